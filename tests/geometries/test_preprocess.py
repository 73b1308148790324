"""Preprocessing: connectivity filter, buffers, crop, downsample, mirror; metadata kept."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from geometries import GeometryError, VoxelGeometry
from geometries.generators import sphere_array, square_duct
from geometries.preprocess import add_buffer, crop, downsample, keep_connected, mirror


def _duct_with_pocket() -> VoxelGeometry:
    """A duct along x, partly blocked, with a sealed 2×2×1 fluid pocket inside the block."""
    geom = square_duct(12, 4)
    solid = geom.solid.copy()
    solid[3:9, 1:5, 1:4] = True  # z = 4 stays open as the through path
    solid[5:7, 2:4, 2] = False  # the pocket, enclosed by solid
    return VoxelGeometry(solid, voxel_size=1e-3)


def test_keep_connected_drops_isolated_pocket_and_reports_it(caplog):
    geom = _duct_with_pocket()
    with caplog.at_level(logging.INFO, logger="geometries.preprocess"):
        kept, dropped = keep_connected(geom)
    assert dropped == 4
    assert kept.n_fluid == geom.n_fluid - 4
    assert kept.solid[5:7, 2:4, 2].all()
    np.testing.assert_array_equal(kept.solid[:, :, 4], geom.solid[:, :, 4])
    assert "dropped 4" in caplog.text
    assert kept.voxel_size == 1e-3


def test_keep_connected_without_through_path_says_what_to_do():
    geom = square_duct(10, 4)
    solid = geom.solid.copy()
    solid[5] = True  # a plug across the duct
    with pytest.raises(GeometryError, match="No fluid path.*flow_axis"):
        keep_connected(VoxelGeometry(solid))


def test_add_buffer_adds_fluid_layers_and_shifts_origin():
    geom = VoxelGeometry(
        np.ones((4, 3, 3), bool) ^ np.eye(4, 3, dtype=bool)[:, :, None],
        voxel_size=0.5,
        labels=np.ones((4, 3, 3), int),
    )
    out = add_buffer(geom, before=2, after=3)
    assert out.shape == (9, 3, 3)
    assert not out.solid[:2].any() and not out.solid[-3:].any()
    np.testing.assert_array_equal(out.solid[2:6], geom.solid)
    assert out.origin == (-1.0, 0.0, 0.0)
    assert (out.labels[:2] == 0).all() and (out.labels[2:6] == 1).all()


def test_add_buffer_edge_keeps_duct_walls():
    out = add_buffer(square_duct(5, 3), before=2, fill="edge")
    np.testing.assert_array_equal(out.solid[0], out.solid[3])
    with pytest.raises(GeometryError, match="fill must be one of"):
        add_buffer(square_duct(5, 3), before=1, fill="mirror")


def test_crop_takes_the_box_and_moves_origin():
    geom = sphere_array("sc", 16, 0.3)
    geom = VoxelGeometry(geom.solid, voxel_size=2.0, labels=geom.labels)
    out = crop(geom, (2, 3, 4), (10, 12, 16))
    assert out.shape == (8, 9, 12)
    np.testing.assert_array_equal(out.solid, geom.solid[2:10, 3:12, 4:16])
    assert out.origin == (4.0, 6.0, 8.0)
    with pytest.raises(GeometryError, match="lo < hi"):
        crop(geom, (5, 0, 0), (5, 16, 16))
    with pytest.raises(GeometryError, match="within the shape"):
        crop(geom, (0, 0, 0), (17, 16, 16))


def test_downsample_majority_vote_and_voxel_size():
    solid = np.zeros((4, 4), bool)
    solid[:2, :2] = [[1, 1], [1, 0]]  # 3 of 4 solid -> solid
    solid[2:, :2] = [[1, 1], [0, 0]]  # tie -> fluid
    labels = np.where(solid, 5, 0)
    out = downsample(VoxelGeometry(solid, voxel_size=1.0, labels=labels), 2)
    np.testing.assert_array_equal(out.solid, [[True, False], [False, False]])
    np.testing.assert_array_equal(out.labels, [[5, 0], [0, 0]])
    assert out.voxel_size == 2.0


def test_downsample_cuts_remainder_and_keeps_porosity():
    geom = sphere_array("sc", 32, 0.3, cells=(2, 2, 2))
    odd = crop(geom, (0, 0, 0), (63, 64, 64))
    out = downsample(odd, 2)
    assert out.shape == (31, 32, 32)
    assert out.porosity == pytest.approx(geom.porosity, abs=0.02)
    with pytest.raises(GeometryError, match="factor must be an integer"):
        downsample(geom, 0)


@pytest.mark.parametrize("shape, factor", [((13, 10, 7), 2), ((9, 12, 6), 3), ((14, 9), 4),
                                           ((12, 12, 12), 7)])
def test_downsample_is_the_majority_of_every_whole_block(shape, factor):
    # Against a direct count per block (ties fluid), for factors whose block holds more
    # voxels than a uint8 doubles (7³ = 343) and trailing remainders that are cut off.
    rng = np.random.default_rng(factor)
    solid = rng.random(shape) < 0.5
    out = downsample(VoxelGeometry(solid), factor)
    coarse = tuple(n // factor for n in shape)
    want = np.zeros(coarse, bool)
    for index in np.ndindex(*coarse):
        block = solid[tuple(slice(i * factor, (i + 1) * factor) for i in index)]
        want[index] = 2 * int(block.sum()) > block.size
    np.testing.assert_array_equal(out.solid, want)


def test_mirror_appends_flipped_copy_with_new_ids():
    geom = sphere_array("sc", 16, 0.2)
    solid = geom.solid.copy()
    solid[0:2] = True  # break the symmetry along x
    asym = VoxelGeometry(solid, labels=geom.labels)
    out = mirror(asym)
    assert out.shape == (32, 16, 16)
    np.testing.assert_array_equal(out.solid[16:], solid[::-1])
    assert set(np.unique(out.labels)) == {0, 1, 2}
    np.testing.assert_array_equal(out.labels[16:] == 2, geom.labels[::-1] == 1)


def test_axis_is_validated():
    with pytest.raises(GeometryError, match="axis must be 0..2"):
        mirror(square_duct(4, 2), axis=3)
