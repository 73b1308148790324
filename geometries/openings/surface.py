"""Openings of triangle surfaces: open boundary loops and flat end caps (STL units).

- **Open loops** (surfaces that are not watertight, e.g. a vessel cut open at its ends): the
  boundary edges (edges of one triangle only, found with trimesh) are walked into closed loops
  in the winding of their triangles (made consistent first with ``fix_normals``). Each loop is
  assumed to be a planar cut: its plane is the one of its vector area ``½ Σ pᵢ × pᵢ₊₁`` (exact
  for planar polygons, a least-squares-like fit otherwise, with a warning beyond 10 % of the
  diameter), its area is the polygon's area and its centre the polygon's area centroid. The
  normal is turned to point away from the wall triangles that meet the loop, i.e. out of the
  lumen.
- **Flat caps** (watertight surfaces, e.g. a vessel closed by planar caps): trimesh's facets
  (groups of adjacent coplanar triangles) that end the vessel (:func:`end_caps`): area between
  ``min_fraction`` and 4 times the mean lumen cross-section (volume / longest box edge: larger
  flat facets are duct walls); a disc (Euler characteristic 1: the annular step of a sudden
  expansion has a hole the lumen runs through); and a rim where the wall turns away at a sharp
  convex edge all around (at least :data:`_RIM_ANGLE` between the normals along
  :data:`_RIM_SHARE` of the rim's length: the vessel's axis crosses the cap, while the wall
  meets a flat patch of itself, e.g. a facet of a faceted cylinder or a flattened side, at a
  shallow angle along the axis). When points are given, the facet nearest to each point is
  taken instead. Each cap is cut out of the surface and then treated as an open loop.

All lengths here are in the STL's own units; :mod:`.lumen` converts to metres.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import GeometryError, GeometryWarning

if TYPE_CHECKING:
    import trimesh

__all__ = ["Loop", "cut_caps", "end_caps", "find_loops"]

logger = logging.getLogger(__name__)

# A loop whose points stray further than this fraction of its diameter from its plane is not a
# planar cut; it is still used, with a warning.
_PLANARITY = 0.1
# Facets larger than this multiple of the mean cross-section are walls, not caps.
_MAX_CAP = 4.0
# Facets smaller than this fraction of the cross-section are never taken as caps, even when a
# point names them (they are wall triangles).
_MIN_NAMED = 0.02
# A cap's rim: the wall leaves it at a convex edge of at least this angle between normals
# (degrees; a cut at right angles to the vessel gives 90, one tilted by 30 degrees 60 at least)
# along at least this share of the rim's length (a few odd triangles allowed). The sides of a
# faceted cylinder meet at 360/sections degrees (22.5 for 16), a flattened patch of a round
# wall at a few tens of degrees.
_RIM_ANGLE = 60.0
_RIM_SHARE = 0.9


@dataclass(frozen=True)
class Loop:
    """A closed boundary loop of a surface, fitted by a plane (STL units).

    ``vertex_ids`` index the surface's vertices in loop order and ``points`` are their
    coordinates, shape (m, 3); ``centre`` is the polygon's area centroid, ``normal`` the outward
    unit normal, ``area`` the polygon area and ``radius`` the largest distance of a loop point
    from ``centre`` within the plane.
    """

    vertex_ids: np.ndarray
    points: np.ndarray
    centre: np.ndarray
    normal: np.ndarray
    area: float
    radius: float
    source: str


def find_loops(mesh: trimesh.Trimesh, source: str = "stl-loop") -> list[Loop]:
    """Return the closed boundary loops of ``mesh`` fitted by planes, normals out of the lumen."""
    loops = []
    for ids in _boundary_cycles(mesh):
        loop = _fit(mesh, ids, source)
        if loop is not None:
            loops.append(loop)
    return loops


def _boundary_cycles(mesh: trimesh.Trimesh) -> list[np.ndarray]:
    """Return the vertex ids of each closed walk along the boundary edges, in walk order.

    Boundary edges are taken in the winding of their one triangle, so each hole is a directed
    cycle; a vertex where two holes touch (a pinch) is left by any unused edge, which splits the
    walk at the vertex instead of losing the loop. Chains that do not close (inconsistent
    winding, non-manifold edges) are skipped.
    """
    import trimesh

    single = trimesh.grouping.group_rows(mesh.edges_sorted, require_count=1)
    directed = np.asarray(mesh.edges)[single]
    outgoing: dict[int, list[int]] = {}
    for k, start in enumerate(directed[:, 0]):
        outgoing.setdefault(int(start), []).append(k)
    used = np.zeros(len(directed), dtype=bool)
    cycles = []
    for first in range(len(directed)):
        if used[first]:
            continue
        origin, walk, k = int(directed[first, 0]), [], first
        while True:
            used[k] = True
            walk.append(int(directed[k, 0]))
            end = int(directed[k, 1])
            if end == origin:
                cycles.append(np.array(walk))
                break
            free = [j for j in outgoing.get(end, ()) if not used[j]]
            if not free:
                logger.info("skipping a boundary chain of %d edges that does not close", len(walk))
                break
            k = free[0]
    return [c for c in cycles if len(c) >= 3]


def cut_caps(
    mesh: trimesh.Trimesh,
    *,
    points: Sequence[Sequence[float]] | None = None,
    min_fraction: float = 0.2,
) -> tuple[trimesh.Trimesh, list[Loop]]:
    """Return (surface without its flat caps, the caps as loops) of a watertight ``mesh``.

    ``points`` (STL units) name caps: the facet nearest to each point is taken; without points
    every facet between ``min_fraction`` and 4 × the mean cross-section is a cap.
    """
    import trimesh

    facets = mesh.facets
    if len(facets) == 0:
        return mesh, []
    areas = np.asarray(mesh.facets_area)
    section = abs(float(mesh.volume)) / float(mesh.extents.max())
    if points is None:
        # A cap is about as large as a cross-section; a flat wall of a duct is much larger.
        sized = (areas >= min_fraction * section) & (areas <= _MAX_CAP * section)
        chosen = np.flatnonzero(sized & end_caps(mesh))
    else:
        chosen = _nearest_facets(mesh, facets, areas >= _MIN_NAMED * section, points)
    if len(chosen) == 0:
        return mesh, []
    drop = np.zeros(len(mesh.faces), dtype=bool)
    for k in chosen:
        drop[facets[k]] = True
    # process=False keeps the vertex numbering, so loop ids index the original vertices.
    opened = trimesh.Trimesh(mesh.vertices, mesh.faces[~drop], process=False)
    return opened, find_loops(opened, source="stl-cap")


def end_caps(mesh: trimesh.Trimesh) -> np.ndarray:
    """Per facet of ``mesh``, whether it can end the vessel: a disc whose rim is a sharp convex
    edge all around (module docstring; bool, one per ``mesh.facets``)."""
    facets = mesh.facets
    label = np.full(len(mesh.faces), -1)
    for k, faces in enumerate(facets):
        label[faces] = k
    pairs = np.asarray(mesh.face_adjacency)
    edges = np.asarray(mesh.vertices)[np.asarray(mesh.face_adjacency_edges)]
    length = np.linalg.norm(edges[:, 0] - edges[:, 1], axis=1)
    sharp = (np.degrees(mesh.face_adjacency_angles) >= _RIM_ANGLE) & mesh.face_adjacency_convex
    rim = np.zeros(len(facets))
    good = np.zeros(len(facets))
    for side in (0, 1):  # an adjacency across a facet's rim counts for the facet on each side
        own, other = label[pairs[:, side]], label[pairs[:, 1 - side]]
        at_rim = (own >= 0) & (own != other)
        rim += np.bincount(own[at_rim], length[at_rim], minlength=len(facets))
        good += np.bincount(own[at_rim], (length * sharp)[at_rim], minlength=len(facets))
    ends = (good >= _RIM_SHARE * rim) & (rim > 0)
    for k in np.flatnonzero(ends):  # few facets have such a rim: test only those
        ends[k] = _is_disc(mesh, facets[k])
    return ends


def _is_disc(mesh: trimesh.Trimesh, faces: np.ndarray) -> bool:
    """Whether the triangles ``faces`` form a disc (V - E + F = 1; an annulus gives 0)."""
    tri = np.asarray(mesh.faces)[faces]
    edges = np.sort(tri[:, [0, 1, 1, 2, 2, 0]].reshape(-1, 2), axis=1)
    n_edges = len(np.unique(edges, axis=0))
    return len(np.unique(tri)) - n_edges + len(faces) == 1


def _nearest_facets(
    mesh: trimesh.Trimesh, facets: list, usable: np.ndarray, points: Sequence[Sequence[float]]
) -> np.ndarray:
    """Return the index of the usable facet nearest to each point (distance to its centroid)."""
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3 or not np.all(np.isfinite(pts)):
        raise GeometryError(
            f"cap_points must be a list of (x, y, z) points in metres, got {points!r}."
        )
    if not usable.any():
        raise GeometryError("The surface has no flat facet large enough to be a cap.")
    tri_area = mesh.area_faces
    centroids = np.array(
        [np.average(mesh.triangles_center[f], axis=0, weights=tri_area[f]) for f in facets]
    )
    dist = np.linalg.norm(centroids[None, :, :] - pts[:, None, :], axis=2)
    dist[:, ~usable] = np.inf
    return np.unique(dist.argmin(axis=1))


def _fit(mesh: trimesh.Trimesh, ids: np.ndarray, source: str) -> Loop | None:
    """Return the plane fit of the loop through vertices ``ids`` (None for a degenerate loop)."""
    pts = np.asarray(mesh.vertices[ids], dtype=np.float64)
    mean = pts.mean(axis=0)
    rel = pts - mean
    cross = np.cross(rel, np.roll(rel, -1, axis=0))
    vector_area = 0.5 * cross.sum(axis=0)
    area = float(np.linalg.norm(vector_area))
    if not area > 0:
        logger.info("skipping a boundary loop of %d points with zero area", len(ids))
        return None
    normal = vector_area / area
    # Area centroid of the fan of triangles (mean, pᵢ, pᵢ₊₁), signed areas about the normal.
    weights = 0.5 * cross @ normal
    centre = mean + (weights[:, None] * (rel + np.roll(rel, -1, axis=0))).sum(axis=0) / (
        3.0 * weights.sum()
    )
    # Vertices of the wall triangles at the loop lie on the lumen side of the plane.
    touching = np.isin(mesh.faces, ids).any(axis=1)
    wall = np.setdiff1d(np.unique(mesh.faces[touching]), ids)
    if len(wall) and float(((mesh.vertices[wall] - centre) @ normal).mean()) > 0:
        normal = -normal
    offsets = (pts - centre) @ normal
    in_plane = pts - centre - offsets[:, None] * normal
    radius = float(np.linalg.norm(in_plane, axis=1).max())
    diameter = 2.0 * np.sqrt(area / np.pi)
    if np.abs(offsets).max() > _PLANARITY * diameter:
        warnings.warn(
            f"An opening of diameter {diameter:.3g} (STL units) is not planar: its edge strays "
            f"{np.abs(offsets).max():.3g} from the best plane. The lumen is closed at that plane; "
            "cut the vessel with a plane for an exact opening.",
            GeometryWarning,
            stacklevel=4,
        )
    return Loop(ids, pts, centre, normal, area, radius, source)
