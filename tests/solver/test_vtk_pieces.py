"""A parallel VTK image (.pvti and slab pieces) reads back as the single-process .vti."""

from __future__ import annotations

import numpy as np
import pytest

from solver.io import write_vti
from solver.tiling import Tiling
from solver.vtk_pieces import cell_extent, cell_image, piece_path, save_image, write_pvti

pv = pytest.importorskip("pyvista")


def _fields(shape: tuple[int, ...], seed: int = 0) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    solid = rng.random(shape) < 0.3
    rho = np.where(solid, np.nan, 1 + 0.01 * rng.standard_normal(shape))
    u = np.where(solid, np.nan, 0.01 * rng.standard_normal((len(shape), *shape)))
    extra = {"solid": solid.astype(np.uint8), "wall_shear_stress": rng.random(shape)}
    return {"rho": rho, "u": u}, extra


def _write_pieces(path, fields, extra, axis, cuts, voxel_size, origin):
    """The pieces of ``fields`` cut at ``cuts`` along ``axis`` and their .pvti."""
    shape = fields["rho"].shape
    pieces = []
    for rank, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)):
        cut = tuple(slice(lo, hi) if k == axis else slice(None) for k in range(len(shape)))
        start = [0] * len(shape)
        start[axis] = lo
        grid = cell_image(fields["rho"][cut], fields["u"][(slice(None), *cut)],
                          {k: v[cut] for k, v in extra.items()}, voxel_size, origin, start)
        pieces.append((cell_extent(shape, axis, lo, hi),
                       save_image(grid, piece_path(path, rank))))
    arrays = [("rho", np.float64, 1), ("u", np.float64, 3), ("solid", np.uint8, 1),
              ("wall_shear_stress", np.float64, 1)]
    return write_pvti(path, shape, voxel_size, origin, arrays, pieces)


@pytest.mark.parametrize("shape", [(13, 9, 7), (11, 8)])
def test_pvti_of_slab_pieces_reads_back_as_the_vti(tmp_path, shape):
    """Pieces cut along every axis (their extents sharing one layer of points) and the .pvti
    naming them read back through pyvista as the single-process .vti: the same points, every
    array with its name, dtype and values (NaN in solid), bit for bit."""
    fields, extra = _fields(shape)
    origin = (1e-3, -2e-3, 0.5e-3)[: len(shape)]
    whole = pv.read(write_vti(tmp_path / "one.vti", fields, 2e-6, origin, extra=extra))
    for axis in range(len(shape)):
        n = shape[axis]
        path = _write_pieces(tmp_path / f"fields_{axis}.pvti", fields, extra, axis,
                             [0, n // 3, n // 3 + 1, n], 2e-6, origin)
        assert sorted(p.name for p in (tmp_path / f"fields_{axis}").iterdir()) == \
            ["rank_0000.vti", "rank_0001.vti", "rank_0002.vti"]
        read = pv.read(path)
        assert read.dimensions == whole.dimensions and read.extent == whole.extent
        assert np.allclose(read.origin, whole.origin) and np.allclose(read.spacing,
                                                                      whole.spacing)
        assert list(read.cell_data) == list(whole.cell_data)
        for name in whole.cell_data:
            a, b = whole.cell_data[name], read.cell_data[name]
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), (axis, name)


def test_scatter_slab_is_the_slab_of_the_whole_scatter():
    """Tiling.scatter_slab of a slab's tiles = that slab of Tiling.scatter (offset tiles)."""
    rng = np.random.default_rng(3)
    solid = rng.random((21, 18, 13)) < 0.4
    tiling = Tiling.build(solid, a=4, offset=(3, 1, 2))
    values = rng.random((tiling.n_tiles, tiling.nodes_per_tile))
    whole, mask = tiling.scatter(values), tiling.mask()
    for axis in range(3):
        layers = tiling.tile_map.shape[axis]
        for first, end in [(0, 2), (2, layers - 1), (layers - 1, layers)]:
            rows = np.flatnonzero((tiling.tiles[:, axis] >= first) &
                                  (tiling.tiles[:, axis] < end))
            lo, hi = tiling.slab_cells(axis, first, end)
            part = tiling.scatter_slab(values[rows], tiling.tiles[rows], axis, first, end)
            assert np.array_equal(part, np.take(whole, range(lo, hi), axis=axis),
                                  equal_nan=True)
            held = tiling.scatter_slab(tiling.solid[rows], tiling.tiles[rows], axis, first,
                                       end, fill=True)
            assert np.array_equal(held, np.take(mask, range(lo, hi), axis=axis))
