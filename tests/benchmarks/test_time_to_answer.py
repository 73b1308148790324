"""``benchmarks/rock_time_to_answer/time_to_answer.py --quick``: the CPU smoke run writes a sane
before/after table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "rock_time_to_answer"))

import time_to_answer  # noqa: E402


def test_quick_run_writes_json_and_markdown(tmp_path):
    assert time_to_answer.main(["--quick", "--out", str(tmp_path)]) == 0
    (json_path,) = tmp_path.glob("time_to_answer-*.json")
    report = json.loads(json_path.read_text())
    (row,) = report["rows"]
    assert row["size"] == 20 and row["before"]["converged"] and row["after"]["converged"]
    assert row["before"]["tau"] == 1.0 and row["after"]["tau"] < 1.0
    assert row["after"]["coarse_steps"] > 0
    # The speed-up takes less work (measured 1.04x: at 20³ both runs are near the floor of one
    # 1000-step convergence window; 2.7x at 40³, see the module doc) ...
    assert row["work_ratio"] > 1.0
    assert abs(row["k_difference"]) < 0.005  # ... to the same k within 0.5 %
    assert row["after"]["k_mD"] == pytest.approx(
        row["after"]["k_voxel2"] * 5.345e-6**2 / 9.869233e-13 * 1e3)
    md = json_path.with_suffix(".md").read_text()
    assert "| 20³ | after |" in md and "work before/after" in md
    # Kernels are warmed before timing (compilation is not time to answer), and said so.
    assert report["warm_up_seconds"] > 0 and "compiled and loaded before timing" in md
