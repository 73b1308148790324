"""How many 32-byte L2 sectors a step's warps touch, per storage precision (CPU, no GPU).

The H100 profiles of issue 20 found the pull kernels held by L2-to-SM traffic before DRAM
(``benchmarks/kernel_tuning/README.md``, Nsight profile). A warp's load of one direction touches
every sector that holds one of its 32 sources; on the 4^3 tile layout the sources of a face lie in
the neighbour tile's block, a few values per sector. This counts those sectors exactly for the
compact storage's addressing (:meth:`~solver.backends.cuda.compact.CompactTiling.pull_sources`;
on an all-fluid box it is the tiled XYZ layout): warps of 32 tile nodes, one load and one store
per fluid node and direction, sectors per warp instruction (no L1 reuse, so an upper bound of
the L2 traffic), as multiples of the bytes a step needs (2 q value bytes per fluid node). From
it, the speed ratio of two storage precisions that an L2-bound kernel can reach on one case:
value bytes times sectors per byte, compared. Measured ratios: ``benchmarks/l2_sectors/README.md``.

Usage: ``python benchmarks/l2_sectors/sector_model.py --out DIR`` (about 2 minutes on 2 cores);
writes ``sector-model-<date>.json`` and ``.md``. ``--staged`` counts instead the loads of a kernel
whose blocks of K consecutive tiles first copy their contiguous range of the compact array to
shared memory in whole sectors and read from L2 only the sources outside it (K = 1, 2, 4, 8;
compact rock-like pack): ``sector-model-staged-<date>.{json,md}``. Such a kernel was built and
timed (``benchmarks/compact/README.md``, staged blocks): it touches fewer sectors and runs
slower. ``--moments`` counts the moment-storage probe of issue 34
(``benchmarks/moment_storage``: ten moments a fluid node; each tile's 64 threads stage the
moments of its fluid halo nodes, entry ``h = n + 64 k`` by thread n, and store their own ten):
``sector-model-moments-<date>.{json,md}``, next to the population storage's count.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.backends.cuda.compact import CompactTiling  # noqa: E402
from solver.benchmarking.cases import sphere_pack  # noqa: E402
from solver.benchmarking.results import write_json_md  # noqa: E402
from solver.lattice import get_lattice  # noqa: E402
from solver.tiling import Tiling  # noqa: E402

SECTOR_BYTES = 32
#: Storage precisions by bytes per stored value.
VALUE_BYTES = {"float16": 2, "float32": 4, "float64": 8}


def sector_multiples(value_bytes: int, dst: np.ndarray, src: np.ndarray,
                     warp: np.ndarray) -> tuple[float, float]:
    """Sectors the loads and the stores of one step touch, as multiples of the sectors their
    bytes would fill (warp instructions counted apart: no reuse between them)."""
    q, n_fluid = dst.shape
    ideal = q * n_fluid * value_bytes / SECTOR_BYTES
    touched = []
    for index in (src, dst):
        total = 0
        for i in range(q):
            sectors = index[i] * value_bytes // SECTOR_BYTES
            total += len(np.unique(warp * (1 << 40) + sectors))
        touched.append(total / ideal)
    return touched[0], touched[1]


def compact_pulls(solid: np.ndarray) -> tuple[CompactTiling, np.ndarray, np.ndarray,
                                               np.ndarray]:
    """Compact storage of ``solid`` (4^3 tiles, best offset, periodic faces), the value
    indices of a step's stores and loads (q, n_fluid) and each fluid node's warp (32 tile
    nodes a warp, fluid lanes only)."""
    compact = CompactTiling(Tiling.build(solid, 4, "best"), 1)
    dst, src = compact.pull_sources(get_lattice("D3Q19"), (True,) * 3)
    tile, node = np.nonzero(compact.ranks() >= 0)
    return compact, dst, src, (tile * 2 + node // 32).astype(np.int64)


def staged_load_multiple(value_bytes: int, src: np.ndarray, warp: np.ndarray,
                         compact: CompactTiling, tiles_per_block: int) -> float:
    """Sectors the loads of a staged step touch, as a multiple of the sectors their bytes would
    fill: each block of ``tiles_per_block`` consecutive tiles reads its contiguous range once
    in whole sectors, and per warp instruction the sources that lie outside its range."""
    q, n_fluid = src.shape
    tile_of_value = np.repeat(np.arange(compact.tiling.n_tiles), q * compact.padded)
    block_of_lane = warp // 2 // tiles_per_block  # warp = 2 tile + half
    outside = 0
    for i in range(q):
        far = tile_of_value[src[i]] // tiles_per_block != block_of_lane
        sectors = src[i][far] * value_bytes // SECTOR_BYTES
        outside += len(np.unique(warp[far] * (1 << 40) + sectors))
    starts = q * compact.base[::tiles_per_block] * value_bytes
    ends = np.append(starts[1:], q * compact.n_slots * value_bytes)
    staged = int((-(-ends // SECTOR_BYTES) - starts // SECTOR_BYTES).sum())
    return (outside + staged) / (q * n_fluid * value_bytes / SECTOR_BYTES)


def staged_case(label: str, solid: np.ndarray, blocks=(1, 2, 4, 8)) -> list[dict]:
    """Load multiples of the compact storage unstaged and staged in blocks of K tiles, for
    every storage precision (periodic faces)."""
    compact, dst, src, warp = compact_pulls(solid)
    rows = []
    for precision, value_bytes in VALUE_BYTES.items():
        row = {"case": label, "precision": precision,
               "unstaged": round(sector_multiples(value_bytes, dst, src, warp)[0], 3)}
        for k in blocks:
            row[f"staged {k}"] = round(staged_load_multiple(value_bytes, src, warp, compact, k), 3)
        rows.append(row)
    return rows


def tiled_indices(tiling: Tiling, q: int, compact: CompactTiling, dst: np.ndarray,
                  src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The same loads and stores in the tiled storage (every node of a tile): value index
    ``(tile * q + i) * 64 + node`` for each compact index of ``dst`` and ``src``."""
    compact_index, tiled_index = compact.edge_index(q)
    lookup = np.empty(q * compact.n_slots, dtype=np.int64)
    lookup[compact_index] = tiled_index
    return lookup[dst], lookup[src]


