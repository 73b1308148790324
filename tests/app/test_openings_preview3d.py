"""The Geometry tab's 3D picture of a previewed geometry's openings (#18 item 4): discs with
labels coloured by the preview's kinds, cheap for a 256^3 upload, hidden without openings."""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import pytest
from bokeh.document import Document

from app.openings import drive_setup
from app.views.openings_preview3d import OpeningsPreview3D, preview_meshes
from app.views.scene3d import KIND_COLOURS, MAX_TRIANGLES
from geometries import VoxelGeometry, samples
from geometries.openings import face_openings

pytestmark = pytest.mark.timeout(300)


def test_the_vessel_preview_shows_each_opening_coloured_by_its_default_kind():
    vessel = samples.load_sample("vessel_bifurcation.stl")
    _, groups, openings = drive_setup(vessel, "openings of the geometry", 1.0)
    discs = preview_meshes(vessel, openings)["openings"]
    ids = discs.cell_data["opening"]
    assert sorted(np.unique(ids)) == [1, 2, 3]
    kinds = {int(i): list(KIND_COLOURS)[int(discs.cell_data["kind"][ids == i][0])]
             for i in (1, 2, 3)}
    assert kinds == {1: "velocity", 2: "pressure", 3: "pressure"}


def test_the_preview_of_a_256_cube_upload_is_cheap_and_serialises():
    solid = np.ones((256, 256, 256), dtype=bool)
    yy, zz = np.mgrid[:256, :256]
    solid[:, (yy - 128) ** 2 + (zz - 128) ** 2 < 60 ** 2] = False  # a tube along x
    tube = VoxelGeometry(solid, voxel_size=1e-4)
    tube = dataclasses.replace(tube, openings=face_openings(tube, axes=(0,)))
    view = OpeningsPreview3D()
    start = time.perf_counter()
    view.show(tube, {o.id: {"kind": "pressure", "value": 1.0} for o in tube.openings})
    seconds = time.perf_counter() - start
    try:
        assert view.shown
        triangles = sum(mesh.n_cells for mesh in view._meshes.values())
        assert triangles < MAX_TRIANGLES + 10_000
        assert view._meshes["pressure"].n_cells > 0  # both tube ends, as outlets
        assert seconds < 20, f"{seconds:.1f} s to build the 3D preview of a 256^3 tube"
        view.pane.get_root(Document())  # the scene serialises for the browser
    finally:
        view.clear()
        assert not view.shown and view._meshes["pressure"].n_cells == 0
        view.close()


def test_no_3d_preview_without_openings():
    view = OpeningsPreview3D()
    view.show(VoxelGeometry(np.zeros((8, 8, 8), dtype=bool)), {})
    assert not view.shown
    view.close()


def test_the_discs_follow_the_kinds_set_in_the_table_before_use():
    import asyncio

    from app.controller import Controller
    from app.settings import settings
    from app.views.geometry_panel import GeometryPanel

    controller = Controller(samples.load_sample("vessel_bifurcation.stl"), autostart=None)
    panel = GeometryPanel(controller, settings)
    try:
        panel.source, panel.sample = "Sample", "vessel_bifurcation.stl"
        asyncio.run(panel._preview_clicked(None))
        assert panel.preview3d.shown
        meshes = panel.preview3d._meshes

        def ids(kind: str) -> list[int]:
            mesh = meshes[kind]
            return sorted(set(mesh.cell_data["opening"].tolist())) if mesh.n_cells else []
        assert (ids("velocity"), ids("pressure"), ids("closed")) == ([1], [2, 3], [])
        panel.openings.rows[1].kind = "closed"
        assert (ids("velocity"), ids("pressure"), ids("closed")) == ([1], [3], [2])
    finally:
        panel.preview3d.close()
        controller.close()
