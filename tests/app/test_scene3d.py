"""The 3D view: tiny pores, and the openings drawn at their centres (issue 18)."""

from __future__ import annotations

import numpy as np
import pytest

from app.controller import Controller
from app.views.scene3d import Scene3D
from geometries import VoxelGeometry

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("pore", [np.s_[:, 4, 1], np.s_[1, 1, 1]], ids=["line", "voxel"])
def test_a_pore_one_voxel_wide_off_the_cut_is_drawn_without_error(pore):
    """Pores one voxel wide that miss the middle cut left an empty fluid mesh: pyvista raised
    "Empty meshes cannot be plotted" and the dashboard could not be built."""
    solid = np.ones((8, 8, 8), dtype=bool)
    solid[pore] = False
    controller = Controller(VoxelGeometry(solid), autostart=None)
    scene = Scene3D(controller)
    try:
        assert scene._meshes["fluid"].n_points == 0  # the cut holds no fluid
        assert scene._meshes["solid"].n_points > 0
        controller.position = 1  # a cut through the pore: its cells appear
        scene._update(controller.geometry, np.where(solid[:, :, 1], np.nan, 0.5),
                      type(controller.snapshot.view)("umag", 2, 1))
        assert scene._meshes["fluid"].n_cells == int((~solid[:, :, 1]).sum())
    finally:
        scene.close()
        controller.close()
