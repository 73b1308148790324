"""benchmarks/memory/readout_peak.py runs end to end on the CPU (NumPy backend, tracemalloc in place
of the CuPy pool): every storage and precision gets a row with every readout, and the table."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "memory"))

import readout_peak  # noqa: E402


def test_readout_peak_writes_a_row_per_storage_and_precision(tmp_path) -> None:
    rows = readout_peak.run(24, 1, tmp_path)
    assert [(r["storage"], r["precision"]) for r in rows] == [
        ("compact", "float32"), ("tiled", "float32"), ("compact", "float64"),
        ("tiled", "float64")]
    for row in rows:
        for name in ("health", "view+health", "fields", "populations", "checkpoint",
                     "wall shear"):
            assert row[name]["peak_B_per_fluid"] > 0 and row[name]["ms"] >= 0
        assert row["estimate_B_per_fluid"] > row["state_B_per_fluid"] > 0
    saved = json.loads((tmp_path / "readout-peak.json").read_text())
    assert saved["size"] == 24 and len(saved["rows"]) == 4
    table = (tmp_path / "readout-peak.md").read_text()
    assert table.count("\n| compact") == 2 and "| health |" in table


def test_readout_peak_in_place_writes_its_own_files(tmp_path) -> None:
    rows = readout_peak.run(24, 3, tmp_path, "in-place")  # odd: the streamed layout is read
    assert {r["streaming"] for r in rows} == {"in-place"} and len(rows) == 4
    saved = json.loads((tmp_path / "readout-peak-in-place.json").read_text())
    assert saved["streaming"] == "in-place"
    assert "in-place" in (tmp_path / "readout-peak-in-place.md").read_text()
    assert not (tmp_path / "readout-peak.json").exists()


def test_estimates_print_state_and_peak_of_every_storage(capsys) -> None:
    readout_peak.estimates(24, 8)
    out = capsys.readouterr().out
    assert "compact in-place" in out and out.count("| float") == 2