def model_case(label: str, solid: np.ndarray, tiled: bool = False) -> list[dict]:
    """Sector multiples of one geometry (periodic faces) for every storage precision, in the
    compact storage or (``tiled``) the tiled one (its solid lanes store nothing here; the sector
    fill's stores would complete sectors already touched)."""
    compact, dst, src, warp = compact_pulls(solid)
    tiling = compact.tiling
    if tiled:
        dst, src = tiled_indices(tiling, dst.shape[0], compact, dst, src)
    rows = []
    for precision, value_bytes in VALUE_BYTES.items():
        loads, stores = sector_multiples(value_bytes, dst, src, warp)
        rows.append({"case": label, "eta_t": round(tiling.eta_t, 3), "precision": precision,
                     "loads": round(loads, 3), "stores": round(stores, 3),
                     # L2 bytes per fluid node and step over those of a float32 step's needs
                     "l2_per_float32_ideal": round((loads + stores) / 2 * value_bytes / 4, 3)})
    f32 = next(r for r in rows if r["precision"] == "float32")["l2_per_float32_ideal"]
    for r in rows:
        r["l2_bound_speed_vs_float32"] = round(f32 / r["l2_per_float32_ideal"], 3)
    return rows


#: Moments stored per fluid node by the moment-storage probe (issue 34).
N_MOMENTS = 10
#: Halo edge of a 4^3 tile and the halo entries a tile's threads stage.
HALO_EDGE = 6


