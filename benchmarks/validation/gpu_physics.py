"""Check and time the GPU port of the boundary conditions and MRT in one call on the GPU machine.

1. Compiles every kernel variant in worker processes (fills CuPy's disk cache for the tests).
2. Runs ``pytest -m gpu tests/solver`` (CuPy against NumPy, incl. ``test_cupy_physics.py``).
3. Times BGK, TRT and MRT (and the boundary kernel) on the dense 256^3 box, float32 and
   float64, with CUDA events after warm-up; fluid nodes only (``physics-timing.json``/``.md``).
4. Optionally the dense part of the benchmark suite (``--suite``), for comparison with
   ``benchmarks/validation/results/nvidia-h200-2026-11-22.md``.
5. Runs validation cases (``--cases``, default all) at ``--size`` until ``--deadline`` seconds
   after the start; the report is rewritten after every case, so a cut-off run keeps the rest.

Usage, from the repository root: ``python benchmarks/validation/gpu_physics.py --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

log = logging.getLogger("gpu_physics")
START = time.perf_counter()


def _compile_batch(variants) -> list[str]:
    from solver.backends.cuda.backend import compile_kernel

    errors = []
    for v in variants:
        try:
            compile_kernel(v)
        except Exception as exc:  # reported; the tests show the failing variant again
            errors.append(f"{v.name}: {exc.__class__.__name__}: {str(exc)[-1500:]}")
    return errors


def precompile(workers: int) -> list[str]:
    """Compile all variants in ``workers`` processes; compile errors."""
    from solver.backends.cuda.kernels import all_variants

    variants = all_variants()
    batches = [variants[k::workers] for k in range(workers)]
    with ProcessPoolExecutor(workers) as pool:
        errors = [e for batch in pool.map(_compile_batch, batches) for e in batch]
    log.info("compiled %d variants in %.1f s", len(variants), time.perf_counter() - START)
    return errors


def run_pytest(out: Path, timeout: float) -> str:
    """``pytest -m gpu tests/solver``; the summary line (log in out/pytest-gpu.log)."""
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-ra", "-p", "no:cacheprovider",
           "--durations=25", "tests/solver"]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        text = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode() + "\nTIMEOUT"
    (out / "pytest-gpu.log").write_text(text)
    lines = [ln for ln in text.splitlines() if ln.strip()]
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    return "\n".join(failed[:30] + lines[-1:])


def _dense_problem(precision: str, boundary: str):
    from solver.config import SimulationConfig
    from solver.problem import Problem

    faces = {f"{ax}_{s}": "wall" for ax in "xyz" for s in ("min", "max")}
    if boundary == "zou_he":  # Zou-He inlet/outlet: the kernel without Ladd's term
        faces |= dict(x_min="velocity", x_min_value=0.01, x_max="pressure")
    elif boundary == "moving":  # lid-driven: Zou-He code and Ladd's term
        faces |= dict(y_max="moving_wall", y_max_value=(0.05, 0.0, 0.0))
    config = SimulationConfig(lattice="D3Q19", precision=precision, collision="BGK", tau=0.8,
                              tile_offset="origin", **faces)
    return Problem.from_config(np.zeros((256, 256, 256), dtype=bool), config)


def timing(steps: int = 64, repeats: int = 7) -> list[dict]:
    """MFLUPS of BGK/TRT/MRT, plain and boundary kernels, on the dense 256^3 box."""
    from solver.benchmarking.probe_backend import ProbeBackend
    from solver.collision import relaxation
    from solver.mrt import mrt_rates

    backend = ProbeBackend()
    copy = backend.device_info()["copy_bandwidth"]
    rows = []
    for precision in ("float32", "float64"):
        for boundary in ("none", "zou_he", "moving"):
            problem = _dense_problem(precision, boundary)
            base = backend.allocate(problem)
            for collision in ("BGK", "TRT", "MRT"):
                rates = (mrt_rates("D3Q19", 0.8) if collision == "MRT"
                         else relaxation(collision, 0.8))
                for layout, tpb in (("xyz", 1), ("xyz", 2), ("xyz", 4), ("paper", 1)):
                    state = backend.reconfigure(base, collision=collision, rates=rates,
                                                layout=layout, tiles_per_block=tpb)
                    backend.step(state, 2 * steps)  # compile, graph capture, clocks
                    times = [backend.step(state, steps) / steps for _ in range(repeats)]
                    sec = float(np.median(times))
                    mflups = problem.n_fluid / sec / 1e6
                    bw = mflups * 1e6 * problem.bytes_per_fluid_node_step()
                    rows.append({"precision": precision, "boundary": boundary,
                                 "collision": collision, "layout": layout,
                                 "tiles_per_block": tpb, "mflups": round(mflups, 1),
                                 "fraction_copy": round(bw / copy, 4),
                                 "spread": round((max(times) - min(times)) / sec, 4)})
                    log.info("%s", rows[-1])
                    base = state
            backend.release(base)
    return rows


def timing_markdown(rows: list[dict], device: str, commit: str) -> str:
    """Best layout/tiles-per-block per (precision, kernel, collision) as a markdown table."""
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["precision"], r["boundary"], r["collision"])
        if r["mflups"] > best.get(key, {"mflups": 0})["mflups"]:
            best[key] = r
    lines = [f"# BGK, TRT and MRT on the GPU: {device}", "",
             f"Date {time.strftime('%Y-%m-%d')}, commit {commit}. Dense 256^3 D3Q19 box: "
             "'plain' cavity3D (all faces resting walls, the kernel without boundary code); "
             "'Zou-He': x faces a velocity inlet and a pressure outlet (kernel with the Zou-He "
             "code); 'Zou-He + Ladd': lid-driven, y_max a moving wall (kernel with Zou-He code "
             "and Ladd's term). MFLUPS over fluid nodes, CUDA events, median of 7 x 64 steps "
             "after warm-up; best of xyz with 1/2/4 tiles per block and paper with 1.",
             "", "| precision | kernel | collision | MFLUPS | of copy bandwidth | layout | t/b |",
             "| --- | --- | --- | ---: | ---: | --- | ---: |"]
    order = {"none": 0, "zou_he": 1, "moving": 2}
    for (prec, bc, coll), r in sorted(best.items(), key=lambda kv: (kv[0][0], order[kv[0][1]],
                                                                       kv[0][2])):
        kernel = {"none": "plain", "zou_he": "Zou-He", "moving": "Zou-He + Ladd"}[bc]
        lines.append(f"| {prec} | {kernel} | {coll} | {r['mflups']:.0f} | "
                     f"{r['fraction_copy']:.3f} | {r['layout']} | {r['tiles_per_block']} |")
    return "\n".join(lines) + "\n"


def validation(out: Path, size: str, cases: list[str] | None, deadline: float) -> list[str]:
    """Run validation cases until the deadline; rewrite the report after each. Summary lines."""
    from solver.benchmarking.probe_backend import ProbeBackend
    from solver.validation import CASES, run_case, write_report

    device = ProbeBackend().device_info()["name"]
    names = cases or [n for n, c in CASES.items() if size in c.sizes]
    results, lines = [], []
    for name in names:
        left = deadline - (time.perf_counter() - START)
        if left < 20:
            lines.append(f"skipped {name}: deadline")
            continue
        t0 = time.perf_counter()
        try:
            rows = run_case(name, size, "cupy")
        except Exception as exc:  # a case that breaks must not lose the others' rows
            lines.append(f"ERROR {name}: {exc.__class__.__name__}: {exc}")
            continue
        results.extend(rows)
        path = write_report(results, device, out, size, "cupy")
        commit = os.environ.get("LBM_COMMIT")  # the copy on the GPU machine has no .git
        if commit:
            path.write_text(path.read_text().replace("Commit: unknown", f"Commit: {commit}"))
        for r in rows:
            verdict = ("pass" if r.passed else "FAIL") if r.checked else "info"
            lines.append(f"{verdict} {name}: {r.quantity} = {r.measured:.5g} (ref "
                         f"{r.reference:.5g}, {r.size}, {r.steps} steps)")
        log.info("validation %s done in %.1f s", name, time.perf_counter() - t0)
    (out / "validation-rows.json").write_text(json.dumps([r.__dict__ for r in results],
                                                         indent=1, default=str))
    return lines


def main() -> int:
    """Run the selected parts; print a short summary last."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/validation/results")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--suite", action="store_true", help="dense 256^3 benchmark suite")
    parser.add_argument("--size", default="full", choices=["ci", "full"])
    parser.add_argument("--cases", nargs="*", default=None, help="validation cases; none: skip")
    parser.add_argument("--deadline", type=float, default=540.0, help="seconds after start")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    errors = precompile(min(14, os.cpu_count() or 1))
    summary += [f"compile error: {e[:300]}" for e in errors]
    if not args.skip_tests:
        summary.append(f"pytest -m gpu: {run_pytest(out, 300)}")
    commit = os.environ.get("LBM_COMMIT", "unknown")
    if not args.skip_timing:
        from solver.benchmarking.probe_backend import ProbeBackend
        from solver.benchmarking.results import write_json_md

        rows = timing()
        device = ProbeBackend().device_info()["name"]
        md = timing_markdown(rows, device, commit)
        write_json_md(out, "physics-timing", rows, md)
        summary.append(md)
    if args.suite:
        from solver.benchmarking.gpu_suite import GpuSuite, run_gpu_suite
        from solver.benchmarking.probe_backend import ProbeBackend
        from solver.benchmarking.report import write_report

        report = run_gpu_suite(ProbeBackend(), GpuSuite(dense_sizes=(256,),
                                                             porosities=()))
        write_report(report, out)
    if args.cases is None or args.cases:
        summary += validation(out, args.size, args.cases, args.deadline)
    print("\n".join(summary))
    print(f"total {time.perf_counter() - START:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
