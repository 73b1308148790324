"""Reading geometries from files and uploads; :func:`load` is the one entry point.

Formats: STL (binary/ASCII, voxelised), ``.npy``, ``.npz`` (saved VoxelGeometry), ``.raw``,
MATLAB ``.mat``, TIFF stacks, NRRD, and VTK-readable images (``.vti``, ``.vtk``, ``.mha``/``.mhd``).
Every failure caused by the input is a :class:`~geometries.errors.GeometryError`. What a person
may choose when reading each format is declared beside its loader (:data:`LOADER_OPTIONS`).
"""

from __future__ import annotations

from .arrays import load_npy, load_npz, load_raw
from .dispatch import FORMATS, LOADER_OPTIONS, format_of, load
from .mat import load_mat
from .nrrd import load_nrrd
from .options import LoaderOption, loader_options
from .source import DEFAULT_MAX_VOXELS
from .stl import load_stl
from .tiff import load_tiff
from .vtkimage import load_vtk_image

__all__ = [
    "DEFAULT_MAX_VOXELS",
    "FORMATS",
    "LOADER_OPTIONS",
    "LoaderOption",
    "format_of",
    "load",
    "loader_options",
    "load_npy",
    "load_mat",
    "load_npz",
    "load_nrrd",
    "load_raw",
    "load_stl",
    "load_tiff",
    "load_vtk_image",
]
