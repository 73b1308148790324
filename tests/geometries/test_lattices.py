"""SC/BCC/FCC sphere arrays: solid fraction, labels, periodicity, argument checks."""

from __future__ import annotations

import numpy as np
import pytest

from geometries import GeometryError
from geometries.generators import MAX_SOLID_FRACTION, sphere_array, sphere_radius


@pytest.mark.parametrize("fraction", [0.064, 0.216, 0.45])
def test_sc_voxel_fraction_matches_continuous_fraction(fraction):
    geom = sphere_array("sc", 48, fraction)
    assert 1 - geom.porosity == pytest.approx(fraction, rel=0.03)
    r = sphere_radius("sc", 48, fraction)
    assert 4 / 3 * np.pi * r**3 / 48**3 == pytest.approx(fraction)


@pytest.mark.parametrize(("kind", "per_cell"), [("sc", 1), ("bcc", 2), ("fcc", 4)])
def test_one_label_per_sphere_and_fraction(kind, per_cell):
    geom = sphere_array(kind, 32, 0.3, cells=(2, 1, 1))
    assert geom.shape == (64, 32, 32)
    ids = np.unique(geom.labels[geom.labels > 0])
    np.testing.assert_array_equal(ids, np.arange(1, 2 * per_cell + 1))
    assert 1 - geom.porosity == pytest.approx(0.3, rel=0.04)
    np.testing.assert_array_equal(geom.labels > 0, geom.solid)


def test_array_is_periodic_unit_cell_repeated():
    geom = sphere_array("bcc", 20, 0.5, cells=(2, 2, 2))
    cell = geom.solid[:20, :20, :20]
    np.testing.assert_array_equal(geom.solid, np.tile(cell, (2, 2, 2)))


def test_spheres_cut_by_faces_keep_one_id():
    geom = sphere_array("bcc", 24, 0.4)
    corner_ids = {geom.labels[0, 0, 0], geom.labels[-1, -1, -1], geom.labels[0, -1, 0]}
    assert corner_ids == {2}


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("hcp", 32, 0.3), "kind must be one of"),
        (("sc", 2, 0.3), "cell must be an integer ≥ 4"),
        (("sc", 32, 0.6), f"≤ {MAX_SOLID_FRACTION['sc']:.4g}"),
        (("fcc", 32, -0.1), "solid_fraction must be a finite number > 0"),
    ],
)
def test_bad_arguments(args, fragment):
    with pytest.raises(GeometryError, match=fragment):
        sphere_array(*args)


def test_bad_cells():
    with pytest.raises(GeometryError, match="three positive integers"):
        sphere_array("sc", 16, 0.2, cells=(1, 1))
