"""Tiling (Algorithm 1), tile utilisation and the tile-offset search (paper section 3.3)."""

from collections import Counter

import numpy as np
import pytest

from solver.tiling import Tiling, best_offset, tile_utilisation


def square_channel(side: int = 8, margin: int = 6, length: int = 8) -> np.ndarray:
    """Solid mask of an infinitely long square channel along z (paper Fig. 9)."""
    n = side + 2 * margin
    solid = np.ones((n, n, length), dtype=bool)
    solid[margin:margin + side, margin:margin + side, :] = False
    return solid


def test_fig9_square_channel_utilisation_values():
    _, per_offset = best_offset(square_channel(), 4)
    # Placement along the channel axis does not matter for a 4-periodic length; the 16
    # cross-section placements give the paper's three values.
    xy = [v for off, v in per_offset.items() if off[2] == 0]
    counts = Counter(round(v, 2) for v in xy)
    assert counts == {0.44: 9, 0.67: 6, 1.0: 1}
    assert np.mean(xy) == pytest.approx((9 * 64 / 144 + 6 * 64 / 96 + 1) / 16)
    assert np.mean(xy) == pytest.approx(0.56, abs=0.005)


def test_offset_search_finds_full_utilisation():
    offset, _ = best_offset(square_channel(), 4)
    tiling = Tiling.build(square_channel(), 4, "best")
    assert tiling.offset == offset
    assert tiling.eta_t == pytest.approx(1.0)
    assert tiling.n_tiles == 4 * 2


def test_origin_placement_matches_algorithm_1():
    solid = square_channel()
    tiling = Tiling.build(solid, 4, (0, 0, 0))
    assert tiling.eta_t == pytest.approx(tile_utilisation(solid, 4, (0, 0, 0)))
    # Algorithm 1 numbers tiles in the order it meets them, x fastest.
    order = [tuple(t) for t in tiling.tiles[:, ::-1].tolist()]
    assert order == sorted(order)


