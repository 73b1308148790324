"""GPU benchmark suite: the paper's cavity3D (Table 3) and sphere-pack (Table 6) measurements.

Every case is allocated once per precision; the kernel variants (read/write-only and
propagation-only probes, BGK/TRT collision kernels; both in-tile layouts; 1, 2 and 4 tiles per
block) are then timed on that allocation with CUDA events after warm-up. MFLUPS counts fluid
nodes only; the bandwidth is ``MFLUPS * B`` with ``B = 2 q n_d`` bytes per node and step (paper
eq. 10), given as a fraction of the theoretical peak (device attributes) and of the
device-to-device copy bandwidth measured in the same process. Sphere packs run with the tiles
per block that was fastest on the dense box of the same size. The precision label 'float16'
means float16 storage with float32 arithmetic (:mod:`solver.storage`; B = 2 q 2 bytes).
``GpuSuite.streaming`` adds in-place (AA pattern) runs: the same bytes per step on one copy of
f instead of two, each (precision, streaming) option on its own allocation.
``GpuSuite.tile_storages`` adds fluid-compacted storage ('compact': only the fluid nodes of each
tile, :mod:`solver.backends.cuda.compact_run`): its full steps only (the probes and layouts are
the tiled storage's), one allocation per kernel, every precision label float16 storage
included; options it cannot run (boundary code, 2D) are listed under ``skipped`` with the
reason.
"""

from __future__ import annotations

import logging
import platform
from dataclasses import asdict, dataclass, replace
from datetime import date

import numpy as np
from tqdm import tqdm

from ..backends.plan import FAMILIES, TILED
from ..collisions import collision_model
from ..config import GPU_LAYOUTS, SimulationConfig
from ..problem import Problem
from ..values import ConfigError
from .cases import BenchCase, git_commit, precision_options, sphere_pack

__all__ = ["KERNELS", "GpuSuite", "dense_cases", "pack_cases", "rock_case", "run_gpu_suite"]

log = logging.getLogger(__name__)

#: Benchmarked kernels: label -> (kernel mode, collision, incompressible).
KERNELS = {
    "read/write only": ("readwrite", "BGK", True),
    "propagation only": ("propagate", "BGK", True),
    "BGK incompressible": ("full", "BGK", True),
    "BGK quasi-compressible": ("full", "BGK", False),
    "TRT incompressible": ("full", "TRT", True),
    "MRT incompressible": ("full", "MRT", True),
}


@dataclass
class GpuSuite:
    """What to measure (defaults follow the paper's Tables 3 and 6)."""

    dense_sizes: tuple[int, ...] = (64, 128, 192, 256)
    porosities: tuple[float, ...] = (0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1)
    pack_size: int = 192
    diameter: float = 40.0
    precisions: tuple[str, ...] = ("float32", "float64", "float16")
    layouts: tuple[str, ...] = GPU_LAYOUTS
    tiles_per_block: tuple[int, ...] = (1, 2, 4)
    kernels: tuple[str, ...] = tuple(KERNELS)
    streaming: tuple[str, ...] = ("two-copy",)
    tile_storages: tuple[str, ...] = ("tiled",)
    #: Grain diameter of a rock-like pack (phi 0.2, eta_t about 0.5 at 192^3 with 22); 0: none.
    rock_diameter: float = 0.0
    min_seconds: float = 0.03
    repeats: int = 3


def dense_cases(sizes) -> list[BenchCase]:
    """cavity3D: all-fluid boxes of n^3 nodes closed by walls (bounce-back) on every face."""
    return [BenchCase(f"cavity3D {n}^3", np.zeros((n, n, n), dtype=bool), faces="wall",
                      tile_offset="origin") for n in sizes]


def pack_cases(size: int, porosities, diameter: float, seed: int = 0) -> list[BenchCase]:
    """Random periodic sphere packs of ``size``^3 nodes at each porosity (paper Table 6)."""
    return [BenchCase(f"spheres {size}^3 phi={p:.1f}", sphere_pack((size,) * 3, p, diameter,
                                                                   seed),
                      porosity=p) for p in porosities]


