"""Exact against sector-padded direction blocks of the compact step, on the current kernels.

Compact storage packs a tile's direction block to its fluid count (pad 1) or rounds it up to a
whole 32-byte sector (pad 8 in float32, 4 in float64, 16 in float16 storage), so that no sector
is shared by two blocks. The compact suite (``compact_probe.py``) timed the padded blocks only
with the first halo code; this times both paddings with the inner-tile halo code that runs use
(``CompactCode(inner=True)``), on the rock-like pack and the phi 0.1 and 0.5 sphere packs, each
configuration twice in alternating order (``CompactRun.step``, CUDA events, captured graphs).

Usage, on the GPU machine from the repository root: ``python benchmarks/compact_pad_ab.py
--out DIR`` (about 1 minute on an H100); writes ``compact-pad-ab-<gpu>-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solver.backends.cuda.backend import CupyBackend  # noqa: E402
from solver.backends.cuda.compact_run import CompactRun  # noqa: E402
from solver.backends.cuda.compact_source import CompactCode  # noqa: E402
from solver.benchmarking.compact_suite import CompactSuite, _median_seconds  # noqa: E402
from solver.benchmarking.gpu_suite import _problem, pack_cases, rock_case  # noqa: E402

INNER = CompactCode(inner=True)
#: Values per 32-byte sector per storage precision.
SECTOR = {"float32": 8, "float64": 4, "float16": 16}


def configs(precision: str) -> list[tuple[int, int, int]]:
    """(pad, packed tiles per block, tiles per block) timed: float16 as its runs (packed 4)
    and per node; float32/float64 per node at 1 and 2 tiles per block."""
    out = []
    for pad in (1, SECTOR[precision]):
        out += [(pad, 4, 0), (pad, 0, 2)] if precision == "float16" else [(pad, 0, 1), (pad, 0, 2)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    suite = CompactSuite(min_seconds=0.05, repeats=5)
    info = CupyBackend().device_info()
    copy = info["copy_bandwidth"]
    rows = []
    for case in [rock_case(192, 22)] + pack_cases(192, (0.1, 0.5), 40.0):
        for precision in ("float32", "float16", "float64"):
            problem = replace(_problem(case, precision), tile_storage="compact")
            value_bytes = 2 if precision == "float16" else np.dtype(precision).itemsize
            limit = copy / (2 * 19 * value_bytes)
            runs = configs(precision)
            for rep in range(2):
                for pad, packed, tpb in (runs if rep == 0 else runs[::-1]):
                    run = CompactRun(problem, pad, tiles_per_block=tpb or 2, packed=packed,
                                     code=INNER)
                    try:
                        _, sec = _median_seconds(run.step, suite)
                    finally:
                        run.release()
                    g = problem.n_fluid / sec / 1e9
                    rows.append(dict(case=case.label, precision=precision, pad=pad,
                                     packed=packed, tpb=tpb, rep=rep, fluid_g=g,
                                     of_limit=g * 1e9 / limit,
                                     slots=run.compact.n_slots / problem.n_fluid))
                    print(json.dumps(rows[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"compact-pad-ab-{info['name'].lower().replace(' ', '-')}-{date.today().isoformat()}"
    (args.out / f"{stem}.json").write_text(json.dumps({"copy": copy, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
