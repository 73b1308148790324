"""Host parts of ``benchmarks/kernel_tuning/kernel_instructions.py``: SASS around the barrier."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "kernel_tuning"))

import kernel_instructions as counts  # noqa: E402

_SASS = """
        .text.lbm:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/              @!P0 LDG.E.U8.CONSTANT R2, desc[UR6][R2.64] ;
                                                                       /* 0x000fe20000000800 */
        /*0020*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0030*/               @P3 EXIT ;
        /*0040*/                   FFMA R4, R4, UR10, R5 ;
        /*0050*/                   FFMA R6, R6, UR10, R7 ;
        /*0060*/                   STG.E desc[UR6][R2.64], R4 ;
        /*0070*/                   EXIT ;
.L_x_9:
        /*0080*/                   BRA `(.L_x_9);
"""


def test_counts_split_at_the_barrier_with_predicates_and_encodings_skipped() -> None:
    got = counts.count(_SASS)
    assert got["halo"] == 2 and got["node"] == 7
    assert got["node_mix"] == {"EXIT": 2, "FFMA": 2, "BAR": 1, "STG": 1, "BRA": 1}


def test_every_measured_variant_is_distinct() -> None:
    names = [v.canonical().name for v in counts.VARIANTS.values()]
    assert len(set(names)) == len(names)


@pytest.mark.skipif(not (shutil.which("nvcc") and shutil.which("nvdisasm")),
                    reason="needs the CUDA toolkit's nvcc and nvdisasm")
def test_float16_node_path_is_longer_than_float32() -> None:
    rows = {label: counts.count(counts.disassemble(v, "sm_90", "nvcc", "nvdisasm")[0])
            for label, v in counts.VARIANTS.items() if label in ("BGK float32",
                                                                 "BGK float16 storage")}
    assert rows["BGK float16 storage"]["node"] > rows["BGK float32"]["node"] > 100
