"""``python -m solver run CASE`` end to end: outputs, permeability, divergence (exit 3, last good
checkpoint kept), memory refusal, Ctrl-C (exit 130 + checkpoint) and a bitwise-identical resume."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from solver.__main__ import main
from solver.backends.numpy_backend import NumpyBackend
from solver.io import read_checkpoint
from solver.run import CSV_COLUMNS, EXIT_DIVERGED, EXIT_INVALID
from solver.tiling import Tiling

pytest.importorskip("geometries.loaders", reason="case files load geometries via geometries")

ROOT = Path(__file__).parents[2]
H = 16  # fluid nodes across the channel


def channel_case(tmp_path: Path, name: str = "tiny", config=None, run=None,
                 solid: np.ndarray | None = None) -> Path:
    """A 2D plate channel (H fluid nodes) saved as .npy plus a case file naming it."""
    if solid is None:
        solid = np.zeros((8, H + 2), dtype=bool)
        solid[:, 0] = solid[:, -1] = True
    np.save(tmp_path / f"{name}.npy", solid)
    case = {
        "name": name,
        "geometry": {"file": f"{name}.npy", "options": {"voxel_size": 1e-6}},
        "config": {"lattice": "D2Q9", "collision": "TRT", "precision": "float64", "tau": 0.8,
                   "body_force": [1e-6, 0], **(config or {})},
        "run": {"max_steps": 6000, "output_interval": 500, "check_interval": 100,
                "convergence": 1e-7, **(run or {})},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(case))
    return path


def cli(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess | subprocess.Popen:
    """Run ``python -m solver`` in a subprocess with this checkout importable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)}
    cmd = [sys.executable, "-m", "solver", *args]
    if kw.pop("background", False):
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_run_writes_vti_csv_summary_and_darcy_permeability(tmp_path):
    pv = pytest.importorskip("pyvista")
    result = cli("run", str(channel_case(tmp_path)), "--output", "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "tiny: converged" in result.stdout and "permeability k =" in result.stdout
    assert "step" in result.stderr and "|" in result.stderr  # tqdm progress bar
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    # Half-way bounce-back (TRT, magic 3/16): the node-averaged plane Poiseuille profile gives
    # <u>_fluid = F (H^2/12 + 1/24) / nu; superficial over the box of H + 2 rows.
    k_exact = (H**2 / 12 + 1 / 24) * H / (H + 2)
    assert summary["status"] == "converged" and summary["exit_code"] == 0
    assert summary["permeability"] == pytest.approx(k_exact, rel=1e-4)
    assert summary["permeability_m2"] == pytest.approx(k_exact * 1e-12, rel=1e-4)
    assert summary["permeability_mD"] == pytest.approx(k_exact * 1e-12 / 9.869233e-16, rel=1e-4)
    assert summary["mflups"] > 0
    assert summary["eta_t"] == pytest.approx(Tiling.build(np.load(tmp_path / "tiny.npy")).eta_t)
    assert summary["residual"] < 1e-7
    with open(out / "history.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    assert reader.fieldnames == CSV_COLUMNS
    assert [int(r["step"]) for r in rows] == list(range(500, summary["steps"] + 1, 500))
    assert float(rows[-1]["permeability"]) == pytest.approx(summary["permeability"])
    grid = pv.read(out / f"fields_{summary['steps']:08d}.vti")
    assert grid.dimensions == (9, H + 3, 1) and grid.n_cells == 8 * (H + 2)
    np.testing.assert_allclose(grid.spacing, (1e-6,) * 3)
    assert {"rho", "u", "solid"} <= set(grid.cell_data.keys())
    ux = grid.cell_data["u"][:, 0].reshape((H + 2, 8))  # cells x fastest
    assert np.isnan(ux[0]).all() and np.isnan(ux[-1]).all()
    nu = (0.8 - 0.5) / 3  # the centre nodes sit half a node off the axis: y (H - y) = H^2/4 - 1/4
    assert np.nanmax(ux) == pytest.approx(1e-6 * (H**2 / 4 - 0.25) / (2 * nu), rel=1e-6)
    checkpoint = read_checkpoint(out / "checkpoint.npz")
    assert checkpoint.step == summary["steps"]


def test_invalid_case_exits_2_naming_the_key(tmp_path, capsys):
    path = channel_case(tmp_path, config={"tua": 0.8})
    assert main(["run", str(path), "--quiet"]) == EXIT_INVALID
    err = capsys.readouterr().err
    assert "tua" in err and "'tau'" in err


def test_too_much_memory_is_refused_with_both_numbers(tmp_path, capsys, monkeypatch):
    path = channel_case(tmp_path)
    monkeypatch.setattr(NumpyBackend, "free_memory", lambda self: 1000, raising=False)
    assert main(["run", str(path), "--output", str(tmp_path / "o"), "--quiet"]) == EXIT_INVALID
    solid = np.load(tmp_path / "tiny.npy")
    from solver.case import load_case
    from solver.memory import precheck_memory

    # Refused by the lower bound from the mask, before the geometry is even tiled.
    needed = precheck_memory(solid, load_case(path).config, "numpy").required
    err = capsys.readouterr().err
    assert f"({needed} bytes)" in err and "(1000 bytes) free" in err
    assert not (tmp_path / "o").exists()


def test_divergence_exits_3_and_keeps_last_good_checkpoint(tmp_path, capsys):
    solid = np.zeros((32, 18), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    solid[10:14, 5:11] = True  # an obstacle to trip the instability
    path = channel_case(tmp_path, "unstable", solid=solid,
                        config={"tau": 0.5001, "body_force": [1e-4, 0]},
                        run={"max_steps": 1200, "output_interval": 100,
                             "checkpoint_interval": 100, "check_interval": 20, "vti": False})
    out = tmp_path / "out"
    assert main(["run", str(path), "--output", str(out), "--quiet"]) == EXIT_DIVERGED
    err = capsys.readouterr().err
    assert "diverged" in err and "tau = 0.5001 is too close to 0.5" in err
    assert "Mach" in err and "body force" in err
    step = int(re.search(r"Step (\d+):", err).group(1))
    assert 0 < step < 1200
    checkpoint = read_checkpoint(out / "checkpoint.npz")
    assert checkpoint.step == (step - 1) // 100 * 100  # the last checkpoint before divergence
    assert np.isfinite(checkpoint.populations).all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["exit_code"] == 3


def test_resume_refuses_another_configuration(tmp_path, capsys):
    path = channel_case(tmp_path, run={"max_steps": 100, "vti": False})
    assert main(["run", str(path), "--output", str(tmp_path / "a"), "--quiet"]) == 0
    other = channel_case(tmp_path, "other", config={"tau": 0.9})
    code = main(["run", str(other), "--resume", str(tmp_path / "a" / "checkpoint.npz"),
                 "--quiet"])
    assert code == EXIT_INVALID
    assert "tau: 0.8 -> 0.9" in capsys.readouterr().err


def test_ctrl_c_writes_checkpoint_and_resume_is_bitwise_identical(tmp_path):
    path = channel_case(tmp_path, run={"max_steps": 10**7, "output_interval": 50,
                                       "check_interval": 50, "convergence": 0, "vti": False})
    proc = cli("run", str(path), "--output", "run", "--quiet", cwd=tmp_path, background=True)
    history = tmp_path / "run" / "history.csv"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if history.exists() and len(history.read_text().splitlines()) >= 3:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "--resume" in err
    stopped = read_checkpoint(tmp_path / "run" / "checkpoint.npz")
    assert stopped.step >= 100
    # Resume to a later step and compare with one uninterrupted run to the same step.
    target = stopped.step + 130
    resumed = cli("run", str(path), "--resume", "run/checkpoint.npz", "--output", "run",
                  "--max-steps", str(target), "--quiet", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    straight = cli("run", str(path), "--output", "straight", "--max-steps", str(target),
                   "--quiet", cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr
    a = read_checkpoint(tmp_path / "run" / "checkpoint.npz")
    b = read_checkpoint(tmp_path / "straight" / "checkpoint.npz")
    assert a.step == b.step == target
    assert np.array_equal(a.populations, b.populations)
    with open(history, newline="") as fh:
        steps = [int(r["step"]) for r in csv.DictReader(fh)]
    assert steps == sorted(set(steps)) and steps[-1] == target


def test_resume_at_the_step_limit_adds_no_duplicate_row(tmp_path):
    path = channel_case(tmp_path, run={"max_steps": 100, "output_interval": 50, "vti": False})
    out = tmp_path / "out"
    assert main(["run", str(path), "--output", str(out), "--quiet"]) == 0
    first = json.loads((out / "summary.json").read_text())
    assert main(["run", str(path), "--output", str(out), "--resume",
                 str(out / "checkpoint.npz"), "--quiet"]) == 0
    with open(out / "history.csv", newline="") as fh:
        assert [int(r["step"]) for r in csv.DictReader(fh)] == [50, 100]
    again = json.loads((out / "summary.json").read_text())
    assert again["steps"] == 100 and again["permeability"] == first["permeability"]
