"""A/B timings of compact-storage kernels as runs step them: padding, and the in-place kernel.

``--what pad``: compact storage packs a tile's direction block to its fluid count (pad 1) or
rounds it up to a whole 32-byte sector (pad 8 in float32, 4 in float64, 16 in float16 storage),
so that no sector is shared by two blocks. The compact suite (``compact_probe.py``) timed the
padded blocks only with the first halo code; this times both paddings with the inner-tile halo
code that runs use (``CompactCode(inner=True)``), on the rock-like pack and the phi 0.1 and 0.5
sphere packs, each configuration twice in alternating order (``CompactRun.step``, CUDA events,
captured graphs).

``--what in-place``: ``auto`` runs porous in-place cases on compact storage (AA pattern,
``solver/backends/plan.py``); this times its kernel choices there: the halo code (inner-tile column
fill, with or without paired shared entries), the per-node kernel at 1, 2 and 4 tiles per
block, and the packed kernel (4 tiles, one thread per fluid node), float32, float64 and float16
storage, on the rock-like pack and the phi 0.1 and 0.5 sphere packs.

Usage, on the GPU machine from the repository root: ``python benchmarks/compact/compact_ab.py --what
pad --out DIR`` (about 1 minute on an H100; ``--what in-place`` about 2); writes
``compact-<what>-ab-<gpu>-<date>.json`` and a table of it (``.md``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.backends.cuda.compact_run import CompactRun  # noqa: E402
from solver.backends.cuda.compact_source import CompactCode  # noqa: E402
from solver.benchmarking.compact_suite import CompactSuite, _median_seconds  # noqa: E402
from solver.benchmarking.gpu_suite import _problem, pack_cases, rock_case  # noqa: E402
from solver.benchmarking.results import write_json_md  # noqa: E402

INNER = CompactCode(inner=True)
#: Values per 32-byte sector per storage precision.
SECTOR = {"float32": 8, "float64": 4, "float16": 16}


def configs(what: str, precision: str) -> list[tuple[int, int, int, CompactCode]]:
    """(pad, packed tiles per block, tiles per block, halo code) timed. 'pad': float16 as its
    runs (packed 4) and per node, float32/float64 per node at 1 and 2 tiles per block, each
    exact and sector-padded; 'in-place': exact, inner halo code, per node at 1, 2 and 4 tiles
    per block and packed 4 (the paired halo code lost its timing: removed, issue 27)."""
    if what == "in-place":
        return [(1, packed, tpb, INNER) for packed, tpb in ((0, 1), (0, 2), (0, 4), (4, 0))]
    out = []
    for pad in (1, SECTOR[precision]):
        out += [(pad, 4, 0, INNER), (pad, 0, 2, INNER)] if precision == "float16" \
            else [(pad, 0, 1, INNER), (pad, 0, 2, INNER)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--what", choices=("pad", "in-place"), default="pad")
    parser.add_argument("--porosity", type=float, nargs="*", default=None,
                        help="porosities of the sphere packs timed besides the rock-like "
                             "pack (default: 0.1 0.5)")
    args = parser.parse_args()
    streaming = "in-place" if args.what == "in-place" else "two-copy"
    from solver.backends.cuda.backend import CupyBackend  # CuPy: the GPU machine only

    suite = CompactSuite(min_seconds=0.05, repeats=5)
    info = CupyBackend().device_info()
    copy = info["copy_bandwidth"]
    rows = []
    porosities = args.porosity if args.porosity is not None else (0.1, 0.5)
    for case in [rock_case(192, 22)] + pack_cases(192, porosities, 40.0):
        for precision in ("float32", "float16", "float64"):
            problem = replace(_problem(case, precision, streaming), tile_storage="compact")
            value_bytes = 2 if precision == "float16" else np.dtype(precision).itemsize
            limit = copy / (2 * 19 * value_bytes)
            runs = configs(args.what, precision)
            for rep in range(2):
                for pad, packed, tpb, code in (runs if rep == 0 else runs[::-1]):
                    try:
                        run = CompactRun(problem, pad, tiles_per_block=tpb or 2, packed=packed,
                                         code=code)
                    except ValueError as exc:  # a combination the compact kernel lacks
                        rows.append(dict(case=case.label, precision=precision, pad=pad,
                                         packed=packed, tpb=tpb, code=code.label, rep=rep,
                                         error=str(exc)[:300]))
                        continue
                    try:
                        _, sec = _median_seconds(run.step, suite)
                    finally:
                        run.release()
                    g = problem.n_fluid / sec / 1e9
                    rows.append(dict(case=case.label, precision=precision, pad=pad,
                                     packed=packed, tpb=tpb, code=code.label, rep=rep, fluid_g=g,
                                     of_limit=g * 1e9 / limit,
                                     slots=run.compact.n_slots / problem.n_fluid))
                    print(json.dumps(rows[-1]), flush=True)
    gpu = info["name"].lower().replace(" ", "-")
    stem = f"compact-{args.what}-ab-{gpu}-{date.today().isoformat()}"
    table = summary(rows, info["name"], copy)
    write_json_md(args.out, stem, {"copy": copy, "rows": rows}, table)
    print(table)


def _config(row: dict) -> str:
    """A timed configuration in words: 'pad 1 inner packed 4', 'pad 8 plain 2 tiles/block'."""
    kernel = f"packed {row['packed']}" if row["packed"] else f"{row['tpb']} tiles/block"
    return f"pad {row['pad']} {row['code'] or 'plain'} {kernel}"


def summary(rows: list[dict], gpu: str, copy: float) -> str:
    """Markdown table: fraction of the fluid-only limit of each configuration, mean of its
    two timings, per case and storage precision (the best of a row in bold)."""
    timings: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in rows:
        if "of_limit" in r:  # refused configurations have no timing
            cells = timings.setdefault((r["case"], r["precision"]), {})
            cells.setdefault(_config(r), []).append(r["of_limit"])
    columns = list(dict.fromkeys(c for cells in timings.values() for c in cells))
    lines = [f"# Compact A/B on {gpu} ({date.today().isoformat()}), copy {copy / 1e9:.0f} GB/s",
             "", "Fraction of the fluid-only limit (copy bandwidth / 2 q value bytes per fluid "
             "node), mean of two timings.", "",
             "| case | storage | " + " | ".join(columns) + " |",
             "| --- | --- |" + " ---: |" * len(columns)]
    for (case, precision), cells in timings.items():
        means = {c: sum(t) / len(t) for c, t in cells.items()}
        best = max(means.values())
        text = ["" if c not in means else
                (f"**{means[c]:.3f}**" if means[c] == best else f"{means[c]:.3f}")
                for c in columns]
        lines.append(f"| {case} | {precision} | " + " | ".join(text) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
