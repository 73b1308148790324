"""Oblique walls under each collision: a tube at 45 degrees to the grid vs Hagen-Poiseuille.

A straight tube of radius R voxels, 6 R long, its axis at ``--angle`` degrees from z towards x
(NumPy-voxelised: a node is fluid where its centre lies within R of the axis), a Poiseuille
velocity inlet and a pressure outlet (D3Q19, float64, NumPy). The inlet's mean speed gives
Re = U 2R / nu. At the steady state (the run monitor's definition), the pressure gradient between
the cross-sections at +-1.5 R from the middle is compared with Hagen-Poiseuille's
``8 mu Q / (pi R^4)`` (Q the inflow the inlet imposes). Per row: collision, tau, TRT magic
parameter, R, angle, lattice Mach of the inlet's peak, relative error, steps.

Usage (CPU, minutes): ``python benchmarks/oblique_walls/oblique_tube.py [--quick]`` writes
``benchmarks/oblique_walls/results/oblique_tube.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from geometries import VoxelGeometry  # noqa: E402
from geometries.generators import tilted_pipe  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.simulation import Simulation  # noqa: E402
from solver.validation.vessels import section_density, steady  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def tube(radius: float, angle_deg: float, length: float) -> tuple[VoxelGeometry, np.ndarray,
                                                                  np.ndarray]:
    """The tube (``length`` voxels, :func:`~geometries.generators.tilted_pipe` at ``angle_deg``
    in the xz-plane), its middle and unit axis (voxel index coordinates)."""
    a = math.radians(angle_deg)
    axis = np.array([math.sin(a), 0.0, math.cos(a)])
    geom = tilted_pipe(radius, length, tuple(axis), name="tube")
    return geom, np.array(geom.solid.shape) / 2.0 - 0.5, axis


def gradient_error(collision: str, tau: float, radius: float, angle: float = 45.0,
                   reynolds: float = 10.0, magic: float = 3 / 16,
                   max_steps: int = 40000) -> dict:
    """Relative error of the tube's pressure gradient vs Hagen-Poiseuille (module text)."""
    geom, middle, axis = tube(radius, angle, 6 * radius)
    nu = (tau - 0.5) / 3
    speed = reynolds * nu / (2 * radius)
    openings = {1: {"kind": "velocity", "value": speed, "profile": "poiseuille"},
                2: {"kind": "pressure"}}
    config = SimulationConfig(lattice="D3Q19", collision=collision, tau=tau, trt_magic=magic,
                              precision="float64", openings=openings)
    sim = Simulation(geom, config, backend="numpy")
    start = time.perf_counter()
    change = steady(sim, 100, max_steps)
    half = 1.5 * radius
    drho = (section_density(sim, middle, axis, -half)
            - section_density(sim, middle, axis, half))
    measured = drho / 3.0 / (2 * half)
    q = speed * math.pi * radius**2
    exact = 8.0 * nu * q / (math.pi * radius**4)
    return {"collision": collision, "tau": tau, "magic": magic, "radius": radius,
            "angle": angle, "reynolds": reynolds, "mach_peak": 2 * speed * math.sqrt(3),
            "error": measured / exact - 1, "steps": sim.time_step, "change": change,
            "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="",
                        help="collision:tau:radius[:magic[:angle[:reynolds]]],...")
    parser.add_argument("--name", default="oblique_tube")
    args = parser.parse_args()
    rows = []
    for item in args.rows.split(","):
        parts = item.split(":")
        collision, tau, radius = parts[0], float(parts[1]), float(parts[2])
        magic = float(parts[3]) if len(parts) > 3 and parts[3] else 3 / 16
        angle = float(parts[4]) if len(parts) > 4 and parts[4] else 45.0
        reynolds = float(parts[5]) if len(parts) > 5 else 10.0
        row = gradient_error(collision, tau, radius, angle, reynolds, magic=magic)
        print(json.dumps(row), flush=True)
        rows.append(row)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(rows, indent=1))
    lines = ["| collision | tau | magic | R | angle | Re | Ma peak | error | steps |",
             "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['collision']} | {r['tau']:g} | {r['magic']:.4g} | {r['radius']:g} | "
              f"{r['angle']:g} | {r['reynolds']:.3g} | {r['mach_peak']:.3f} | "
              f"{100 * r['error']:+.1f} % | {r['steps']} |" for r in rows]
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
