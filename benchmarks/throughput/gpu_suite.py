"""Everything the GPU needs checked and measured, in one call on the GPU machine.

1. Compiles every kernel variant once (threads; CuPy's disk cache then serves the rest).
2. Runs ``pytest -m gpu`` (CuPy against the NumPy reference, probes, counters), then
   compute-sanitizer memcheck and racecheck on a few small GPU tests.
3. Cross-checks a 64^3 sphere pack against NumPy (float64, float32 and float16 storage, 20
   steps).
4. Runs the benchmark suite of ``python -m solver bench`` (cavity3D and sphere packs).
5. Writes ``<gpu>-<date>.json`` / ``.md`` and logs to ``--out``, and prints the table last.

Usage, from the repository root: ``python benchmarks/throughput/gpu_suite.py --out results_dir``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.backends import gpu_available  # noqa: E402
from solver.backends.cuda.backend import compile_kernel  # noqa: E402
from solver.backends.cuda.kernels import all_variants  # noqa: E402
from solver.benchmarking.cases import PRECISION_LABELS, precision_options, sphere_pack  # noqa: E402
from solver.benchmarking.gpu_suite import GpuSuite, run_gpu_suite  # noqa: E402
from solver.benchmarking.probe_backend import ProbeBackend  # noqa: E402
from solver.benchmarking.report import summary, write_report  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.simulation import Simulation  # noqa: E402

log = logging.getLogger("gpu_suite")


def _compile(variant) -> str | None:
    try:
        compile_kernel(variant)
    except Exception as exc:  # reported, and the tests show which variant fails
        return f"{variant.name}: {exc.__class__.__name__}: {str(exc)[-2000:]}"
    return None


def precompile() -> tuple[float, list[str]]:
    """Compile all kernel variants in threads (warms CuPy's disk cache); seconds, errors."""
    start = time.perf_counter()
    with ThreadPoolExecutor(int(os.environ.get("LBM_COMPILE_THREADS", "8"))) as pool:
        errors = [e for e in pool.map(_compile, all_variants()) if e]
    return time.perf_counter() - start, errors


def run_pytest(out: Path) -> dict:
    """``pytest -m gpu`` on the solver tests; its summary line and exit code."""
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-ra", "-p", "no:cacheprovider",
           "--junitxml", str(out / "pytest-gpu.xml"), "tests/solver"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    (out / "pytest-gpu.log").write_text(proc.stdout + proc.stderr)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
    return {"returncode": proc.returncode, "summary": lines[-1] if lines else "",
            "failed": failed[:20], "seconds": round(time.perf_counter() - start, 1)}


def sanitize(out: Path) -> dict:
    """compute-sanitizer memcheck and racecheck on a few small GPU tests, where installed."""
    tool = shutil.which("compute-sanitizer")
    if tool is None:
        return {"summary": "compute-sanitizer not found"}
    tests = ["tests/solver/test_cupy_backend.py", "tests/solver/test_cupy_inplace.py"]
    runs = {"memcheck": "narrower or forced_tile_offsets or probes",
            "racecheck": "narrower and shape0"}
    lines, codes = [], []
    for check, select in runs.items():
        cmd = [tool, "--tool", check, "--error-exitcode", "9", sys.executable, "-m", "pytest",
               "-m", "gpu", "-q", "-p", "no:cacheprovider", "-k", select, *tests]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        codes.append(proc.returncode)
        lines += [f"== {check}: exit {proc.returncode}", proc.stdout[-6000:], proc.stderr[-3000:]]
    (out / "sanitizer.log").write_text("\n".join(lines))
    return {"summary": f"memcheck exit {codes[0]}, racecheck exit {codes[1]}",
            "returncode": max(codes)}


def numpy_check(n: int = 64, steps: int = 20) -> list[dict]:
    """Relative max deviation of CuPy from NumPy on an n^3 periodic sphere pack with force."""
    solid = sphere_pack((n, n, n), 0.6, n / 4, seed=3)
    out = []
    for precision in PRECISION_LABELS:
        config = SimulationConfig(lattice="D3Q19", collision="TRT", body_force=(1e-5, 0, 0),
                                  fluid_model="quasi-compressible",
                                  **precision_options(precision))
        f = {}
        for name in ("numpy", "cupy"):
            sim = Simulation(solid, config, backend=name)
            sim.step(steps)
            f[name] = sim.populations()
            sim.close()
        err = float(np.abs(f["cupy"] - f["numpy"]).max() / np.abs(f["numpy"]).max())
        out.append({"case": f"spheres {n}^3 phi=0.6 TRT quasi-compressible", "steps": steps,
                    "precision": precision, "max_relative_deviation": err})
    return out


def main() -> int:
    """Run the whole suite; non-zero exit when tests or the NumPy check fail."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/throughput/results",
                        help="folder for logs and results")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--check-size", type=int, default=64, help="NumPy cross-check box edge")
    parser.add_argument("--pack-size", type=int, default=192)
    parser.add_argument("--dense", type=int, nargs="+", default=[64, 128, 192, 256])
    parser.add_argument("--porosity", type=float, nargs="*",
                        default=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ok, why = gpu_available()
    if not ok:
        print(f"No usable GPU: {why}")
        return 2
    log.info("device: %s", why)
    seconds, errors = precompile()
    log.info("compiled %d kernel variants in %.1f s", len(all_variants()), seconds)
    for err in errors:
        log.error("compile error: %s", err)
    tests = {"summary": "skipped", "returncode": 0} if args.skip_tests else run_pytest(out)
    log.info("pytest -m gpu: %s", tests["summary"])
    sanitizer = {"summary": "skipped"} if args.skip_tests else sanitize(out)
    log.info("compute-sanitizer: %s", sanitizer["summary"])
    check = numpy_check(args.check_size)
    log.info("NumPy cross-check: %s", check)
    suite = GpuSuite(dense_sizes=tuple(args.dense), porosities=tuple(args.porosity),
                     pack_size=args.pack_size)
    report = run_gpu_suite(ProbeBackend(), suite)
    report["meta"]["pytest_gpu"] = tests
    report["meta"]["numpy_check"] = check
    report["meta"]["compute_sanitizer"] = sanitizer
    js, md = write_report(report, out)
    (out / "suite-meta.json").write_text(json.dumps(report["meta"], indent=1))
    print(f"\nwrote {js} and {md}")
    print(f"pytest -m gpu: {tests['summary']} {tests.get('failed', '')}")
    print(f"compute-sanitizer: {sanitizer['summary']}")
    for c in check:
        print(f"NumPy check {c['precision']}: max relative deviation "
              f"{c['max_relative_deviation']:.2e}")
    print(summary(report))
    # float16 storage: a few binary16 steps of |f - w rho0| (~1e-2 w here) over max f (~1/3).
    tol = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-5}
    bad = any(c["max_relative_deviation"] > tol[c["precision"]] for c in check)
    return 1 if tests["returncode"] or sanitizer.get("returncode") or bad else 0


if __name__ == "__main__":
    sys.exit(main())
