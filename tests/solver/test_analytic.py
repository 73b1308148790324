"""Kozeny-Carman estimates of solver.analytic: identities and the overlapping-sphere surface."""

from __future__ import annotations

import numpy as np
import pytest

from geometries.generators import random_sphere_pack
from solver.analytic import boolean_sphere_surface, kozeny_carman, kozeny_carman_surface


@pytest.mark.parametrize("porosity", [0.3, 0.5, 0.8])
def test_sphere_form_is_the_surface_form_with_separate_spheres(porosity):
    d = 12.0
    separate = 6.0 * (1.0 - porosity) / d
    assert kozeny_carman(porosity, d) == pytest.approx(kozeny_carman_surface(porosity, separate))
    # Carman's numbers: eps = 0.4, d = 1 gives 0.064 / (180 * 0.36).
    assert kozeny_carman(0.4, 1.0) == pytest.approx(0.4**3 / (180 * 0.6**2))


def test_overlapping_spheres_expose_less_surface_and_tend_to_separate_ones_when_dilute():
    d = 10.0
    for eps in (0.3, 0.6, 0.9):
        assert boolean_sphere_surface(eps, d) < 6.0 * (1.0 - eps) / d
    dilute = 0.999
    assert boolean_sphere_surface(dilute, d) == pytest.approx(6 * (1 - dilute) / d, rel=2e-3)


@pytest.mark.parametrize("porosity", [0.4, 0.6, 0.8])
def test_boolean_surface_matches_the_generated_packs(porosity):
    """Marching-cubes area of random_sphere_pack (d = 16 voxels) against -6 eps ln(eps) / d."""
    pv = pytest.importorskip("pyvista")
    pack = random_sphere_pack((96,) * 3, porosity, 16, seed=3)
    image = pv.ImageData(dimensions=pack.shape)
    image.point_data["solid"] = pack.solid.astype(np.float32).ravel(order="F")
    area = image.contour([0.5], scalars="solid").area
    measured = area / np.prod(np.array(pack.shape) - 1)
    # The voxel staircase adds a few per cent of area to a smooth sphere.
    assert measured / boolean_sphere_surface(pack.porosity, 16) == pytest.approx(1.04, abs=0.05)


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, 1.5])
def test_porosity_outside_the_open_unit_interval_is_refused(bad):
    with pytest.raises(ValueError, match="Porosity"):
        kozeny_carman(bad, 1.0)
    with pytest.raises(ValueError, match="Porosity"):
        boolean_sphere_surface(bad, 1.0)
