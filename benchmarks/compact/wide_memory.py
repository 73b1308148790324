"""Device memory of the mirrored 1000³ and 1600³ rock runs on compact storage with 64-bit
offsets, from the code's own estimators, on the CPU (no GPU, no tiling of the whole image).

A mirrored n³ rock image at porosity 0.2 is a 2n x n x n box with 0.4 n³ fluid nodes: 4.0e8 at
1000³ (7.6e9 D3Q19 values per copy), 1.6e9 at 1600³ (3.1e10), beyond the 2^31 values the
compact kernels' 32-bit offsets address, so compact storage takes the wide kernels. These are
slower than the tiled storage (1000³ on an H200: 10.3 against 12.5 G fluid updates/s, commit
f052a62), so tile_storage 'auto' takes them only where the tiled state does not fit the device
and the compact one does: the table shows its choice on an H100 and an H200, one process and
each of 2 ranks. Tiling such a box here would take tens of GB of host memory, so the estimators
run on a stand-in tiling with the counts they read (fluid nodes, tiles, tile-grid shape): the
tile utilisation eta_t and the porosity measured on a generated sample of ``--sample`` voxels a
side (the generator of ``benchmarks/rock_time_to_answer/rock_tensor.py``: random sphere pack,
20-voxel grains, seed 3), mirrored along x and tiled with 4³ tiles from the origin (as the
mirrored runs tile), and the compact storage's slot count equal to the fluid count (pad 1, the
plans' ``COMPACT_PAD``). Per size, storage (float32, float16) and streaming (in place): the
compact plan asked for (``plan_for``: offsets and their reasons), 'auto''s choice per device,
:func:`solver.backends.cuda.footprint.device_bytes` (one process, the peak of a ``Simulation``)
and :func:`solver.distributed.mirrored.device_estimate` (one rank holding the whole box, and
each of 2 ranks holding half of it, halo layers left out), next to the tiled state of the same
box.

Usage: ``python benchmarks/compact/wide_memory.py`` (about 20 s on the CPU); writes
``wide-memory-<date>-<commit>.{json,md}`` to ``benchmarks/compact/results``.
"""

from __future__ import annotations

import argparse
import sys
from contextlib import contextmanager
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.backends.cuda import compact as compact_module  # noqa: E402
from solver.backends.cuda import compact_readout  # noqa: E402
from solver.backends.cuda.compact import CompactTiling  # noqa: E402
from solver.backends.cuda.footprint import device_bytes  # noqa: E402
from solver.backends.plan import (  # noqa: E402
    AUTO_HEADROOM_PER_TILE_NODE,
    compact_state_estimate,
    plan_for,
)
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.distributed.mirrored import device_estimate  # noqa: E402
from solver.lattice import get_lattice  # noqa: E402
from solver.problem import Problem  # noqa: E402
from solver.tiling import CountedTiling, Tiling  # noqa: E402

GIB = 2**30


def mirrored_box(n: int, porosity: float = 0.2, grain: float = 20.0, seed: int = 3
                 ) -> np.ndarray:
    """Solid mask (2n, n, n) of a generated n³ image followed by its mirror image along x."""
    from geometries.generators import random_sphere_pack

    pack = random_sphere_pack((n, n, n), porosity, diameter=min(grain, n / 3), seed=seed)
    solid = np.asarray(pack.solid, dtype=bool)
    return np.concatenate([solid, solid[::-1]], axis=0)


def measure_sample(n: int, porosity: float = 0.2, grain: float = 20.0, seed: int = 3) -> dict:
    """Porosity and eta_t of a generated n³ image mirrored along x, tiled from the origin."""
    box = mirrored_box(n, porosity, grain, seed)
    tiling = Tiling.build(box, 4, (0, 0, 0))
    return {"sample": n, "porosity": float(1.0 - box.mean()), "eta_t": float(tiling.eta_t),
            "n_fluid": int(tiling.n_fluid), "n_tiles": int(tiling.n_tiles)}


