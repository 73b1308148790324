"""Openings: the planes where fluid enters or leaves a geometry, with their fluid node sets.

Three detectors, each documented in its module:

- :func:`face_openings` (voxel images): each connected fluid patch on a face of the box;
- open boundary loops of an STL surface that is not watertight (planar cuts), and
- flat end caps of a watertight STL surface (large coplanar facet groups, or the caps nearest to
  given points): both through ``load_stl(..., openings=...)``, which also closes the lumen at each
  opening plane and pads the box so that every opening has fluid nodes on its plane.

Every opening is an :class:`Opening` in SI units (metres, m²) with an outward unit normal and the
voxel indices of its fluid nodes; :attr:`VoxelGeometry.openings` holds them.
The lattice links that cross an opening are the solver's (``solver.opening_links``).
"""

from __future__ import annotations

from .faces import face_openings
from .opening import SOURCES, Opening

__all__ = ["SOURCES", "Opening", "face_openings"]
