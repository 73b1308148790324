"""Loader for VTK-readable images: ``.vti``, legacy ``.vtk`` (STRUCTURED_POINTS) and MetaImage
``.mha``/``.mhd``, via pyvista.

VTK stores images x fastest, which maps onto (x, y, z) as a Fortran-ordered view. Point data
gives one voxel per point, cell data one voxel per cell; ``array_name=`` picks the array, else
the first point array (or the first cell array when there are no point arrays). The spacing
(times ``unit``, metres per file unit) becomes ``voxel_size`` and must be cubic unless
``voxel_size=`` overrides it.

Before VTK sees a file its header is checked here: the declared size must be within
``max_voxels`` (VTK would otherwise allocate whatever a header claims), and an upload's
MetaImage header may not name a separate data file (that name would be a path chosen by the
uploader). Trusted paths may use detached data files. (NRRD has its own reader, :mod:`.nrrd`:
VTK's NRRD reader hangs on some malformed headers.)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..errors import GeometryError
from ..segment import segment
from ..voxel import VoxelGeometry
from .headers import check_metaimage, check_vti, confined_data_file
from .source import (
    DEFAULT_MAX_VOXELS,
    Payload,
    build_geometry,
    cubic_voxel_size,
    parse_errors,
    positive_number,
    temporary_copy,
)

if TYPE_CHECKING:
    import pyvista as pv

__all__ = ["VTK_FORMATS", "load_vtk_image"]

VTK_FORMATS = ("vti", "vtk", "mha", "mhd")
_HEADER_BYTES = 8192


def load_vtk_image(
    payload: Payload,
    *,
    format: str,
    array_name: str | None = None,
    pore_value: float | Sequence[float] | None = None,
    threshold: float | None = None,
    pore_below: bool = True,
    voxel_size: float | None = None,
    unit: float = 1.0,
    flow_axis: int = 0,
    name: str = "",
    max_voxels: int = DEFAULT_MAX_VOXELS,
) -> VoxelGeometry:
    """Load an image array of a VTK-readable file as an (x, y[, z]) geometry."""
    if format not in VTK_FORMATS:
        raise GeometryError(f"format must be one of {VTK_FORMATS}, got {format!r}.")
    unit = positive_number(unit, "unit")
    _check_header(payload, format, max_voxels)
    image = _read_image(payload, format)
    with parse_errors(format.upper()):
        values, dims, cell = _pick_array(image, array_name)
    volume = values.reshape(dims, order="F")
    if volume.ndim == 3 and volume.shape[2] == 1:
        volume = volume[:, :, 0]
    spacing = np.asarray(image.spacing, dtype=np.float64)[: volume.ndim] * positive_number(
        unit, "unit"
    )
    size = cubic_voxel_size(spacing) if voxel_size is None else voxel_size
    # Point data sits on voxel centres, cell data fills cells: the box corner differs by h/2.
    origin = np.asarray(image.origin, dtype=np.float64)[: volume.ndim] * unit
    if not cell:
        origin = origin - spacing / 2
    solid = segment(volume, pore_value=pore_value, threshold=threshold, pore_below=pore_below)
    return build_geometry(
        solid,
        max_voxels=max_voxels,
        voxel_size=size,
        origin=tuple(float(v) for v in origin),
        flow_axis=flow_axis,
        name=name,
    )


def _read_image(payload: Payload, format: str) -> pv.ImageData:
    """Read the file with VTK, turning VTK errors into GeometryError."""
    import pyvista as pv  # VTK takes seconds to import; only image files need it.

    with parse_errors(format.upper()):
        # VTK reports bad files on stderr and through its output window; both become the
        # GeometryError raised here instead.
        with (
            pv.vtk_verbosity("off"),
            pv.VtkErrorCatcher(raise_errors=True, send_to_logging=False) as catcher,
        ):
            if payload.path is not None and payload.path.suffix.lower() == f".{format}":
                image = pv.get_reader(str(payload.path)).read()
            else:
                with temporary_copy(payload.data, f".{format}") as path:
                    image = pv.get_reader(str(path)).read()
    if catcher.warning_events:
        # Readers only warn about, e.g., binary data cut short; the image would be wrong.
        raise GeometryError(
            f"VTK could not read the {format} file cleanly ({catcher.warning_events[0].alert}). "
            "Check that the file is complete and valid."
        )
    if not isinstance(image, pv.ImageData):
        raise GeometryError(
            f"The {format} file holds a {type(image).__name__}, not an image. "
            "Export a regular image (vtkImageData / STRUCTURED_POINTS)."
        )
    return image


def _pick_array(image: pv.ImageData, array_name: str | None) -> tuple[np.ndarray, tuple, bool]:
    """Return (values, grid dims, is_cell_data) of the requested or first array."""
    point_dims = tuple(int(n) for n in image.dimensions)
    cell_dims = tuple(max(n - 1, 1) for n in point_dims)
    names = [n for n in [*image.point_data.keys(), *image.cell_data.keys()] if isinstance(n, str)]
    if array_name is None:
        if not names:
            raise GeometryError("The image holds no data arrays. Export it with a label array.")
        array_name = names[0]
    if array_name in image.point_data:
        values, dims, cell = np.asarray(image.point_data[array_name]), point_dims, False
    elif array_name in image.cell_data:
        values, dims, cell = np.asarray(image.cell_data[array_name]), cell_dims, True
    else:
        raise GeometryError(f"The image has no array {array_name!r}; choose one of {names}.")
    if values.ndim != 1 or values.size != int(np.prod(dims)):
        raise GeometryError(
            f"The array {array_name!r} has shape {values.shape}, not one value per voxel of a "
            f"{dims} grid. Choose a single-component array with array_name=."
        )
    return values, dims, cell


def _check_header(payload: Payload, format: str, max_voxels: int) -> None:
    """Refuse headers that declare too much or, for uploads, name other files (see headers)."""
    uploaded = payload.path is None
    if format == "vti":
        check_vti(payload.data, max_voxels)
        return
    text = payload.head(_HEADER_BYTES).decode("latin-1")
    if format == "vtk":
        kind = _field(text, r"^DATASET[ \t]+(\S+)", "DATASET", format)
        if kind.upper() != "STRUCTURED_POINTS":
            raise GeometryError(
                f"The legacy VTK file holds {kind}, not an image. Export STRUCTURED_POINTS "
                "(vtkImageData) or a .vti file."
            )
        dims = _numbers(_field(text, r"^DIMENSIONS[ \t]+([^\r\n]*)", "DIMENSIONS", format))
        if not dims or min(dims) < 1 or int(np.prod(dims, dtype=object)) > 2 * max_voxels:
            raise GeometryError(
                f"The {format} header declares an image of {dims} samples, which is empty or "
                f"more than the limit of {max_voxels:,} voxels. Crop the image or raise "
                "max_voxels=."
            )
        return
    data_file = check_metaimage(
        payload.head(_HEADER_BYTES), payload.size(), max_voxels, uploaded=uploaded
    )
    if not uploaded and data_file.upper() != "LOCAL":
        assert payload.path is not None
        if len(data_file.split()) != 1:
            raise GeometryError("MetaImage data split over several files is not supported.")
        confined_data_file(payload.path, data_file, "MetaImage")


def _field(text: str, pattern: str, what: str, format: str) -> str:
    """Return the first group of ``pattern`` in a header or raise GeometryError."""
    match = re.search(pattern, text, re.MULTILINE)
    if match is None:
        raise GeometryError(
            f"The {format} header has no {what} entry, so it is not a valid {format} image. "
            "Check the file, or pass the right format=."
        )
    return match.group(1)


def _numbers(field: str) -> list[int]:
    """Return the integers of a header field or raise GeometryError."""
    try:
        return [int(v) for v in field.split()]
    except ValueError as exc:
        raise GeometryError(f"The image header has malformed sizes {field!r}.") from exc
