"""Straight round tubes with a narrowing or a widening, open at both ends: vessel benchmarks.

- :func:`stenosed_pipe`: a pipe with a smooth cosine-shaped axisymmetric stenosis (the shape of
  Varghese, Frankel & Fischer 2007, J. Fluid Mech. 582: 253-280, stenosis length 2 D).
- :func:`expanded_pipe`: a pipe of diameter d that widens suddenly to ``ratio`` d (diameter),
  the expansion of the FDA benchmark nozzle (throat 4 mm to 12 mm: diameter 1:3).
- :func:`tilted_pipe`: a straight pipe along any direction, its two end planes cut across the
  axis and carrying its openings (walls at an angle to the grid: a staircase).

The tube's axis is x (``flow_axis`` 0), centred in a square cross-section with one solid layer
around the widest part; a voxel is fluid when its centre lies within the local radius. Sizes are
in voxels (the throat diameter sets the resolution); the two ends are open and carry the
geometry's openings (:func:`geometries.openings.face_openings` on the x faces): the inlet at
x = 0 (normal -x) and the outlet at the last layer.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import GeometryError
from ..openings import Opening, face_openings
from ..voxel import VoxelGeometry
from .checks import check_positive, check_size

__all__ = ["stenosed_pipe", "expanded_pipe", "tilted_pipe"]


def _revolve(radius: np.ndarray, outer: float, name: str) -> VoxelGeometry:
    """The tube of local radius ``radius[i]`` (voxels) at x slice i, in a box that holds
    ``outer`` (the largest radius) plus one solid layer; openings on both x faces."""
    cross = int(math.ceil(2.0 * outer)) + 2
    check_size((len(radius), cross, cross))
    c = np.arange(cross) + 0.5 - cross / 2.0
    r2 = c[:, None] ** 2 + c[None, :] ** 2
    solid = r2[None, :, :] > (radius[:, None, None] ** 2)
    geometry = VoxelGeometry(solid, flow_axis=0, name=name)
    openings = face_openings(geometry, axes=(0,))
    if len(openings) != 2:
        raise GeometryError(f"{name}: expected two openings (the tube's ends), found "
                            f"{len(openings)}; use a larger diameter.")
    return VoxelGeometry(solid, flow_axis=0, name=name, openings=openings)


def stenosed_pipe(throat_diameter: float, area_reduction: float = 0.75,
                  upstream: float = 2.0, downstream: float = 8.0) -> VoxelGeometry:
    """A pipe of diameter D with a cosine stenosis of ``area_reduction`` (0.75: the throat's
    area is a quarter of the pipe's, D = 2 d) and length 2 D, ``upstream`` D of straight pipe
    before it and ``downstream`` D after it; ``throat_diameter`` d in voxels."""
    d = check_positive(throat_diameter, "throat_diameter", minimum=3.0)
    if not 0.0 < area_reduction < 1.0:
        raise GeometryError(f"area_reduction must lie between 0 and 1 (0.75 = 75 %), got "
                            f"{area_reduction!r}.")
    big = d / math.sqrt(1.0 - area_reduction)
    up = check_positive(upstream, "upstream", minimum=0.5)
    down = check_positive(downstream, "downstream", minimum=0.5)
    n = int(round((up + 2.0 + down) * big))
    x = np.arange(n) + 0.5
    centre = (up + 1.0) * big
    bump = np.where(np.abs(x - centre) < big, 0.5 * (1.0 + np.cos(math.pi * (x - centre) / big)),
                    0.0)
    radius = 0.5 * big - 0.5 * (big - d) * bump
    return _revolve(radius, 0.5 * big, f"stenosed pipe d={d:g}, {area_reduction:.0%} area")


def expanded_pipe(throat_diameter: float, ratio: float = 3.0, upstream: float = 2.0,
                  downstream: float = 40.0) -> VoxelGeometry:
    """A pipe of diameter d (``throat_diameter``, voxels), ``upstream`` d long, widening
    suddenly to ``ratio`` d (diameter ratio; area ratio ``ratio``²) for ``downstream`` d."""
    d = check_positive(throat_diameter, "throat_diameter", minimum=3.0)
    big = d * check_positive(ratio, "ratio", minimum=1.0)
    up = check_positive(upstream, "upstream", minimum=0.5)
    down = check_positive(downstream, "downstream", minimum=0.5)
    step = int(round(up * d))
    n = step + int(round(down * d))
    radius = np.where(np.arange(n) < step, 0.5 * d, 0.5 * big)
    return _revolve(radius, 0.5 * big, f"expanded pipe d={d:g}, 1:{ratio:g} diameter")


def tilted_pipe(radius: float, length: float, axis: tuple[float, float, float],
                name: str = "tilted pipe") -> VoxelGeometry:
    """A pipe of ``radius`` and ``length`` voxels along ``axis`` (any direction), centred in its
    box with 3 voxels around it, closed beyond its two end planes: opening 1 at the start
    (normal -axis), 2 at the end, each the fluid voxels within half a voxel of its plane. The
    pipe's middle is at ``shape / 2`` (voxel i's centre at i + 0.5)."""
    radius, length = check_positive(radius, "radius"), check_positive(length, "length")
    unit = np.asarray(axis, float)
    if not np.isfinite(unit).all() or not np.linalg.norm(unit):
        raise GeometryError(f"tilted_pipe needs a non-zero axis direction, got {axis}.")
    unit = unit / np.linalg.norm(unit)
    half = 0.5 * length
    shape = tuple(int(math.ceil(2 * e)) for e in np.abs(unit) * half + radius + 3)
    check_size(shape)
    centre = np.array(shape) / 2.0
    grids = np.stack(np.meshgrid(*(np.arange(n) + 0.5 for n in shape), indexing="ij"), -1)
    along = (grids - centre) @ unit
    across = np.linalg.norm(grids - centre - along[..., None] * unit, axis=-1)
    fluid = (across <= radius) & (np.abs(along) <= half + 0.5)
    openings = []
    for oid, sign in ((1, -1.0), (2, 1.0)):
        normal = sign * unit
        plane = centre + normal * half
        beyond = (grids - plane) @ normal
        fluid &= ~(beyond > 0.5)  # closed beyond the opening's plane
        nodes = np.argwhere(fluid & (beyond > -0.5) & (beyond <= 0.5))
        openings.append(Opening(oid, tuple(plane), tuple(normal), math.pi * radius**2,
                                2 * radius, nodes, "face-patch"))
    return VoxelGeometry(~fluid, openings=tuple(openings), name=name)
