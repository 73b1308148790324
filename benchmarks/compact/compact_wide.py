"""Compact storage with 64-bit value offsets (issues 29 and 33): checked on the GPU, then timed.

A copy of 2^31 values or more (a 1000³ rock image mirrored, a 1600³ one) is addressed by the
wide compact kernels (``ExecutionPlan.wide``: 64-bit offsets, bases and located halo sources;
the same templates). One command, on one GPU, in well under a minute:

1. ``pytest -m gpu tests/solver/test_cupy_compact_wide.py``: wide and 32-bit runs store the same
   bits on CuPy (launches, graphs, tile ranges, readouts, the fused check);
2. times the 32-bit and the wide kernels as the plan runs them (in place, TRT, the plan's
   compact kernel of each storage: float32 per node, float16 packed 4) on a rock-like
   256³ pack at porosity 0.2, ``CompactRun.step`` (CUDA events, captured graphs, after a
   warm-up), each configuration twice in alternating order: G fluid updates/s and wide/32-bit.

Usage, from the repository root on the GPU machine:
``python benchmarks/compact/compact_wide.py`` (``--size``, ``--skip-tests``, ``--out DIR``);
writes ``compact-wide-<gpu>-<date>-<commit>.json`` and ``.md`` to ``benchmarks/compact/results``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.backends.plan import compact_kernel  # noqa: E402
from solver.benchmarking.compact_suite import CompactSuite, _median_seconds  # noqa: E402
from solver.benchmarking.gpu_suite import _problem, rock_case  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402

TEST = "tests/solver/test_cupy_compact_wide.py"


def run_tests() -> dict:
    """The wide kernels' GPU tests: return code, seconds and the last lines of their output."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", TEST, "-q",
                          "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    tail = (out.stdout + out.stderr).strip().splitlines()[-15:]
    print("\n".join(tail), flush=True)
    return {"command": f"python -m pytest -m gpu {TEST} -q", "returncode": out.returncode,
            "seconds": time.perf_counter() - start, "tail": tail}


def time_runs(size: int, repeats: int = 2) -> list[dict]:
    """G fluid updates/s of the 32-bit and the wide compact kernels, in place, per storage."""
    from solver.backends.cuda.compact_run import CompactRun

    case = rock_case(size, 22)
    suite = CompactSuite(min_seconds=0.1, repeats=5)
    rows = []
    for precision in ("float32", "float16"):
        problem = replace(_problem(case, precision, "in-place", collision="TRT"),
                          tile_storage="compact")
        pad, packed, code = compact_kernel(precision)
        order = (False, True)
        for rep in range(repeats):
            for wide in (order if rep % 2 == 0 else order[::-1]):
                run = CompactRun(problem, pad, tiles_per_block=problem.tiles_per_block,
                                 packed=packed, code=code, wide=wide)
                try:
                    steps, sec = _median_seconds(run.step, suite)
                finally:
                    run.release()
                rows.append({"case": case.label, "storage": precision, "wide": wide,
                             "rep": rep, "steps": steps, "kernel": run.variant.name,
                             "n_fluid": int(problem.n_fluid), "eta_t": problem.tiling.eta_t,
                             "seconds_per_step": sec,
                             "fluid_g_per_s": problem.n_fluid / sec / 1e9})
                print(json.dumps(rows[-1]), flush=True)
    return rows


def summary(result: dict) -> str:
    """Markdown: the tests' outcome and the mean G fluid updates/s per storage and offsets."""
    t = result["tests"]
    lines = [f"# Compact storage with 64-bit offsets on {result['gpu']} ({result['date']}, "
             f"commit {result['commit']})", ""]
    if t is not None:
        lines += [f"GPU tests (`{t['command']}`): return code {t['returncode']}, "
                  f"{t['seconds']:.0f} s; last line: `{t['tail'][-1] if t['tail'] else ''}`", ""]
    lines += ["In place, TRT, the plan's compact kernel per storage; G fluid updates/s (CUDA "
              "events, graphs), mean of the repeats.", "",
              "| case | storage | eta_t | 32-bit | 64-bit (wide) | wide / 32-bit |",
              "| --- | --- | ---: | ---: | ---: | ---: |"]
    for storage in dict.fromkeys(r["storage"] for r in result["rows"]):
        rows = [r for r in result["rows"] if r["storage"] == storage]
        mean = {w: sum(r["fluid_g_per_s"] for r in rows if r["wide"] == w)
                / max(1, sum(r["wide"] == w for r in rows)) for w in (False, True)}
        lines.append(f"| {rows[0]['case']} | {storage} | {rows[0]['eta_t']:.3f} | "
                     f"{mean[False]:.2f} | {mean[True]:.2f} | {mean[True] / mean[False]:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--size", type=int, default=256, help="edge of the rock-like pack")
    parser.add_argument("--skip-tests", action="store_true", help="time only")
    args = parser.parse_args(argv)
    tests = None if args.skip_tests else run_tests()
    from solver.backends.cuda.backend import CupyBackend  # CuPy: the GPU machine only

    info = CupyBackend().device_info()
    commit = git_commit()
    result = {"gpu": info["name"], "date": date.today().isoformat(), "commit": commit,
              "tests": tests, "rows": time_runs(args.size)}
    gpu = info["name"].lower().replace(" ", "-")
    stem = f"compact-wide-{gpu}-{result['date']}-{commit}"
    table = summary(result)
    write_json_md(args.out, stem, result, table)
    print(table)
    if tests is not None and tests["returncode"] != 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
