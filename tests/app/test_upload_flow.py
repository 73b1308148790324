"""The upload flow without a browser: kept uploads, re-applied options, errors that stay (#17)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import trimesh

from app.dashboard import Dashboard
from app.geometry_sources import make_preview
from app.uploads import BoundedFileDropper
from geometries import VoxelGeometry, generators
from solver.config import SimulationConfig
from tests.geometries.geometry_builders import stl_bytes

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def board():
    pack = generators.random_sphere_pack((16,) * 3, porosity=0.6, diameter=6, seed=2)
    board = Dashboard(pack, SimulationConfig(backend="numpy", body_force=(2e-5, 0, 0)),
                      refresh=False, autostart=False)
    board.geometry_panel.source = "Upload"
    yield board
    board.close()


def upload(board: Dashboard, name: str, data: bytes) -> None:
    """What the chunked widget does when the last chunk arrives (async watchers run at once
    outside a server)."""
    board.geometry_panel.file_input.value = {name: data}


def raw_volume() -> bytes:
    volume = np.zeros((6, 7, 8), dtype=np.uint8)
    volume[:, :2] = 1
    return volume.tobytes(order="F")


def test_an_option_reapplies_to_the_uploaded_file_without_a_second_upload(board):
    """B1: a .raw without its shape fails; entering the shape previews the same bytes."""
    panel = board.geometry_panel
    upload(board, "rock.raw", raw_volume())
    assert panel.preview is None and "needs its shape" in panel.alert.object
    assert board.controller.level == "danger"
    panel.upload_options.raw_shape = "6, 7, 8"
    assert panel.preview is not None and panel.preview.geometry.shape == (6, 7, 8)
    assert panel.alert.object.startswith("Ready")
    # B12: the error of the failed attempt is gone from the status bar too.
    assert board.controller.level != "danger" and "needs its shape" not in board.controller.status
    panel.upload_options.raw_dtype = "uint16"  # 336 bytes are not 6*7*8 uint16 voxels
    assert panel.preview is None and panel.alert.alert_type == "danger"


def test_an_stl_unit_change_reapplies_and_the_guess_is_stated(board):
    panel = board.geometry_panel
    panel.upload_options.param.update(stl_inside="fluid", stl_resolution=24)
    upload(board, "aorta.stl", stl_bytes(trimesh.creation.box(extents=(167.0, 80.0, 60.0))))
    assert panel.preview.geometry.voxel_size == pytest.approx(167e-3 / 24)
    assert "read as millimetres (guessed from a 167 x 80 x 60 extent)" in panel.alert.object
    panel.upload_options.stl_unit = "µm"
    assert panel.preview.geometry.voxel_size == pytest.approx(167e-6 / 24)
    assert "guessed" not in panel.alert.object and panel.alert.alert_type == "success"


def test_a_failed_use_stays_visible_until_the_next_action(board):
    """B2: the error was replaced by "Paused" within a poll while the panel said Simulating."""
    c, panel = board.controller, board.geometry_panel
    cube = np.zeros((8, 8, 8), dtype=bool)
    # Previews refuse such voxels now; one made before that check (1.67e6 µm voxels):
    panel.preview = dataclasses.replace(make_preview(VoxelGeometry(cube), c.config),
                                        geometry=VoxelGeometry(cube, voxel_size=1.67))
    panel._use_clicked(None)
    assert c.level == "danger" and "voxel_size_um" in c.status
    assert "Simulating" not in panel.alert.object and panel.alert.alert_type == "danger"
    error = c.status
    c.runner.step(3)
    c.runner.wait_for(lambda s: s.step >= 3, 60)
    c.poll()
    assert c.status == error, "a runner state change must not replace the error"
    c.start()
    assert c.level != "danger"


def test_the_dropper_drops_a_transfer_above_the_cap():
    class Event:
        event_name = "upload_event"

        def __init__(self, chunk: int, total: int, data: bytes) -> None:
            self.data = {"name": "big.npy", "chunk": chunk, "total_chunks": total,
                         "data": data, "type": ""}

    dropper = BoundedFileDropper(max_bytes=25)
    for chunk in range(1, 5):  # 4 chunks of 10 bytes: over the cap at the third
        dropper._process_event(Event(chunk, 4, b"x" * 10))
    assert dropper.value == {} and dropper._file_buffer == {}
    assert "larger than the upload limit" in dropper.refused
    dropper._process_event(Event(1, 2, b"y" * 10))
    dropper._process_event(Event(2, 2, b"y" * 10))
    assert dropper.value == {"big.npy": b"y" * 20}


def test_user_names_are_escaped_in_the_counters_and_the_status(board):
    """#16 item 4: a file name or an .npz's stored name was inserted as HTML."""
    from app.views.counters import _cards_html

    evil = "<img src=x onerror=alert(1)>"
    page = _cards_html(dataclasses.replace(board.controller.snapshot, geometry_name=evil))
    assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    board.controller.notify("danger", f"Geometry not loaded: {evil}.npy is not an array")
    assert "<img" not in board.status.object
    upload(board, f"{evil}.npy", b"not an array")
    assert "<img" not in board.geometry_panel.alert.object


def test_the_not_watertight_warning_reaches_the_preview(board):
    """#17: "STL not watertight (85 open edges)" reached only the server log."""
    sphere = trimesh.creation.icosphere(subdivisions=3, radius=40.0)
    holed = trimesh.Trimesh(sphere.vertices, sphere.faces[sphere.triangles_center[:, 2] < 36])
    board.geometry_panel.upload_options.param.update(stl_resolution=24, stl_unit="mm")
    upload(board, "holed.stl", stl_bytes(holed))
    alert = board.geometry_panel.alert
    assert re.search(r"not watertight \(\d+ open edges\)", alert.object)
    assert alert.alert_type == "warning"
