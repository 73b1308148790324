"""Velocity sets: weights, isotropy, opposite directions and the paper's D3Q19 naming."""

import numpy as np
import pytest

from solver.lattice import CS2, LATTICE_NAMES, get_lattice


@pytest.fixture(params=LATTICE_NAMES)
def lattice(request):
    return get_lattice(request.param)


def test_weights_sum_to_one(lattice):
    assert lattice.w.sum() == pytest.approx(1.0, abs=1e-15)


def test_first_moment_vanishes(lattice):
    np.testing.assert_allclose(lattice.w @ lattice.c, 0.0, atol=1e-15)


def test_second_moment_is_isotropic(lattice):
    second = np.einsum("i,ia,ib->ab", lattice.w, lattice.c, lattice.c)
    np.testing.assert_allclose(second, CS2 * np.eye(lattice.d), atol=1e-15)


def test_fourth_moment_is_isotropic(lattice):
    fourth = np.einsum("i,ia,ib,ic,id->abcd", lattice.w, *[lattice.c] * 4)
    delta = np.eye(lattice.d)
    expected = CS2**2 * (np.einsum("ab,cd->abcd", delta, delta)
                         + np.einsum("ac,bd->abcd", delta, delta)
                         + np.einsum("ad,bc->abcd", delta, delta))
    np.testing.assert_allclose(fourth, expected, atol=1e-15)


def test_opposite_negates_velocity(lattice):
    np.testing.assert_array_equal(lattice.c[lattice.opposite], -lattice.c)
    np.testing.assert_array_equal(lattice.opposite[lattice.opposite], np.arange(lattice.q))


def test_velocities_are_distinct(lattice):
    assert len({tuple(v) for v in lattice.c.tolist()}) == lattice.q


def test_d3q19_follows_paper_naming():
    lat = get_lattice("D3Q19")
    assert lat.names[:7] == ("O", "E", "N", "W", "S", "T", "B")
    assert lat.index("W") == 3  # the paper's Fig. 1: e_3 = e_W = (-1, 0, 0)
    for name, vector in zip(lat.names, lat.c.tolist(), strict=True):
        expected = np.zeros(3, int)
        axes = {"E": (0, 1), "W": (0, -1), "N": (1, 1), "S": (1, -1), "T": (2, 1), "B": (2, -1)}
        for letter in name.replace("O", ""):
            axis, sign = axes[letter]
            expected[axis] += sign
        assert vector == expected.tolist(), name


def test_unknown_lattice_names_choices():
    with pytest.raises(ValueError, match="D3Q19"):
        get_lattice("D3Q15")
