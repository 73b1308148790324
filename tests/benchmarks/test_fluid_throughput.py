"""Host arithmetic of ``benchmarks/fluid_throughput.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

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
    assert "commit c" in text and "| 0.500 |" in text and "read/write" not in text
