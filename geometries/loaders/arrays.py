"""Loaders for plain arrays: NumPy ``.npy``, saved geometries ``.npz`` and headerless ``.raw``.

``.npy`` arrays are taken to be in (x, y[, z]) order already. ``.raw`` volumes are described by
``shape=(nx, ny[, nz])`` and, by default, store x fastest (``order="F"``), the usual layout of
micro-CT exports (ImageJ, Avizo, Digital Rocks Portal); ``order="C"`` means the last axis is
fastest. The result of a raw load is a Fortran-ordered view, not a copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from ..errors import GeometryError
from ..npyfile import NPY_HEAD_BYTES, check_npy_header, read_npy
from ..segment import segment
from ..voxel import VoxelGeometry
from .options import IMAGE_OPTIONS, VOXEL_SIZE, LoaderOption, shape
from .source import DEFAULT_MAX_VOXELS, Payload, build_geometry, check_voxel_count

__all__ = ["load_npy", "load_npz", "load_raw"]

_BYTE_ORDERS = {"little": "<", "big": ">"}
_ORDERS = ("F", "C")


#: What a person chooses when reading each format (:mod:`geometries.loaders.options`).
NPY_OPTIONS = IMAGE_OPTIONS
NPZ_OPTIONS = (VOXEL_SIZE,)  # a saved VoxelGeometry: already segmented
RAW_OPTIONS = (
    LoaderOption("shape", "raw_shape", "RAW shape (nx, ny, nz)",
                 "RAW: nx, ny[, nz] in voxels (x fastest), e.g. 64,64,64.", "", parse=shape),
    LoaderOption("dtype", "raw_dtype", "RAW voxel type", "RAW: voxel type.", "uint8",
                 choices={t: t for t in ("uint8", "uint16", "int16", "int32", "float32",
                                         "bool")}),
    *IMAGE_OPTIONS,
)


def load_npy(
    payload: Payload,
    *,
    pore_value: float | Sequence[float] | None = None,
    threshold: float | None = None,
    pore_below: bool = True,
    voxel_size: float | None = None,
    flow_axis: int = 0,
    name: str = "",
    max_voxels: int = DEFAULT_MAX_VOXELS,
) -> VoxelGeometry:
    """Load a 2D/3D ``.npy`` image in (x, y[, z]) order; segmentation as in :mod:`segment`."""
    # The header first: a trusted path of a 1500³ array was read whole (3 GiB) before refusal.
    check_npy_header(payload.head(NPY_HEAD_BYTES), max_items=max_voxels)
    image = read_npy(payload.data, max_items=max_voxels)
    solid = segment(image, pore_value=pore_value, threshold=threshold, pore_below=pore_below)
    return build_geometry(
        solid, max_voxels=max_voxels, voxel_size=voxel_size, flow_axis=flow_axis, name=name
    )


def load_npz(
    payload: Payload,
    *,
    voxel_size: float | None = None,
    flow_axis: int | None = None,
    name: str | None = None,
    max_voxels: int = DEFAULT_MAX_VOXELS,
) -> VoxelGeometry:
    """Load a geometry saved by ``VoxelGeometry.save``; given options override stored values.

    Saved openings come along; a given ``voxel_size`` rescales their centres and areas."""
    stored = VoxelGeometry.from_npz(payload.data, max_voxels=max_voxels).in_frame(voxel_size)
    return build_geometry(
        stored.solid,
        max_voxels=max_voxels,
        voxel_size=stored.voxel_size,
        origin=stored.origin,
        flow_axis=stored.flow_axis if flow_axis is None else flow_axis,
        labels=stored.labels,
        name=stored.name if name is None else name,
        openings=stored.openings,
    )


def load_raw(
    payload: Payload,
    *,
    shape: Sequence[int] | None = None,
    dtype: str = "uint8",
    byte_order: Literal["little", "big"] = "little",
    header_bytes: int = 0,
    order: Literal["F", "C"] = "F",
    pore_value: float | Sequence[float] | None = None,
    threshold: float | None = None,
    pore_below: bool = True,
    voxel_size: float | None = None,
    flow_axis: int = 0,
    name: str = "",
    max_voxels: int = DEFAULT_MAX_VOXELS,
) -> VoxelGeometry:
    """Load a headerless volume of ``shape=(nx, ny[, nz])`` voxels skipping ``header_bytes``."""
    dims = _raw_shape(shape)
    check_voxel_count(dims, max_voxels)
    dt = _raw_dtype(dtype, byte_order)
    if order not in _ORDERS:
        raise GeometryError(
            f"order must be 'F' (x fastest) or 'C' (last axis fastest), got {order!r}."
        )
    if isinstance(header_bytes, bool) or not isinstance(header_bytes, int | np.integer):
        raise GeometryError(f"header_bytes must be a non-negative integer, got {header_bytes!r}.")
    if header_bytes < 0:
        raise GeometryError(f"header_bytes must be a non-negative integer, got {header_bytes!r}.")
    count = int(np.prod(dims))
    expected = header_bytes + count * dt.itemsize
    size = payload.size()
    if size != expected:
        raise GeometryError(
            f"The raw file has {size} bytes but shape {dims} of {dt.name} ({dt.itemsize} bytes "
            f"each) after a {header_bytes}-byte header needs {expected}. Check shape=, dtype= "
            "and header_bytes=."
        )
    flat = np.frombuffer(payload.data, dtype=dt, count=count, offset=header_bytes)
    image = flat.reshape(dims, order=order)
    solid = segment(image, pore_value=pore_value, threshold=threshold, pore_below=pore_below)
    return build_geometry(
        solid, max_voxels=max_voxels, voxel_size=voxel_size, flow_axis=flow_axis, name=name
    )


def _raw_shape(shape: Sequence[int] | None) -> tuple[int, ...]:
    """Return a validated (nx, ny[, nz]) shape for a raw file."""
    if shape is None:
        raise GeometryError(
            "A .raw file has no header, so its size is unknown: pass shape=(nx, ny, nz) "
            "(and dtype=, byte_order=, header_bytes= if they differ from uint8/little/0)."
        )
    try:
        dims = tuple(int(n) for n in shape)
        exact = all(int(n) == n for n in shape)
    except (TypeError, ValueError) as exc:
        raise GeometryError(f"shape must be 2 or 3 positive integers, got {shape!r}.") from exc
    if not exact or len(dims) not in (2, 3) or min(dims) < 1:
        raise GeometryError(f"shape must be 2 or 3 positive integers, got {shape!r}.")
    return dims


def _raw_dtype(dtype: str, byte_order: str) -> np.dtype:
    """Return the numeric dtype of raw voxels with the requested byte order."""
    if byte_order not in _BYTE_ORDERS:
        raise GeometryError(f"byte_order must be 'little' or 'big', got {byte_order!r}.")
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise GeometryError(f"dtype {dtype!r} is not a NumPy dtype; use e.g. 'uint8'.") from exc
    if dt.kind not in "biuf" or dt.fields is not None:
        raise GeometryError(f"dtype must be bool, integer or float for a raw image, got {dt}.")
    return dt.newbyteorder(_BYTE_ORDERS[byte_order])
