"""Bytes per fluid node and the largest cubic sphere pack that fits on this GPU, per storage option.

For every storage (float64, float32, and float16 storage with float32 arithmetic) and every
streaming option :class:`solver.config.SimulationConfig` offers (so a new streaming option is
measured as soon as the config has it), on random periodic packs of
overlapping spheres (porosity 0.5, diameter 40 by default, the kind of paper Table 6):

1. A sample pack (``--sample`` nodes a side) is allocated by the CuPy backend; the device bytes
   the state holds (CuPy pool bytes in use: populations, node types, tile list and map, boundary
   table and slots) over its fluid nodes are the measured bytes per fluid node, next to the
   formula of :meth:`solver.tiling.Tiling.memory_bytes`.
2. With the sample's tiles per voxel, the formula gives the largest edge N (a multiple of 4)
   whose state fits in the free device memory less ``--reserve``; a pack of that size is
   generated, tiled, allocated and stepped (smaller by 4 until it fits), then N + 4 is tried and
   its outcome recorded.

Packs are generated on the GPU (spheres dropped in batches until the fluid fraction reaches the
target, like ``geometries.generators.random_sphere_pack`` but vectorised) and tiled on the GPU
with the tile grid at the origin (no offset search: the search would only lower the tile count).
Usage, from the repository root on the GPU machine:
``python benchmarks/memory/memory_capacity.py --out benchmarks/memory/results``.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.benchmarking.cases import PRECISION_LABELS, precision_options  # noqa: E402
from solver.benchmarking.results import run_meta, write_json_md  # noqa: E402
from solver.config import SimulationConfig, population_copies  # noqa: E402
from solver.problem import Problem  # noqa: E402
from solver.storage import stored_dtype  # noqa: E402
from solver.tiling import Tiling  # noqa: E402

log = logging.getLogger("memory_capacity")

A = 4  # tile edge
Q = 19  # D3Q19
#: Device bytes of a state besides the per-tile arrays: slots table, bc, pool rounding.
FIXED_BYTES = 1 << 20
#: Device bytes per tile-map cell: its tile index and its tile's 64-bit fluid mask.
CELL_BYTES = 4 + 8

_STAMP = r"""
extern "C" __global__ void stamp(unsigned char* solid, const double* centres, const int n,
                                 const double r, const int span)
{
    const double* c = centres + 3 * blockIdx.x;
    const int lo[3] = {(int)ceil(c[0] - r - 0.5), (int)ceil(c[1] - r - 0.5),
                       (int)ceil(c[2] - r - 0.5)};
    for (int k = threadIdx.x; k < span * span * span; k += blockDim.x) {
        const int i[3] = {lo[0] + k % span, lo[1] + (k / span) % span, lo[2] + k / (span * span)};
        double d2 = 0.0;
        for (int ax = 0; ax < 3; ++ax) {
            const double d = i[ax] + 0.5 - c[ax];
            d2 += d * d;
        }
        if (d2 <= r * r) {
            const long long x = (i[0] % n + n) % n, y = (i[1] % n + n) % n, z = (i[2] % n + n) % n;
            solid[(x * n + y) * n + z] = 1;
        }
    }
}
"""


def sphere_pack_gpu(n: int, porosity: float, diameter: float, seed: int = 0):
    """Periodic random overlapping spheres on the GPU: bool (n, n, n) cupy mask, porosity, count.

    Voxel centres within the radius are solid (as ``geometries.generators.ball_region``).
    Spheres are dropped in batches until the fluid fraction is at or below ``porosity``;
    the last batch overshoots by at most 0.2 % of the expected sphere count.
    """
    import cupy as cp

    kernel = cp.RawKernel(_STAMP, "stamp")
    r = diameter / 2.0
    span = 2 * math.ceil(r) + 2
    solid = cp.zeros((n, n, n), dtype=cp.uint8)
    expected = -math.log(porosity) * n**3 / (4.0 / 3.0 * math.pi * r**3)
    rng = np.random.default_rng(seed)
    batches = [int(0.97 * expected)] + [max(1, int(0.002 * expected))] * 100000
    count = 0
    for size in batches:
        centres = cp.asarray(rng.uniform(0.0, n, size=(size, 3)))
        kernel((size,), (256,), (solid, centres, np.int32(n), np.float64(r), np.int32(span)))
        count += size
        fluid = n**3 - int(cp.count_nonzero(solid))
        if fluid <= porosity * n**3:
            return solid.view(cp.bool_), fluid / n**3, count
    raise RuntimeError("the sphere pack did not reach its porosity")


def tile_origin(solid, xp=np) -> Tiling:
    """Tiling of a 3D mask (edges multiples of 4) with the grid at the origin, on ``xp``.

    The same tiles, order and per-tile masks as ``Tiling.build(solid, 4, (0, 0, 0))``, without
    the host's per-node coordinate arrays (24 bytes a node), so that packs of 10^9 nodes tile
    in seconds on the GPU. Returns host arrays.
    """
    g = tuple(n // A for n in solid.shape)
    if any(n % A for n in solid.shape):
        raise ValueError(f"edges must be multiples of {A}, got {solid.shape}")
    blocks = solid.reshape(g[0], A, g[1], A, g[2], A)
    occupied = ~blocks.all(axis=(1, 3, 5))  # a tile is kept when it holds a fluid node
    order = xp.argwhere(occupied.transpose(2, 1, 0))[:, ::-1]  # x fastest (Algorithm 1)
    tiles = xp.ascontiguousarray(order.astype(xp.int32))
    tile_map = xp.full(g, -1, dtype=xp.int32)
    tile_map[tuple(tiles.T)] = xp.arange(len(tiles), dtype=xp.int32)
    per_tile = blocks.transpose(0, 2, 4, 5, 3, 1).reshape(g + (A**3,))  # node x + 4 y + 16 z
    masks = per_tile[tuple(tiles.T)]
    host = (lambda a: a.get()) if hasattr(tiles, "get") else np.asarray
    return Tiling(tuple(solid.shape), A, (0, 0, 0), host(tile_map), host(tiles), host(masks))


def storage_options() -> list[tuple[str, str]]:
    """Every (precision label, streaming) pair: float64, float32 and float16 storage (float32
    arithmetic; :func:`solver.benchmarking.cases.precision_options`) with each streaming the
    config has."""
    return [(p, s) for p in PRECISION_LABELS for s in SimulationConfig.param.streaming.objects]


def value_bytes(precision: str) -> int:
    """Bytes of one stored population for a precision label."""
    return stored_dtype(**precision_options(precision)).itemsize


def make_problem(tiling: Tiling, precision: str, streaming: str) -> Problem:
    """Periodic D3Q19 BGK problem on ``tiling`` (default layout and tiles per block), on the
    tiled storage whose bytes :func:`per_tile_bytes` counts (``auto`` would store the fluid
    nodes only below its thresholds: ``readout_peak.py`` measures that storage)."""
    config = SimulationConfig(lattice="D3Q19", collision="BGK", streaming=streaming,
                              body_force=(1e-6, 0.0, 0.0), tile_offset="origin",
                              tile_storage="tiled", **precision_options(precision))
    seed = Problem.from_config(np.zeros((A, A, A), dtype=bool), config)
    return replace(seed, tiling=tiling)


def per_tile_bytes(precision: str, streaming: str) -> int:
    """Device bytes per tile by the formula: populations and node types, tile list entry."""
    itemsize = value_bytes(precision)
    return A**3 * (population_copies(streaming) * Q * itemsize + 1) + 3 * 4


def largest_edge(tiles_per_voxel: float, tile_bytes: int, budget: int) -> int:
    """Largest edge N (multiple of 4) whose state fits ``budget`` bytes and 32-bit node ids."""
    n = A
    while True:
        m = n + A
        tiles = tiles_per_voxel * m**3
        need = tiles * tile_bytes + (m // A) ** 3 * CELL_BYTES + FIXED_BYTES
        if need > budget or tiles * A**3 >= 2**31:
            return n
        n = m


def measure(backend, problem: Problem) -> dict:
    """Allocate, step 4 times; device bytes the state holds, per fluid and per tile node."""
    import cupy as cp

    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    before, free0 = pool.used_bytes(), cp.cuda.runtime.memGetInfo()[0]
    state = backend.allocate(problem)
    held = pool.used_bytes() - before
    seconds = backend.step(state, 4) / 4
    finite = bool(cp.isfinite(state.f[0, : min(4096, state.f.shape[1])]).all())
    free1 = cp.cuda.runtime.memGetInfo()[0]
    backend.release(state)
    t = problem.tiling
    formula = t.memory_bytes(Q, problem.storage_dtype.itemsize, problem.population_copies)
    return {"bytes_held": int(held), "device_free_drop": int(free0 - free1),
            "formula_bytes": int(formula), "fluid_nodes": int(t.n_fluid),
            "tile_nodes": int(t.n_tiles * A**3), "eta_t": round(t.eta_t, 4),
            "bytes_per_fluid_node": round(held / t.n_fluid, 2),
            "bytes_per_tile_node": round(held / (t.n_tiles * A**3), 2),
            "seconds_per_step": seconds, "mflups": round(t.n_fluid / seconds / 1e6, 1),
            "finite": finite}


def attempt(backend, n: int, option: tuple[str, str], args) -> dict:
    """Generate, tile, allocate and step an n^3 pack; 'fits', 'out of memory' or 'over the
    32-bit node ids' (the kernel's limit, 2^31 nodes in tiles)."""
    import cupy as cp

    start = time.perf_counter()
    solid, porosity, spheres = sphere_pack_gpu(n, args.porosity, args.diameter, seed=n)
    tiling = tile_origin(solid, cp)
    del solid
    cp.get_default_memory_pool().free_all_blocks()
    row = {"edge": n, "porosity": round(porosity, 4), "spheres": spheres,
           "n_tiles": int(tiling.n_tiles)}
    try:
        row |= measure(backend, make_problem(tiling, *option))
        row["outcome"] = "fits"
    except cp.cuda.memory.OutOfMemoryError as exc:
        row["outcome"] = "out of memory"
        row["error"] = str(exc)[:200]
    except ValueError as exc:  # the pack drew a few more tiles than the formula's estimate
        if "32-bit node ids" not in str(exc):
            raise
        row["outcome"] = "over the 32-bit node ids"
        row["error"] = str(exc)[:200]
    cp.get_default_memory_pool().free_all_blocks()
    row["wall_seconds"] = round(time.perf_counter() - start, 1)
    log.info("%s %s: %d^3 %s", *option, n, row["outcome"])
    return row


def capacity(backend, option, tiles_per_voxel: float, args) -> dict:
    """Formula edge, then the largest that really fits, and what the next size does."""
    import cupy as cp

    cp.get_default_memory_pool().free_all_blocks()
    budget = cp.cuda.runtime.memGetInfo()[0] - int(args.reserve * 2**20)
    predicted = largest_edge(tiles_per_voxel, per_tile_bytes(*option), budget)
    tries = []
    n = predicted
    while n >= A and len(tries) < 4:
        tries.append(attempt(backend, n, option, args))
        if tries[-1]["outcome"] == "fits":
            tries.append(attempt(backend, n + A, option, args))
            break
        n -= A
    fits = [t for t in tries if t["outcome"] == "fits"]
    return {"precision": option[0], "streaming": option[1], "budget_bytes": int(budget),
            "predicted_edge": predicted, "largest_edge": max((t["edge"] for t in fits),
                                                             default=None), "tries": tries}


def markdown(report: dict) -> str:
    """Tables of bytes per node and capacities."""
    m = report["meta"]
    lines = [f"# Memory capacity: {m['device']}", "",
             f"Date {m['date']}, commit {m['commit']}. D3Q19 BGK, periodic random sphere packs "
             f"(porosity {m['porosity']}, sphere diameter {m['diameter']:g} nodes), tiles of "
             f"4^3 with the grid at the origin. Device memory {m['memory'] / 2**30:.1f} GiB, "
             f"free at start {m['free_at_start'] / 2**30:.1f} GiB; reserve "
             f"{m['reserve_mib']} MiB. Precision float16: float16 storage, float32 "
             "arithmetic.", "",
             f"## Bytes per node (sample {m['sample_edge']}^3, eta_t {m['sample_eta_t']:.3f})",
             "", "| precision | streaming | bytes held | formula | per fluid node | "
             "per tile node |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for s in report["sample"]:
        lines.append(f"| {s['precision']} | {s['streaming']} | {s['bytes_held']} | "
                     f"{s['formula_bytes']} | {s['bytes_per_fluid_node']:.2f} | "
                     f"{s['bytes_per_tile_node']:.2f} |")
    lines += ["", "## Largest cubic pack", "",
              "| precision | streaming | formula edge | largest that ran | its fluid nodes | "
              "GiB held | MFLUPS | next size |", "| --- | --- |" + " ---: |" * 6]
    for c in report["capacity"]:
        ok = [t for t in c["tries"] if t["outcome"] == "fits"]
        best = max(ok, key=lambda t: t["edge"]) if ok else None
        nxt = [t for t in c["tries"] if best and t["edge"] == best["edge"] + A]
        cells = ([f"{best['edge']}^3", f"{best['fluid_nodes']:.3e}",
                  f"{best['bytes_held'] / 2**30:.2f}", f"{best['mflups']:.0f}"]
                 if best else ["none"] + ["-"] * 3)
        nxt_txt = f"{nxt[0]['edge']}^3: {nxt[0]['outcome']}" if nxt else "-"
        lines.append(f"| {c['precision']} | {c['streaming']} | {c['predicted_edge']} | "
                     + " | ".join(cells) + f" | {nxt_txt} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    """Measure every storage option; write JSON and markdown to ``--out``."""
    import cupy as cp

    from solver.backends import get_backend

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/memory/results")
    parser.add_argument("--porosity", type=float, default=0.5)
    parser.add_argument("--diameter", type=float, default=40.0)
    parser.add_argument("--sample", type=int, default=256, help="sample pack edge (nodes)")
    parser.add_argument("--reserve", type=float, default=64.0, help="MiB kept free")
    parser.add_argument("--no-capacity", action="store_true", help="bytes per node only")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    backend = get_backend("cupy")
    info = backend.device_info()
    solid, porosity, _ = sphere_pack_gpu(args.sample, args.porosity, args.diameter)
    sample_tiling = tile_origin(solid, cp)
    del solid
    tiles_per_voxel = sample_tiling.n_tiles / args.sample**3
    sample = [{"precision": p, "streaming": s} | measure(backend, make_problem(sample_tiling, p, s))
              for p, s in storage_options()]
    meta = run_meta(info["name"], memory=info["memory"],
                    free_at_start=int(cp.cuda.runtime.memGetInfo()[0]),
                    porosity=args.porosity, diameter=args.diameter, sample_edge=args.sample,
                    sample_porosity=round(porosity, 4), sample_eta_t=sample_tiling.eta_t,
                    reserve_mib=args.reserve, tiles_per_voxel=tiles_per_voxel)
    caps = [] if args.no_capacity else [capacity(backend, option, tiles_per_voxel, args)
                                        for option in storage_options()]
    report = {"meta": meta, "sample": sample, "capacity": caps}
    stem = "memory-capacity-" + "-".join(info["name"].lower().split()) + f"-{meta['date']}"
    write_json_md(Path(args.out), stem, report, markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
