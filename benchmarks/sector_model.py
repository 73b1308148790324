"""How many 32-byte L2 sectors a step's warps touch, per storage precision (CPU, no GPU).

The H100 profiles of issue 20 found the pull kernels held by L2-to-SM traffic before DRAM
(``benchmarks/README.md``, third round). A warp's load of one direction touches every sector
that holds one of its 32 sources; on the 4^3 tile layout the sources of a face lie in the
neighbour tile's block, a few values per sector. This counts those sectors exactly for the
compact storage's addressing (:meth:`~solver.backends.cuda.compact.CompactTiling.pull_sources`;
on an all-fluid box it is the tiled XYZ layout): warps of 32 tile nodes, one load and one store
per fluid node and direction, sectors per warp instruction (no L1 reuse, so an upper bound of
the L2 traffic), as multiples of the bytes a step needs (2 q value bytes per fluid node). From
it, the speed ratio of two storage precisions that an L2-bound kernel can reach on one case:
value bytes times sectors per byte, compared. Measured ratios are in ``benchmarks/README.md``.

Usage: ``python benchmarks/sector_model.py --out DIR`` (about 2 minutes on 2 cores); writes
``sector-model-<date>.json`` and ``.md``. ``--staged`` counts instead the loads of a kernel
whose blocks of K consecutive tiles first copy their contiguous range of the compact array to
shared memory in whole sectors and read from L2 only the sources outside it (K = 1, 2, 4, 8;
compact rock-like pack): ``sector-model-staged-<date>.{json,md}``. Such a kernel was built and
timed (issue 20, sixth round in ``benchmarks/README.md``): it touches fewer sectors and runs
slower.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solver.backends.cuda.compact import CompactTiling  # noqa: E402
from solver.benchmarking.cases import sphere_pack  # noqa: E402
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--staged", action="store_true",
                        help="count the loads of staged blocks of 1-8 tiles instead")
    args = parser.parse_args()
    rock = sphere_pack((192,) * 3, 0.2, 22, 1)
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
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(rows, indent=1))
    lines = ["# L2 sectors per step, counted (`python benchmarks/sector_model.py`)", "",
             "Loads/stores: sectors touched by the warps' instructions over the sectors the "
             "bytes would fill. L2 bytes: per fluid node and step, over a float32 step's 152 "
             "bytes. Last column: the speed over float32 on the same case that an L2-bound "
             "kernel could reach.", "",
             "| case | eta_t | storage | loads | stores | L2 bytes / float32 need | "
             "L2-bound speed / float32 |", "| --- | ---: | --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['case']} | {r['eta_t']} | {r['precision']} | {r['loads']} | {r['stores']} "
              f"| {r['l2_per_float32_ideal']} | {r['l2_bound_speed_vs_float32']} |" for r in rows]
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def write_staged(rows: list[dict], out: Path) -> None:
    """``sector-model-staged-<date>.json`` and its table."""
    stem = f"sector-model-staged-{date.today().isoformat()}"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(rows, indent=1))
    keys = [k for k in rows[0] if k not in ("case", "precision")]
    lines = ["# L2 sectors of the loads, staged blocks (`python benchmarks/sector_model.py "
             "--staged`)", "", "Sectors touched over the sectors the bytes would fill; staged "
             "K: blocks of K tiles copy their range once, whole sectors, and load the sources "
             "outside it per warp instruction.", "",
             "| case | storage | " + " | ".join(keys) + " |",
             "| --- | --- |" + " ---: |" * len(keys)]
    lines += [f"| {r['case']} | {r['precision']} | " + " | ".join(str(r[k]) for k in keys)
              + " |" for r in rows]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
