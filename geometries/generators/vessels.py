"""Vessel surfaces for flow with inlets and outlets: a bifurcation cut open at its three ends.

Unlike the other generators this returns a triangle surface (``trimesh.Trimesh``, millimetres),
the kind of file a user uploads: load it with ``geometries.load(..., inside="fluid",
openings="loops", unit=1e-3)``. The lumen is the zero level of a smooth union of three capsules
(parent and two daughter branches), contoured by VTK's marching cubes (PyVista), decimated, and
cut by three planes perpendicular to the branches with trimesh, so the openings are exact planar
loops: one inlet (normal -x) and two outlets.
"""

from __future__ import annotations

import numpy as np
import trimesh

__all__ = ["bifurcation_surface"]


def bifurcation_surface(
    parent_radius: float = 1.0,
    length: float = 6.0,
    angle_deg: float = 35.0,
    spacing: float = 0.08,
    faces: int = 3000,
) -> trimesh.Trimesh:
    """Return a Y-shaped vessel (mm) open at its inlet (x = 0) and at its two outlets.

    The parent (radius ``parent_radius``) runs along +x for ``length``; each daughter has
    Murray's radius ``parent_radius / 2^(1/3)`` and leaves the junction at ``±angle_deg`` in the
    xy-plane for ``length``. ``spacing`` is the marching-cubes grid step (mm) and ``faces`` the
    triangle count after decimation (about 50 bytes each in binary STL).
    """
    import pyvista as pv

    r0 = parent_radius
    r1 = r0 / 2 ** (1 / 3)
    junction = np.array([length, 0.0, 0.0])
    a = np.radians(angle_deg)
    dirs = [np.array([np.cos(a), s * np.sin(a), 0.0]) for s in (1.0, -1.0)]
    segments = [(junction - [length + r0, 0, 0], junction, r0)]
    segments += [(junction, junction + (length + r1) * d, r1) for d in dirs]
    blend = 0.4 * r1
    # The smooth union swells the surface by up to blend·ln 3 where the three capsules meet.
    margin = blend * np.log(3.0) + 2 * spacing
    lo = np.min([np.minimum(p, q) - r for p, q, r in segments], axis=0) - margin
    hi = np.max([np.maximum(p, q) + r for p, q, r in segments], axis=0) + margin
    dims = np.ceil((hi - lo) / spacing).astype(int) + 1
    grid = pv.ImageData(dimensions=tuple(dims), spacing=(spacing,) * 3, origin=tuple(lo))
    points = np.asarray(grid.points)
    dist = np.stack([_capsule(points, p, q, r) for p, q, r in segments])
    grid.point_data["sdf"] = _smooth_min(dist, blend)
    surface = grid.contour([0.0], scalars="sdf").triangulate()
    surface = surface.decimate(1.0 - faces / surface.n_cells)
    # Cut off the rounded capsule ends (keeping the side the normal points away from): the
    # openings become exact planar loops.
    cuts = [([-1.0, 0.0, 0.0], junction - [length, 0, 0])]
    cuts += [(d, junction + length * d) for d in dirs]
    for normal, origin in cuts:
        surface = surface.clip(normal=normal, origin=origin, invert=True)
    surface = surface.triangulate().clean()
    tri = surface.faces.reshape(-1, 4)[:, 1:]
    mesh = trimesh.Trimesh(np.asarray(surface.points, dtype=np.float64), tri, process=True)
    mesh.fix_normals()
    return mesh


def _capsule(points: np.ndarray, p: np.ndarray, q: np.ndarray, radius: float) -> np.ndarray:
    """Return the signed distance (mm) from ``points`` to the capsule of axis p-q and ``radius``."""
    axis = q - p
    t = np.clip((points - p) @ axis / (axis @ axis), 0.0, 1.0)
    return np.linalg.norm(points - p - t[:, None] * axis, axis=1) - radius


def _smooth_min(dist: np.ndarray, k: float) -> np.ndarray:
    """Return a smooth minimum over the first axis (exponential blend of width ``k``, mm)."""
    m = dist.min(axis=0)
    return m - k * np.log(np.exp(-(dist - m) / k).sum(axis=0))
