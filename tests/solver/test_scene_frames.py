"""The command line writes the 3D view's frames headless (issue 30 item 4): a case's ``frames``
with ``views: [slice, 3d]`` writes a PNG of the slice and of the 3D view (PyVista off screen,
the scene the app's 3D view shows) every so many steps, and a movie of each at the end; the
pictures change as the flow develops from rest."""

from __future__ import annotations

import io

import numpy as np
import pytest
import yaml

pytest.importorskip("pyvista")  # the GPU machine's Python has no PyVista

from matplotlib.image import imread  # noqa: E402

from solver.case import CaseError, parse_case  # noqa: E402
from solver.run import HeadlessRun  # noqa: E402
from solver.scene_frames import STREAMLINE_RGB  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GIF_FRAME = b"\x21\xf9\x04"  # a graphic control block: one per frame


def _pixels(path) -> np.ndarray:
    return imread(io.BytesIO(path.read_bytes()), format="png")[..., :3]


def _case(tmp_path, frames: dict) -> dict:
    """A channel between two plates with a block in it, driven from rest by a body force."""
    solid = np.zeros((20, 10, 10), dtype=bool)
    solid[:, 0, :] = solid[:, -1, :] = True
    solid[8:11, 3:7, 3:7] = True
    np.save(tmp_path / "ch.npy", solid)
    return {
        "name": "ch", "geometry": {"file": "ch.npy", "options": {"voxel_size": 1e-5}},
        "config": {"lattice": "D3Q19", "collision": "TRT", "precision": "float64", "tau": 0.8,
                   "body_force": [1e-5, 0, 0], "backend": "numpy"},
        "run": {"max_steps": 90, "output_interval": 90, "check_interval": 30,
                "convergence": 0, "viscosity": 1e-6, "density": 1000.0, "vti": False},
        "frames": frames,
    }


def test_the_cli_writes_slice_and_3d_frames_and_their_movies(tmp_path):
    # Fixed colour range (m/s; here 1 lattice unit of speed is 1 m/s): colours grow with the flow.
    frames = {"field": "umag", "axis": "z", "index": 5, "every": 30, "views": ["slice", "3d"],
              "streamlines": 20, "isosurface": "umag", "movie": "gif", "range": [0.0, 1e-3]}
    case = parse_case(yaml.safe_load(yaml.safe_dump(_case(tmp_path, frames))), tmp_path)
    outcome = HeadlessRun(case, tmp_path / "out").execute(progress=False)
    assert outcome.exit_code == 0, outcome.message
    folder = tmp_path / "out" / "frames"
    steps = ["00000030", "00000060", "00000090"]
    slices = sorted(folder.glob("umag_z5_*.png"))
    scenes = sorted(folder.glob("scene_umag_z5_*.png"))
    assert [p.name for p in slices] == [f"umag_z5_{s}.png" for s in steps]
    assert [p.name for p in scenes] == [f"scene_umag_z5_{s}.png" for s in steps]
    assert scenes[0].read_bytes().startswith(PNG_MAGIC)
    first, last = _pixels(scenes[0]), _pixels(scenes[-1])
    assert first.shape == (480, 640, 3)
    # The flow developed: the cut's colours changed over a good part of the picture.
    changed = np.abs(first - last).max(axis=-1) > 0.1
    assert changed.mean() > 0.01, changed.mean()
    # Streamlines are drawn (their blue) once the fluid moves.
    blue = np.array([int(STREAMLINE_RGB[k:k + 2], 16) for k in (1, 3, 5)]) / 255
    assert (np.abs(last - blue).max(axis=-1) < 0.12).sum() > 30
    s_first, s_last = _pixels(slices[0]), _pixels(slices[-1])
    assert np.abs(s_first - s_last).max(axis=-1).mean() > 0.005
    for movie in ("umag_z5.gif", "scene_umag_z5.gif"):
        data = (folder / movie).read_bytes()
        assert data[:6] == b"GIF89a" and data.count(GIF_FRAME) >= 3, movie


def test_frames_3d_needs_a_3d_geometry_and_known_keys(tmp_path):
    data = _case(tmp_path, {"views": ["3d"], "movie": "webm"})
    with pytest.raises(CaseError, match="frames.movie"):
        parse_case(data, tmp_path)
    data["frames"] = {"views": ["3d"], "isosurface": "speed"}
    with pytest.raises(CaseError, match="frames.isosurface"):
        parse_case(data, tmp_path)
    data["frames"] = {"views": ["volume"]}
    with pytest.raises(CaseError, match="frames.views"):
        parse_case(data, tmp_path)
    np.save(tmp_path / "plate.npy", np.zeros((12, 8), dtype=bool))
    data["geometry"]["file"] = "plate.npy"
    data["config"].update(lattice="D2Q9", body_force=[1e-5, 0.0])
    data["frames"] = {"views": ["3d"]}
    with pytest.raises(CaseError, match="3D geometry"):
        HeadlessRun(parse_case(data, tmp_path), tmp_path / "out")


def test_the_frames_option_of_the_command_line(tmp_path, capsys):
    from solver.__main__ import main

    data = _case(tmp_path, None)
    del data["frames"]
    data["run"]["max_steps"] = 30
    (tmp_path / "ch.yaml").write_text(yaml.safe_dump(data))
    code = main(["run", str(tmp_path / "ch.yaml"), "--quiet", "--output", str(tmp_path / "o"),
                 "--frames", "every: 30, views: [3d], streamlines: 10, index: 5"])
    assert code == 0
    assert [p.name for p in (tmp_path / "o" / "frames").iterdir()] == [
        "scene_umag_z5_00000030.png"]
    code = main(["run", str(tmp_path / "ch.yaml"), "--quiet", "--output", str(tmp_path / "p"),
                 "--frames", "every: 30, views: [3d"])
    assert code == 2 and "--frames" in capsys.readouterr().err
