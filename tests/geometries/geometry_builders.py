"""Builders of small valid files in every supported format, shared by the geometry tests."""

from __future__ import annotations

import io

import numpy as np
import pyvista as pv
import tifffile
import trimesh


def sphere_mesh(radius: float = 1.0, subdivisions: int = 4) -> trimesh.Trimesh:
    """Return a watertight icosphere."""
    return trimesh.creation.icosphere(subdivisions=subdivisions, radius=radius)


def stl_bytes(mesh: trimesh.Trimesh, ascii: bool = False) -> bytes:
    """Return the mesh as binary or ASCII STL bytes."""
    data = mesh.export(file_type="stl_ascii" if ascii else "stl")
    return data.encode() if isinstance(data, str) else data


def npy_bytes(array: np.ndarray) -> bytes:
    """Return ``array`` as .npy bytes."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def tiff_bytes(zyx: np.ndarray) -> bytes:
    """Return a (z, y, x) or (y, x) array as TIFF bytes."""
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, zyx, photometric="minisblack")
    return buffer.getvalue()


def image_data(xyz: np.ndarray, spacing=(1.0, 1.0, 1.0), cell: bool = False) -> pv.ImageData:
    """Return a pyvista image holding ``xyz`` as point (or cell) data named 'phase'."""
    dims = xyz.shape + (1,) * (3 - xyz.ndim)
    grid = pv.ImageData(
        dimensions=tuple(n + 1 for n in dims) if cell else dims, spacing=spacing
    )
    data = grid.cell_data if cell else grid.point_data
    data["phase"] = xyz.ravel(order="F")
    return grid


def vtk_bytes(xyz: np.ndarray, suffix: str, tmp_path, **kwargs) -> bytes:
    """Return ``xyz`` written by pyvista as a .vti or legacy .vtk file."""
    path = tmp_path / f"image{suffix}"
    image_data(xyz, **kwargs).save(path)
    return path.read_bytes()


def mha_bytes(xyz: np.ndarray, data_file: str = "LOCAL") -> bytes:
    """Return a MetaImage (uint8, x fastest) with attached data or naming a data file."""
    dims = " ".join(str(n) for n in xyz.shape)
    header = (
        f"ObjectType = Image\nNDims = {xyz.ndim}\nBinaryData = True\n"
        f"BinaryDataByteOrderMSB = False\nCompressedData = False\n"
        f"ElementSpacing = {' '.join(['1'] * xyz.ndim)}\nDimSize = {dims}\n"
        f"ElementType = MET_UCHAR\nElementDataFile = {data_file}\n"
    ).encode()
    body = xyz.astype(np.uint8).tobytes(order="F") if data_file == "LOCAL" else b""
    return header + body


def nrrd_bytes(xyz: np.ndarray, data_file: str | None = None) -> bytes:
    """Return an NRRD (uint8, raw encoding, x fastest) with attached data or a data file."""
    sizes = " ".join(str(n) for n in xyz.shape)
    header = (
        f"NRRD0004\ntype: uint8\ndimension: {xyz.ndim}\nsizes: {sizes}\n"
        f"spacings: {' '.join(['1'] * xyz.ndim)}\nencoding: raw\n"
    )
    if data_file is not None:
        return (header + f"data file: {data_file}\n\n").encode()
    return (header + "\n").encode() + xyz.astype(np.uint8).tobytes(order="F")


def asymmetric_volume(shape=(5, 6, 7)) -> np.ndarray:
    """Return a uint8 (x, y, z) volume whose every voxel value differs along each axis."""
    x, y, z = np.indices(shape)
    return ((x + 3 * y + 11 * z) % 4 == 0).astype(np.uint8)