def rock_case(size: int, diameter: float, porosity: float = 0.2) -> BenchCase:
    """A rock-like periodic pack: small grains at low porosity, so tiles are half fluid."""
    return BenchCase(f"rock-like {size}^3 phi={porosity:.1f} d={diameter:g}",
                     sphere_pack((size,) * 3, porosity, diameter, 1), porosity=porosity)


def _problem(case: BenchCase, precision: str, streaming: str = "two-copy",
             tile_storage: str = "tiled", collision: str = "BGK") -> Problem:
    """The case's problem; ``precision`` 'float16' = float16 storage, float32 arithmetic."""
    faces = {f"{ax}_{side}": case.faces for ax in "xyz" for side in ("min", "max")}
    config = SimulationConfig(lattice="D3Q19", collision=collision,
                              tile_offset=case.tile_offset, streaming=streaming,
                              tile_storage=tile_storage, **precision_options(precision), **faces)
    return Problem.from_config(case.solid, config)


def _time(backend, state, mode: str, tpb: int, suite: GpuSuite) -> tuple[int, float]:
    """Steps per measurement and the median seconds per step of ``repeats`` measurements."""
    backend.probe(state, mode, 3, tpb)  # compiles on first use; excluded
    # Sized from a second, compiled warm-up: the first one's compile time would cut the steps
    # to the minimum, timed as plain launches instead of graphs.
    warm = backend.probe(state, mode, 3, tpb) / 3
    steps = int(np.clip(np.ceil(suite.min_seconds / max(warm, 1e-6)), 4, 400))
    times = [backend.probe(state, mode, steps, tpb) / steps for _ in range(suite.repeats)]
    return steps, float(np.median(times))


def _row(case, problem, kernel, layout, tpb, steps, sec, info, tile_storage="tiled") -> dict:
    bytes_node = problem.bytes_per_fluid_node_step()
    mflups = problem.n_fluid / sec / 1e6
    bandwidth = mflups * 1e6 * bytes_node
    peak, copy = info.get("peak_bandwidth"), info["copy_bandwidth"]
    return {
        "case": case.label, "porosity": case.porosity, "nodes": int(case.solid.size),
        "fluid_nodes": problem.n_fluid, "n_tiles": problem.tiling.n_tiles,
        "eta_t": round(problem.tiling.eta_t, 4), "kernel": kernel,
        "precision": problem.storage_dtype.name, "arithmetic": problem.dtype.name,
        "streaming": problem.streaming, "tile_storage": tile_storage, "layout": layout,
        "tiles_per_block": tpb,
        "steps": steps, "seconds_per_step": sec, "mflups": round(mflups, 1),
        "bytes_per_node": bytes_node, "bandwidth_gbs": round(bandwidth / 1e9, 1),
        "fraction_peak": round(bandwidth / peak, 4) if peak else None,
        "fraction_copy": round(bandwidth / copy, 4),
    }


def _rates(collision: str, problem: Problem):
    """Relaxation rates at tau = 0.8 for ``collision`` on the problem's lattice."""
    return collision_model(collision).rates(problem.lattice.name, 0.8)


def _measure_case(backend, case, precision, streaming, suite, info, tpbs_for, bar
                  ) -> list[dict]:
    problem = _problem(case, precision, streaming)
    base = laid = backend.allocate(problem)
    rows = []
    try:
        for layout in suite.layouts:
            laid = backend.reconfigure(laid, layout=layout)  # re-lays the data once per layout
            for kernel in suite.kernels:
                mode, collision, incompressible = KERNELS[kernel]
                state = backend.reconfigure(laid, collision=collision,
                                            incompressible=incompressible,
                                            rates=_rates(collision, problem))
                for tpb in tpbs_for(kernel, precision, layout, streaming):
                    steps, sec = _time(backend, state, mode, tpb, suite)
                    rows.append(_row(case, problem, kernel, layout, tpb, steps, sec, info))
                    bar.update(1)
    finally:
        backend.release(base)
    return rows


