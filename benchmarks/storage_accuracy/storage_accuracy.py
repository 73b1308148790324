"""Accuracy of float16 storage (solver.storage) against float32 and float64 arithmetic/storage.

Two steady flows, every precision on the same backend and grid:

- plane Poiseuille flow between halfway bounce-back walls, driven by a body force (D2Q9, BGK at
  tau = 0.8, whose wall error sets the float64 error; and TRT with Lambda = 3/16, exact for this
  flow, so that its error is round-off only): L2 error of the velocity profile against the
  analytic parabola;
- the lid-driven cavity at Re = 100 (D2Q9 BGK, the validation case ``cavity_re100_bgk``):
  largest deviation of the centreline velocities from Ghia et al. (1982), in units of the lid
  speed.

Each run steps to a steady state (Poiseuille: 30 viscous times T = h^2 / (pi^2 nu); cavity: as
many steps as the float64 run needs to reach a speed residual of 1e-6 per passage), then
averages the velocity field over a window (float16's stochastic rounding makes the steady state
noisy; float32/64 do not change over it): ``--window`` times T in 200 samples for Poiseuille
(the noise decorrelates over about T, and its amplitude grows with h), 5 passages in 50 samples
for the cavity. Columns: the error against the reference solution, the
deviation from the float64 result on the same grid, and float16's error over float32's (the
target is <= 2). On the NumPy backend a fourth row repeats float16 with rounding to nearest:
the stagnation that stochastic rounding removes.

Usage, from the repository root::

    python benchmarks/storage_accuracy/storage_accuracy.py --size ci --backend numpy
    python benchmarks/storage_accuracy/storage_accuracy.py --size full --backend cupy  # GPU
    python benchmarks/storage_accuracy/storage_accuracy.py --channels 64 --cases poiseuille
"""

from __future__ import annotations

import argparse
import logging
import math
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.analytic import l2_error, poiseuille_plates  # noqa: E402
from solver.benchmarking.report import results_stem  # noqa: E402
from solver.benchmarking.results import run_meta, write_json_md  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.simulation import Simulation  # noqa: E402
from solver.validation.cavity import centrelines, ghia_reference  # noqa: E402
from solver.validation.core import run_steady  # noqa: E402

log = logging.getLogger("storage_accuracy")

#: (label, precision, storage, rounding); rounding 'nearest' is a NumPy-only ablation.
VARIANTS = [("float64", "float64", "auto", None), ("float32", "float32", "auto", None),
            ("float16 storage", "float32", "float16", "stochastic"),
            ("float16, nearest (ablation)", "float32", "float16", "nearest")]
SIZES = {"ci": {"channels": (16, 32), "trt": 16, "cavity": ((64, 0.1),)},
         "full": {"channels": (32, 64, 128), "trt": 64, "cavity": ((128, 0.1), (256, 0.05))}}
#: Samples of the averaging window (Poiseuille, cavity).
SAMPLES = {"poiseuille": 200, "cavity": 50}
CASES = ("poiseuille", "trt", "cavity")


def _simulation(shape, config: SimulationConfig, rounding: str | None) -> Simulation:
    sim = Simulation(np.zeros(shape, bool), config)
    if rounding == "nearest":  # before allocation: the NumPy backend rounds as told
        sim.problem.storage = replace(sim.problem.storage, rounding="nearest")
    return sim


def _average_u(sim: Simulation, steps: int, every: int, samples: int
               ) -> tuple[np.ndarray, float]:
    """Step ``steps``, then the velocity averaged over ``samples`` samples ``every`` apart."""
    start = time.perf_counter()
    sim.step(steps)
    mean = np.zeros_like(sim.fields()["u"])
    for _ in range(samples):
        sim.step(every)
        mean += sim.fields()["u"] / samples
    return mean, time.perf_counter() - start


