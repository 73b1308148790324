"""``python -m solver bench``: MFLUPS of the chosen backend on standard cases.

Cases: a fully periodic fluid box (dense) and random sphere packs (sparse). Timing excludes
allocation and the first (warm-up) steps; on the GPU the backend times with CUDA events. The GPU
suite (paper Tables 3 and 6: cavities and sphere packs, probe and collision kernels) lives in
:mod:`solver.benchmarking.gpu_suite`.
"""

from __future__ import annotations

import logging
import platform
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..config import SimulationConfig
from ..simulation import Simulation
from ..storage import PRECISION_LABELS, label_options, precision_label
from .results import checkout_commit, git_commit, write_json_md

__all__ = ["BenchCase", "run_case", "cpu_cases", "write_results", "sphere_pack", "git_commit",
           "PRECISION_LABELS", "precision_options"]

log = logging.getLogger(__name__)


def precision_options(label: str) -> dict[str, str]:
    """SimulationConfig ``precision`` and ``storage`` of a benchmark precision label."""
    return label_options(label)


@dataclass
class BenchCase:
    """One benchmark geometry (True = solid) with a label, its faces and tile placement."""

    label: str
    solid: np.ndarray
    faces: str = "periodic"
    tile_offset: str = "best"
    porosity: float | None = None


def sphere_pack(shape: tuple[int, ...], porosity: float, diameter: float = 40.0,
                seed: int = 0) -> np.ndarray:
    """Solid mask of random overlapping periodic spheres with fluid fraction ~ ``porosity``."""
    from geometries.generators import random_sphere_pack

    return random_sphere_pack(tuple(shape), porosity=porosity, diameter=diameter,
                              seed=seed).solid


def random_porous_box(n: int, porosity: float, diameter: float, seed: int = 0) -> np.ndarray:
    """Solid mask of overlapping random spheres at about ``porosity`` (periodic, n^3 nodes)."""
    return sphere_pack((n, n, n), porosity, diameter, seed)


def cpu_cases(n: int = 64) -> list[BenchCase]:
    """The CPU benchmark set: periodic box and a random porous box, both n^3."""
    return [
        BenchCase(f"periodic box {n}^3", np.zeros((n, n, n), dtype=bool)),
        BenchCase(f"sphere pack {n}^3, porosity 0.7, d={n // 4}",
                  random_porous_box(n, 0.7, n / 4)),
    ]


def run_case(case: BenchCase, config: SimulationConfig, steps: int, warmup: int = 2) -> dict:
    """Time ``steps`` steps after ``warmup``; MFLUPS counts fluid nodes only."""
    sim = Simulation(case.solid, config)
    sim.step(warmup)
    seconds = 0.0
    chunk = max(1, steps // 10)
    with tqdm(total=steps, desc=case.label, unit="step", leave=False) as bar:
        done = 0
        while done < steps:
            n = min(chunk, steps - done)
            seconds += sim.backend.step(sim.state, n)
            done += n
            bar.update(n)
    result = {
        "case": case.label, "backend": sim.backend.name, "lattice": config.lattice,
        "collision": config.collision_model().name,
        "precision": precision_label(config.precision, config.storage),
        "fluid_nodes": sim.problem.n_fluid, "eta_t": round(sim.tiling.eta_t, 4),
        "steps": steps, "seconds": seconds,
        "mflups": sim.problem.n_fluid * steps / seconds / 1e6,
    }
    sim.close()
    return result


def write_results(results: list[dict], device: str, out_dir: Path, stem: str) -> Path:
    """Write ``<stem>.json`` and ``<stem>.md`` (device, date, commit, table); return the .md."""
    meta = {"device": device, "date": date.today().isoformat(), "commit": checkout_commit(),
            "host": platform.node()}
    lines = [f"# Benchmark: {device}", "",
             f"Date {meta['date']}, commit {meta['commit']}.", "",
             "| case | backend | lattice | collision | precision | fluid nodes | eta_t | MFLUPS |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: |"]
    for r in results:
        lines.append(f"| {r['case']} | {r['backend']} | {r['lattice']} | {r['collision']} | "
                     f"{r['precision']} | {r['fluid_nodes']} | {r['eta_t']:.3f} | "
                     f"{r['mflups']:.2f} |")
    return write_json_md(out_dir, stem, {"meta": meta, "results": results},
                         "\n".join(lines) + "\n", indent=2)[1]
