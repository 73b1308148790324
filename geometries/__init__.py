"""Voxel geometries for lattice-Boltzmann flow through porous media.

Conventions used throughout the package:

- Voxel arrays are in (x, y, z) axis order, 2D arrays in (x, y): ``solid[i, j, k]`` is the voxel
  at x = i, y = j, z = k. File formats with another order (TIFF stacks are (z, y, x)) are
  transposed on loading.
- ``solid`` is a bool mask, True = solid, False = fluid (pore space).
- Sizes given to generators and preprocessing are in voxels; ``voxel_size`` and ``origin`` are in
  metres.
- Openings (:mod:`geometries.openings`): planes where fluid enters or leaves, each with its
  centre (m), outward unit normal, area (m²) and fluid node set (voxel indices).
- Errors caused by user input are :class:`GeometryError` (a ``ValueError``) whose message says
  what was wrong and what to do.

The layer knows nothing about lattices, tiles or GPUs.
"""

from __future__ import annotations

from . import generators, openings, pores, preprocess, samples
from .errors import GeometryError, GeometryWarning
from .loaders import DEFAULT_MAX_VOXELS, FORMATS, load
from .voxel import VoxelGeometry

__all__ = [
    "DEFAULT_MAX_VOXELS",
    "FORMATS",
    "GeometryError",
    "GeometryWarning",
    "VoxelGeometry",
    "generators",
    "load",
    "openings",
    "pores",
    "preprocess",
    "samples",
]
