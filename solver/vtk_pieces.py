"""Fields as a parallel VTK image: one ``.vti`` piece per rank and a ``.pvti`` naming them.

The single-process ``.vti`` (:func:`solver.io.write_vti`) holds one cell per voxel; over MPI
ranks each rank writes the cells of its slab as a piece (the same array names, dtypes and
values), and rank 0 writes ``fields_STEP.pvti`` naming the pieces, which lie in the folder
``fields_STEP/`` beside it as ``rank_RRRR.vti``. A piece's extent is in points: the slab's cells
``[lo, hi)`` along the slab axis span points ``lo..hi``, so neighbouring pieces share the one
layer of points between them (VTK's piece extents) and no cell is written twice. ParaView and
``pyvista.read`` open the ``.pvti`` as the whole image.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import numpy as np

__all__ = ["cell_image", "save_image", "pieces_folder", "piece_path", "cell_extent",
           "write_pvti"]

#: VTK's XML names of the array dtypes a field file holds.
VTK_TYPES = {np.dtype(np.float64): "Float64", np.dtype(np.float32): "Float32",
             np.dtype(np.uint8): "UInt8",
             np.dtype(np.int32): "Int32", np.dtype(np.int64): "Int64"}


def cell_image(rho: np.ndarray, u: np.ndarray, extra: dict[str, np.ndarray] | None,
               voxel_size: float | None, origin: Sequence[float] | None,
               start: Sequence[int] = ()) -> Any:
    """A ``pyvista.ImageData`` of ``rho`` (cells), ``u`` ((d,) + cells, padded to 3
    components) and ``extra`` as cell data; its first cell is voxel ``start`` of the whole grid
    (zeros by default), spacing the voxel size in metres (1: lattice units)."""
    import pyvista as pv

    d = rho.ndim
    h = float(voxel_size) if voxel_size else 1.0
    corner = tuple(origin or ()) + (0.0,) * (3 - len(origin or ()))
    first = tuple(start) + (0,) * (3 - len(start))
    grid = pv.ImageData(spacing=(h, h, h), origin=corner)
    cells = tuple(rho.shape) + (1,) * (3 - d)
    # A 2D grid is one point thick (no cell layer along z), as in the single-process file.
    grid.extent = tuple(v for k in range(3) for v in
                        (first[k], first[k] + cells[k] if k < d else first[k]))
    grid.cell_data["rho"] = rho.ravel(order="F")
    vectors = np.zeros((rho.size, 3), dtype=u.dtype)
    for k in range(d):
        vectors[:, k] = u[k].ravel(order="F")
    grid.cell_data["u"] = vectors
    for name, values in (extra or {}).items():
        grid.cell_data[name] = np.asarray(values).ravel(order="F")
    return grid


def save_image(grid: Any, path: str | Path) -> Path:
    """Save ``grid`` as ``path`` (``.vti``) through a temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.vti")
    grid.save(tmp)
    os.replace(tmp, path)
    return path


def pieces_folder(pvti: str | Path) -> Path:
    """The folder of a ``.pvti``'s pieces: beside it, named by its stem."""
    pvti = Path(pvti)
    return pvti.with_name(pvti.stem)


def piece_path(pvti: str | Path, rank: int) -> Path:
    """Where ``rank`` writes its piece of the ``.pvti`` at ``pvti``."""
    return pieces_folder(pvti) / f"rank_{rank:04d}.vti"


def cell_extent(shape: Sequence[int], axis: int, lo: int, hi: int) -> tuple[int, ...]:
    """VTK point extent (6 ints) of the cells ``[lo, hi)`` along ``axis`` and all cells of the
    other axes of a grid of ``shape`` cells (2D: one point thick along z)."""
    ext = []
    for k in range(3):
        n = shape[k] if k < len(shape) else 0
        ext += [lo, hi] if k == axis else [0, n]
    return tuple(ext)


def write_pvti(path: str | Path, shape: Sequence[int], voxel_size: float | None,
               origin: Sequence[float] | None, arrays: Sequence[tuple[str, Any, int]],
               pieces: Sequence[tuple[tuple[int, ...], Path]]) -> Path:
    """Write the ``.pvti`` of a grid of ``shape`` cells whose pieces ``(extent, file)`` hold
    the cell arrays ``arrays`` (name, dtype, components): a temporary file, then
    ``os.replace``; the pieces named relative to the ``.pvti``'s folder."""
    path = Path(path)
    h = float(voxel_size) if voxel_size else 1.0
    corner = tuple(origin or ()) + (0.0,) * (3 - len(origin or ()))
    whole = cell_extent(shape, 0, 0, shape[0])

    def ints(values: Sequence[int]) -> str:
        return " ".join(str(int(v)) for v in values)

    lines = ['<?xml version="1.0"?>',
             '<VTKFile type="PImageData" version="1.0" byte_order="LittleEndian" '
             'header_type="UInt64">',
             f'  <PImageData WholeExtent="{ints(whole)}" GhostLevel="0" '
             f'Origin="{" ".join(repr(float(c)) for c in corner)}" '
             f'Spacing="{repr(h)} {repr(h)} {repr(h)}">',
             '    <PCellData Scalars="rho" Vectors="u">']
    for name, dtype, components in arrays:
        lines.append(f'      <PDataArray type="{VTK_TYPES[np.dtype(dtype)]}" '
                     f'Name={quoteattr(name)} NumberOfComponents="{int(components)}"/>')
    lines.append("    </PCellData>")
    for extent, file in pieces:
        source = Path(file).relative_to(path.parent).as_posix()
        lines.append(f'    <Piece Extent="{ints(extent)}" Source={quoteattr(source)}/>')
    lines += ["  </PImageData>", "</VTKFile>", ""]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, path)
    return path
