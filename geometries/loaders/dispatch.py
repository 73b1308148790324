"""The one entry point for reading geometries: :func:`load` picks the loader for a source.

The format comes from ``format=``, else the extension of ``filename=`` or of the path, else (for
bytes) from the content. The extension or format only chooses a loader; an uploaded file name is
never opened. Options are checked against the chosen loader's keyword arguments, so a misspelt
option is an error rather than silently ignored.
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import PurePath

from ..errors import GeometryError
from ..voxel import VoxelGeometry
from .arrays import NPY_OPTIONS, NPZ_OPTIONS, RAW_OPTIONS, load_npy, load_npz, load_raw
from .isolation import ISOLATED_FORMATS, Limits, load_isolated
from .mat import MAT_OPTIONS, load_mat
from .nrrd import load_nrrd
from .options import IMAGE_OPTIONS, LoaderOption
from .sniff import sniff_format
from .source import DEFAULT_MAX_VOXELS, Payload, Source
from .stl import STL_OPTIONS, load_stl
from .tiff import load_tiff
from .vtkimage import VTK_FORMATS, load_vtk_image

__all__ = ["FORMATS", "LOADER_OPTIONS", "format_of", "load"]

logger = logging.getLogger(__name__)

Loader = Callable[..., VoxelGeometry]

#: Format name → loader; every loader takes a Payload plus keyword options.
FORMATS: dict[str, Loader] = {
    "stl": load_stl,
    "npy": load_npy,
    "npz": load_npz,
    "raw": load_raw,
    "mat": load_mat,
    "tiff": load_tiff,
    "nrrd": load_nrrd,
    **{fmt: functools.partial(load_vtk_image, format=fmt) for fmt in VTK_FORMATS},
}

#: Format name → the options its loader declares for a person reading a file (TIFF, NRRD and
#: the VTK images take the image options alone).
LOADER_OPTIONS: dict[str, tuple[LoaderOption, ...]] = {
    "stl": STL_OPTIONS,
    "npy": NPY_OPTIONS,
    "npz": NPZ_OPTIONS,
    "raw": RAW_OPTIONS,
    "mat": MAT_OPTIONS,
    "tiff": IMAGE_OPTIONS,
    "nrrd": IMAGE_OPTIONS,
    **{fmt: IMAGE_OPTIONS for fmt in VTK_FORMATS},
}

_ALIASES = {"tif": "tiff", "nhdr": "nrrd"}


def format_of(filename: str) -> str | None:
    """The format a file name's extension picks (None: none, or one no loader reads)."""
    fmt = _normalise(PurePath(filename).suffix)
    return fmt if fmt in FORMATS else None


def load(
    source: Source,
    *,
    format: str | None = None,
    filename: str | None = None,
    **options: object,
) -> VoxelGeometry:
    """Read a geometry from a trusted path or uploaded bytes; options go to the format's loader.

    Parameters
    ----------
    source : str, os.PathLike or bytes
        A path chosen by trusted code, or the raw bytes of an upload.
    format : str, optional
        One of ``stl, npy, npz, raw, tif/tiff, vti, vtk, mha, mhd, nrrd``; overrides the rest.
    filename : str, optional
        Name of an upload; only its extension is used, to choose the loader.
    **options
        Loader options, e.g. ``resolution=``, ``inside=`` (STL); ``shape=``, ``dtype=`` (raw);
        ``pore_value=``, ``threshold=`` (images); ``voxel_size=`` (metres), ``flow_axis=``,
        ``max_voxels=`` (all, default 512³). See each loader in :mod:`geometries.loaders`.

    Images are segmented by :func:`geometries.segment.segment`: bool True = solid; integers
    0 = pore, anything else solid; grey-scale floats need ``threshold=``.
    Raises GeometryError for anything wrong with the source or the options.
    """
    payload = Payload(source)
    if payload.size() == 0:
        raise GeometryError("The geometry source is empty (0 bytes). Upload a non-empty file.")
    fmt = _choose_format(payload, format, filename)
    loader = FORMATS[fmt]
    params = _check_options(fmt, loader, options)
    limit = options.get("max_voxels", 1)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise GeometryError(f"max_voxels must be a positive integer, got {limit!r}.")
    if "name" not in options and params["name"].default == "":
        options["name"] = _default_name(payload, filename, fmt)
    logger.info("loading %s geometry from %s", fmt, filename or payload.path or "bytes")
    if fmt in ISOLATED_FORMATS:
        # Native readers and STL voxelising never run in this process, for uploads and trusted
        # paths alike (a damaged file crashed the CLI): see SECURITY.md.
        limits = Limits.for_voxels(int(options.get("max_voxels", DEFAULT_MAX_VOXELS)))
        source = payload.data if payload.path is None else payload.path
        return load_isolated(source, fmt, options, limits)
    return loader(payload, **options)


def _choose_format(payload: Payload, format: str | None, filename: str | None) -> str:
    """Return the format name from ``format``, an extension, or the content."""
    if format is not None:
        fmt = _normalise(str(format))
        if fmt not in FORMATS:
            raise GeometryError(f"Unknown format {format!r}; choose one of {sorted(FORMATS)}.")
        return fmt
    for name in (filename, payload.path):
        if name is not None:
            fmt = _normalise(PurePath(os.fspath(name)).suffix)
            if fmt in FORMATS:
                return fmt
    sniffed = sniff_format(payload.head(), payload.size())
    if sniffed is None:
        raise GeometryError(
            "Could not recognise the file format from its name or content. Use a file ending in "
            f"one of {', '.join('.' + f for f in sorted(FORMATS))} (a headerless volume: .raw "
            "with its shape). From Python: pass format= or filename=; raw volumes need "
            "format='raw' and shape=."
        )
    return sniffed


def _normalise(name: str) -> str:
    """Return a lower-case format name without a leading dot, aliases resolved."""
    key = name.lower().lstrip(".")
    return _ALIASES.get(key, key)


def _check_options(
    fmt: str, loader: Loader, options: dict[str, object]
) -> Mapping[str, inspect.Parameter]:
    """Return the loader's parameters; refuse options the chosen loader does not take."""
    params = inspect.signature(loader).parameters
    allowed = sorted(
        p
        for p, spec in params.items()
        if spec.kind is inspect.Parameter.KEYWORD_ONLY and p != "format"
    )
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise GeometryError(
            f"Option(s) {unknown} do not apply to {fmt} files; valid options: {allowed}."
        )
    return params


def _default_name(payload: Payload, filename: str | None, fmt: str) -> str:
    """Return a display name: the file name if known, else the format."""
    if filename:
        return PurePath(filename).name
    if payload.path is not None:
        return payload.path.name
    return f"uploaded {fmt}"
