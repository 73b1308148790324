"""Host arithmetic of ``benchmarks/throughput/fluid_throughput.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "throughput"))

import fluid_throughput  # noqa: E402


def _suite() -> dict:
    row = {"case": "spheres 192^3 phi=0.5", "porosity": 0.5, "eta_t": 0.8,
           "kernel": "BGK incompressible", "precision": "float32", "streaming": "two-copy",
           "bytes_per_node": 152, "mflups": 10000.0}
    probe = dict(row, kernel="read/write only", mflups=1.0)
    return {"meta": {"device": "GPU", "date": "d", "commit": "c", "copy_bandwidth": 3.04e12},
            "results": [row, probe]}


def test_limit_is_copy_bandwidth_over_bytes_per_fluid_node() -> None:
    (row,) = fluid_throughput.fluid_rows(_suite(), "BGK incompressible")
    assert row["limit_g_per_s"] == pytest.approx(20.0)
    assert row["fluid_g_per_s"] == pytest.approx(10.0)
    assert row["of_limit"] == pytest.approx(0.5)


def test_markdown_names_gpu_commit_and_every_row() -> None:
    text = fluid_throughput.markdown(_suite(), "BGK incompressible")
    assert "commit c" in text and "10.00 (0.500)" in text and "read/write" not in text


def _option_rows() -> dict:
    suite = _suite()
    row = suite["results"][0]
    slow_layout = dict(row, mflups=5000.0, layout="paper")
    in_place = dict(row, streaming="in-place", mflups=8800.0)
    mrt = dict(row, kernel="MRT incompressible", mflups=9500.0)
    compact = dict(row, tile_storage="compact", mflups=12000.0)
    suite["results"] += [slow_layout, in_place, mrt, compact]
    suite["meta"]["skipped"] = {"compact float16 two-copy": "no float16 storage"}
    return suite


def test_each_option_takes_its_fastest_layout_and_gets_its_own_column() -> None:
    rows = fluid_throughput.fluid_rows(_option_rows(), "BGK incompressible")
    by = {(r["tile_storage"], r["streaming"]): r["fluid_g_per_s"] for r in rows}
    assert by == pytest.approx({("tiled", "two-copy"): 10.0, ("tiled", "in-place"): 8.8,
                                ("compact", "two-copy"): 12.0})


def test_ratio_table_states_mrt_over_bgk_and_in_place_over_two_copy() -> None:
    text = fluid_throughput.markdown(_option_rows(), "BGK incompressible")
    tiled_row = [line for line in text.splitlines()
                 if line.startswith("| spheres") and "0.950" in line]
    assert tiled_row and "0.880" in tiled_row[0]
    assert "compact float16 two-copy: no float16 storage" in text
