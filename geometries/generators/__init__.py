"""Generated geometries, all returned as VoxelGeometry with sizes in voxels.

Porous media: :func:`random_sphere_pack` (overlapping spheres at a target porosity),
:func:`sphere_array` (SC/BCC/FCC unit cells). Bounded flows with walls as solid voxels:
:func:`channel`, :func:`square_duct`, :func:`circular_pipe`, :func:`cylinder_in_channel`,
:func:`sphere_in_pipe`, :func:`lid_cavity`. Vessel benchmarks open at both ends (with their
openings): :func:`stenosed_pipe`, :func:`expanded_pipe`.
"""

from __future__ import annotations

from .lattices import MAX_SOLID_FRACTION, sphere_array, sphere_radius
from .packs import random_sphere_pack
from .shapes import (
    channel,
    circular_pipe,
    cylinder_in_channel,
    lid_cavity,
    sphere_in_pipe,
    square_duct,
)
from .tubes import expanded_pipe, stenosed_pipe, tilted_pipe

__all__ = [
    "MAX_SOLID_FRACTION",
    "channel",
    "circular_pipe",
    "cylinder_in_channel",
    "expanded_pipe",
    "lid_cavity",
    "random_sphere_pack",
    "sphere_array",
    "sphere_in_pipe",
    "sphere_radius",
    "square_duct",
    "stenosed_pipe",
    "tilted_pipe",
]
