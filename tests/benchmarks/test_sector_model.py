"""benchmarks/l2_sectors/sector_model.py --staged: the L2 sector count of staged blocks (CPU).

Invariants of the count: a block that holds every tile reads its range once and nothing else
(one pass over the bytes, up to the range's partial end sectors); doubling the tiles per block
never adds sectors (the blocks nest, so the sources outside a block of 2K tiles are a subset
of those outside its halves, and there are fewer range ends); and the table lists each."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "l2_sectors"))

import sector_model  # noqa: E402

from ..solver.porous_cases import porous_solid  # noqa: E402


def _case():
    compact, _, src, warp = sector_model.compact_pulls(porous_solid((16, 12, 12), 3))
    return compact, src, warp


def test_one_block_of_every_tile_reads_its_range_once() -> None:
    compact, src, warp = _case()
    for value_bytes in (2, 4, 8):
        got = sector_model.staged_load_multiple(value_bytes, src, warp, compact,
                                                compact.tiling.n_tiles)
        ideal_sectors = src.size * value_bytes / 32
        assert 1.0 <= got <= (ideal_sectors + 1) / ideal_sectors


def test_more_tiles_per_block_never_touch_more_sectors() -> None:
    compact, src, warp = _case()
    unstaged = sector_model.sector_multiples(4, src, src, warp)[0]
    staged = [sector_model.staged_load_multiple(4, src, warp, compact, k) for k in (1, 2, 4, 8)]
    assert all(a >= b for a, b in zip(staged, staged[1:], strict=False))
    assert staged[-1] < unstaged


def test_staged_table_lists_every_precision_and_block(tmp_path) -> None:
    rows = sector_model.staged_case("small", porous_solid((16, 12, 12), 3), blocks=(1, 4))
    assert [r["precision"] for r in rows] == ["float16", "float32", "float64"]
    sector_model.write_staged(rows, tmp_path)
    table = next(tmp_path.glob("sector-model-staged-*.md")).read_text()
    assert "| unstaged | staged 1 | staged 4 |" in table and table.count("\n| small |") == 3
