"""benchmarks/scaling/mirrored_rock.py on CPU ranks: the launcher runs the ranks under mpirun
and rank 0 writes time and memory per rank to JSON and markdown (skipped without MPI)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.solver.test_local_setup import needs_mpi

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "scaling"))

import mirrored_rock  # noqa: E402


@needs_mpi
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
def test_two_cpu_ranks_write_time_and_memory_per_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("LBM_COMMIT", "test")
    code = mirrored_rock.main(["--ranks", "2", "--size", "24", "--diameter", "9",
                               "--porosity", "0.3", "--backend", "numpy", "--storage",
                               "float32", "--steps", "21", "--check", "10", "--out",
                               str(tmp_path)])
    assert code == 0
    (found,) = tmp_path.glob("mirrored-rock-24-2x-numpy-float32-*.json")
    result = json.loads(found.read_text())
    # Checks at 10 and 20, each read one step later too: k is the mean of k at steps 20 and
    # 21 (solver.rock.uncertainty)
    assert result["shape"] == [48, 24, 24] and result["steps"] == 21 and result["ranks"] == 2
    # k at multiples of --check (the steps the one-device protocol checks at)
    assert [h["step"] for h in result["history"]] == [10, 20] and result["k"] > 0
    assert result["k_pair"]["step"] == 20 and result["alternation"] >= 0
    assert result["alternation_residual"] > 0
    ranks = result["per_rank"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert sum(r["fluid_nodes"] for r in ranks) == result["fluid_nodes"]
    for r in ranks:
        assert r["device_bytes_estimate"] > 0 and r["host_peak_bytes"] > 0
        # the default start: the sample coarsened by 2, run over the same ranks, prolonged
        assert set(r["seconds"]) == {"summary", "slab", "coarse_summary", "coarse_runs",
                                     "allocate", "prolong"} and r["step_seconds"] > 0
    text = found.with_suffix(".md").read_text()
    assert "| rank |" in text and text.count("\n| ") >= 3


def test_launcher_keeps_the_callers_python_path(monkeypatch):
    """The ranks find the dependencies on the caller's PYTHONPATH (a GPU box keeps them
    there; replacing it lost ``param`` on the ranks), with the repository first."""
    seen = {}

    def fake_run(cmd, env, cwd, timeout):
        seen.update(cmd=cmd, env=env)
        return type("Done", (), {"returncode": 0})()

    monkeypatch.setenv("PYTHONPATH", "/opt/deps")
    monkeypatch.setattr(mirrored_rock.subprocess, "run", fake_run)
    monkeypatch.setattr(mirrored_rock, "_mpirun", lambda: "mpirun")
    assert mirrored_rock.main(["--ranks", "4", "--size", "400"]) == 0
    assert seen["env"]["PYTHONPATH"].split(":") == [str(mirrored_rock.REPO), "/opt/deps"]
    assert seen["cmd"][:3] == ["mpirun", "-n", "4"] and "--worker" in seen["cmd"]
