"""Bounded-flow generators: walls as solid voxels, labelled obstacles, argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from geometries import GeometryError
from geometries.generators import (
    channel,
    circular_pipe,
    cylinder_in_channel,
    lid_cavity,
    sphere_in_pipe,
    square_duct,
)


def test_channel_has_one_wall_layer_at_both_ends_of_wall_axis():
    geom = channel((10, 7, 4), wall_axis=1)
    assert geom.solid[:, 0].all() and geom.solid[:, -1].all()
    assert not geom.solid[:, 1:-1].any()
    assert geom.flow_axis == 0
    assert channel((8, 5), wall_axis=0, flow_axis=1).solid[[0, -1]].all()


def test_square_duct_walls_around_the_flow_axis():
    geom = square_duct(12, 6, axis=2)
    assert geom.shape == (8, 8, 12) and geom.flow_axis == 2
    assert geom.n_fluid == 6 * 6 * 12
    assert not geom.solid[1:-1, 1:-1, :].any()


def test_circular_pipe_cross_section_area():
    geom = circular_pipe(5, 40)
    assert geom.shape == (5, 42, 42)
    area = geom.n_fluid / 5
    assert area == pytest.approx(np.pi * 20**2, rel=0.02)
    assert geom.solid[:, 0].all() and geom.solid[:, :, -1].all()


def test_cylinder_in_channel_is_labelled_2d_and_3d():
    flat = cylinder_in_channel((80, 41), 10)
    assert flat.ndim == 2
    assert np.count_nonzero(flat.labels == 1) == pytest.approx(np.pi * 25, rel=0.1)
    assert flat.solid[:, 0].all() and flat.solid[:, -1].all()
    tall = cylinder_in_channel((80, 41, 6), 10, center=(30.0, 20.0))
    np.testing.assert_array_equal(tall.labels[:, :, 0], tall.labels[:, :, 5])
    assert tall.labels[30, 20, 3] == 1


def test_sphere_in_pipe_labels_the_sphere():
    geom = sphere_in_pipe(40, 30, 16, position=15)
    assert geom.shape == (40, 32, 32)
    assert geom.labels[15, 16, 16] == 1 and geom.labels[30, 16, 16] == 0
    assert np.count_nonzero(geom.labels) == pytest.approx(4 / 3 * np.pi * 8**3, rel=0.03)
    np.testing.assert_array_equal(geom.solid[geom.labels == 1], True)
    assert geom.flow_axis == 0


def test_lid_cavity_walls_on_every_face():
    geom = lid_cavity(16)
    assert geom.shape == (18, 18) and geom.n_fluid == 256
    assert geom.solid[:, -1].all()  # the lid, at +y
    assert lid_cavity(8, ndim=3).n_fluid == 512


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: channel((10, 2, 4)), "≥ 3"),
        (lambda: channel((10, 5), wall_axis=0), "must differ"),
        (lambda: channel((10, 5), wall_axis=3), "wall_axis must be 0..1"),
        (lambda: square_duct(0, 5), "length must be an integer ≥ 1"),
        (lambda: circular_pipe(10, 0.5), "diameter must be a finite number > 1"),
        (lambda: cylinder_in_channel((40, 20), 19), "does not fit"),
        (lambda: sphere_in_pipe(40, 10, 12), "must be smaller than pipe_diameter"),
        (lambda: sphere_in_pipe(40, 20, 10, position=2), "Choose position between"),
        (lambda: lid_cavity(10, ndim=4), "ndim must be 2 or 3"),
    ],
)
def test_bad_arguments(call, fragment):
    with pytest.raises(GeometryError, match=fragment):
        call()
