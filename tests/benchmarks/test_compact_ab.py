"""benchmarks/compact/compact_ab.py's table: one row per case and storage, one column per kernel
configuration, the mean of its timings, the best of a row in bold (CPU: rows made up here)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "compact"))

import compact_ab  # noqa: E402


def _row(precision: str, packed: int, tpb: int, code: str, of_limit: float) -> dict:
    return dict(case="rock", precision=precision, pad=1, packed=packed, tpb=tpb, code=code,
                of_limit=of_limit)


def test_summary_averages_the_timings_of_a_configuration_and_marks_the_best() -> None:
    rows = [_row("float32", 0, 2, "inner", 0.80), _row("float32", 0, 2, "inner", 0.70),
            _row("float32", 4, 0, "inner", 0.60), _row("float16", 4, 0, "inner", 0.50),
            dict(case="rock", precision="float64", pad=1, packed=0, tpb=1, code="", rep=0,
                 error="lacks")]
    table = compact_ab.summary(rows, "GPU", 3.0e12)
    lines = table.splitlines()
    assert lines[0].startswith("# Compact A/B on GPU") and "3000 GB/s" in lines[0]
    assert "| pad 1 inner 2 tiles/block | pad 1 inner packed 4 |" in table
    assert "| rock | float32 | **0.750** | 0.600 |" in lines
    assert "| rock | float16 |  | **0.500** |" in lines  # not timed there: an empty cell
    assert not any("float64" in line for line in lines)  # refused configurations: no row