def poiseuille(h: int, collision: str, backend: str, variants, window: float) -> list[dict]:
    """Plane Poiseuille flow of width h: L2 error of the mid-length profile per variant."""
    tau, u_max, nx = 0.8, 0.05, 16
    nu = (tau - 0.5) / 3
    force = 8 * nu * u_max / h**2
    exact = poiseuille_plates(h, force, nu)
    relax = h * h / (math.pi**2 * nu)
    rows, base = [], None
    for label, precision, storage, rounding in variants:
        config = SimulationConfig(lattice="D2Q9", collision=collision, tau=tau,
                                  precision=precision, storage=storage, backend=backend,
                                  body_force=(force, 0.0, 0.0), y_min="wall", y_max="wall")
        sim = _simulation((nx, h), config, rounding)
        samples = SAMPLES["poiseuille"]
        u, seconds = _average_u(sim, int(30 * relax), max(1, int(window * relax / samples)),
                                samples)
        profile = u[0][nx // 2]
        base = profile if base is None else base
        rows.append({"case": f"Poiseuille {collision} h={h}, window {window:g} T",
                     "variant": label,
                     "error": l2_error(profile, exact),
                     "vs_float64": float(np.linalg.norm(profile - base) / np.linalg.norm(exact)),
                     "steps": sim.time_step, "seconds": round(seconds, 1)})
        sim.close()
        log.info("%s", rows[-1])
    return rows


def cavity(n: int, lid: float, backend: str, variants) -> list[dict]:
    """Lid-driven cavity, Re = 100: max centreline deviation from Ghia, units of the lid speed."""
    re = 100
    tau = 3.0 * lid * n / re + 0.5
    ref = ghia_reference(re)
    passage = int(n / lid)
    rows, base, steps = [], None, None
    for label, precision, storage, rounding in variants:
        config = SimulationConfig(lattice="D2Q9", collision="BGK", tau=tau, precision=precision,
                                  storage=storage, backend=backend, x_min="wall", x_max="wall",
                                  y_min="wall", y_max="moving_wall", y_max_value=(lid, 0.0))
        sim = _simulation((n, n), config, rounding)
        if steps is None:  # float64 sets the step count of every variant
            run_steady(sim, passage // 2, 1e-6, 400 * passage, measure="speed")
            steps = sim.time_step
        u, seconds = _average_u(sim, steps - sim.time_step, max(10, passage // 10),
                                SAMPLES["cavity"])
        s, u_col, v_row = centrelines(u, lid)
        du = np.abs(np.interp(ref["u_vs_y"][:, 0], s, u_col) - ref["u_vs_y"][:, 1]).max()
        dv = np.abs(np.interp(ref["v_vs_x"][:, 0], s, v_row) - ref["v_vs_x"][:, 1]).max()
        base = u if base is None else base
        rows.append({"case": f"cavity Re=100 {n}x{n} U={lid}", "variant": label,
                     "error": float(max(du, dv)),
                     "vs_float64": float(np.nanmax(np.abs(u - base)) / lid),
                     "steps": sim.time_step, "seconds": round(seconds, 1)})
        sim.close()
        log.info("%s", rows[-1])
    return rows


def markdown(meta: dict, rows: list[dict]) -> str:
    """The accuracy table with float16 / float32 error ratios."""
    lines = [f"# float16 storage accuracy: {meta['device']}", "",
             f"Date {meta['date']}, commit {meta['commit']}, backend {meta['backend']}, size "
             f"{meta['size']}, Poiseuille window {meta['window']:g} T. Produced by "
             "`benchmarks/storage_accuracy/storage_accuracy.py` (method in its docstring). "
             "Poiseuille error: "
             "L2 of the profile against the analytic parabola; cavity error: max |u - u_Ghia| "
             "/ U over both centrelines; 'vs float64': the same measure against the float64 "
             "result on the same grid.", "",
             "| case | variant | error | vs float64 | error / float32 error | steps | s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    single = {r["case"]: r["error"] for r in rows if r["variant"] == "float32"}
    for r in rows:
        ratio = r["error"] / single[r["case"]] if single.get(r["case"]) else float("nan")
        lines.append(f"| {r['case']} | {r['variant']} | {r['error']:.3e} | "
                     f"{r['vs_float64']:.2e} | {ratio:.2f} | {r['steps']} | {r['seconds']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Run every case at ``--size`` on ``--backend``; write JSON and markdown to ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="ci", choices=list(SIZES))
    parser.add_argument("--backend", default="numpy", choices=["numpy", "cupy"])
    parser.add_argument("--out", default="benchmarks/storage_accuracy/results")
    parser.add_argument("--channels", type=int, nargs="+", default=None,
                        help="Poiseuille widths (default: those of --size)")
    parser.add_argument("--window", type=float, default=40.0,
                        help="Poiseuille averaging window in viscous times h^2/(pi^2 nu)")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--tag", default=None, help="file name suffix (default: --size)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    variants = VARIANTS if args.backend == "numpy" else VARIANTS[:3]
    sizes = SIZES[args.size]
    rows = []
    if "poiseuille" in args.cases:
        for h in args.channels or sizes["channels"]:
            rows += poiseuille(h, "BGK", args.backend, variants, args.window)
    if "trt" in args.cases:
        rows += poiseuille(sizes["trt"], "TRT", args.backend, variants, args.window)
    if "cavity" in args.cases:
        for n, lid in sizes["cavity"]:
            rows += cavity(n, lid, args.backend, variants)
    probe = Simulation(np.zeros((8, 8), bool), SimulationConfig(lattice="D2Q9",
                                                                 backend=args.backend))
    device = probe.backend.device_info()["name"]
    probe.close()
    meta = run_meta(device, host=platform.node(), backend=args.backend, size=args.size,
                    window=args.window)
    stem = "storage-accuracy-" + results_stem(device, meta["date"]) + f"-{args.tag or args.size}"
    text = markdown(meta, rows)
    write_json_md(Path(args.out), stem, {"meta": meta, "results": rows}, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
