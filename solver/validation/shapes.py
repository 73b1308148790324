"""Voxel shapes of the validation cases, with their effective (volume-equivalent) sizes.

Node ``i`` sits at coordinate ``i``; a node is solid when its centre is inside the shape. With
halfway bounce-back the wall lies between solid and fluid nodes, so the hydrodynamic size of a
voxelised body is best estimated from its voxel volume: the sphere of the same number of solid
voxels (diameter ``2 (3 N / 4 pi)^(1/3)``) or the pipe of the same fluid cross-section.
"""

from __future__ import annotations

import numpy as np

__all__ = ["sphere_cell", "pipe_with_sphere", "cylinder_2d", "equivalent_diameter"]


def _r2(shape, centre) -> np.ndarray:
    axes = [np.arange(n) - c for n, c in zip(shape, centre, strict=True)]
    grids = np.meshgrid(*axes, indexing="ij")
    return sum(g * g for g in grids)


def sphere_cell(n: int, fraction: float) -> np.ndarray:
    """Periodic n^3 cell with a centred sphere whose voxel fraction is closest to ``fraction``.

    The radius is chosen among the distinct node distances, so the solid fraction matches the
    target as closely as the voxel grid allows (shells of equal distance come whole).
    """
    r2 = _r2((n, n, n), ((n - 1) / 2,) * 3)
    values, counts = np.unique(r2, return_counts=True)
    cumulative = np.cumsum(counts) / r2.size
    threshold = values[np.argmin(np.abs(cumulative - fraction))]
    return r2 <= threshold


def equivalent_diameter(solid_count: int, ndim: int) -> float:
    """Diameter of the sphere (3D) or disc (2D) with ``solid_count`` unit voxels."""
    if ndim == 3:
        return 2.0 * (3.0 * solid_count / (4.0 * np.pi)) ** (1.0 / 3.0)
    return 2.0 * np.sqrt(solid_count / np.pi)


def pipe_with_sphere(length: int, width: int, pipe_d: float, sphere_d: float,
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Pipe along x (diameter ``pipe_d``) in a ``length x width x width`` box, sphere at centre.

    Returns (solid, labels) with label 1 = sphere, 2 = pipe wall.
    """
    centre = ((length - 1) / 2, (width - 1) / 2, (width - 1) / 2)
    sphere = _r2((length, width, width), centre) < (sphere_d / 2) ** 2
    radial = _r2((width, width), centre[1:]) >= (pipe_d / 2) ** 2
    wall = np.broadcast_to(radial, (length, width, width)).copy()
    labels = np.zeros(sphere.shape, dtype=np.int32)
    labels[wall] = 2
    labels[sphere] = 1
    return sphere | wall, labels


def cylinder_2d(nx: int, ny: int, x0: float, y0: float, diameter: float,
                ) -> tuple[np.ndarray, np.ndarray]:
    """Circular cylinder of ``diameter`` at (x0, y0) in an nx x ny box; label 1."""
    solid = _r2((nx, ny), (x0, y0)) < (diameter / 2) ** 2
    return solid, solid.astype(np.int32)
