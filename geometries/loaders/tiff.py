"""Loader for TIFF stacks (one page per z slice) via tifffile.

A TIFF stack stores pages in (z, y, x) order: page k is the slice z = k, and within a page rows
are y and columns are x. The loader transposes to the package's (x, y, z) order (a view, no
copy); a single page becomes a 2D (x, y) geometry. Colour (RGB) images are refused.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np
import tifffile

from ..errors import GeometryError
from ..segment import segment
from ..voxel import VoxelGeometry
from .source import DEFAULT_MAX_VOXELS, Payload, build_geometry, check_voxel_count, parse_errors

__all__ = ["load_tiff"]


def load_tiff(
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
    """Load a single-channel TIFF page or (z, y, x) stack as an (x, y[, z]) geometry."""
    with parse_errors("TIFF"):
        with tifffile.TiffFile(io.BytesIO(payload.data)) as tif:
            if not tif.series:
                raise GeometryError("The TIFF file holds no image. Upload a TIFF stack.")
            series = tif.series[0]
            dims = _zyx_shape(series.shape, series.axes)
            check_voxel_count(dims, max_voxels)
            image = np.asarray(series.asarray()).reshape(dims)
    xyz = image.transpose(tuple(reversed(range(image.ndim))))
    solid = segment(xyz, pore_value=pore_value, threshold=threshold, pore_below=pore_below)
    return build_geometry(
        solid, max_voxels=max_voxels, voxel_size=voxel_size, flow_axis=flow_axis, name=name
    )


def _zyx_shape(shape: tuple[int, ...], axes: str) -> tuple[int, ...]:
    """Return the ([z,] y, x) shape of a series, dropping singleton axes; refuse colour."""
    for size, axis in zip(shape, axes, strict=False):
        if axis == "S" and size > 1:
            raise GeometryError(
                f"The TIFF image has {size} colour samples per pixel (axes {axes}). "
                "Save a single-channel (grey-scale or label) stack."
            )
    dims = tuple(int(n) for n in shape if n != 1)
    if len(dims) not in (2, 3):
        raise GeometryError(
            f"The TIFF image has shape {tuple(shape)} (axes {axes}); expected one page (y, x) "
            "or a stack of pages (z, y, x). Save a single 2D slice or 3D stack."
        )
    return dims