def _measure_compact(backend, case, precision, streaming, suite, info, bar) -> list[dict]:
    """The full-step kernels of ``suite`` on compact storage, one allocation each (a compact
    run is not reconfigured); tiles per block as its runs use them."""
    rows = []
    for kernel in suite.kernels:
        mode, collision, incompressible = KERNELS[kernel]
        if mode != "full":
            continue
        problem = _problem(case, precision, streaming, "compact", collision)
        problem = replace(problem, incompressible=incompressible,
                          rates=_rates(collision, problem))
        state = backend.allocate(problem)
        try:
            steps, sec = _time(backend, state, mode, problem.tiles_per_block, suite)
        finally:
            backend.release(state)
        rows.append(_row(case, problem, kernel, "compact", state.tiles_per_block, steps, sec,
                         info, "compact"))
        bar.update(1)
    return rows


def _measure_storages(backend, case, options, suite, info, tpbs_for, bar, skipped
                      ) -> list[dict]:
    """Every (precision, streaming, tile storage) option of one case."""
    rows = []
    for precision, streaming in options:
        for storage in suite.tile_storages:
            if FAMILIES[storage] is TILED:
                rows += _measure_case(backend, case, precision, streaming, suite, info,
                                      tpbs_for, bar)
                continue
            try:
                rows += _measure_compact(backend, case, precision, streaming, suite, info, bar)
            except (ConfigError, ValueError) as exc:  # e.g. boundary code: said, not timed
                skipped.setdefault(f"{storage} {precision} {streaming}", str(exc))
    return rows


def run_gpu_suite(backend, suite: GpuSuite | None = None) -> dict:
    """Measure the suite on ``backend`` (a CuPy ``ProbeBackend``: probes, re-laid views);
    return {'meta': ..., 'results': [...]}."""
    suite = suite or GpuSuite()
    info = dict(backend.device_info())
    dense = dense_cases(suite.dense_sizes)
    packs = pack_cases(suite.pack_size, suite.porosities, suite.diameter) if suite.porosities \
        else []
    if suite.rock_diameter:
        packs.insert(0, rock_case(suite.pack_size, suite.rock_diameter))
    per_case = (len(suite.precisions) * len(suite.streaming) * len(suite.layouts)
                * len(suite.kernels) * len(suite.tile_storages))
    total = per_case * (len(dense) * len(suite.tiles_per_block) + len(packs))
    results: list[dict] = []
    all_tpb = lambda *key: suite.tiles_per_block  # noqa: E731
    options = [(p, s) for p in suite.precisions for s in suite.streaming]
    skipped: dict[str, str] = {}
    with tqdm(total=total, desc="GPU benchmark", unit="variant", mininterval=5.0) as bar:
        for case in dense:
            results += _measure_storages(backend, case, options, suite, info, all_tpb, bar,
                                         skipped)
        best = _best_tpb(results, f"cavity3D {suite.pack_size}^3")
        tpb_for = lambda *key: (best.get(key, suite.tiles_per_block[0]),)  # noqa: E731
        for case in packs:
            results += _measure_storages(backend, case, options, suite, info, tpb_for, bar,
                                         skipped)
    meta = {"device": info["name"], "date": date.today().isoformat(), "commit": git_commit(),
            "host": platform.node(), "peak_bandwidth": info.get("peak_bandwidth"),
            "copy_bandwidth": info["copy_bandwidth"], "memory": info.get("memory"),
            "pack_generator": "geometries.generators.random_sphere_pack" if packs else None,
            "suite": asdict(suite), "skipped": skipped}
    return {"meta": meta, "results": results}


def _best_tpb(results: list[dict], case: str) -> dict:
    """Fastest tiles per block per (kernel, precision, layout, streaming) on ``case``."""
    best: dict[tuple, tuple[float, int]] = {}
    for r in results:
        if r["case"] == case:
            key = (r["kernel"], r["precision"], r["layout"], r["streaming"])
            if r["mflups"] > best.get(key, (0.0, 0))[0]:
                best[key] = (r["mflups"], r["tiles_per_block"])
    return {k: v[1] for k, v in best.items()}
