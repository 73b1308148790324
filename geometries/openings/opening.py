"""One opening of a geometry: where fluid may enter or leave, with its plane, size and nodes.

An :class:`Opening` is the data a boundary condition needs and nothing more: the plane (centre
and outward unit normal), its size (area, equivalent diameter) and the fluid nodes that lie on
it, as voxel indices of the geometry it belongs to. Lengths are in metres; when the geometry's
voxel size is unknown they are in voxels (one voxel edge = 1), with the geometry's origin.

The node set is the layer of fluid voxels whose centre lies within half a voxel of the plane
(``-h/2 < n·(x - centre) <= h/2``). Beyond it the lumen is closed: the voxels on the outward side
of the layer are solid (or outside the box, for a patch on a domain face), so every lattice link
that leaves a node of the set through the plane points into a non-fluid voxel. A velocity-inlet or
pressure-outlet kind replaces the bounce-back of exactly those links.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import GeometryError

__all__ = [
    "ARRAY_NAMES",
    "SOURCES",
    "Opening",
    "check_openings",
    "on_fluid",
    "openings_from_arrays",
    "openings_to_arrays",
]

#: How an opening was found: an open boundary loop of an STL surface, a flat end cap of a
#: closed STL surface, or a connected fluid patch on a face of the voxel box.
SOURCES = ("stl-loop", "stl-cap", "face-patch")


@dataclass(frozen=True, eq=False)
class Opening:
    """A planar opening: centre (m), outward unit normal, area (m²), nodes (voxel indices).

    Attributes
    ----------
    id : int
        Identifier, unique within a geometry (1 = the largest opening when detected).
    centre : tuple of float
        Centroid of the opening's polygon (or patch) in metres, in the geometry's frame (voxel
        ``i`` has its centre at ``origin + (i + 0.5) * voxel_size``).
    normal : tuple of float
        Unit normal pointing out of the fluid (away from the lumen).
    area : float
        Area of the opening in m² (in 2D: its length in m).
    diameter : float
        Equivalent diameter in metres, ``2 sqrt(area / π)`` (in 2D: the length).
    nodes : np.ndarray
        int64, shape (n, ndim): voxel indices of the fluid nodes on the opening plane.
    source : str
        One of :data:`SOURCES`.
    """

    id: int
    centre: tuple[float, ...]
    normal: tuple[float, ...]
    area: float
    diameter: float
    nodes: np.ndarray
    source: str

    def __post_init__(self) -> None:
        centre = _vector(self.centre, "centre")
        normal = _vector(self.normal, "normal")
        if len(normal) != len(centre):
            raise GeometryError(
                f"Opening {self.id}: centre has {len(centre)} and normal {len(normal)} entries."
            )
        length = float(np.linalg.norm(normal))
        if not length > 0:
            raise GeometryError(f"Opening {self.id}: the normal {self.normal} has zero length.")
        nodes = np.asarray(self.nodes)
        if nodes.size == 0:
            nodes = nodes.reshape(0, len(centre))
        if nodes.ndim != 2 or nodes.shape[1] != len(centre) or nodes.dtype.kind not in "iu":
            raise GeometryError(
                f"Opening {self.id}: nodes must be integer voxel indices of shape (n, "
                f"{len(centre)}), got {nodes.dtype} {nodes.shape}."
            )
        if self.source not in SOURCES:
            raise GeometryError(f"Opening source must be one of {SOURCES}, got {self.source!r}.")
        for value, what in ((self.area, "area"), (self.diameter, "diameter")):
            if not np.isfinite(value) or value < 0:
                raise GeometryError(f"Opening {self.id}: {what} must be ≥ 0, got {value!r}.")
        # Frozen dataclass: normalised copies are set once here.
        object.__setattr__(self, "id", int(self.id))
        object.__setattr__(self, "centre", centre)
        object.__setattr__(self, "normal", tuple(v / length for v in normal))
        object.__setattr__(self, "area", float(self.area))
        object.__setattr__(self, "diameter", float(self.diameter))
        object.__setattr__(self, "nodes", nodes.astype(np.int64, copy=False))

    @property
    def n_nodes(self) -> int:
        """Number of fluid nodes on the opening plane."""
        return len(self.nodes)

    def describe(self) -> str:
        """Return one line: id, source, size (m, or voxels without a voxel size), normal, nodes."""
        normal = ", ".join(f"{v:+.3f}" for v in self.normal)
        return (
            f"opening {self.id} ({self.source}): diameter {self.diameter:.4g}, "
            f"area {self.area:.4g}, normal ({normal}), {self.n_nodes} nodes"
        )


def openings_to_arrays(openings: Sequence[Opening]) -> dict[str, np.ndarray]:
    """Return the openings as plain arrays for ``.npz`` (empty dict when there are none)."""
    if not openings:
        return {}
    return {
        "opening_ids": np.array([o.id for o in openings], dtype=np.int64),
        "opening_centres": np.array([o.centre for o in openings], dtype=np.float64),
        "opening_normals": np.array([o.normal for o in openings], dtype=np.float64),
        "opening_areas": np.array([o.area for o in openings], dtype=np.float64),
        "opening_diameters": np.array([o.diameter for o in openings], dtype=np.float64),
        "opening_sources": np.array([o.source for o in openings], dtype=np.str_),
        "opening_counts": np.array([o.n_nodes for o in openings], dtype=np.int64),
        "opening_nodes": np.concatenate([o.nodes for o in openings]).astype(np.int64),
    }


#: The array names :func:`openings_to_arrays` writes.
ARRAY_NAMES = (
    "opening_ids",
    "opening_centres",
    "opening_normals",
    "opening_areas",
    "opening_diameters",
    "opening_sources",
    "opening_counts",
    "opening_nodes",
)


def openings_from_arrays(arrays: dict[str, np.ndarray], ndim: int) -> tuple[Opening, ...]:
    """Return the openings stored by :func:`openings_to_arrays` (none when absent)."""
    present = [n for n in ARRAY_NAMES if n in arrays]
    if not present:
        return ()
    if len(present) != len(ARRAY_NAMES):
        missing = sorted(set(ARRAY_NAMES) - set(present))
        raise GeometryError(
            f"The .npz archive holds incomplete openings (missing {missing}). "
            "Use a file written by VoxelGeometry.save."
        )
    ids = arrays["opening_ids"].reshape(-1)
    counts = arrays["opening_counts"].reshape(-1)
    try:
        nodes = arrays["opening_nodes"].reshape(-1, ndim)
        centres = arrays["opening_centres"].reshape(len(ids), ndim)
        normals = arrays["opening_normals"].reshape(len(ids), ndim)
    except ValueError as exc:
        raise GeometryError(
            f"The .npz archive holds openings of the wrong shape ({exc}). "
            "Use a file written by VoxelGeometry.save."
        ) from exc
    if len(counts) != len(ids) or counts.min(initial=0) < 0 or counts.sum() != len(nodes):
        raise GeometryError("The .npz archive holds inconsistent opening node counts.")
    starts = np.concatenate([[0], np.cumsum(counts)])
    return tuple(
        Opening(
            id=int(ids[k]),
            centre=tuple(centres[k]),
            normal=tuple(normals[k]),
            area=float(arrays["opening_areas"].reshape(-1)[k]),
            diameter=float(arrays["opening_diameters"].reshape(-1)[k]),
            nodes=nodes[starts[k] : starts[k + 1]].copy(),
            source=str(arrays["opening_sources"].reshape(-1)[k]),
        )
        for k in range(len(ids))
    )


def check_openings(openings: object, shape: tuple[int, ...]) -> tuple[Opening, ...]:
    """Return ``openings`` as a tuple validated against a grid of ``shape`` (voxels)."""
    items = tuple(openings)  # type: ignore[arg-type]
    ids = set()
    for opening in items:
        if not isinstance(opening, Opening):
            raise GeometryError(
                f"openings must hold Opening objects, got {type(opening).__name__}."
            )
        if len(opening.centre) != len(shape):
            raise GeometryError(
                f"Opening {opening.id} is {len(opening.centre)}D but the geometry is "
                f"{len(shape)}D."
            )
        if opening.n_nodes and (
            opening.nodes.min() < 0 or np.any(opening.nodes.max(axis=0) >= np.asarray(shape))
        ):
            raise GeometryError(
                f"Opening {opening.id} has nodes outside the grid {shape}; detect the openings "
                "again after changing the grid."
            )
        if opening.id in ids:
            raise GeometryError(f"Two openings share the id {opening.id}; ids must be unique.")
        ids.add(opening.id)
    return items


def on_fluid(openings: Sequence[Opening], solid: np.ndarray) -> tuple[Opening, ...]:
    """Return ``openings`` keeping only their nodes that are fluid in ``solid`` (same grid).

    Openings left without a node are dropped; ids, planes and areas are kept.
    """
    kept = []
    for opening in openings:
        nodes = opening.nodes[~solid[tuple(opening.nodes.T)]]
        if len(nodes) == len(opening.nodes):
            kept.append(opening)
        elif len(nodes):
            kept.append(dataclasses.replace(opening, nodes=nodes))
    return tuple(kept)


def _vector(values: object, what: str) -> tuple[float, ...]:
    """Return ``values`` as a tuple of 2 or 3 finite floats."""
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if len(arr) not in (2, 3) or not np.all(np.isfinite(arr)):
        raise GeometryError(f"Opening {what} must be 2 or 3 finite numbers, got {values!r}.")
    return tuple(float(v) for v in arr)
