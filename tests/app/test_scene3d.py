"""The 3D view: tiny pores, and the openings drawn at their centres (issue 18)."""

from __future__ import annotations

import numpy as np
import pytest
from bokeh.document import Document

from app.controller import Controller
from app.openings import driven_values, opening_groups
from app.views.scene3d import Scene3D, opening_marks
from geometries import VoxelGeometry, samples
from solver.config import SimulationConfig

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
        assert controller.position == 1  # the slice opens where the fluid is (issue 30)
        scene._update(controller.geometry, np.where(solid[:, :, 5], np.nan, 0.5),
                      type(controller.snapshot.view)("umag", 2, 5))
        assert scene._meshes["fluid"].area == 0  # a cut holding no fluid
        assert scene._meshes["solid"].n_points > 0
        controller.position = 1  # a cut through the pore: its cells appear
        scene._update(controller.geometry, np.where(solid[:, :, 1], np.nan, 0.5),
                      type(controller.snapshot.view)("umag", 2, 1))
        assert scene._meshes["fluid"].n_cells == int((~solid[:, :, 1]).sum())
        scene.pane.get_root(Document())  # the scene serialises for the browser
    finally:
        scene.close()
        controller.close()


def test_the_openings_of_a_vessel_are_discs_with_labels_at_their_centres():
    vessel = samples.load_sample("vessel_bifurcation.stl")
    discs, labels = opening_marks(vessel)
    groups = opening_groups(vessel)
    assert discs.n_cells == 3 * 32 and labels.n_points > 0
    h = vessel.voxel_size
    # Each disc: centred on its opening, radius the equivalent radius (nodes).
    for k, group in enumerate(sorted(groups, key=lambda g: -g.area_nodes)):
        points = discs.extract_cells(range(32 * k, 32 * (k + 1))).points
        assert np.allclose(points.mean(axis=0), group.centre_nodes, atol=0.5)
        radius = np.linalg.norm(points - np.asarray(group.centre_nodes), axis=1).max()
        assert radius == pytest.approx(group.diameter / h / 2, rel=0.01)
        # ... in the opening's plane (float32 points).
        assert np.abs((points - group.centre_nodes) @ np.asarray(group.normal)).max() < 1e-4
    openings = {1: {"kind": "velocity", "value": 0.01}, 2: {"kind": "closed"},
                3: {"kind": "pressure", "value": 1.0}}
    config = SimulationConfig(backend="numpy", **driven_values(openings, 3))
    controller = Controller(vessel, config, autostart=None)
    scene = Scene3D(controller)
    try:
        assert scene._meshes["labels"].n_cells == labels.n_cells
        # Coloured by the applied kind: one plain-coloured mesh per kind (KIND_COLOURS).
        by_kind = {kind: sorted(set(scene._meshes[kind].cell_data["opening"].tolist()))
                   for kind in ("velocity", "closed", "pressure")}
        assert by_kind == {"velocity": [1], "closed": [2], "pressure": [3]}
        assert sum(scene._meshes[k].n_cells for k in by_kind) == discs.n_cells
        assert scene._meshes["outflow"].n_cells == 0
        scene.pane.get_root(Document())
    finally:
        scene.close()
        controller.close()


def mapped_actors(scene) -> list[int]:
    """Per actor the browser is sent, how many mappers (with their data) come with it: an
    actor sent without one keeps drawing what vtk.js had before."""
    root = scene.pane.get_root(Document())
    sent: list[int] = []

    def walk(node: dict) -> None:
        if node.get("type", "").endswith("Actor"):
            sent.append(sum("Mapper" in d.get("type", "") for d in node.get("dependencies", [])))
        for child in node.get("dependencies", []) or []:
            walk(child)
    walk(scene.pane._models[root.ref["id"]][0].scene)
    return sent


def test_a_vessel_after_a_porous_sample_drops_the_samples_grains_in_the_browser():
    """A vessel uploaded after the default pack showed the pack's cut grains floating beside
    the tube: its empty grains cut was sent without data, and vtk.js kept the old one."""
    solid = np.zeros((16, 16, 16), dtype=bool)
    solid[4:8, 4:8, :] = True
    controller = Controller(VoxelGeometry(solid), autostart=None)
    scene = Scene3D(controller)
    try:
        assert scene._meshes["grains"].n_cells > 0
        vessel = samples.load_sample("vessel_bifurcation.stl", resolution=32)
        scene._update(vessel, np.where(vessel.solid[:, :, 5], np.nan, 0.5),
                      type(controller.snapshot.view)("umag", 2, 5))
        assert scene._meshes["grains"].area == 0  # nothing of the pack is drawn
        assert mapped_actors(scene) == [1] * len(scene.plotter.renderer.actors)
    finally:
        scene.close()
        controller.close()
