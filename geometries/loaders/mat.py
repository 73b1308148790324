"""Loader for MATLAB ``.mat`` files (v4 to v7), a common container of segmented micro-CT volumes.

Read with :func:`scipy.io.loadmat`, which builds only arrays, never Python objects. The
variables are listed first from their headers (:func:`scipy.io.whosmat`), so a declared size
above ``max_voxels`` is refused before anything is allocated, and only the chosen variable is
read: ``variable=`` names it, otherwise the largest 2D/3D numeric array is taken and a note says
which. Array axes are taken as (x, y[, z]) in MATLAB's index order (``vol(i, j, k)``: x = i).
MATLAB v7.3 files are HDF5, which ``scipy.io`` does not read: the message says how to re-save.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import numpy as np

from ..errors import GeometryError
from ..segment import segment
from ..voxel import VoxelGeometry
from .options import IMAGE_OPTIONS, LoaderOption
from .source import DEFAULT_MAX_VOXELS, Payload, build_geometry, check_voxel_count

__all__ = ["load_mat"]

#: MATLAB classes that hold plain numbers or logicals.
_NUMERIC = {"double", "single", "logical", "int8", "uint8", "int16", "uint16", "int32",
            "uint32", "int64", "uint64"}
_V73 = b"MATLAB 7.3 MAT-file"


#: What a person chooses when reading a MATLAB file (:mod:`geometries.loaders.options`).
MAT_OPTIONS = (
    LoaderOption("variable", "mat_variable", "MATLAB variable (.mat)",
                 "MAT: variable holding the volume (empty: the largest array).", "", unset=""),
    *IMAGE_OPTIONS,
)


def load_mat(
    payload: Payload,
    *,
    variable: str | None = None,
    pore_value: float | Sequence[float] | None = None,
    threshold: float | None = None,
    pore_below: bool = True,
    voxel_size: float | None = None,
    flow_axis: int = 0,
    name: str = "",
    max_voxels: int = DEFAULT_MAX_VOXELS,
) -> VoxelGeometry:
    """Load a 2D/3D array from a MATLAB v4-v7 ``.mat`` file; segmentation as in :mod:`segment`."""
    import scipy.io

    data = payload.data
    if data[:128].startswith(_V73) or data[:8] == b"\x89HDF\r\n\x1a\n":
        raise GeometryError(
            "This .mat file is MATLAB v7.3 (HDF5), which cannot be read here. In MATLAB save "
            "the volume with save('volume.mat', 'vol', '-v7'), or export it as .tif, .raw or "
            ".npy, and upload that.")
    try:
        listed = scipy.io.whosmat(io.BytesIO(data))
    except Exception as exc:  # scipy raises ValueError, TypeError, OSError... on bad bytes
        raise GeometryError(
            f"This is not a readable MATLAB .mat file ({exc}). Save it from MATLAB with "
            "save(..., '-v7'), or upload the volume as .tif, .raw or .npy.") from None
    arrays = [(n, tuple(s), c) for n, s, c in listed if c in _NUMERIC and len(s) in (2, 3)]
    chosen = _choose(arrays, variable, [n for n, _, _ in listed])
    var, shape, cls = chosen
    check_voxel_count(shape, max_voxels)
    try:
        image = scipy.io.loadmat(io.BytesIO(data), variable_names=[var])[var]
    except Exception as exc:
        raise GeometryError(f"Variable {var!r} of the .mat file could not be read ({exc}). "
                            "Save the file again from MATLAB with '-v7'.") from None
    image = np.asarray(image)
    if image.dtype == object or image.ndim not in (2, 3) or image.shape != shape:
        raise GeometryError(f"Variable {var!r} is not a plain 2D/3D numeric array; save the "
                            "volume itself (not a struct or cell) and upload again.")
    solid = segment(image, pore_value=pore_value, threshold=threshold, pore_below=pore_below)
    geometry = build_geometry(
        solid, max_voxels=max_voxels, voxel_size=voxel_size, flow_axis=flow_axis, name=name
    )
    size = " x ".join(map(str, shape))
    others = [n for n, _, _ in arrays if n != var]
    if variable is None:  # the choice was made for the user: say which, so it can be changed
        note = f"Read MATLAB variable '{var}' ({size} {cls})"
        if others:
            note += f", the largest of {len(arrays)} arrays (others: {', '.join(others)})"
        geometry.notes = (note + "; axes taken as x, y, z in MATLAB index order.",)
    return geometry


def _choose(
    arrays: list[tuple[str, tuple[int, ...], str]], variable: str | None, names: list[str]
) -> tuple[str, tuple[int, ...], str]:
    """The named variable, or the largest 2D/3D numeric array."""
    if variable is not None:
        for entry in arrays:
            if entry[0] == variable:
                return entry
        raise GeometryError(f"The .mat file has no 2D/3D numeric variable {variable!r}; it holds "
                            f"{names or 'no variables'}.")
    if not arrays:
        raise GeometryError(
            f"The .mat file holds no 2D or 3D numeric array (variables: {names or 'none'}). "
            "Save the segmented volume itself, e.g. save('volume.mat', 'vol', '-v7').")
    # Largest first; ties keep the file's order.
    return max(arrays, key=lambda entry: math.prod(entry[1]))
