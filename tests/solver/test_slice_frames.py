"""Slice pictures (issue 30 item 4): one rendering for the app's PNG and the CLI's headless
frames; a case's ``frames`` writes a PNG of the cut every so many steps, in SI."""

from __future__ import annotations

import io

import numpy as np
import pytest
import yaml
from matplotlib.image import imread

from solver.case import CaseError, parse_case
from solver.run import HeadlessRun
from solver.slice_frames import FrameSettings, frame_settings, fullest_layer, save_slice_png

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _pixels(path) -> np.ndarray:
    return imread(io.BytesIO(path.read_bytes()), format="png")


def test_a_frame_is_a_png_that_changes_with_the_field(tmp_path):
    y = np.linspace(0.0, 1.0, 20)
    plane = np.tile(y * (1 - y), (12, 1))  # (n_a, n_b): a profile across b
    plane[:, 0] = plane[:, -1] = np.nan  # walls
    a = save_slice_png(tmp_path / "a.png", plane, ("x", "y"), "|u| (m/s)", "step 1")
    b = save_slice_png(tmp_path / "b.png", plane[::-1, ::-1] ** 2 + np.arange(12)[:, None],
                       ("x", "y"), "|u| (m/s)", "step 1")
    again = save_slice_png(tmp_path / "c.png", plane, ("x", "y"), "|u| (m/s)", "step 1")
    assert a.read_bytes().startswith(PNG_MAGIC)
    pa, pb = _pixels(a), _pixels(b)
    assert pa.shape == pb.shape and pa.shape[0] > 100
    assert np.abs(pa - pb).max() > 0.2  # another field: other colours
    assert np.array_equal(pa, _pixels(again))  # the same field: the same picture
    # The solid rows are drawn grey (#4a4a4a), the fluid in viridis: both colours are there.
    grey = np.all(np.abs(pa[..., :3] - 0x4A / 255) < 0.02, axis=-1)
    assert grey.sum() > 50


def test_frame_settings_from_a_case_entry():
    assert frame_settings(None) is None
    f = frame_settings({"field": "pressure", "axis": "y", "index": 3, "every": 20})
    assert f == FrameSettings("pressure", 1, 3, 20)
    assert frame_settings({}).index is None and frame_settings({}).axis == 2
    for bad, message in (({"field": "speed"}, "not a field"), ({"axis": "w"}, "x, y or z"),
                         ({"every": 0}, "whole number"), ({"index": -1}, "layer number"),
                         ({"colour": 1}, "unknown key")):
        with pytest.raises(ValueError, match=message):
            frame_settings(bad)
    solid = np.ones((4, 5, 6), dtype=bool)
    solid[:, :, 4] = False  # only layer z = 4 holds fluid: auto finds it, not the middle
    assert fullest_layer(solid, 2) == 4 and FrameSettings(axis=2).layer(solid) == 4
    with pytest.raises(ValueError, match="outside"):
        FrameSettings(axis=0, index=4).layer(solid)


def test_the_cli_writes_slice_frames_in_si(tmp_path):
    solid = np.zeros((10, 8, 8), dtype=bool)
    solid[:, 0, :] = solid[:, -1, :] = True  # a channel between two plates
    np.save(tmp_path / "ch.npy", solid)
    data = {
        "name": "ch", "geometry": {"file": "ch.npy", "options": {"voxel_size": 1e-5}},
        "config": {"lattice": "D3Q19", "collision": "TRT", "precision": "float64", "tau": 0.8,
                   "body_force": [1e-5, 0, 0], "backend": "numpy"},
        "run": {"max_steps": 40, "output_interval": 40, "check_interval": 20,
                "convergence": 0, "viscosity": 1e-6, "density": 1000.0, "vti": False},
        "frames": {"field": "umag", "axis": "x", "index": "auto", "every": 20},
    }
    case = parse_case(yaml.safe_load(yaml.safe_dump(data)), tmp_path)
    HeadlessRun(case, tmp_path / "out").execute(progress=False)
    frames = sorted((tmp_path / "out" / "frames").glob("*.png"))
    assert [f.name for f in frames] == ["umag_x4_00000020.png", "umag_x4_00000040.png"]
    first, last = (_pixels(f) for f in frames)
    assert frames[0].read_bytes().startswith(PNG_MAGIC)
    assert np.abs(first - last).max() > 0.05  # the flow (and its colour bar) grew
    with pytest.raises(CaseError, match="frames.field"):
        parse_case({**data, "frames": {"field": "speed"}}, tmp_path)
    data["frames"]["index"] = 99
    with pytest.raises(CaseError, match="outside"):
        HeadlessRun(parse_case(data, tmp_path), tmp_path / "out2")
