"""The dashboard's controller and views driven without a browser (as a notebook would)."""

from __future__ import annotations

import io
import tempfile

import numpy as np
import pytest
import pyvista as pv

from app.controller import fullest_layer
from app.dashboard import Dashboard
from app.geometry_sources import GENERATORS, make_preview
from app.views.physics_panel import PhysicsPanel
from geometries import generators
from solver.config import SimulationConfig
from solver.runner import live_runners

pytestmark = pytest.mark.timeout(300)


def small_pack(size: int = 20):
    return generators.random_sphere_pack((size,) * 3, porosity=0.6, diameter=8, seed=2)


@pytest.fixture
def dashboard():
    before = live_runners()
    board = Dashboard(small_pack(), SimulationConfig(backend="numpy", body_force=(2e-5, 0, 0)),
                      refresh=False)
    yield board
    board.close()
    assert live_runners() == before, "closing the dashboard must end its runner thread"


def advance(board: Dashboard, steps: int):
    """Wait for the runner to pass ``steps`` and let the UI pick the snapshot up."""
    snap = board.controller.runner.wait_for(lambda s: s.step >= steps and s.plane is not None, 60)
    board.controller.poll()
    return snap


def test_snapshots_reach_the_views(dashboard):
    snap = advance(dashboard, 5)
    frame = dashboard.slice.pipe.data
    # In SI (m/s) with the physical setup's units (issue 30).
    units = dashboard.physics.setup.units(snap.config.get("tau", 0.8),
                                          dashboard.controller.geometry.voxel_size)
    np.testing.assert_allclose(frame["plane"], snap.plane * units.dx / units.dt, rtol=1e-12)
    assert frame["label"] == "|u| (m/s)"
    assert f"step {snap.step}" in frame["title"]
    assert len(dashboard.counters.buffer.data) == len(snap.history["step"])
    assert 'data-counter="mflups"' in dashboard.counters.cards.object
    assert f"{snap.step:,}" in dashboard.counters.cards.object
    dashboard.scene.refresh()
    assert dashboard.scene._meshes["fluid"].n_cells + dashboard.scene._meshes["grains"].n_cells \
        == 20 * 20


def test_slice_choice_goes_through_the_runner(dashboard):
    advance(dashboard, 2)
    dashboard.controller.param.update(quantity="ux", axis=0)
    # The layer with the most fluid (issue 30: a middle layer may hold none).
    assert dashboard.controller.position == fullest_layer(dashboard.controller.geometry.solid, 0)
    position = dashboard.controller.position
    dashboard.controller.runner.wait_for(lambda s: s.view.axis == 0 and
                                         s.view.quantity == "ux", 30)
    dashboard.controller.poll()
    assert dashboard.slice.pipe.data["axes"] == ("y", "z")
    dashboard.controller.runner.wait_for(lambda s: s.view.index == position, 30)


def test_pause_step_and_reset(dashboard):
    c = dashboard.controller
    advance(dashboard, 3)
    c.pause()
    paused = c.runner.wait_for(lambda s: s.status == "paused", 30).step
    c.step(10)
    assert c.runner.wait_for(lambda s: s.step == paused + 10, 30).status == "paused"
    c.reset()
    snap = c.runner.wait_for(lambda s: s.step == 0 and s.status == "paused", 30)
    c.poll()
    assert snap.run_id > 0 and len(dashboard.counters.buffer.data) == 0


def test_bad_settings_are_a_message_and_the_run_goes_on(dashboard):
    c = dashboard.controller
    advance(dashboard, 2)
    c.config.lattice = "D2Q9"
    assert c.settings_changed
    c.apply_settings()
    assert c.level == "danger" and "D2Q9" in c.status
    step = c.runner.snapshot().step
    c.runner.wait_for(lambda s: s.step > step + 2, 60)
    c.config.lattice = "D3Q19"
    assert not c.settings_changed


def test_use_geometry_switches_the_simulation(dashboard):
    c = dashboard.controller
    geometry = GENERATORS["Square duct"](length=12, width=6).build()
    c.use_geometry(make_preview(geometry, c.config))
    snap = c.runner.wait_for(lambda s: s.shape == geometry.shape and s.step > 0, 60)
    c.poll()
    assert c.geometry is geometry and c.param.position.bounds == (0, geometry.shape[2] - 1)
    assert snap.config["body_force"] == (2e-5, 0.0, 0.0)
    dashboard.scene.refresh()


def test_3d_view_hidden_during_a_geometry_change_shows_it_when_visible_again(dashboard):
    c, scene = dashboard.controller, dashboard.scene
    advance(dashboard, 2)
    dashboard.poll()
    scene.active = False  # the user is on the Geometry tab
    geometry = GENERATORS["Square duct"](length=12, width=6).build()
    c.use_geometry(make_preview(geometry, c.config))
    c.runner.wait_for(lambda s: s.shape == geometry.shape and s.plane is not None
                      and (s.view.axis, s.view.index) == (c.axis, c.position), 60)
    dashboard.poll()
    assert scene._geometry is not geometry, "a hidden view is not synchronised"
    scene.active = True  # back on the Flow tab: the next poll brings the new geometry
    dashboard.poll()
    assert scene._geometry is geometry


def test_exports(dashboard):
    c = dashboard.controller
    advance(dashboard, 4)
    with tempfile.NamedTemporaryFile(suffix=".vti") as handle:
        handle.write(c.export_vti())
        handle.flush()
        image = pv.read(handle.name)
    assert image.n_cells == 20**3 and "u" in image.cell_data
    assert c.export_png().startswith(b"\x89PNG")
    lines = c.export_csv().splitlines()
    assert lines[0] == "step,mflups,residual,permeability" and len(lines) >= 2


def test_physics_panel_maps_units_and_refuses_fast_flow(dashboard):
    panel: PhysicsPanel = dashboard.physics
    c = dashboard.controller
    # Water in 10 um voxels at tau 0.8: dt = 1e-5 s, so F = 2e-5 lattice units is 2 kPa/m
    # and 5 kPa/m is F = 5e-5.
    assert panel.setup.pressure_gradient == pytest.approx(2000.0)
    panel.setup.pressure_gradient = 5000.0
    assert panel.lattice_force() == pytest.approx(5e-5)
    assert not panel.apply_button.disabled
    panel.setup.pressure_gradient = 5e8
    assert panel.apply_button.disabled, "a Mach number far above 0.3 must be refused"
    text = "".join(getattr(o, "object", "") for o in panel.mapping.objects[0])
    assert "Mach" in text
    panel.setup.pressure_gradient = 1000.0
    assert not panel.apply_button.disabled
    panel.apply_button.clicks += 1
    snap = c.runner.wait_for(lambda s: s.config.get("body_force", (0,))[0] == pytest.approx(1e-5),
                             60)
    assert snap.status in ("running", "paused")
    advance(dashboard, snap.step + 2)
    panel._refresh_measured()
    measured = panel.measured.object
    assert "mD" in measured and "Pore Reynolds" in measured


def test_ui_errors_become_messages(dashboard):
    dashboard.controller.report(RuntimeError("Something went wrong; do this instead."))
    assert dashboard.status.alert_type == "danger"
    assert dashboard.status.object == "Something went wrong; do this instead."
    buffer = dashboard._download("x", "x.bin", lambda: 1 / 0).callback()
    assert isinstance(buffer, io.BytesIO) and dashboard.status.alert_type == "danger"
