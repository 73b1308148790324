"""Host arithmetic of ``benchmarks/vessel/vessel_throughput.py``'s table."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "vessel"))

import vessel_throughput  # noqa: E402


def _row(collision: str, case: str, mflups: float) -> dict:
    return {"case": f"{collision}: {case}", "collision": collision, "box": [8, 8, 8],
            "fluid_nodes": 512, "eta_t": 1.0, "mflups": mflups, "fraction_copy": 0.5}


def test_table_of_several_collisions_compares_each_with_its_own_dense_box() -> None:
    # The H100 run of two collisions stopped here (StopIteration): their case names carry the
    # model's name in front of "dense".
    rows = [_row("TRT", "vessel, inlet + outlets driven", 90.0), _row("TRT", "dense 8^3", 100.0),
            _row("RR", "vessel, inlet + outlets driven", 60.0), _row("RR", "dense 8^3", 80.0)]
    meta = {"device": "GPU", "date": "d", "commit": "c", "collisions": ["TRT", "RR"],
            "precision": "float32", "streaming": "two-copy", "copy_bandwidth": 3e12,
            "voxelise_s": 1.0, "of_first": {"TRT": 1.0, "RR": 60.0 / 90.0}}
    text = vessel_throughput.markdown(meta, rows)
    assert "| TRT: vessel, inlet + outlets driven | 8x8x8 | 512 | 1.000 | 90 | 0.500 | 0.900 |" \
        in text
    assert "| RR: vessel, inlet + outlets driven | 8x8x8 | 512 | 1.000 | 60 | 0.500 | 0.750 |" \
        in text
    assert "RR: 66.7 % of TRT's fluid MFLUPS" in text
