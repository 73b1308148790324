"""Voxelising a vessel with openings: close the lumen at each opening plane, collect its nodes.

Before voxelisation every opening loop (:mod:`.surface`) gets a short collar: the loop is extruded
along its outward normal by :data:`COLLAR` voxels and closed by a flat lid, which makes the
surface watertight and lets the lumen reach just past the plane. After voxelisation, within the
collar (the loop's disk, radius + one voxel), the voxels whose centre lies more than half a voxel
beyond the plane (``n·(x - centre) > h/2``) become solid again: no fluid leaks past the opening,
and the box (which covers the collar) keeps at least one solid layer beyond it. The opening's
nodes are the fluid voxels with ``-h/2 < n·(x - centre) <= h/2`` inside the loop's disk (radius +
half a voxel); for an opening at an angle to the grid that digital plane is one or two voxels
thick along the grid axis closest to the normal.

Positions are in voxel index units here (voxel ``i`` centred at ``i``); openings are returned in
metres.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import GeometryError, GeometryWarning
from .opening import Opening
from .surface import Loop, cut_caps, find_loops

if TYPE_CHECKING:
    import trimesh

__all__ = ["COLLAR", "HOLE", "MODES", "Lumen", "open_lumen"]

#: Detection modes of ``load_stl(openings=...)``: none, loops if the surface is open else caps,
#: open boundary loops only, flat caps only.
MODES = ("none", "auto", "loops", "caps")
#: Length of the collar beyond each opening plane, in voxels.
COLLAR = 2.0
#: Boundary loops smaller than this fraction of the largest one are holes in the surface (export
#: defects), closed flat rather than taken as openings.
HOLE = 0.01
# A plane half-way between two voxel layers (a tube whose length is a whole number of voxels)
# would split its layer by round-off; shifting the bounds by far less than a voxel decides every
# such tie the same way (towards the outer layer).
_TIE = 1e-6


@dataclass(frozen=True)
class Lumen:
    """A vessel surface closed by collars at its openings (STL units) and the opening loops."""

    mesh: trimesh.Trimesh
    loops: tuple[Loop, ...]
    voxel: float

    def close(
        self, enclosed: np.ndarray, corner: np.ndarray, unit: float
    ) -> tuple[np.ndarray, tuple[Opening, ...]]:
        """Return (lumen mask closed at every opening plane, the openings in metres).

        ``enclosed`` is the voxelised lumen (True = inside) of :attr:`mesh` on a grid whose voxel
        0 has its lower corner at ``corner`` (STL units); ``unit`` = metres per STL unit.
        """
        lumen = enclosed.copy()
        frames = [self._frame(loop, corner, lumen.shape) for loop in self.loops]
        for (box, d, rho), loop in zip(frames, self.loops, strict=True):
            disk = rho <= loop.radius / self.voxel + 1.0
            beyond = (d > 0.5 + _TIE) & (d <= COLLAR + 1.0) & disk
            lumen[box] &= ~beyond
        order = sorted(range(len(self.loops)), key=lambda k: -self.loops[k].area)
        openings = []
        for number, k in enumerate(order, start=1):
            (box, d, rho), loop = frames[k], self.loops[k]
            disk = rho <= loop.radius / self.voxel + 0.5
            on_plane = (d > -0.5 + _TIE) & (d <= 0.5 + _TIE) & disk
            nodes = np.argwhere(lumen[box] & on_plane) + np.array([s.start for s in box])
            if len(nodes) == 0:
                warnings.warn(
                    f"Opening {number} has no fluid node at this resolution; use a finer "
                    "resolution (or a smaller voxel_size).",
                    GeometryWarning,
                    stacklevel=3,
                )
            area = loop.area * unit**2
            openings.append(
                Opening(
                    id=number,
                    centre=tuple(loop.centre * unit),
                    normal=tuple(loop.normal),
                    area=area,
                    diameter=2.0 * np.sqrt(area / np.pi),
                    nodes=nodes,
                    source=loop.source,
                )
            )
        return lumen, tuple(openings)

    def _frame(
        self, loop: Loop, corner: np.ndarray, shape: tuple[int, ...]
    ) -> tuple[tuple[slice, ...], np.ndarray, np.ndarray]:
        """Return (box around the collar, signed distance d, in-plane distance rho) in voxels."""
        h = self.voxel
        centre = (loop.centre - corner) / h - 0.5
        rim = (loop.points - corner) / h - 0.5
        # The box of the slab from one voxel inside the plane to the end of the collar.
        ends = np.concatenate([rim - loop.normal, rim + (COLLAR + 1.0) * loop.normal])
        lo = np.maximum(np.floor(ends.min(axis=0)).astype(int) - 2, 0)
        hi = np.minimum(np.ceil(ends.max(axis=0)).astype(int) + 3, shape)
        box = tuple(slice(int(a), int(max(a, b))) for a, b in zip(lo, hi, strict=True))
        grids = np.meshgrid(*(np.arange(s.start, s.stop) for s in box), indexing="ij")
        rel = np.stack(grids, axis=-1) - centre
        d = rel @ loop.normal
        rho = np.linalg.norm(rel - d[..., None] * loop.normal, axis=-1)
        return box, d, rho


def open_lumen(
    mesh: trimesh.Trimesh,
    mode: str,
    *,
    voxel: float,
    unit: float = 1.0,
    cap_points: Sequence[Sequence[float]] | None = None,
) -> Lumen:
    """Return the surface closed by a collar at each opening found by ``mode`` (see MODES).

    ``voxel`` is the voxel edge in STL units; ``cap_points`` (metres, needs ``mode`` "caps" or
    "auto" on a watertight surface) name the caps to open; ``unit`` = metres per STL unit.
    """
    if mode not in MODES or mode == "none":
        raise GeometryError(f"openings must be one of {MODES}, got {mode!r}.")
    if mode == "auto":
        mode = "caps" if mesh.is_watertight else "loops"
    if cap_points is not None and mode != "caps":
        raise GeometryError(
            "cap_points name flat caps of a watertight surface; this surface is open, so its "
            "openings are its boundary loops. Leave cap_points out, or use openings='caps'."
        )
    if mode == "caps":
        points = None if cap_points is None else np.asarray(cap_points, dtype=float) / unit
        opened, loops = cut_caps(mesh, points=points)
    else:
        # One consistent winding turns every boundary loop into a directed cycle.
        mesh.fix_normals(multibody=True)
        opened, loops = mesh, find_loops(mesh)
    if not loops:
        warnings.warn(
            f"No openings found ({mode}): the surface has no "
            f"{'flat cap' if mode == 'caps' else 'open boundary loop'}. Name caps by points "
            "(cap_points=, metres) or cut the vessel open with planes.",
            GeometryWarning,
            stacklevel=3,
        )
        return Lumen(mesh, (), voxel)
    largest = max(loop.area for loop in loops)
    holes = [loop for loop in loops if loop.area < HOLE * largest]
    loops = [loop for loop in loops if loop.area >= HOLE * largest]
    if holes:
        warnings.warn(
            f"{len(holes)} small holes in the surface (under {HOLE:.0%} of the largest opening's "
            "area) were closed flat; they are not openings. Repair the mesh if they should be.",
            GeometryWarning,
            stacklevel=3,
        )
    closed = _with_collars(opened, loops, holes, COLLAR * voxel)
    return Lumen(closed, tuple(loops), voxel)


def _with_collars(
    mesh: trimesh.Trimesh, loops: list[Loop], holes: list[Loop], depth: float
) -> trimesh.Trimesh:
    """Return ``mesh`` with each loop extruded by ``depth`` and closed by a lid; holes lidded."""
    import trimesh

    vertices = [np.asarray(mesh.vertices)]
    faces = [np.asarray(mesh.faces)]
    count = len(mesh.vertices)
    for hole in holes:
        vertices.append(hole.centre[None, :])
        ids = hole.vertex_ids
        faces.append(np.column_stack([ids, np.roll(ids, -1), np.full(len(ids), count)]))
        count += 1
    for loop in loops:
        ids = loop.vertex_ids
        m = len(ids)
        top = mesh.vertices[ids] + depth * loop.normal
        lid = loop.centre + depth * loop.normal
        vertices += [top, lid[None, :]]
        p, p_next = ids, np.roll(ids, -1)
        q = count + np.arange(m)
        q_next = np.roll(q, -1)
        c = np.full(m, count + m)
        faces += [
            np.column_stack([p, p_next, q_next]),
            np.column_stack([p, q_next, q]),
            np.column_stack([q, q_next, c]),
        ]
        count += m + 1
    return trimesh.Trimesh(np.concatenate(vertices), np.concatenate(faces), process=True)
