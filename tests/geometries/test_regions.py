"""Region sources: slabs of an image read or generated without the whole image
(geometries/regions.py), every voxel the same whichever slab asks for it."""

from __future__ import annotations

import numpy as np
import pytest

from geometries.errors import GeometryError
from geometries.regions import ArrayRegions, GrainRegions, MirroredRegions, TiffRegions


def grains(shape=(26, 15, 22), seed=2) -> GrainRegions:
    """A small rock-like grain pack (porosity ~0.35)."""
    return GrainRegions(shape, 0.35, 7, seed=seed)


def test_grain_pack_gives_the_same_voxels_in_any_slab():
    source = grains()
    whole = source.slab(0, 0, source.shape[0])
    assert 0.25 < 1 - whole.mean() < 0.45  # the Boolean model's porosity, roughly
    for axis, n in enumerate(source.shape):
        parts = [source.slab(axis, s, min(s + 5, n)) for s in range(0, n, 5)]
        assert np.array_equal(np.concatenate(parts, axis=axis), whole)
    mirrored = MirroredRegions(source, 1)
    expected = np.concatenate([whole, whole[:, ::-1]], axis=1)
    assert mirrored.shape == expected.shape
    for axis, n in enumerate(mirrored.shape):
        parts = [mirrored.slab(axis, s, min(s + 4, n)) for s in range(0, n, 4)]
        assert np.array_equal(np.concatenate(parts, axis=axis), expected)
    with pytest.raises(GeometryError, match="outside"):
        source.slab(0, 3, 99)


def test_npy_source_reads_slabs_of_a_memory_map(tmp_path):
    solid = grains().slab(0, 0, 26)
    np.save(tmp_path / "s.npy", solid)
    source = ArrayRegions.from_npy(tmp_path / "s.npy")
    assert isinstance(source.solid, np.memmap)
    assert np.array_equal(source.slab(2, 4, 9), solid[:, :, 4:9])


def test_tiff_source_reads_slabs_segmented_like_the_whole(tmp_path):
    tifffile = pytest.importorskip("tifffile")
    solid = grains(shape=(12, 10, 7)).slab(0, 0, 12)
    labels = np.where(solid, 3, 1).astype(np.uint8)  # pore label 1, grains 3
    tifffile.imwrite(tmp_path / "s.tif", labels.transpose(2, 1, 0))  # pages are z slices
    source = TiffRegions(tmp_path / "s.tif", pore_value=1)
    assert source.shape == solid.shape
    for axis, n in enumerate(solid.shape):
        parts = [source.slab(axis, s, min(s + 3, n)) for s in range(0, n, 3)]
        assert np.array_equal(np.concatenate(parts, axis=axis), solid)
    assert source.voxel_size is None  # no ImageJ calibration
    tifffile.imwrite(tmp_path / "c.tif", labels.transpose(2, 1, 0), imagej=True,
                     resolution=(0.5, 0.5), metadata={"spacing": 2.0, "unit": "micron"})
    assert TiffRegions(tmp_path / "c.tif").voxel_size == pytest.approx(2e-6)


def test_grain_pack_is_the_balls_around_its_centres():
    """A voxel is solid exactly when a drawn centre lies within the radius (brute force)."""
    source = GrainRegions((14, 11, 9), 0.4, 6.5, seed=7)
    solid = source.slab(1, 0, 11)
    grid = np.stack(np.meshgrid(*[np.arange(n) for n in source.shape], indexing="ij"), -1)
    d2 = ((grid[..., None, :] - source.centres[None, None, None]) ** 2).sum(-1)
    assert np.array_equal(solid, (d2 <= source.radius**2).any(-1))
