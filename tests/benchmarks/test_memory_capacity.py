"""Host parts of ``benchmarks/memory/memory_capacity.py``: the fast tiler, the capacity formula."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "memory"))

import memory_capacity as capacity  # noqa: E402

from solver.tiling import Tiling  # noqa: E402


@pytest.mark.parametrize("shape", [(16, 12, 8), (20, 20, 20)])
def test_origin_tiler_equals_tiling_build(shape) -> None:
    rng = np.random.default_rng(3)
    solid = rng.random(shape) < 0.55
    solid[:8, :8, :8] = True  # empty tiles
    fast = capacity.tile_origin(solid)
    ref = Tiling.build(solid, 4, (0, 0, 0))
    assert fast.shape == ref.shape and fast.offset == ref.offset
    assert np.array_equal(fast.tiles, ref.tiles) and fast.tiles.dtype == ref.tiles.dtype
    assert np.array_equal(fast.tile_map, ref.tile_map)
    assert np.array_equal(fast.solid, ref.solid) and fast.n_fluid == ref.n_fluid


def test_capacity_formula_matches_the_memory_estimate() -> None:
    solid = np.random.default_rng(0).random((24, 16, 20)) < 0.6
    tiling = Tiling.build(solid, 4, (0, 0, 0))
    for precision, streaming in capacity.storage_options():
        itemsize = np.dtype(precision).itemsize
        copies = 1 if streaming == "in-place" else 2
        cells = tiling.tile_map.size * capacity.CELL_BYTES  # tile index and fluid mask
        expected = tiling.memory_bytes(19, itemsize, copies) - cells
        assert capacity.per_tile_bytes(precision, streaming) * tiling.n_tiles == expected
    assert ("float32", "in-place") in capacity.storage_options()
    # Largest edge: a dense box of 64 GiB in float32 in place (76 + 1 + 12/64 bytes a node).
    budget = 64 * 2**30
    n = capacity.largest_edge(1 / 64, capacity.per_tile_bytes("float32", "in-place"), budget)
    per_node = capacity.per_tile_bytes("float32", "in-place") / 64 + capacity.CELL_BYTES / 64
    assert n % 4 == 0 and per_node * n**3 <= budget < per_node * (n + 4) ** 3 + (1 << 20)
    assert capacity.largest_edge(1 / 64, 64, 2**62) ** 3 * 1 < 2**31  # 32-bit node ids
