"""The openings in the dashboard without a browser: preview, drive picker, use, edits (#18)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from bokeh.document import Document

from app.dashboard import Dashboard
from app.openings import DEFAULT_INLET_SPEED, DRIVES
from geometries import generators, samples
from solver.config import SimulationConfig

pytestmark = pytest.mark.timeout(300)

OPENINGS, BODY_FORCE, X_FACES = "openings of the geometry", next(iter(DRIVES)), \
    "x faces: inlet x min, outlet x max"


@pytest.fixture
def board():
    pack = generators.random_sphere_pack((16,) * 3, porosity=0.6, diameter=6, seed=2)
    board = Dashboard(pack, SimulationConfig(backend="numpy", body_force=(2e-5, 0, 0)),
                      refresh=False, autostart=False)
    yield board
    board.close()


def preview_sample(board: Dashboard, name: str) -> None:
    panel = board.geometry_panel
    panel.store.param.update(source="Sample", sample=name)
    asyncio.run(panel._preview_clicked(None))


def test_a_vessel_preview_lists_its_openings_driven_by_default(board):
    panel = board.geometry_panel
    preview_sample(board, "vessel_bifurcation.stl")
    assert panel.drive == OPENINGS
    rows = panel.openings.rows
    assert [r.label.split(" ")[0] for r in rows] == ["1", "2", "3"]
    assert [r.kind for r in rows] == ["inlet velocity", "outlet pressure", "outlet pressure"]
    config = panel.preview.config
    assert config.body_force == (0.0, 0.0, 0.0) and config.x_min == "wall"
    # The default inlet speed is set at the default tau (0.8); the panel then chooses tau for
    # the Mach target and keeps that SI speed: the lattice value follows the time step.
    assert config.openings[1]["value"] == pytest.approx(
        DEFAULT_INLET_SPEED * (config.tau - 0.5) / (0.8 - 0.5), rel=1e-12)
    choice = panel.openings.choice
    assert f"tau {config.tau:.4g} (chosen)" in choice and "flow-through" in choice
    assert "3 openings" in panel.info.object
    # The preview image marks them (a labelled overlay) and renders.
    panel.image.get_root(Document())


def test_the_drive_picker_switches_between_openings_and_the_body_force(board):
    panel = board.geometry_panel
    preview_sample(board, "vessel_bifurcation.stl")
    panel.drive = BODY_FORCE
    assert panel.openings.rows == [] and panel.preview.config.openings == {}
    assert panel.preview.config.body_force[0] > 0 and panel.preview.config.x_min == "periodic"
    assert "body force" in panel.info.object
    panel.drive = OPENINGS
    assert len(panel.openings.rows) == 3


def test_an_image_driven_through_a_pair_of_faces(board):
    panel = board.geometry_panel
    preview_sample(board, "sphere_pack_48.tif")
    assert panel.drive == BODY_FORCE and panel.openings.rows == []  # periodic samples: force
    panel.drive = X_FACES
    rows = panel.openings.rows
    assert [r.label.split(" (")[0] for r in rows] == ["x min face", "x max face"]
    geometry = panel.preview.geometry
    assert {o.normal for o in geometry.openings} == {(-1.0, 0.0, 0.0), (1.0, 0.0, 0.0)}
    openings = panel.preview.config.openings
    inlet = [i for i, spec in openings.items() if spec["kind"] == "velocity"]
    assert {tuple(geometry.openings[i - 1].normal) for i in inlet} == {(-1.0, 0.0, 0.0)}
    # Every inlet patch is on x = 0.
    assert all(np.all(geometry.openings[i - 1].nodes[:, 0] == 0) for i in inlet)
    panel.drive = "openings of the geometry"  # an image has none: a message, nothing used
    assert panel.preview is None and "no openings" in panel.alert.object


def test_using_a_vessel_applies_its_openings_and_later_edits_are_pending(board):
    c, panel = board.controller, board.geometry_panel
    preview_sample(board, "vessel_bifurcation.stl")
    panel.openings.rows[1].kind = "closed"  # before use: edits the preview's config
    assert panel.preview.config.openings[2] == {"kind": "closed"}
    assert panel.preview.current_problem() is None  # built with other openings: rebuilt
    panel._use_clicked(None)
    assert c.level != "danger", c.status
    assert c.applied_config.openings[2] == {"kind": "closed"}
    assert c.applied_config.openings[1]["kind"] == "velocity"
    assert not c.settings_changed
    panel.openings.rows[2].kind = "outflow"  # after use: the session's pending settings
    assert c.config.openings[3] == {"kind": "outflow"} and c.settings_changed
    c.apply_settings()
    assert c.applied_config.openings[3] == {"kind": "outflow"}


def test_an_uploaded_vessel_stl_is_searched_for_openings(board):
    panel = board.geometry_panel
    panel.source = "Upload"
    panel.upload_options.param.update(stl_inside="fluid", stl_unit="mm", stl_resolution=64)
    data = samples.sample_path("vessel_bifurcation.stl").read_bytes()
    panel.file_input.value = {"vessel.stl": data}
    assert panel.preview is not None, panel.alert.object
    assert len(panel.preview.geometry.openings) == 3 and panel.drive == OPENINGS
    assert [r.label.split(" ")[0] for r in panel.openings.rows] == ["1", "2", "3"]
    # Told not to search: a closed lumen, driven by the body force as before.
    panel.upload_options.stl_openings = "none (closed vessel)"
    assert panel.preview.geometry.openings == () and panel.drive == BODY_FORCE
    assert panel.openings.rows == []


def test_the_physics_tab_says_which_drive_is_on(board):
    def drive() -> str:
        return board.physics.mapping.objects[0].objects[0].object

    assert "<td>Drive</td><td class=\"value\">body force</td>" in drive()
    preview_sample(board, "vessel_bifurcation.stl")
    board.geometry_panel._use_clicked(None)
    assert "<td>Drive</td><td class=\"value\">3 openings</td>" in drive()
