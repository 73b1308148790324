"""Loader for TIFF stacks (one page per z slice) via tifffile.

A TIFF stack stores pages in (z, y, x) order: page k is the slice z = k, and within a page rows
are y and columns are x. The loader transposes to the package's (x, y, z) order (a view, no
copy); a single page becomes a 2D (x, y) geometry. Colour (RGB) images are refused.

The voxel size comes from an ImageJ/Fiji calibration when the file has one (the pages' X and
Y resolution, the stack's ``spacing`` along z, in the metadata's ``unit``): cubic voxels only,
as for NRRD and VTI; a TIFF without it (or in pixels, or inches) has no voxel size.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator, Sequence

import numpy as np

from ..errors import GeometryError
from ..segment import segment
from ..voxel import VoxelGeometry
from .headers import check_tiff_chain
from .source import (
    DEFAULT_MAX_VOXELS,
    Payload,
    build_geometry,
    check_voxel_count,
    cubic_voxel_size,
    parse_errors,
)

__all__ = ["load_tiff", "tiff_voxel_size"]

#: ImageJ calibration units, metres each (Fiji writes 'micron' or 'µm').
IMAGEJ_UNITS = {"nm": 1e-9, "nanometer": 1e-9, "micron": 1e-6, "microns": 1e-6, "um": 1e-6,
                "µm": 1e-6, "μm": 1e-6, "\\u00b5m": 1e-6, "micrometer": 1e-6, "mm": 1e-3,
                "millimeter": 1e-3, "cm": 1e-2, "m": 1.0, "meter": 1.0, "metre": 1.0}


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
    import tifffile  # imported where TIFF is read: `import geometries` works without it (GPU box)

    check_tiff_chain(payload.data)  # tifffile follows a looping page chain forever
    with parse_errors("TIFF"), _logged_errors() as errors:
        with tifffile.TiffFile(io.BytesIO(payload.data)) as tif:
            if not tif.series:
                raise GeometryError("The TIFF file holds no image. Upload a TIFF stack.")
            series = tif.series[0]
            dims = _zyx_shape(series.shape, series.axes)
            check_voxel_count(dims, max_voxels)
            _check_complete(series.pages, len(payload.data))
            image = np.asarray(series.asarray()).reshape(dims)
            if voxel_size is None:
                voxel_size = tiff_voxel_size(tif)
    if errors:
        raise GeometryError(
            f"The TIFF file is corrupted or truncated ({errors[0]}). Upload the complete file."
        )
    xyz = image.transpose(tuple(reversed(range(image.ndim))))
    solid = segment(xyz, pore_value=pore_value, threshold=threshold, pore_below=pore_below)
    return build_geometry(
        solid, max_voxels=max_voxels, voxel_size=voxel_size, flow_axis=flow_axis, name=name
    )


def tiff_voxel_size(tif) -> float | None:
    """The voxel edge in metres of an open ``tifffile.TiffFile`` from its ImageJ calibration;
    None without one; GeometryError when the calibrated voxels are not cubic."""
    metadata = tif.imagej_metadata if tif.is_imagej else None
    scale = IMAGEJ_UNITS.get(str((metadata or {}).get("unit", "")).strip().lower())
    if scale is None:
        return None
    page = tif.pages[0]
    spacing = []
    for name in ("XResolution", "YResolution"):
        tag = page.tags.get(name)
        pixels, per = tag.value if tag is not None else (1, 1)  # pixels per `per` units
        spacing.append(per / pixels * scale if pixels else np.nan)
    if len(tif.pages) > 1:
        spacing.append(float(metadata.get("spacing", 1.0)) * scale)
    try:
        return cubic_voxel_size(np.asarray(spacing, dtype=float))
    except GeometryError as exc:
        raise GeometryError(f"The TIFF's ImageJ calibration ({metadata.get('unit')}): {exc} "
                            "(a case file: geometry.options.voxel_size).") from exc


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


def _check_complete(pages: Sequence, size: int) -> None:
    """Refuse pages whose image data reaches past the end of the file (tifffile pads them)."""
    for page in pages:
        if page is None:
            raise GeometryError("The TIFF stack has unreadable pages. Upload a complete file.")
        ends = [o + c for o, c in zip(page.dataoffsets, page.databytecounts, strict=False)]
        if not ends or max(ends) > size:
            raise GeometryError(
                "The TIFF file is truncated: its image data reaches past the end of the file. "
                "Upload the complete file."
            )


class _ErrorList(logging.Handler):
    """Collects the messages of ERROR records."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def _logged_errors() -> Iterator[list[str]]:
    """Yield the list of errors tifffile logs meanwhile (it logs, then pads, broken files)."""
    handler = _ErrorList()
    log = logging.getLogger("tifffile")
    log.addHandler(handler)
    try:
        yield handler.messages
    finally:
        log.removeHandler(handler)
