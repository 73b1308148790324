"""benchmarks/rock_time_to_answer/deep_compare.py: runs matched by edge, protocol and axis; the
default's error against the deep k and whether its stated remainder covers it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "rock_time_to_answer"))

import deep_compare  # noqa: E402


def report(path: Path, runs: list[tuple[str, float, float | None]], size: int = 200) -> Path:
    """A rock_tensor.py-shaped report of mirrored runs: (axis, k in mD, stated remainder)."""
    study = {"runs": [{"protocol": "mirrored", "axis": a, "k_mD": k, "steps": 1001,
                       "converged": True, "change_per_1000": 1e-3} for a, k, _ in runs],
             "intervals": [{"protocol": "mirrored", "axis": a, "remainder": r}
                           for a, _, r in runs if r is not None]}
    rows = [{"size": size, "study": study,
             "runs": [{"protocol": r["protocol"], "axis": r["axis"]} for r in study["runs"]]}]
    path.write_text(json.dumps({"device": "TEST", "rows": rows}))
    return path


def test_errors_and_coverage_against_the_deep_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("LBM_COMMIT", "test")
    default = report(tmp_path / "d.json", [("x", 1010.0, 0.02), ("y", 1001.0, 0.005),
                                           ("z", 500.0, None)])
    deep = report(tmp_path / "deep.json", [("x", 1000.0, None), ("y", 1000.0, None)])
    assert deep_compare.main(["--default", str(default), "--deep", str(deep),
                              "--out", str(tmp_path / "out")]) == 0
    (found,) = (tmp_path / "out").glob("deep_compare-TEST-*.json")
    rows = {r["axis"]: r for r in json.loads(found.read_text())["rows"]}
    assert set(rows) == {"x", "y"}  # z has no deep run
    assert rows["x"]["error"] == pytest.approx(0.01) and rows["x"]["covered"] is True
    assert rows["y"]["error"] == pytest.approx(0.001) and rows["y"]["covered"] is True
    assert rows["x"]["error_over_remainder"] == pytest.approx(0.5)
    text = found.with_suffix(".md").read_text()
    assert "**2 of 2**" in text


def test_a_remainder_below_the_error_is_not_covered(tmp_path):
    rows = deep_compare.compare(
        deep_compare.runs_of(report(tmp_path / "d.json", [("z", 1003.0, 0.002)]))[1],
        deep_compare.runs_of(report(tmp_path / "deep.json", [("z", 1000.0, None)]))[1])
    assert rows[0]["covered"] is False and rows[0]["error_over_remainder"] == pytest.approx(1.5)


def test_the_estimator_is_replayed_on_a_recorded_history(tmp_path):
    """A geometric approach (changes 8, 4, 2, 1, 0.5 per check) to k = 1000: this checkout's
    remainder is that series' tail, 0.5 x 0.5 / (1 - 0.5) = 0.5, and covers the error of the
    last k, 999.5, where the stated 0 did not."""
    path = report(tmp_path / "d.json", [("x", 999.5, 0.0)])
    data = json.loads(path.read_text())
    data["rows"][0]["runs"][0]["history"] = [
        [200 * i, 1000.0 - 16.0 * 0.5**i] for i in range(6)]
    path.write_text(json.dumps(data))
    deep = report(tmp_path / "deep.json", [("x", 1000.0, None)])
    (row,) = deep_compare.compare(deep_compare.runs_of(path)[1], deep_compare.runs_of(deep)[1])
    assert row["error"] == pytest.approx(-5e-4) and row["covered"] is False
    assert row["replayed"] == pytest.approx(0.5 / 999.5, rel=1e-9)
    assert row["replayed_covered"] is True


def test_no_common_run_is_an_error(tmp_path):
    default = report(tmp_path / "d.json", [("x", 1.0, 0.1)], size=200)
    deep = report(tmp_path / "deep.json", [("x", 1.0, None)], size=300)
    with pytest.raises(SystemExit):
        deep_compare.main(["--default", str(default), "--deep", str(deep),
                           "--out", str(tmp_path)])