def test_tile_map_and_tiles_are_consistent():
    rng = np.random.default_rng(1)
    solid = rng.random((13, 10, 7)) < 0.7
    tiling = Tiling.build(solid, 4, (1, 3, 2))
    assert tiling.tile_map.shape == ((13 + 1 + 3) // 4, (10 + 3 + 3) // 4, (7 + 2 + 3) // 4)
    np.testing.assert_array_equal(tiling.tile_map[tuple(tiling.tiles.T)],
                                  np.arange(tiling.n_tiles))
    assert (tiling.tile_map >= 0).sum() == tiling.n_tiles
    # Every fluid node lives in a kept tile; dropped tiles hold only solid nodes.
    assert tiling.n_fluid == (~solid).sum()
    assert tiling.eta_t == pytest.approx((~solid).sum() / (tiling.n_tiles * 64))


def test_gather_scatter_round_trip_with_offset():
    rng = np.random.default_rng(2)
    solid = rng.random((9, 11, 6)) < 0.5
    values = rng.random(solid.shape)
    tiling = Tiling.build(solid, 4, "best")
    back = tiling.scatter(tiling.gather(values))
    kept = ~np.isnan(back)
    assert kept[~solid].all()
    np.testing.assert_array_equal(back[kept], values[kept])
    tile, node = tiling.locate(np.argwhere(~solid))
    assert (tile >= 0).all()
    assert not tiling.solid[tile, node].any()


@pytest.mark.parametrize("block", [1, 50, 1 << 22])  # slabs of 1 tile layer, a few, all
@pytest.mark.parametrize("shape, a, offset", [((9, 11, 6), 4, (1, 3, 2)),
                                              ((10, 7, 5), 4, (0, 0, 0)), ((13, 9), 8, (5, 2))])
def test_gather_is_the_value_at_each_tile_node_and_fill_outside(shape, a, offset, block,
                                                                monkeypatch):
    # The block gather must equal indexing the grid at every tile node's coordinates
    # (node_coordinates), with ``fill`` for the padding, for scalar and vector fields, whether
    # it reads the grid whole or a slab of tile layers at a time.
    import solver.tiling

    monkeypatch.setattr(solver.tiling, "GATHER_BLOCK_VALUES", block)
    rng = np.random.default_rng(5)
    solid = rng.random(shape) < 0.6
    tiling = Tiling.build(solid, a, offset)
    coords = tiling.node_coordinates()
    inside = tiling.inside()
    for grid in (rng.random(shape), rng.random((*shape, 3)), solid):
        fill = True if grid.dtype == bool else np.nan
        got = tiling.gather(grid, fill=fill)
        assert got.shape == (tiling.n_tiles, a**len(shape), *grid.shape[len(shape):])
        want = np.empty_like(got)
        want[inside] = grid[tuple(coords[inside].T)]
        want[~inside] = fill
        np.testing.assert_array_equal(got, want)
        # scatter, the way back: each tile node's value at its coordinates, fill elsewhere.
        back = np.full(grid.shape, fill, dtype=grid.dtype)
        back[tuple(coords[inside].T)] = got[inside]
        scattered = tiling.scatter(got, fill=fill)
        assert scattered.flags.c_contiguous and scattered.dtype == grid.dtype
        np.testing.assert_array_equal(scattered, back)


def test_memory_estimate_counts_two_copies_node_types_and_fluid_masks():
    tiling = Tiling.build(np.zeros((8, 8, 8), bool), 4, (0, 0, 0))
    masks = 8 * tiling.tile_map.size  # one 64-bit word per tile-map cell
    expected = 8 * 64 * (2 * 19 * 4 + 1) + tiling.tile_map.nbytes + masks + tiling.tiles.nbytes
    assert tiling.memory_bytes(q=19, value_bytes=4) == expected


def test_two_dimensional_default_tile_edge():
    tiling = Tiling.build(np.zeros((20, 12), bool))
    assert tiling.a == 8 and tiling.nodes_per_tile == 64


@pytest.mark.parametrize("bad", [(4, 0, 0), (0, 0), "center"])
def test_bad_offsets_are_rejected(bad):
    with pytest.raises(ValueError, match="offset"):
        Tiling.build(np.zeros((8, 8, 8), bool), 4, bad)


@pytest.mark.parametrize("shape,a", [((23, 18, 13), 4), ((21, 30), 8)])
def test_occupancy_of_all_offsets_equals_each_offsets_own(shape, a):
    """The one-axis-at-a-time occupancy of every offset (issue 29: sped up) is the occupancy
    of each offset computed alone, on sizes that leave partial tiles at both ends."""
    from solver.tiling import _occupancy_all_offsets, _tile_occupancy

    fluid = np.random.default_rng(5).random(shape) < 0.05  # sparse: many empty tiles
    every = dict(_occupancy_all_offsets(fluid, a))
    assert len(every) == a ** len(shape) and list(every) == sorted(every)
    of_solid = dict(_occupancy_all_offsets(~fluid, a, of_solid=True))  # no inverted copy
    for offset, occupied in every.items():
        assert np.array_equal(occupied, _tile_occupancy(fluid, a, offset))
        assert np.array_equal(occupied, of_solid[offset])
        assert np.array_equal(occupied, _tile_occupancy(~fluid, a, offset, of_solid=True))
    import solver.tiling

    for block in (5, 97):  # reduced a slab across the image at a time (the host's large images)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(solver.tiling, "GATHER_BLOCK_VALUES", block)
            slabbed = dict(_occupancy_all_offsets(~fluid, a, of_solid=True))
        assert all(np.array_equal(every[k], slabbed[k]) for k in every)


@pytest.mark.parametrize("group", [1, 2, 4, 8, 16, 32])
def test_mixed_group_fraction_counts_runs_with_both_kinds(group):
    """The share of mixed runs, read as unsigned words for runs of 1-8 nodes, is the one of
    the definition (runs holding fluid that also hold a solid node), for every run size."""
    rng = np.random.default_rng(group)
    solid = rng.random((20, 18, 16)) < 0.6
    solid[:8] = True  # whole solid runs as well
    solid[12:, :9] = False  # and whole fluid ones
    tiling = Tiling.build(solid, 4, (1, 2, 3))
    runs = tiling.solid.reshape(tiling.n_tiles, -1, group)
    fluid = ~runs.all(axis=2)
    want = int((fluid & runs.any(axis=2)).sum()) / int(fluid.sum())
    assert (0 < want < 1) if group > 1 else want == 0  # a run of one node is never mixed
    assert tiling.mixed_group_fraction(group) == want


@pytest.mark.parametrize("shape, offset", [((13, 10, 7), (0, 0, 0)), ((13, 10, 7), (3, 1, 2)),
                                           ((17, 9), (5, 7))])
def test_tile_occupancy_is_any_fluid_node_per_padded_tile(shape, offset):
    """The occupancy (planes OR-ed axis by axis, no reduction kernel) is the definition: the
    mask shifted by the offset, padded with solid to whole tiles, any fluid node per tile."""
    from solver.tiling import _tile_occupancy

    a = 4 if len(shape) == 3 else 8
    fluid = np.random.default_rng(len(shape)).random(shape) < 0.05
    pads = [(o, (-(n + o)) % a) for n, o in zip(shape, offset, strict=True)]
    padded = np.pad(fluid, pads)
    blocked = padded.reshape([k for n in padded.shape for k in (n // a, a)])
    want = blocked.any(axis=tuple(range(1, 2 * len(shape), 2)))
    assert 0 < want.mean() < 1
    np.testing.assert_array_equal(_tile_occupancy(fluid, a, offset), want)


@pytest.mark.parametrize("shape, a, offset", [((13, 10, 7), 4, "best"), ((13, 10, 7), 3, (2, 0, 1)),
                                              ((16, 8, 12), 4, (0, 0, 0)), ((21, 30), 8, "best")])
def test_mask_is_the_mask_the_tiling_was_built_from(shape, a, offset):
    """Tiling.mask (rank 0 of a run over MPI ranks keeps the tiling, not the image): the
    tiles' masks placed back and empty tiles solid give the image, whatever its memory order
    and the grid's offset."""
    solid = np.random.default_rng(3).random(shape) < 0.5
    solid[(slice(0, 9),) * len(shape)] = True  # empty tiles
    for image in (solid, np.asfortranarray(solid)):
        tiling = Tiling.build(image, a, offset)
        assert tiling.tile_map.min() == -1
        mask = tiling.mask()
        assert mask.dtype == bool and mask.shape == shape and np.array_equal(mask, solid)
