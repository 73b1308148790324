"""Reading geometries from files and uploads; :func:`load` is the one entry point.

Formats: STL (binary/ASCII, voxelised), ``.npy``, ``.npz`` (saved VoxelGeometry), ``.raw``,
TIFF stacks, and VTK-readable images (``.vti``, ``.vtk``, ``.mha``/``.mhd``, ``.nrrd``).
Every failure caused by the input is a :class:`~geometries.errors.GeometryError`.
"""

from __future__ import annotations

from .arrays import load_npy, load_npz, load_raw
from .dispatch import FORMATS, load
from .source import DEFAULT_MAX_VOXELS
from .stl import load_stl
from .tiff import load_tiff
from .vtkimage import load_vtk_image

__all__ = [
    "DEFAULT_MAX_VOXELS",
    "FORMATS",
    "load",
    "load_npy",
    "load_npz",
    "load_raw",
    "load_stl",
    "load_tiff",
    "load_vtk_image",
]
