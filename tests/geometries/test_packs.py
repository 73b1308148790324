"""Random sphere packs: target porosity, reproducibility, periodic wrap, argument checks."""

from __future__ import annotations

import time

import numpy as np
import pytest

from geometries import GeometryError
from geometries.generators import random_sphere_pack


@pytest.mark.parametrize("porosity", [0.2, 0.5, 0.8])
def test_reaches_target_porosity_within_one_percent(porosity):
    geom = random_sphere_pack((64, 64, 64), porosity, diameter=12, seed=3)
    assert porosity - 0.01 <= geom.porosity <= porosity
    assert f"{geom.porosity:.4f}" in geom.name


def test_same_seed_same_pack_other_seed_other_pack():
    a = random_sphere_pack((40, 40, 40), 0.5, diameter=10, seed=7)
    b = random_sphere_pack((40, 40, 40), 0.5, diameter=10, seed=7)
    c = random_sphere_pack((40, 40, 40), 0.5, diameter=10, seed=8)
    np.testing.assert_array_equal(a.solid, b.solid)
    assert (a.solid != c.solid).mean() > 0.1


def test_periodic_pack_tiles_space():
    geom = random_sphere_pack((48, 48, 48), 0.6, diameter=16, seed=1, periodic=True)
    tiled = np.tile(geom.solid, (2, 1, 1))
    # Shifted by half a period the pack is the same structure: spheres continue across faces,
    # so the solid runs through the face instead of being cut flat.
    rolled = np.roll(tiled, 24, axis=0)[:48]
    across = geom.solid[0] & geom.solid[-1]
    assert across.sum() > 0
    assert rolled.mean() == pytest.approx(geom.solid.mean(), abs=0.05)


def test_non_periodic_spheres_are_cut_at_faces():
    geom = random_sphere_pack((48, 48, 48), 0.6, diameter=16, seed=1, periodic=False)
    assert 0.59 <= geom.porosity <= 0.6


def test_two_dimensional_disc_pack():
    geom = random_sphere_pack((80, 60), 0.5, diameter=10)
    assert geom.ndim == 2 and 0.49 <= geom.porosity <= 0.5


def test_paper_sized_pack_is_fast():
    start = time.perf_counter()
    geom = random_sphere_pack((192, 192, 192), 0.1, diameter=40)
    assert time.perf_counter() - start < 10.0
    assert 0.095 <= geom.porosity <= 0.1


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"shape": (10, 10, 10), "porosity": 1.0}, "porosity must be > 0 and < 1"),
        ({"shape": (10, 10, 10), "porosity": 0.0}, "porosity must be a finite number > 0"),
        ({"shape": (10, 10, 10), "porosity": 0.5, "diameter": 20}, "smaller diameter"),
        ({"shape": (10,), "porosity": 0.5}, "2 or 3 integers"),
        ({"shape": (10, 0, 10), "porosity": 0.5}, "integer ≥ 1"),
    ],
)
def test_bad_arguments(kwargs, fragment):
    with pytest.raises(GeometryError, match=fragment):
        random_sphere_pack(**kwargs)
