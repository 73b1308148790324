"""The Rock tab: pore classes of the current geometry and priced crop/downsample choices."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from app.dashboard import Dashboard
from app.settings import Settings
from geometries import VoxelGeometry
from solver.config import SimulationConfig
from solver.runner import live_runners

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def board():
    before = live_runners()
    solid = np.ones((16, 16, 16), bool)
    solid[:, 4, 4] = False            # through channel along x
    solid[:6, 10, 10] = False         # blind hole from the inlet: dead end along x
    for i in range(16):               # a staircase along x joined through edges only
        solid[i, 12 + i % 2, 3] = False
    geom = VoxelGeometry(solid, voxel_size=2e-6)
    dash = Dashboard(geom, SimulationConfig(backend="numpy", body_force=(1e-5, 0, 0)),
                     refresh=False, autostart=False, app_settings=Settings(scene_3d=False))
    yield dash
    dash.close()
    assert live_runners() == before


def test_check_reports_pore_classes_with_lattice_connectivity(board):
    board.rock.check_button.clicks += 1
    text = board.rock.pores.object
    assert "percolating" in text and "dead-end" in text and "m³" in text
    x_row = text.split("<tr>")[2]
    # channel 16 + staircase 16 percolate (edges count), the 6-voxel blind hole is a dead end
    assert "84.2 %" in x_row and "15.8 %" in x_row
    assert "No axis has a connected pore path" not in text


def test_price_lists_downsampled_and_cropped_choices(board):
    board.rock.price_button.clicks += 1
    text = board.rock.choices.object
    for label in ("full", "downsample x2", "downsample x4", "crop 8³"):
        assert label in text
    assert "MFLUPS" in text and "η_t" in text
    # majority-vote coarsening by 4 closes the 1-voxel channels: said, not crashed
    assert "cannot run: No connected pore path" in text.split("downsample x4")[1]


def test_rock_tab_is_in_the_dashboard(board):
    tabs = board.main.objects[1]
    assert "Rock" in tabs._names


def test_measure_k_runs_the_tensor_as_commands_on_the_session_runner(board):
    """The measurement runs on the session's runner thread: no second device thread."""
    import threading

    board.controller.step(20)
    runner = board.controller.runner
    runner.wait_for(lambda s: s.step >= 20)
    threads = {t.name for t in threading.enumerate()}
    assert board.rock.json_download.disabled  # nothing to export yet
    board.rock.rev_box.value = True
    board.rock.measure_button.clicks += 1
    assert board.rock.measure_button.disabled and not board.rock.stop_button.disabled
    board.rock.measure_button.clicks += 1  # a second click while measuring starts nothing
    job = board.rock.job
    while job.running and job.thread_name is None:
        job.join(0.01)
    assert {t.name for t in threading.enumerate()} <= threads, "a second device thread"
    assert job.join(240)
    assert job.thread_name == runner._thread.name
    board.rock.refresh()
    text = board.rock.tensor.object
    # x percolates (channel + staircase); y and z have no connected path: said on their rows
    assert "converged" in text.split("<tr>")[2] and "mD" in text
    assert text.count("No connected pore path") == 2 and "Done." in text
    assert not board.rock.measure_button.disabled and board.rock.stop_button.disabled
    assert board.controller.runner is runner and runner.snapshot().step >= 20  # run kept
    # k_x with its interval and flow tortuosity; F along x only (the straight channel is the
    # one face-connected path: F = 256 / 1, the cross-section over one open voxel)
    x_row = text.split("<tr>")[2]
    assert "±" in x_row and "[" in x_row
    extras = board.rock.extras.object
    assert "formation factor F" in extras and "<td>256</td>" in extras
    assert "REV along x" in extras and "0.125" in extras and "8×8×8" in extras
    assert "Time: k x" in extras and "formation factor" in extras and "REV" in extras
    # exports in SI: JSON (the study's dict) and CSV (a row per measured axis, then REV)
    assert not board.rock.json_download.disabled
    data = json.loads(board.rock.export_json().read())
    assert data["units"]["k_m2"] == "m^2" and data["formation_factor"]["x"][
        "formation_factor"] == pytest.approx(256.0, rel=1e-6)
    assert len(data["rev"]["points"]) == 4 and data["intervals"][0]["axis"] == "x"
    rows = list(csv.reader(board.rock.export_csv()))
    assert rows[0][:3] == ["axis", "k_m2", "k_mD"] and rows[1][0] == "x"
    assert float(rows[1][1]) == pytest.approx(data["tensor_m2"]["mirrored"]["x"])
    assert any(r and r[0] == "rev_volume_fraction" for r in rows)


def test_tensor_table_says_when_the_run_is_paused_for_the_measurement(board):
    from app.views.rock_panel import _tensor_html
    from solver.rock.job import AxisProgress, TensorProgress

    axes = (AxisProgress("x", "running", 200, 0.01, 5.0, 0.3),)
    paused = _tensor_html(TensorProgress(axes, True, paused_run=True))
    assert "simulation is paused while k is measured" in paused
    assert "paused" not in _tensor_html(TensorProgress(axes, True))
    assert board.rock.job is None
    board.rock.measure()  # the panel hands the session's runner to the job
    assert board.rock.job.runner is board.controller.runner
    board.rock.stop()
    assert board.rock.job.join(60)


def test_a_geometry_without_voxel_size_is_measured_with_the_physics_tab_voxel(tmp_path):
    """A TIFF carries no voxel size: the Rock tab showed no k at all (mD, m², interval and
    the CSV's k columns empty) while the Physics tab gave k in mD. It measures with the
    Physics tab's voxel size now and says so."""
    solid = np.ones((8, 8, 8), bool)
    solid[:, 3:5, 3:5] = False  # a straight 2x2 duct along x; y and z are refused at once
    dash = Dashboard(VoxelGeometry(solid), SimulationConfig(backend="numpy"), refresh=False,
                     autostart=False, app_settings=Settings(scene_3d=False))
    try:
        dash.physics.setup.voxel_size_um = 2.0
        assert dash.rock.sample().voxel_size == pytest.approx(2e-6)
        dash.rock.check()
        assert "m³" in dash.rock.pores.object
        dash.rock.measure()
        note = dash.rock.voxel_note.object
        assert "Physics tab" in note and "2 µm" in note
        assert dash.rock.job.join(120)
        dash.rock.refresh()
        x_row = dash.rock.tensor.object.split("<tr>")[2]
        assert "converged" in x_row and "±" in x_row
        rows = list(csv.reader(dash.rock.export_csv()))
        k_voxel2, k_m2 = float(rows[1][11]), float(rows[1][1])
        assert rows[0][11:] == ["k_voxel2", "voxel_size_m"] and float(rows[1][12]) == 2e-6
        assert k_m2 == pytest.approx(k_voxel2 * 4e-12) and float(rows[1][2]) > 0
    finally:
        dash.close()


def test_a_stopped_measurement_exports_as_not_converged(board):
    """Stop before any axis converged: the JSON said "converged": true with no run at all."""
    board.rock.measure()
    board.rock.stop()
    assert board.rock.job.join(60)
    board.rock.refresh()
    data = json.loads(board.rock.export_json().read())
    assert data["converged"] is False and data["runs"] == []
    assert {a["state"] for a in data["axes"].values()} == {"cancelled"}
    assert "Done." in board.rock.tensor.object and not board.rock.measure_button.disabled
