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

The record of what was tried and what it gave: ``benchmarks/kernel_tuning/README.md``.

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
