"""Compact storage with 64-bit value offsets (issues 29 and 33): checked on the GPU, then timed.

A copy of 2^31 values or more (a 1000³ rock image mirrored, a 1600³ one) is addressed by the
wide compact kernels (``ExecutionPlan.wide``: 64-bit offsets, bases and located halo sources;
the same templates). One command, on one GPU, in well under a minute:

1. ``pytest -m gpu tests/solver/test_cupy_compact_wide.py``: wide and 32-bit runs store the same
   bits on CuPy (launches, graphs, tile ranges, readouts, the fused check);
2. times the 32-bit and the wide kernels as the plan runs them (in place or, ``--streaming
   two-copy``, two copies; TRT, the plan's compact kernel of each storage: float32 per node,
   float16 packed 4) on a rock-like 256³ pack at porosity 0.2, ``CompactRun.step`` (CUDA
   events, captured graphs, after a warm-up), each configuration twice in alternating order:
   G fluid updates/s and wide/32-bit, with each kernel's registers and local (spill) bytes.
   ``--cap``: also the wide kernels compiled with ``__maxnreg__`` at their 32-bit twin's
   register count (a question, not a plan choice: nvcc 13.0 for sm_90 fits the two-copy
   float32 wide kernel in the 32-bit one's 40 registers with 8 B of spills, against 48
   uncapped: 12 instead of 10 blocks of 128 threads an SM).

Usage, from the repository root on the GPU machine:
``python benchmarks/compact/compact_wide.py`` (``--size``, ``--streaming``, ``--cap``,
``--skip-tests``, ``--out DIR``); writes ``compact-wide-<gpu>-<date>-<commit>[-two-copy].json``
and ``.md`` to ``benchmarks/compact/results``.
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


def capped_launcher():
    """A CompactRun launcher that compiles each kernel with ``__maxnreg__`` at the register
    count of its 32-bit twin (NVRTC, the backend's options), and its compiled kernels."""
    import cupy as cp

    from solver.backends.cuda.device import _NVRTC_OPTIONS, compile_kernel
    from solver.backends.cuda.kernels import kernel_source

    kernels = {}

    def launch(variant, blocks, threads, shared, args) -> None:
        if variant.name not in kernels:
            regs = compile_kernel(replace(variant, wide=False)).num_regs
            head = 'extern "C" __global__ void '
            code = kernel_source(variant)
            assert code.count(head) == 1, variant.name
            code = code.replace(head, f"{head}__maxnreg__({regs}) ")
            kernels[variant.name] = cp.RawModule(code=code, options=_NVRTC_OPTIONS) \
                .get_function(variant.name)
        kernels[variant.name]((blocks,), (threads,), args, shared_mem=shared)
    return launch, kernels


def _registers(run, kernels: dict | None) -> tuple[int, int]:
    """Registers and local-memory (spill) bytes per thread of the run's first kernel."""
    from solver.backends.cuda.device import compile_kernel

    k = kernels[run.variant.name] if kernels else compile_kernel(run.variant)
    attributes = k.attributes  # CUDA's function attributes
    return int(attributes["num_regs"]), int(attributes["local_size_bytes"])


def time_runs(size: int, streaming: str = "in-place", cap: bool = False,
              repeats: int = 2) -> list[dict]:
    """G fluid updates/s of the 32-bit and the wide compact kernels (``cap``: and the wide ones
    capped at the 32-bit registers), per storage."""
    from solver.backends.cuda.compact_run import CompactRun

    case = rock_case(size, 22)
    suite = CompactSuite(min_seconds=0.1, repeats=5)
    rows = []
    configs = ("32-bit", "wide") + (("wide capped",) if cap else ())
    for precision in ("float32", "float16"):
        problem = replace(_problem(case, precision, streaming, collision="TRT"),
                          tile_storage="compact")
        pad, packed, code = compact_kernel(precision)
        for rep in range(repeats):
            for config in (configs if rep % 2 == 0 else configs[::-1]):
                launch, kernels = capped_launcher() if config == "wide capped" else (None, None)
                run = CompactRun(problem, pad, tiles_per_block=problem.tiles_per_block,
                                 packed=packed, code=code, wide=config != "32-bit",
                                 **({"launcher": launch} if launch else {}))
                try:
                    steps, sec = _median_seconds(run.step, suite)
                    regs, spill = _registers(run, kernels)
                except Exception as exc:  # the cap is a question: its failure ends no timing
                    if launch is None:
                        raise
                    rows.append({"storage": precision, "config": config,
                                 "error": f"{exc.__class__.__name__}: {exc}"})
                    print(json.dumps(rows[-1]), flush=True)
                    continue
                finally:
                    run.release()
                rows.append({"case": case.label, "storage": precision, "streaming": streaming,
                             "config": config, "wide": config != "32-bit", "rep": rep,
                             "steps": steps, "kernel": run.variant.name, "registers": regs,
                             "local_bytes": spill, "n_fluid": int(problem.n_fluid),
                             "eta_t": problem.tiling.eta_t, "seconds_per_step": sec,
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
    failed = [r for r in result["rows"] if "error" in r]
    result = {**result, "rows": [r for r in result["rows"] if "error" not in r]}
    streaming = result["rows"][0].get("streaming", "in-place") if result["rows"] else ""
    lines += [f"{streaming}, TRT, the plan's compact kernel per storage; G fluid updates/s "
              "(CUDA events, graphs), mean of the repeats; registers (local bytes) per thread.",
              "", "| case | storage | eta_t | kernels | G/s | / 32-bit | registers |",
              "| --- | --- | ---: | --- | ---: | ---: | --- |"]
    for storage in dict.fromkeys(r["storage"] for r in result["rows"]):
        rows = [r for r in result["rows"] if r["storage"] == storage]
        configs = list(dict.fromkeys(r.get("config", "wide" if r["wide"] else "32-bit")
                                     for r in rows))
        mean = {}
        for config in configs:
            some = [r for r in rows
                    if r.get("config", "wide" if r["wide"] else "32-bit") == config]
            mean[config] = sum(r["fluid_g_per_s"] for r in some) / len(some)
            regs = f"{some[0]['registers']} ({some[0]['local_bytes']})" \
                if "registers" in some[0] else ""
            lines.append(f"| {rows[0]['case']} | {storage} | {rows[0]['eta_t']:.3f} | {config} "
                         f"| {mean[config]:.2f} | {mean[config] / mean[configs[0]]:.3f} "
                         f"| {regs} |")
    lines += [f"\n{r['storage']} {r['config']} failed: {r['error']}" for r in failed]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--size", type=int, default=256, help="edge of the rock-like pack")
    parser.add_argument("--streaming", choices=("in-place", "two-copy"), default="in-place")
    parser.add_argument("--cap", action="store_true",
                        help="also the wide kernels at their 32-bit twins' register counts")
    parser.add_argument("--skip-tests", action="store_true", help="time only")
    args = parser.parse_args(argv)
    tests = None if args.skip_tests else run_tests()
    from solver.backends.cuda.backend import CupyBackend  # CuPy: the GPU machine only

    info = CupyBackend().device_info()
    commit = git_commit()
    result = {"gpu": info["name"], "date": date.today().isoformat(), "commit": commit,
              "tests": tests, "rows": time_runs(args.size, args.streaming, args.cap)}
    gpu = info["name"].lower().replace(" ", "-")
    stem = f"compact-wide-{gpu}-{result['date']}-{commit}" \
        + ("" if args.streaming == "in-place" else f"-{args.streaming}")
    table = summary(result)
    write_json_md(args.out, stem, result, table)
    print(table)
    if tests is not None and tests["returncode"] != 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