class CountedCompact(CompactTiling):
    """Compact storage of a :class:`CountedTiling` with pad 1: as many slots as fluid nodes."""

    def __post_init__(self) -> None:
        if self.pad != 1:
            raise ValueError("counted compact storage: pad 1 only (slots = fluid nodes)")
        self.padded = np.array([self.tiling.n_fluid], dtype=np.int64)


@contextmanager
def counted_compact():
    """The estimators build :class:`CountedCompact` storage while inside."""
    saved = compact_module.CompactTiling, compact_readout.CompactTiling
    compact_module.CompactTiling = compact_readout.CompactTiling = CountedCompact
    try:
        yield
    finally:
        compact_module.CompactTiling, compact_readout.CompactTiling = saved


def mirrored_problem(n: int, sample: dict, storage: str, streaming: str,
                     tile_storage: str = "auto", ranks: int = 1) -> Problem:
    """The mirrored n³ run (box 2n x n x n, or one of ``ranks`` equal parts of it along x) as
    the estimators see it: TRT, float32 arithmetic, the sample's porosity and eta_t."""
    shape = (2 * n // ranks, n, n)
    n_fluid = int(round(sample["porosity"] * np.prod(shape, dtype=np.float64)))
    n_tiles = int(np.ceil(n_fluid / (64 * sample["eta_t"])))
    config = SimulationConfig(precision="float32", storage=storage, streaming=streaming,
                              collision="TRT")
    return Problem(lattice=get_lattice("D3Q19"), tiling=CountedTiling(shape, n_fluid, n_tiles),
                   rates=None, force=np.zeros(3), incompressible=True, rho0=1.0,
                   periodic=(True, False, False), dtype=np.dtype("float32"),
                   collision=config.collision_model(), storage_kind=storage,
                   streaming=streaming, tile_storage=tile_storage, layout="xyz",
                   tiles_per_block=2)


#: Device memories 'auto' is shown on (nominal, decimal: a little below what the devices
#: report, so the choice shown is on the safe side): one H100 and one H200.
DEVICES = {"H100 80 GB": 80 * 10**9, "H200 141 GB": 141 * 10**9}


def estimate(n: int, sample: dict, storage: str, streaming: str = "in-place") -> dict:
    """The compact plan (asked for: 64-bit offsets) and the estimates of one mirrored run, the
    tiled storage's, and the storage 'auto' picks on each of :data:`DEVICES` for one process
    and for each of 2 ranks (bytes)."""
    label = "float16" if storage == "float16" else "float32"
    with counted_compact():
        problem = mirrored_problem(n, sample, storage, streaming, "compact")
        plan = plan_for(problem)
        half = mirrored_problem(n, sample, storage, streaming, "compact", ranks=2)
        row = {"n": n, "storage": label, "streaming": streaming,
               "n_fluid": problem.n_fluid, "n_tiles": problem.tiling.n_tiles,
               "values_per_copy": problem.lattice.q * problem.n_fluid,
               "plan": dict(plan.reasons), "tile_storage": plan.tile_storage,
               "wide": plan.wide, "device_bytes": device_bytes(problem, plan),
               "rank_estimate_1": device_estimate(problem),
               "rank_estimate_2": device_estimate(half),
               "narrow_device_bytes": device_bytes(problem, replace(plan, wide=False)),
               "tiled_state_bytes": problem.tiled_state_bytes(),
               "compact_state_estimate": compact_state_estimate(problem, plan.pad)}
        tiled = replace(problem, tile_storage="tiled")
        row["tiled_device_bytes"] = device_bytes(tiled, plan_for(tiled))
        row["auto"] = {}
        for name, capacity in DEVICES.items():
            chosen = [plan_for(replace(p, tile_storage="auto", device_capacity=capacity))
                      for p in (problem, half)]
            row["auto"][name] = {"one_process": _storage(chosen[0]),
                                 "each_of_2_ranks": _storage(chosen[1]),
                                 "why": chosen[0].why("tile_storage"),
                                 "why_2_ranks": chosen[1].why("tile_storage")}
    return row


def _storage(plan) -> str:
    """'tiled', 'compact' or 'compact, 64-bit offsets'."""
    return f"{plan.tile_storage}{', 64-bit offsets' if plan.wide else ''}"


def markdown(result: dict) -> str:
    """The table of the estimates (GiB), 'auto''s choice per device and the reasons."""
    s = result["sample"]
    lines = [f"# Device memory of mirrored rock runs, compact 64-bit offsets ({result['date']}, "
             f"commit {result['commit']})", "",
             f"Estimators of the code on counts: porosity {s['porosity']:.3f} and eta_t "
             f"{s['eta_t']:.3f} measured on a generated {s['sample']}³ sample mirrored along x "
             "(`rock_tensor.py`'s generator, 20-voxel grains). GiB; in place; the compact "
             "storage asked for (64-bit offsets); 'peak, one process' is "
             "`footprint.device_bytes`, 'rank' `mirrored.device_estimate`; 'state' the plan's "
             "resident-state estimates that 'auto' compares with "
             f"the device's memory, each with {AUTO_HEADROOM_PER_TILE_NODE} B per tile node "
             "of headroom (`plan.device_headroom`).", "",
             "| image | storage | fluid nodes | tiles | values/copy | peak, one process "
             "| 1 rank | each of 2 ranks | wide tables add | tiled storage, one process "
             "| state tiled / compact |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in result["rows"]:
        lines.append(
            f"| {r['n']}³ mirrored | {r['storage']} | {r['n_fluid']:.3g} | {r['n_tiles']:.3g} "
            f"| {r['values_per_copy']:.3g} | {r['device_bytes'] / GIB:.1f} | "
            f"{r['rank_estimate_1'] / GIB:.1f} | {r['rank_estimate_2'] / GIB:.1f} | "
            f"{(r['device_bytes'] - r['narrow_device_bytes']) / GIB:.2f} | "
            f"{r['tiled_device_bytes'] / GIB:.1f} | {r['tiled_state_bytes'] / GIB:.1f} / "
            f"{r['compact_state_estimate'] / GIB:.1f} |")
    names = list(DEVICES)
    lines += ["", "What tile_storage 'auto' picks (the plan with the device's memory, "
              "`Problem.device_capacity`; the wide compact kernels only where the tiled state "
              "does not fit and the compact one does):", "",
              "| image | storage | " + " | ".join(f"{d}: one process | {d}: each of 2 ranks"
                                                   for d in names) + " |",
              "| --- | --- | " + " | ".join("---" for _ in range(2 * len(names))) + " |"]
    for r in result["rows"]:
        cells = " | ".join(f"{r['auto'][d]['one_process']} | {r['auto'][d]['each_of_2_ranks']}"
                           for d in names)
        lines.append(f"| {r['n']}³ mirrored | {r['storage']} | {cells} |")
    lines += ["", "The reasons (one process):", ""]
    for r in result["rows"]:
        for d in names:
            lines.append(f"- {r['n']}³ {r['storage']}, {d}: {r['auto'][d]['why']}")
    lines += ["", "The compact plan's offsets:", ""]
    for r in result["rows"]:
        lines.append(f"- {r['n']}³ {r['storage']}: {r['plan']['offsets']}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--sample", type=int, default=160, help="edge of the measured sample")
    parser.add_argument("--sizes", type=int, nargs="*", default=[1000, 1600])
    args = parser.parse_args(argv)
    sample = measure_sample(args.sample)
    rows = [estimate(n, sample, storage) for n in args.sizes for storage in ("auto", "float16")]
    commit = git_commit()
    result = {"date": date.today().isoformat(), "commit": commit, "sample": sample,
              "rows": rows}
    stem = f"wide-memory-{result['date']}-{commit}"
    table = markdown(result)
    write_json_md(args.out, stem, result, table)
    print(table)


if __name__ == "__main__":
    main()
