"""The kernel's per-tile fluid masks: bit n % 64 of word n // 64 says whether node n is fluid."""

import numpy as np
import pytest

from solver.backends.cuda.tables import fluid_masks, halo_masks, mask_map, shared_bytes


@pytest.mark.parametrize("npt", [27, 64, 125, 256, 512])
def test_fluid_mask_bits_follow_the_node_types(npt):
    rng = np.random.default_rng(npt)
    types = rng.choice(np.array([0, 1, 2, 9], np.uint8), size=(5, npt), p=[0.4, 0.4, 0.1, 0.1])
    masks = fluid_masks(types).reshape(5, -1)
    assert masks.dtype == np.uint64 and masks.shape[1] == -(-npt // 64)
    node = np.arange(npt)
    bits = (masks[:, node // 64] >> (node % 64).astype(np.uint64)) & np.uint64(1)
    np.testing.assert_array_equal(bits.astype(bool), types != 0)


def test_shared_memory_holds_a_tile_index_and_with_masks_a_mask_word_per_neighbour_and_warp():
    # D3Q19, edge 4, two tiles: 2 x 216 four-byte sources, 4 warps x 27 x (4 [+ 8]) bytes.
    assert shared_bytes("D3Q19", 4, 2) == 2 * 216 * 4 + 4 * 27 * 4
    assert shared_bytes("D3Q19", 4, 2, masks=True) == 2 * 216 * 4 + 4 * 27 * 12


def test_only_float16_storage_fills_the_halo_from_fluid_masks():
    from solver.backends.cuda.kernels import KernelVariant, kernel_source

    for storage, masks in (("auto", False), ("float16", True)):
        assert halo_masks(storage) is masks
        source = kernel_source(KernelVariant("D3Q19", "float32", "BGK", storage=storage))
        assert f"constexpr bool HALO_MASKS = {str(masks).lower()};" in source


def test_mask_map_puts_each_tiles_mask_in_its_tile_map_cell():
    tile_map = np.array([-1, 2, 0, -1, 1], np.int32)
    masks = np.array([[5], [7], [9]], np.uint64)
    np.testing.assert_array_equal(mask_map(masks, tile_map), [0, 9, 5, 0, 7])
