"""Kernel tuning experiments on the GPU: source patches and tile orders timed side by side.

Each experiment is the generated kernel of :mod:`solver.backends.cuda.kernels` with one change
applied to its text or to the tile order, timed on one allocation of the dense cavity3D box
(and optionally sphere packs) with CUDA events after warm-up (median of repeats), next to the
unchanged kernel and the device-to-device copy bandwidth measured in the same process. A change
that wins here moves into the generator; this script keeps the record of what was tried.

Patches (D3Q19 BGK incompressible, XYZ layout, the fastest full-step variant):

- ``fill``/``nofill``: the generator's kernel with/without the sector fill, whichever the
  geometry's share of mixed sectors (``SECTOR_FILL_MIN_MIX``) picked; ``again``: the
  unchanged kernel timed once more at the end of a case (drift check).
- ``pencil``: every tile resolves its halo sources by x-pencils (no ``fill_inner``).
- ``wide``: the kernel with 64-bit halo sources, which copies of 2^31 values or more need
  (``needs_wide_sources``): what the larger runs pay for them.
- ``cs``: stores with the evict-first cache hint (``st.global.cs``): the written copy is not
  read again in this step, so it should not push the neighbour sectors other blocks still read
  out of L2.
- ``cap<R>``: ``__launch_bounds__(threads, blocks)`` so ptxas keeps to about R registers per
  thread (more resident warps, possibly spills).
- tile order ``morton``: tiles numbered along a Z-order curve of the tile grid instead of
  x-fastest, so the neighbours a block pulls from were written by blocks close to it in launch
  order.

Record (H100 80GB HBM3, MFLUPS against the unpatched kernel of the same run and tiles per block;
dense = cavity3D with walls, packs = periodic sphere packs of diameter 40 in 192^3):

- ``cs``: -0.1 to -0.7 % everywhere (256^3 float32 18566 vs 18607, float64 9471 vs 9533): L2
  already keeps the sectors that are read again; dropped.
- ``cap32``/``cap36``: float32 -3 to -4 % (8 B spills at 32 registers), float64 -61 to -73 %
  (288 B spills); ``cap56`` lets float32 grow to 56 registers, -7 to -14 %, float64 -10 %
  (24 B spills). The kernel's own allocation (32 float32, 64 float64) is the best; dropped.
- ``morton``: -0.1 to -2.3 % (dense and packs at porosity 0.1/0.5/0.9); dropped.
- tiles per block 1/2/4: within 1 %, 4 marginally ahead on the dense box.
- whole-tile fill (every solid node of a stored tile writes a constant to its slots, so every
  sector of the written copy is written whole): packs at porosity 0.1 -8 to -10 %, 0.3 -1 to
  -3 %, 0.5-0.9 +0.2 to +2 %; ncu at porosity 0.1 float32: DRAM read + write 113 + 61 MB ->
  85 + 82 MB per step (the solid slots written cost more than the read-modify-writes saved);
  dropped.
- mixed-sector fill as a text patch (only solid nodes whose 32-byte sector holds a fluid node
  write; the sector's node types read with one 8-byte load): float32 packs +5 % at porosity
  0.1-0.5, +1 to +2.5 % at 0.7, -1 to -2 % at 0.9; float64 +2 to +5 %; dense 192^3 float32 -2
  to -3 % (39 registers instead of 32), float64 within noise. ncu, porosity 0.1 float32: 113 +
  61 -> 84 + 57 MB, 70.8 -> 68.1 us; porosity 0.5 float32 370 + 280 -> 317 + 280 MB, float64
  685 + 561 -> 606 + 563 MB. Moved into the generator as the sector fill (``_sector_fill``:
  a warp ballot of the fluid lanes, integer ops only, the rest equilibrium as the value), which
  is what the plain runs now time; ``nofill`` is the kernel without it.
- sector fill, first generator version (ballot and stores after the block barrier, next to the
  solid exit): the same gains on packs (float32 +5 to +7 % at porosity 0.1-0.5, float64 +3 to
  +5 %), but NVRTC still gave the float32 kernel 39 registers instead of 32 (a single store in
  that branch is enough), and dense float32 lost 2 to 4 % (192^3 18208 vs 18586, 256^3 17968
  vs 18596 at 2 tiles per block); float64 unchanged. Moved before the halo work and the
  barrier, where the fluid path keeps the allocation it has without the fill (NVRTC 13.0,
  checked off the GPU: 32 then; 40 with and without the fill since the ``first_tile``
  argument). Timed on the H100 at 7d89e73 (40 registers, fill before the barrier): packs
  lost 20-25 % against ``nofill`` (float32 porosity 0.1: 7517 vs 9445 MFLUPS, float64 4321 vs
  5509), dense unchanged; ``cap32`` on that kernel cost 10 % dense float32 and 62 % float64.
  So the fill went back after the barrier, next to the solid exit (the register argument is
  void at 40 either way).
- sector fill through the fluid path (686651d): the solid lanes of mixed sectors run the fluid
  path with their loads predicated off and every store selects ``w_i rho0`` for them, so they
  add no store instructions of their own. Sparse efficiency (each against the dense box with
  the same patches) float32 at porosity 0.1/0.3/0.5/0.7/0.9: 1.059/1.061/1.043/1.024/1.006
  against ``nofill`` 0.941/0.959/0.969/0.988/0.998; float64 1.251/1.158/1.095/1.050/1.014
  against 1.055/1.012/0.995/0.994/0.994. On the all-fluid box the selects and predicates of
  that version cost float32 3.7 % (256^3 17451 vs 18126 MFLUPS), float64 0.1 %, so the
  generator compiles the fill only where the geometry's share of mixed sectors reaches
  ``SECTOR_FILL_MIN_MIX`` (``Problem.sector_mix``; the porosity 0.9 pack has 3.3 %). With
  plain loads (below) the fill costs 0.5 % there and gains down to 1.6 % mixed sectors.
- ``pencil``: the halo sources resolved by x-pencils in every tile, as before ``fill_inner``
  (686651d: inner tiles, whose halo is inside the domain, fill theirs with all 64 lanes and no
  wrap logic). At 1d8228a: float32 packs +3.0/+1.9/+0.8/+0.8/+0.8/+0.2 % for ``fill_inner`` at
  porosity 0.1/0.3/0.5/0.7/0.9/0.95, float64 packs -0.3 to -0.8 %, the all-fluid box -0.4 to
  -0.9 % (both precisions). Kept for the float32 packs.
- fill predicated vs plain loads (1d8228a against a53047e, same packs): the fill's solid lanes
  with their loads predicated off ran float32 3-7 % slower at porosity 0.1-0.7 than with plain
  loads (11066 vs 10319 MFLUPS at 0.1); float64 the same either way. Plain loads kept.

- halo sources as offsets in a copy, Guo's forcing as launch constants, ``fill_inner`` by
  halo columns (8ca4fc4, 658052f; checked on the CPU only, ``kernel_instructions.py``): SASS
  per thread, node path + inner-tile halo path, float32 826 -> 559, float64 849 -> 582,
  float16 storage 992 -> 727. Not yet timed; ``wide`` times the 64-bit sources that copies
  of 2^31 values or more get.

Usage on the GPU machine: ``python benchmarks/kernel_tuning/tune_kernel.py --out DIR --size 192 256
--porosities 0.1 0.3 0.5 0.7 0.9`` (about 30 s on an H100); it ends with the sparse efficiency
MFLUPS / (eta_t x dense MFLUPS) per porosity, against the dense box of the smallest size.
``--ncu`` runs the kernel and ``nofill`` once per case for ``ncu`` (see
benchmarks/kernel_tuning/README.md).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.backends.cuda.backend import CupyBackend, copy_bandwidth  # noqa: E402
from solver.backends.cuda.kernels import KernelVariant, kernel_source  # noqa: E402
from solver.backends.cuda.tables import launch_shape  # noqa: E402
from solver.benchmarking.cases import git_commit, sphere_pack  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.problem import Problem  # noqa: E402

_ST_CS = """
__device__ __forceinline__ void st_cs(float* p, float v)
{ asm volatile("st.global.cs.f32 [%0], %1;" :: "l"(p), "f"(v) : "memory"); }
__device__ __forceinline__ void st_cs(double* p, double v)
{ asm volatile("st.global.cs.f64 [%0], %1;" :: "l"(p), "d"(v) : "memory"); }
"""


#: The choice of the inner-tile halo fill (fill_inner) in the kernel template.
_INNER_HALO = "if (halo_inside(t, size, off))"


def patch_source(source: str, patches: tuple[str, ...], threads: int) -> str:
    """The kernel text with the named patches applied."""
    for p in patches:
        if p == "cs":
            source = source.replace("typedef float real;", "typedef float real;" + _ST_CS)
            source = source.replace("typedef double real;", "typedef double real;" + _ST_CS)
            source = re.sub(r"fout\[(.+?)\] = (.+?);\n", r"st_cs(&fout[\1], \2);\n", source)
        elif p.startswith("cap"):
            blocks = max(1, 65536 // (int(p[3:]) * threads))
            source = source.replace('extern "C" __global__ void ',
                                    f'extern "C" __global__ void __launch_bounds__({threads}, '
                                    f'{blocks}) ', 1)
        elif p in ("fill", "nofill", "wide", "again"):  # variants (patched_variant), a repeat
            pass
        elif p == "pencil":  # every tile resolves its halo by pencils, as before fill_inner
            assert _INNER_HALO in source, "pencil patch did not apply"
            source = source.replace(_INNER_HALO, "if (false)")
        else:
            raise ValueError(f"unknown patch {p!r}")
    return source


def patched_variant(variant: KernelVariant, patches: tuple[str, ...]) -> KernelVariant:
    """``variant`` with the sector fill (``fill``) or without it (``nofill``), whatever the
    geometry's share of mixed sectors chose, and with 64-bit halo sources (``wide``); as it is
    otherwise."""
    if "fill" in patches or "nofill" in patches:
        variant = replace(variant, sector_fill="fill" in patches).canonical()
    if "wide" in patches:
        variant = replace(variant, wide_sources=True).canonical()
    return variant


def morton_order(tiles: np.ndarray) -> np.ndarray:
    """Permutation of tile rows along the Z-order curve of their grid coordinates."""
    code = np.zeros(len(tiles), dtype=np.int64)
    for bit in range(11):
        for ax in range(tiles.shape[1]):
            code |= ((tiles[:, ax].astype(np.int64) >> bit) & 1) << (bit * tiles.shape[1] + ax)
    return np.argsort(code, kind="stable")


def reordered_tables(state, order: np.ndarray) -> dict:
    """Kernel tables of ``state`` with tiles renumbered by ``order`` (new i = old order[i])."""
    tiling = state.problem.tiling
    npt, d = tiling.nodes_per_tile, tiling.ndim
    tables = dict(state.tables)
    tables["types"] = tables["types"].reshape(-1, npt)[cp.asarray(order)].ravel()
    tiles = tiling.tiles[order]
    tables["tiles"] = cp.asarray(np.ascontiguousarray(tiles, dtype=np.int32).ravel())
    tile_map = np.full(tiling.tile_map.shape, -1, dtype=np.int32)
    tile_map[tuple(tiles.T)] = np.arange(len(tiles), dtype=np.int32)
    tables["tile_map"] = cp.asarray(np.ascontiguousarray(tile_map.transpose()).ravel())
    assert d == 3
    return tables


def time_variant(state, patches, tpb: int, order: str, min_seconds: float = 0.05,
                 repeats: int = 5, once: bool = False) -> tuple[float, dict]:
    """Median seconds per step of one patched kernel on ``state`` and its resource usage."""
    problem = replace(state.problem, tiles_per_block=tpb)
    variant = patched_variant(KernelVariant.for_problem(problem), patches)
    blocks, threads, smem = launch_shape(problem, tpb, wide=variant.wide_sources)
    source = patch_source(kernel_source(variant), patches, threads)
    kernel = cp.RawModule(code=source, options=("-std=c++17",)).get_function(variant.name)
    tables = state.tables if order == "x" else reordered_tables(
        state, morton_order(state.problem.tiling.tiles))
    tail = (*tables.values(), *state.int_args, *state.real_args)
    f0, f1 = state.f[0], state.f[1]

    def run(n):
        for k in range(n):
            src, dst = (f0, f1) if k % 2 == 0 else (f1, f0)
            kernel((blocks,), (threads,), (src, dst, *tail), shared_mem=smem)

    if once:  # a single launch for the profiler
        run(1)
        cp.cuda.Device().synchronize()
        return 0.0, {}
    run(4)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    run(4)
    end.record()
    end.synchronize()
    per = cp.cuda.get_elapsed_time(start, end) / 4e3
    steps = int(np.clip(2 * np.ceil(min_seconds / per / 2), 4, 2000))
    times = []
    for _ in range(repeats):
        start.record()
        run(steps)
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3 / steps)
    info = {"registers": kernel.num_regs, "local_bytes": kernel.local_size_bytes}
    return float(np.median(times)), info


def cases(args) -> list[tuple[str, np.ndarray, str, str]]:
    """(label, solid mask, faces, tile offset) of the measured geometries."""
    n = args.size
    out = [(f"cavity3D {k}^3", np.zeros((k, k, k), bool), "wall", "origin") for k in n]
    for p in args.porosities:
        out.append((f"spheres {args.pack}^3 phi={p}", sphere_pack((args.pack,) * 3, p, 40.0, 0),
                    "periodic", "best"))
    return out


def problem_for(solid, faces, offset, precision) -> Problem:
    """D3Q19 BGK incompressible problem, XYZ layout."""
    sides = {f"{ax}_{s}": faces for ax in "xyz" for s in ("min", "max")}
    config = SimulationConfig(lattice="D3Q19", precision=precision, collision="BGK",
                              tile_offset=offset, gpu_layout="xyz", **sides)
    return Problem.from_config(solid, config)


EXPERIMENTS = [  # (patches, tiles per block, tile order); the first again last (drift check)
    ((), 2, "x"), (("fill",), 2, "x"), (("nofill",), 2, "x"), (("pencil",), 2, "x"),
    (("wide",), 2, "x"), (("again",), 2, "x"),
]


def sparse_efficiency(rows: list[dict], dense: str) -> list[dict]:
    """MFLUPS / (eta_t x MFLUPS of case ``dense``) of every pack row, same kernel and precision."""
    key = lambda r: (r["precision"], r["patches"], r["tpb"], r["order"])  # noqa: E731
    ref = {key(r): r["mflups"] for r in rows if r["case"] == dense}
    return [{"case": r["case"], **dict(zip(("precision", "patches", "tpb", "order"), key(r),
                                           strict=True)),
             "ratio": round(r["mflups"] / (r["eta_t"] * ref[key(r)]), 4)}
            for r in rows if r["case"].startswith("spheres") and key(r) in ref]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--size", type=int, nargs="*", default=[256])
    parser.add_argument("--pack", type=int, default=192)
    parser.add_argument("--porosities", type=float, nargs="*", default=[])
    parser.add_argument("--precisions", nargs="*", default=["float32", "float64"])
    parser.add_argument("--ncu", action="store_true", help="one launch per baseline kernel")
    args = parser.parse_args()
    backend = CupyBackend()
    copy = copy_bandwidth(0)
    name = dict(backend.device_info())["name"]
    rows = []
    for label, solid, faces, offset in cases(args):
        for precision in args.precisions:
            problem = problem_for(solid, faces, offset, precision)
            state = backend.allocate(problem)
            node_bytes = problem.bytes_per_fluid_node_step()
            if args.ncu:
                for patches in ((), ("nofill",)):
                    time_variant(state, patches, 2, "x", once=True)
                backend.release(state)
                continue
            for patches, tpb, order in EXPERIMENTS:
                sec, info = time_variant(state, patches, tpb, order)
                mflups = problem.n_fluid / sec / 1e6
                rows.append({"case": label, "precision": precision,
                             "patches": "+".join(patches) or "-", "tpb": tpb, "order": order,
                             "eta_t": round(problem.tiling.eta_t, 4), "mflups": round(mflups, 1),
                             "fraction_copy": round(mflups * 1e6 * node_bytes / copy, 4), **info})
                print(json.dumps(rows[-1]), flush=True)
            backend.release(state)
    if args.ncu:
        return
    meta = {"device": name, "copy_bandwidth": copy, "commit": git_commit()}
    efficiency = sparse_efficiency(rows, f"cavity3D {args.pack}^3")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tune_kernel.json").write_text(
        json.dumps({"meta": meta, "rows": rows, "efficiency": efficiency}, indent=1))
    print(f"\n{name}: copy {copy / 1e9:.0f} GB/s")
    print("| case | prec | patches | tpb | order | regs | MFLUPS | of copy |")
    for r in rows:
        print(f"| {r['case']} | {r['precision']} | {r['patches']} | {r['tpb']} | {r['order']} "
              f"| {r['registers']} | {r['mflups']:.0f} | {r['fraction_copy']:.3f} |")
    print(f"\nSparse efficiency, MFLUPS / (eta_t x cavity3D {args.pack}^3 MFLUPS):")
    print("| case | prec | patches | tpb | ratio |")
    for e in efficiency:
        print(f"| {e['case']} | {e['precision']} | {e['patches']} | {e['tpb']} | "
              f"{e['ratio']:.3f} |")


if __name__ == "__main__":
    main()
