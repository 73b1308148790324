"""What a new user sees first (issue 30): a vessel's wall, a slice through fluid, fitting cards."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from app.controller import Controller, fullest_layer
from app.views.counters import counter_cards
from app.views.scene3d import (
    VESSEL_OPACITY,
    Scene3D,
    is_vessel,
    solid_surface,
)
from geometries import VoxelGeometry, samples
from solver.snapshot import OpeningFlow, Snapshot

pytestmark = pytest.mark.timeout(300)

#: Seconds between coarse flows in these tests (the 3D view asks for one every 5 s).
FAST_FLOW3D_S = 0.5


def test_a_vessel_is_drawn_as_its_see_through_wall_without_the_box_of_solid():
    vessel = samples.load_sample("vessel_bifurcation.stl")
    assert is_vessel(vessel)
    solid = np.asarray(vessel.solid)
    boxed, wall = solid_surface(solid), solid_surface(solid, close_box=False)
    # The box's six faces are gone: no point of the wall lies on the padded box's faces.
    lo = wall.points.min(axis=0)
    assert (lo > -1.0).all() and wall.n_cells < boxed.n_cells
    controller = Controller(vessel, autostart=None)
    scene = Scene3D(controller)
    try:
        assert scene._actors["solid"].prop.opacity == pytest.approx(VESSEL_OPACITY)
        assert scene._meshes["solid"].n_cells == scene._surface.n_cells  # not cut away
        assert scene._meshes["grains"].area == 0  # the cut shows the lumen alone
        assert scene._meshes["fluid"].n_cells > 0  # ... and the slice holds fluid
    finally:
        scene.close()
        controller.close()


def test_the_slice_opens_at_the_layer_with_the_most_fluid():
    solid = np.ones((9, 9, 20), dtype=bool)
    solid[2:5, 2:5, 3] = False  # a thin pocket far from the middle (z = 10)
    solid[4, 4, 12] = False
    assert fullest_layer(solid, 2) == 3
    assert fullest_layer(np.zeros((4, 4, 7), dtype=bool), 2) == 3  # equals: the middle
    vessel = samples.load_sample("vessel_bifurcation.stl")
    controller = Controller(vessel, autostart=None)
    try:
        layer = np.take(np.asarray(vessel.solid), controller.position, axis=controller.axis)
        assert (~layer).any()
    finally:
        controller.close()


def test_a_run_driven_through_openings_shows_no_permeability_card():
    driven = Snapshot(openings=(OpeningFlow(1, "velocity", 0.1, 1.0),
                                OpeningFlow(2, "pressure", -0.1, 1.0)))
    assert "k" not in {key for key, *_ in counter_cards(driven)}
    assert "k" in {key for key, *_ in counter_cards(Snapshot(permeability=1.0))}
    assert "k" in {key for key, *_ in counter_cards(Snapshot())}  # a body-force run at rest


def test_the_slice_shows_a_chosen_field_in_si_with_a_sensible_range():
    from app.views.physics_panel import PhysicalSetup
    from app.views.slice_view import SlicePlot, colour_range, frame_of
    from solver.config import SimulationConfig
    from solver.snapshot import SliceView

    plane = np.full((6, 5), 0.01)
    plane[0, 0] = 5.0  # one extreme node must not set the range
    plane[1, 1] = np.nan
    low, high = colour_range(plane, "umag")
    assert low == pytest.approx(0.01) and high < 5.0
    low, high = colour_range(np.array([[-0.2, 0.1]]), "pressure")
    assert low == -high and high == pytest.approx(0.2, rel=0.02)  # signed: symmetric
    setup = PhysicalSetup()
    units = setup.units(0.8, 1e-5)
    snap = Snapshot(plane=plane, view=SliceView("pressure", 2, 3), step=7)
    frame = frame_of(snap, False, (6, 5, 4), units)
    assert frame["label"] == "pressure p − p0 (Pa)"
    assert frame["plane"][0, 0] == pytest.approx(units.stress_to_si(5.0))
    assert frame_of(snap, False, (6, 5, 4), units, fixed=(-1.0, 2.0))["clim"] == (-1.0, 2.0)
    solid = np.zeros((8, 8, 8), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    controller = Controller(VoxelGeometry(solid), SimulationConfig(backend="numpy"),
                            autostart=None)
    try:
        view = SlicePlot(controller, setup)
        controller.quantity = "vorticity"
        controller.runner.wait_for(lambda s: s.view.quantity == "vorticity"
                                   and s.plane is not None, 60)
        controller.poll()
        assert view.pipe.data["label"] == "vorticity |ω| (1/s)"
        view.low.value, view.high.value = 0.0, 3.0
        view.fix_range.value = True
        assert view.pipe.data["clim"] == (0.0, 3.0)
    finally:
        controller.close()


def test_probes_and_a_line_stream_live_values_and_a_click_adds_a_probe():
    from app.views.physics_panel import PhysicalSetup
    from app.views.probes_view import ProbesView, parse_line, parse_points
    from app.views.slice_view import SlicePlot
    from solver.config import SimulationConfig
    from solver.probes import Probe, ProbeSet

    assert parse_points("1 2 3; 4,5,6") == [(1, 2, 3), (4, 5, 6)]
    assert parse_line("0 1 2 -> 5 1 2") == ((0, 1, 2), (5, 1, 2))
    with pytest.raises(ValueError, match="whole voxel indices"):
        parse_points("1 2")
    solid = np.zeros((10, 8, 6), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    controller = Controller(VoxelGeometry(solid), SimulationConfig(
        backend="numpy", body_force=(1e-5, 0, 0)), autostart=None)
    try:
        setup = PhysicalSetup()
        view = ProbesView(controller, setup)
        view.points.value, view.line.value = "5 4 3; 5 1 3", "5 0 3 -> 5 7 3"
        assert view.set_from_text()
        controller.step(20)
        snap = controller.runner.wait_for(lambda s: s.probes is not None and s.step >= 20, 60)
        controller.poll()
        data = view.buffer.data
        assert list(data.columns) == ["step", "p1", "p2"] and len(data) >= 1
        assert data["p1"].iloc[-1] > data["p2"].iloc[-1] > 0  # the centre is faster
        profile = view.profile_pipe.data
        assert len(profile["v"]) == 8 and np.isnan(profile["v"][0])  # the wall node
        units = setup.units(0.8, controller.geometry.voxel_size)
        assert profile["v"][4] == pytest.approx(
            snap.probes.lines["line"]["umag"][4] * units.dx / units.dt)
        # A click on the slice adds a probe at that node of the cut.
        plot = SlicePlot(controller, setup)
        plot._tapped(x=2.2, y=3.9)
        assert controller.probes.probes[-1].point == (2, 4, controller.position)
        assert view.points.value.endswith(f"2 4 {controller.position}")
        assert not controller.set_probes(ProbeSet((Probe("far", (50, 0, 0)),)))
        assert "outside the domain" in controller.status
    finally:
        controller.close()


def test_streamlines_and_an_isosurface_come_from_the_coarse_flow():
    from bokeh.document import Document

    from solver.config import SimulationConfig

    solid = np.zeros((16, 10, 8), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    solid[6:9, 3:6, 2:6] = True  # an obstacle: speed varies, vortices form
    controller = Controller(VoxelGeometry(solid), SimulationConfig(
        backend="numpy", body_force=(1e-5, 0, 0)), autostart=None)
    scene = Scene3D(controller)
    try:
        scene.show_streamlines.value = True
        scene.seeds.value = 20
        scene.show_iso.value = True  # of |u|, level auto
        controller.step(40)
        snap = controller.runner.wait_for(lambda s: s.flow3d is not None and s.step >= 40, 60)
        assert snap.flow3d.name == "umag"
        controller.poll()
        scene.refresh()
        lines, iso = scene._meshes["streamlines"], scene._meshes["iso"]
        assert lines.n_lines > 0 and iso.n_cells > 0
        # Streamlines stay in the box and iso points sit at the level.
        assert lines.points.min() >= -0.5 and (lines.points.max(axis=0) <= np.array(
            solid.shape) - 0.5).all()
        first = lines.n_points
        assert f'data-step="{snap.flow3d.step}"' in scene.flow_info.object
        # A newer coarse flow reaches the meshes on the next poll, not at the next refresh.
        before = lines.points.copy()
        controller.set_flow3d("umag", FAST_FLOW3D_S)  # sooner than the view's 5 s
        time.sleep(FAST_FLOW3D_S)
        controller.step(60)
        newer = controller.runner.wait_for(lambda s: s.flow3d is not None
                                           and s.flow3d.step > snap.flow3d.step, 60)
        controller.poll()
        scene.refresh_flow()
        assert f'data-step="{newer.flow3d.step}"' in scene.flow_info.object
        after = scene._meshes["streamlines"].points
        assert after.shape != before.shape or not np.allclose(after, before)
        first = scene._meshes["streamlines"].n_points
        scene.seed_from.value = "probe line"  # no line: the slice plane again
        scene.seeds.value = 5
        assert scene._meshes["streamlines"].n_points < first
        scene.pane.get_root(Document())  # the scene serialises for the browser
        scene.show_streamlines.value = scene.show_iso.value = False
        controller.runner.wait_for(lambda s: s.flow3d is None, 60)
    finally:
        scene.close()
        controller.close()


def test_the_3d_plane_has_its_own_colour_bar_in_si():
    import re

    from app.views.physics_panel import PhysicalSetup
    from app.views.slice_view import colour_range
    from solver.config import SimulationConfig

    solid = np.zeros((10, 8, 8), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    setup = PhysicalSetup()
    controller = Controller(VoxelGeometry(solid, voxel_size=1e-5), SimulationConfig(
        backend="numpy", body_force=(1e-5, 0, 0)), autostart=None)
    scene = Scene3D(controller, setup)
    try:
        controller.step(30)
        snap = controller.runner.wait_for(lambda s: s.step >= 30 and s.plane is not None, 60)
        controller.poll()
        scene.refresh()
        text = scene.colour_bar.object
        assert "|u| (m/s)" in text
        low, high = (float(v) for v in re.search(
            r'data-low="([^"]+)" data-high="([^"]+)"', text).groups())
        factor = setup.units(controller.config.tau, 1e-5).dx / setup.units(
            controller.config.tau, 1e-5).dt
        expected = colour_range(snap.plane, "umag")
        assert high > low >= 0
        assert (low, high) == pytest.approx((expected[0] * factor, expected[1] * factor),
                                            rel=1e-5)
        # The bar's range is the plane's: the VTK mapper shows the same range, lattice units.
        assert scene._actors["fluid"].mapper.scalar_range == pytest.approx(expected)
    finally:
        scene.close()
        controller.close()


def test_another_field_gets_a_fresh_plot_with_its_colour_bar_title():
    from app.views.slice_view import SlicePlot
    from solver.config import SimulationConfig

    solid = np.zeros((8, 8, 8), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    controller = Controller(VoxelGeometry(solid), SimulationConfig(backend="numpy"),
                            autostart=None)
    try:
        view = SlicePlot(controller)
        controller.runner.wait_for(lambda s: s.plane is not None, 60)
        controller.poll()
        first = view.dmap
        controller.quantity = "pressure"
        controller.runner.wait_for(lambda s: s.view.quantity == "pressure", 60)
        controller.poll()
        assert view.dmap is not first and view._pane.object is view.dmap
        image = view.dmap[()].get(0)
        assert image.vdims[0].label == "pressure p − p0 (lattice units)"
    finally:
        controller.close()


def test_the_3d_view_exports_a_png_of_what_it_shows():
    from io import BytesIO

    from matplotlib.image import imread

    controller = Controller(autostart=None)
    scene = Scene3D(controller)
    try:
        png = scene.png()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        pixels = imread(BytesIO(png), format="png")
        assert pixels.shape[:2] == (480, 640) and pixels[..., :3].std() > 0.05  # not blank
    finally:
        scene.close()
        controller.close()


def test_the_slice_recording_keeps_frames_at_the_interval_and_makes_a_gif_and_an_mp4():
    from app.recording import SliceRecorder

    now = [0.0]
    recorder = SliceRecorder(interval_s=1.0, max_frames=3, clock=lambda: now[0])
    with pytest.raises(ValueError, match="Nothing recorded"):
        recorder.gif()
    for k in range(6):
        plane = np.full((6, 4), float(k))
        plane[0, 0] = np.nan
        kept = recorder.offer(plane, f"step {k}", "|u| (m/s)")
        assert kept == (k % 2 == 0)  # every other offer: half the interval apart
        now[0] += 0.5
    assert len(recorder) == 3 and recorder.frames[-1][1] == "step 4"
    gif = recorder.gif()
    assert gif[:6] == b"GIF89a" and gif.count(b"\x21\xf9\x04") >= 3  # a control block per frame
    # The same frames as an MP4, decoded again with the wheel's ffmpeg: three pictures, each
    # of its own field (one colour range over the recording: the field's value sets the colour).
    import imageio_ffmpeg

    mp4 = recorder.mp4()
    assert mp4[4:8] == b"ftyp"
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "slice.mp4"
        path.write_bytes(mp4)
        reader = imageio_ffmpeg.read_frames(str(path))
        meta = next(reader)
        frames = [np.frombuffer(f, np.uint8).reshape(*meta["size"][::-1], 3) for f in reader]
    assert len(frames) == 3
    for a, b in zip(frames, frames[1:], strict=False):
        assert np.abs(a.astype(int) - b).mean() > 2
    now[0] += 5
    recorder.offer(np.zeros((5, 5)), "another cut", "|u| (m/s)")
    assert len(recorder) == 1


def test_the_3d_view_records_pictures_that_change_with_the_flow_as_a_gif_and_an_mp4():
    """Issue 30 item 4: the 3D view recorded at an interval (off screen, headless), each
    picture the scene of its snapshot: the plane's colours and the streamlines follow the
    flow, so pictures of a changing flow differ; the MP4 decodes to those pictures."""
    import imageio_ffmpeg

    controller, scene = _obstacle_channel_scene()
    now = [0.0]
    scene.recorder.clock = lambda: now[0]
    try:
        with pytest.raises(ValueError, match="Nothing recorded"):
            scene.recorder.gif()
        assert not scene.record_tick(), "nothing is recorded unless asked"
        scene.record.value = True
        scene.show_streamlines.value = True
        controller.set_flow3d("umag", FAST_FLOW3D_S)  # sooner than the view's 5 s
        controller.runner.wait_for(lambda s: s.plane is not None, 60)
        controller.poll()
        assert scene.record_tick()  # the fluid at rest
        assert not scene.record_tick(), "the next picture comes after the interval"
        for total in (30, 230):
            time.sleep(FAST_FLOW3D_S)  # a new coarse flow with the next publish
            controller.step(total - controller.snapshot.step)
            controller.runner.wait_for(lambda s, total=total: s.step == total
                                       and s.flow3d is not None and s.flow3d.step == total, 60)
            controller.poll()
            now[0] += scene.recorder.interval_s
            assert scene.record_tick()
        pictures = [p for p, _ in scene.recorder.frames]
        assert [t for _, t in scene.recorder.frames] == ["step 0", "step 30", "step 230"]
        assert pictures[0].shape == (480, 640, 3)
        for a, b in zip(pictures, pictures[1:], strict=False):
            assert (np.abs(a.astype(int) - b).sum(axis=2) > 30).sum() > 200
        assert scene.recorder.gif()[:6] == b"GIF89a"
        mp4 = scene.recorder.mp4()
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "view3d.mp4"
            path.write_bytes(mp4)
            reader = imageio_ffmpeg.read_frames(str(path))
            meta = next(reader)
            frames = [np.frombuffer(f, np.uint8).reshape(*meta["size"][::-1], 3)
                      for f in reader]
        assert len(frames) == 3 and frames[0].shape == (480, 640, 3)
        for a, b in zip(frames, frames[1:], strict=False):
            assert np.abs(a.astype(int) - b).mean() > 0.5
    finally:
        scene.close()
        controller.close()


def _obstacle_channel_scene() -> tuple[Controller, Scene3D]:
    """A 16×10×8 channel along x with a block inside, driven by a body force, and its 3D view
    (run not started)."""
    from solver.config import SimulationConfig

    solid = np.zeros((16, 10, 8), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    solid[6:9, 3:6, 2:6] = True
    controller = Controller(VoxelGeometry(solid), SimulationConfig(
        backend="numpy", body_force=(1e-5, 0, 0)), autostart=None)
    return controller, Scene3D(controller)


def _probed_controller(solid: np.ndarray, voxel_size: float | None = None):
    """A paused NumPy run of ``solid`` (channel walls at y = 0 and -1) with two probes and a
    line typed in, and its probes view."""
    from app.views.physics_panel import PhysicalSetup
    from app.views.probes_view import ProbesView
    from solver.config import SimulationConfig

    controller = Controller(VoxelGeometry(solid, voxel_size=voxel_size), SimulationConfig(
        backend="numpy", body_force=(1e-5, 0, 0)), autostart=None)
    view = ProbesView(controller, PhysicalSetup())
    view.points.value, view.line.value = "5 4 3; 8 4 3", "5 0 3 -> 5 7 3"
    assert view.set_from_text()
    return controller, view


def _steps_shown(controller, view, at_least: int) -> np.ndarray:
    """The steps of the probes' series once the runner has done every command sent and
    reached step ``at_least``."""
    sent = controller.runner.sent
    controller.runner.wait_for(lambda s: s.applied >= sent and s.probes is not None
                               and s.step >= at_least, 60)
    controller.poll()
    return view.buffer.data["step"].to_numpy()


def test_the_probe_series_starts_again_when_the_run_restarts():
    """Reset, Apply (even with the flow carried over) and a new geometry rebuild the run: the
    series then holds that run's samples alone, never the previous run's."""
    from app.geometry_sources import make_preview

    solid = np.zeros((10, 8, 6), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    controller, view = _probed_controller(solid)
    try:
        controller.step(20)
        assert _steps_shown(controller, view, 20).max() == 20
        controller.reset()
        controller.step(5)
        steps = _steps_shown(controller, view, 5)
        assert steps.max() == 5 and (steps <= 5).all(), f"old samples kept: {steps}"
        # Apply carries the flow (the steps go on) but the settings changed: a new series.
        controller.step(5)
        _steps_shown(controller, view, 10)
        controller.config.tau = 0.9
        controller.apply_settings()
        controller.runner.wait_for(lambda s: s.config["tau"] == 0.9, 60)
        controller.step(3)
        steps = _steps_shown(controller, view, 13)
        assert steps.min() >= 10 and steps.max() == 13, f"old settings' samples kept: {steps}"
        # A new geometry (same box) starts from rest.
        controller.use_geometry(make_preview(VoxelGeometry(solid.copy()), controller.config),
                                autostart=False)
        controller.step(2)
        steps = _steps_shown(controller, view, 2)
        assert (steps <= 2).all(), f"the previous geometry's samples kept: {steps}"
    finally:
        controller.close()


def test_probes_a_smaller_geometry_leaves_outside_are_removed_and_named_in_si():
    """A new geometry smaller than a probe's or a line's position: those are removed (the
    others go on sampling) and the probes view names them with their positions in SI."""
    from app.geometry_sources import make_preview

    solid = np.zeros((10, 8, 6), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    controller, view = _probed_controller(solid, voxel_size=1e-4)
    try:
        controller.step(2)
        _steps_shown(controller, view, 2)
        smaller = VoxelGeometry(solid[:7, :6].copy(), voxel_size=1e-4)  # 7 x 6 x 6
        smaller.solid[:, -1] = True
        controller.use_geometry(make_preview(smaller, controller.config), autostart=False)
        assert [p.name for p in controller.probes.probes] == ["p1"]
        assert controller.probes.lines == ()
        assert view.points.value == "5 4 3" and view.line.value == ""
        note = view.dropped.object
        assert 'data-dropped="2"' in note
        # Voxel (8, 4, 3)'s centre with 100 µm voxels: (850, 450, 350) µm.
        assert "p2 at (8, 4, 3) = (850, 450, 350) µm" in note
        assert "line from (5, 0, 3) = (550, 50, 350) µm to (5, 7, 3)" in note
        assert "700 × 600 × 600 µm" in note
        # The probe left inside goes on sampling on the new geometry.
        controller.step(3)
        controller.runner.wait_for(
            lambda s: s.shape == smaller.shape and s.probes is not None and s.step >= 3, 60)
        controller.poll()
        assert list(controller.snapshot.probes.probes) == ["p1"]
        assert list(view.buffer.data.columns) == ["step", "p1"] and len(view.buffer.data)
        # Probes set again clear the note.
        view.points.value = "1 1 1"
        assert view.set_from_text() and view.dropped.object == ""
    finally:
        controller.close()


def test_a_flow_synced_without_a_server_render_sends_its_isosurface():
    """A new flow's sync skips the server render; the smooth-shaded isosurface reaches the
    serialised scene through pyvista's normals filter all the same. It did not: the browser
    kept the isosurface of the last rendered sync, after Apply the empty one of the moment
    the rebuilt run had no flow yet, for as long as new flows kept coming."""
    from bokeh.document import Document

    controller, scene = _obstacle_channel_scene()
    try:
        scene.pane.get_root(Document())  # a browser's copy: each sync serialises the scene
        scene.show_iso.value = True
        controller.step(40)
        controller.runner.wait_for(lambda s: s.flow3d is not None and s.step >= 40, 60)
        controller.poll()
        drawn = scene._actors["iso"].mapper
        scene._update_flow(None)  # the rebuilt run before its first flow, synced with a render
        scene.pane.synchronize()
        assert drawn.GetInput().GetNumberOfPoints() <= 1
        scene.refresh_flow()  # the run's flow, synced without a render
        iso = scene._meshes["iso"]
        assert iso.n_points > 1
        assert drawn.GetInput().GetNumberOfPoints() == iso.n_points
    finally:
        scene.close()
        controller.close()