def halo_sources(compact: CompactTiling, tiles: np.ndarray, periodic: tuple[bool, ...],
                 values: int = N_MOMENTS) -> tuple[np.ndarray, np.ndarray]:
    """Per tile of ``tiles`` and halo entry h (x fastest, 6^3, the 8 corners excluded as
    D3Q19 never reads them): value index of the node's first value (``values * base +
    rank``, -1 where the node is not fluid) and its tile's block length."""
    t = compact.tiling
    h = np.arange(HALO_EDGE**3)
    local = np.stack([h % 6, h // 6 % 6, h // 36], axis=1) - 1
    corner = np.all((local == -1) | (local == 4), axis=1)
    coords = (t.tiles[tiles].astype(np.int64)[:, None, :] * 4 - np.array(t.offset)
              + local[None, :, :])
    size = np.array(t.shape)
    wrap = np.array(periodic, dtype=bool)
    coords = np.where(wrap & (coords < 0), coords + size, coords)
    coords = np.where(wrap & (coords >= size), coords - size, coords)
    inside = np.all((coords >= 0) & (coords < size), axis=-1) & ~corner[None, :]
    tile, node = t.locate(np.where(inside[..., None], coords, 0))
    ok = inside & (tile >= 0)
    tile = np.maximum(tile, 0)
    rank = compact.ranks()[tile, node]
    ok &= rank >= 0
    return np.where(ok, values * compact.base[tile] + rank, -1), compact.padded[tile]


def moment_sector_multiples(compact: CompactTiling, periodic: tuple[bool, ...],
                            value_bytes: int, block: int = 0, layout: str = "soa",
                            chunk: int = 4096) -> tuple[float, float]:
    """Sectors the moment probe's staging loads and its stores touch per step, over the
    sectors of the bytes a step needs (ten values read and ten written per fluid node).

    ``layout`` 'soa': a tile's moment k of rank r at ``10 base + k padded + r`` (one load
    instruction per moment, each counted apart; stores by each node, per moment); 'aos': the
    ten moments of a node side by side at ``10 (base + rank) + k`` (a node's ten values
    loaded by one thread in one pass, the sectors of a warp's pass counted once; stores of a
    tile's contiguous range in whole warps, staged through shared memory). ``block`` 0: warp
    passes apart (no reuse between them, as :func:`sector_multiples`); K > 0: each sector
    loaded once per block of K consecutive tiles (a lower bound of a block's loads)."""
    if layout not in ("soa", "aos"):
        raise ValueError(f"layout must be 'soa' or 'aos', not {layout!r}.")
    n_tiles = compact.tiling.n_tiles
    h = np.arange(HALO_EDGE**3)
    instruction = (h % 64) // 32 * 4 + h // 64  # warp of thread h % 64, loop pass h // 64
    loads = 0
    chunk = chunk // max(block, 1) * max(block, 1)  # blocks never straddle chunks
    for first in range(0, n_tiles, chunk):
        tiles = np.arange(first, min(first + chunk, n_tiles))
        key = (np.repeat(tiles[:, None] // block, len(h), axis=1) if block
               else tiles[:, None] * 8 + instruction[None, :])
        if layout == "soa":
            at0, pc = halo_sources(compact, tiles, periodic)
            index = [at0 + m * pc for m in range(N_MOMENTS)]
        else:
            at0 = halo_sources(compact, tiles, periodic, values=1)[0]
            index = [N_MOMENTS * at0 + m for m in range(N_MOMENTS)]
        ok = at0 >= 0
        keyed = [key[ok] * (1 << 32) + i[ok] * value_bytes // SECTOR_BYTES for i in index]
        if block or layout == "aos":  # one set of sectors per block or warp pass
            loads += len(np.unique(np.concatenate(keyed)))
        else:
            loads += sum(len(np.unique(k)) for k in keyed)
    ranks = compact.ranks()
    tile, node = np.nonzero(ranks >= 0)
    if layout == "soa":
        own = N_MOMENTS * compact.base[tile] + ranks[tile, node]
        warp = tile * 2 + node // 32
        stores = sum(len(np.unique(warp * (1 << 32) + (own + m * compact.padded[tile])
                                   * value_bytes // SECTOR_BYTES)) for m in range(N_MOMENTS))
    else:  # the tile's range [10 base, 10 (base + padded)), lane after lane, 2 warps a pass
        starts = N_MOMENTS * compact.base
        lengths = N_MOMENTS * compact.padded
        value = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        at = np.repeat(starts, lengths) + value
        warp = np.repeat(np.arange(n_tiles), lengths) * 64 + value // 32
        stores = len(np.unique(warp * (1 << 32) + at * value_bytes // SECTOR_BYTES))
    ideal = N_MOMENTS * len(tile) * value_bytes / SECTOR_BYTES
    return loads / ideal, stores / ideal


def moment_case(label: str, solid: np.ndarray,
                precisions: tuple[str, ...] = ("float16", "float32")) -> list[dict]:
    """Per storage precision and moment layout: the moment probe's L2 sectors next to the
    compact population step's on the same geometry (periodic faces), in bytes per fluid node
    and step; loads without reuse between warp passes and with each sector once per block of
    4 tiles."""
    populations = {r["precision"]: r for r in model_case(label, solid)}
    compact = CompactTiling(Tiling.build(solid, 4, "best"), 1)
    rows = []
    for precision in precisions:
        value_bytes = VALUE_BYTES[precision]
        population_l2 = populations[precision]["l2_per_float32_ideal"] * 2 * 19 * 4
        for layout in ("soa", "aos"):
            loads, stores = moment_sector_multiples(compact, (True,) * 3, value_bytes,
                                                    layout=layout)
            reused = moment_sector_multiples(compact, (True,) * 3, value_bytes, 4, layout)[0]
            moment_l2 = (loads + stores) * N_MOMENTS * value_bytes
            rows.append({"case": label, "eta_t": populations[precision]["eta_t"],
                         "precision": precision, "layout": layout,
                         "loads": round(loads, 3), "stores": round(stores, 3),
                         "loads_reused_in_4_tiles": round(reused, 3),
                         "dram_bytes": 2 * N_MOMENTS * value_bytes,
                         "l2_bytes": round(moment_l2, 1),
                         "l2_bytes_reused_in_4_tiles": round((reused + stores) * N_MOMENTS
                                                             * value_bytes, 1),
                         "population_dram_bytes": 2 * 19 * value_bytes,
                         "population_l2_bytes": round(population_l2, 1),
                         "population_over_moment_l2": round(population_l2 / moment_l2, 3)})
    return rows


def write_moments(rows: list[dict], out: Path) -> None:
    """``sector-model-moments-<date>.json`` and its table."""
    stem = f"sector-model-moments-{date.today().isoformat()}"
    keys = [k for k in rows[0] if k not in ("case", "precision")]
    lines = ["# L2 sectors of moment storage vs population storage (`python "
             "benchmarks/l2_sectors/sector_model.py --moments`)", "",
             "Compact tiles (pad 1), periodic faces. loads/stores: sectors the moment probe's "
             "staging loads and its stores touch over the sectors of 10 values a fluid node "
             "(layout soa: one block per moment a tile; aos: a node's ten moments side by "
             "side); *_bytes: per fluid node and step (DRAM: each value read and written "
             "once; L2: sectors touched x 32 B, no reuse between warp passes, or once per "
             "block of 4 tiles); population_*: the compact population step on the same "
             "geometry, counted the same way (no reuse).", "",
             "| case | storage | " + " | ".join(keys) + " |",
             "| --- | --- |" + " ---: |" * len(keys)]
    lines += [f"| {r['case']} | {r['precision']} | " + " | ".join(str(r[k]) for k in keys)
              + " |" for r in rows]
    write_json_md(out, stem, rows, "\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--staged", action="store_true",
                        help="count the loads of staged blocks of 1-8 tiles instead")
    parser.add_argument("--moments", action="store_true",
                        help="count the moment-storage probe (issue 34) instead")
    args = parser.parse_args()
    rock = sphere_pack((192,) * 3, 0.2, 22, 1)
    if args.moments:
        write_moments(moment_case("all-fluid box 64^3", np.zeros((64,) * 3, dtype=bool))
                      + moment_case("rock-like 192^3 phi=0.2 d=22, compact", rock), args.out)
        return
    if args.staged:
        write_staged(staged_case("rock-like 192^3 phi=0.2 d=22, compact", rock), args.out)
        return
    cases = [("all-fluid box 64^3 (tiled = compact)", np.zeros((64,) * 3, dtype=bool), False),
             ("rock-like 192^3 phi=0.2 d=22, compact", rock, False),
             ("rock-like 192^3 phi=0.2 d=22, tiled", rock, True),
             ("spheres 192^3 phi=0.1, compact", sphere_pack((192,) * 3, 0.1, 40.0, 0), False)]
    rows = []
    for label, solid, tiled in cases:
        rows += model_case(label, solid, tiled)
        print(json.dumps(rows[-3:]), flush=True)
    stem = f"sector-model-{date.today().isoformat()}"
    lines = ["# L2 sectors per step, counted (`python benchmarks/l2_sectors/sector_model.py`)", "",
             "Loads/stores: sectors touched by the warps' instructions over the sectors the "
             "bytes would fill. L2 bytes: per fluid node and step, over a float32 step's 152 "
             "bytes. Last column: the speed over float32 on the same case that an L2-bound "
             "kernel could reach.", "",
             "| case | eta_t | storage | loads | stores | L2 bytes / float32 need | "
             "L2-bound speed / float32 |", "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['case']} | {r['eta_t']} | {r['precision']} | {r['loads']} | {r['stores']} "
              f"| {r['l2_per_float32_ideal']} | {r['l2_bound_speed_vs_float32']} |" for r in rows]
    write_json_md(args.out, stem, rows, "\n".join(lines) + "\n")
    print("\n".join(lines))


def write_staged(rows: list[dict], out: Path) -> None:
    """``sector-model-staged-<date>.json`` and its table."""
    stem = f"sector-model-staged-{date.today().isoformat()}"
    keys = [k for k in rows[0] if k not in ("case", "precision")]
    lines = ["# L2 sectors of the loads, staged blocks "
             "(`python benchmarks/l2_sectors/sector_model.py --staged`)", "",
             "Sectors touched over the sectors the bytes would fill; staged "
             "K: blocks of K tiles copy their range once, whole sectors, and load the sources "
             "outside it per warp instruction.", "",
             "| case | storage | " + " | ".join(keys) + " |",
             "| --- | --- |" + " ---: |" * len(keys)]
    lines += [f"| {r['case']} | {r['precision']} | " + " | ".join(str(r[k]) for k in keys)
              + " |" for r in rows]
    write_json_md(out, stem, rows, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
