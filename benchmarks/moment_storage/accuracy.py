"""Permeability's tau dependence: the regularized moment scheme against today's TRT (CPU).

Issue 34 item 1: TRT with Lambda = 3/16 places the halfway bounce-back wall independently of
tau, so the permeability k does not depend on tau; the regularized scheme (moment storage,
``moment_reference.py``) relaxes the non-equilibrium part of every second moment at 1/tau
(BGK-like for the walls), so its wall, and k, move with tau. This measures both on a periodic
simple-cubic sphere array (c = 0.216, the published Zick & Homsy 1982 value as reference) and
a small rock-like random pack, at tau = 0.8, 1.5 and 3.0: body force along x, steady state
(relative change of k below 1e-6 over 50 steps), ``k = nu <u_x> / F`` with the mean over the
whole box. TRT runs through the solver (``Simulation``, NumPy backend, float64).

Usage: ``python benchmarks/moment_storage/accuracy.py`` (about 2 minutes on 2 busy cores;
``--quick``: tau 0.8 and 1.5, SC only); writes ``accuracy-cpu-<date>.json`` and ``.md`` into
``--out`` (default ``benchmarks/moment_storage/results``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # small matrices: threads only contend
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from datetime import date  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for p in (str(ROOT), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

from moment_reference import MomentGrid, rest_moments, velocity  # noqa: E402

from solver.benchmarking.results import write_json_md  # noqa: E402

FORCE = 1e-5
TAUS = (0.8, 1.5, 3.0)
#: k changes by less than this (relative) over CHECK_EVERY steps: steady.
TOLERANCE = 1e-6
CHECK_EVERY = 50
MAX_STEPS = 30_000


def steady_k(advance: Callable[[int], float], max_steps: int = MAX_STEPS) -> tuple[float, int]:
    """Step ``advance(n)`` (returns k after n more steps) until k is steady; (k, steps)."""
    k_old, steps = advance(CHECK_EVERY), CHECK_EVERY
    while steps < max_steps:
        k = advance(CHECK_EVERY)
        steps += CHECK_EVERY
        if abs(k - k_old) <= TOLERANCE * abs(k):
            return k, steps
        k_old = k
    return k_old, steps


def moment_k(solid: np.ndarray, tau: float, max_steps: int = MAX_STEPS) -> tuple[float, int]:
    """Permeability (lattice units) of the regularized moment scheme, body force along x."""
    grid = MomentGrid(solid)
    force = (FORCE, 0.0, 0.0)
    state = {"m": rest_moments(grid.n_fluid)}
    nu = (tau - 0.5) / 3

    def advance(n: int) -> float:
        m = state["m"]
        for _ in range(n):
            m = grid.step(m, 1.0 / tau, force)
        state["m"] = m
        return nu * float(velocity(m, force)[0].sum()) / solid.size / FORCE

    return steady_k(advance, max_steps)


def trt_k(solid: np.ndarray, tau: float, max_steps: int = MAX_STEPS) -> tuple[float, int]:
    """Permeability of the solver's TRT (Lambda = 3/16), NumPy backend, float64."""
    from solver.config import SimulationConfig
    from solver.simulation import Simulation

    config = SimulationConfig(lattice="D3Q19", collision="TRT", tau=tau, precision="float64",
                              body_force=(FORCE, 0.0, 0.0), backend="numpy")
    sim = Simulation(solid, config)

    def advance(n: int) -> float:
        sim.step(n)
        return sim.permeability(axis=0).lattice

    return steady_k(advance, max_steps)


def geometries(quick: bool) -> list[tuple[str, np.ndarray, float | None]]:
    """(label, solid mask, published k or None): the SC array and a rock-like pack."""
    from solver.benchmarking.cases import sphere_pack
    from solver.validation.porous import zick_homsy_k
    from solver.validation.shapes import sphere_cell

    n = 16
    sc = sphere_cell(n, 0.216)
    out = [(f"SC array c=0.216, {n}^3 cell", sc, zick_homsy_k(n, float(sc.mean())))]
    if not quick:
        out.append(("rock-like pack 24^3 phi=0.35 d=7", sphere_pack((24,) * 3, 0.35, 7.0, 1),
                    None))
    return out


def study(quick: bool = False) -> list[dict]:
    """k per geometry, scheme and tau, with its ratio to the published value (SC) and to the
    same scheme's k at the first tau."""
    rows = []
    taus = TAUS[:2] if quick else TAUS
    for label, solid, published in geometries(quick):
        for scheme, run in (("TRT 3/16", trt_k), ("regularized moments", moment_k)):
            first = None
            for tau in taus:
                start = time.perf_counter()
                k, steps = run(solid, tau)
                first = first or k
                rows.append(dict(geometry=label, scheme=scheme, tau=tau, k=k, steps=steps,
                                 seconds=round(time.perf_counter() - start, 1),
                                 k_over_published=k / published if published else None,
                                 k_over_first_tau=k / first))
                print(json.dumps(rows[-1]), flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    """Table of the study and each scheme's spread of k over tau."""
    lines = ["# Permeability against tau: regularized moments vs TRT (NumPy, float64)", "",
             f"Body force {FORCE} along x, steady when k changes < {TOLERANCE} over "
             f"{CHECK_EVERY} steps; k in lattice units (nodes^2).", "",
             "| geometry | scheme | tau | k | k / Zick-Homsy | k / k(first tau) | steps |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        pub = f"{r['k_over_published']:.4f}" if r["k_over_published"] else "-"
        lines.append(f"| {r['geometry']} | {r['scheme']} | {r['tau']} | {r['k']:.5g} | {pub} "
                     f"| {r['k_over_first_tau']:.4f} | {r['steps']} |")
    lines += ["", "Spread (k_max - k_min) / k_mean over tau:"]
    for key in dict.fromkeys((r["geometry"], r["scheme"]) for r in rows):
        ks = [r["k"] for r in rows if (r["geometry"], r["scheme"]) == key]
        lines.append(f"- {key[0]}, {key[1]}: {(max(ks) - min(ks)) / np.mean(ks):.4f}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Run the study; write JSON and the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    rows = study(args.quick)
    stem = f"accuracy-cpu-{date.today().isoformat()}"
    table = markdown(rows)
    write_json_md(args.out, stem, rows, table)
    print(table)


if __name__ == "__main__":
    main()
