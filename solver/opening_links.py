"""The lattice links that cross an opening: what an inlet or outlet boundary kind replaces.

The solver's side of an opening (the geometry package finds the opening, its plane and nodes;
which links a boundary kind then replaces is the solver's concern, issue 28 item 6).

Lattice-free: the caller passes its velocity set as integer vectors. A link from fluid node ``x``
along ``c`` crosses the opening when ``x`` lies on the fluid side of the plane or on it
(``n·(x - centre) <= h/2``), its target ``x + c`` lies beyond (``n·(x + c - centre) > h/2``)
within the disk of the opening's nodes (their largest distance from the centre + one voxel),
and the target is not fluid (solid or outside the box). For a plane along a grid axis the
sources are exactly the opening's nodes; for an oblique plane a diagonal link may also leave
from a fluid node just behind the node layer (up to ``max |n·c| - 1/2`` voxels), which this
function includes, so that no link through the opening is left to bounce back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from geometries.errors import GeometryError

if TYPE_CHECKING:
    from geometries.openings import Opening
    from geometries.voxel import VoxelGeometry

__all__ = ["crossing_links"]

# As in geometries/openings/lumen.py: ties half-way between two voxel layers go to the outer layer.
_TIE = 1e-6


def crossing_links(
    geometry: VoxelGeometry, opening: Opening, velocities: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Return (source voxel indices (m, ndim) int64, direction index (m,) int64) of crossing links.

    ``velocities`` are the lattice's integer vectors, shape (Q, ndim). Links are listed once per
    (source node, direction); their targets are ``sources + velocities[directions]``.
    """
    c = np.asarray(velocities)
    if c.ndim != 2 or c.shape[1] != geometry.ndim or c.dtype.kind not in "iu":
        raise GeometryError(
            f"velocities must be integer vectors of shape (Q, {geometry.ndim}), got "
            f"{c.dtype} {c.shape}."
        )
    h = 1.0 if geometry.voxel_size is None else geometry.voxel_size
    normal = np.asarray(opening.normal)
    centre = (np.asarray(opening.centre) - np.asarray(geometry.origin)) / h - 0.5
    reach = float(np.abs(c @ normal).max(initial=0.0))
    disk = _rim(opening, centre, normal) + 1.0
    candidates = _slab_nodes(geometry, opening, centre, normal, reach, disk)
    if len(candidates) == 0:
        empty = np.zeros((0, geometry.ndim), dtype=np.int64)
        return empty, np.zeros(0, dtype=np.int64)
    targets = candidates[:, None, :] + c[None, :, :]
    rel = targets - centre
    d = rel @ normal
    rho = np.linalg.norm(rel - d[..., None] * normal, axis=-1)
    shape = np.asarray(geometry.shape)
    inside = np.all((targets >= 0) & (targets < shape), axis=-1)
    clipped = np.clip(targets, 0, shape - 1)
    fluid = inside & ~geometry.solid[tuple(np.moveaxis(clipped, -1, 0))]
    # The disk (the nodes' rim + one voxel) keeps the wall links of other vessels out.
    crossing = (d > 0.5 + _TIE) & ~fluid & (rho <= disk)
    node, direction = np.nonzero(crossing)
    return candidates[node], direction.astype(np.int64)


def _slab_nodes(
    geometry: VoxelGeometry,
    opening: Opening,
    centre: np.ndarray,
    normal: np.ndarray,
    reach: float,
    disk: float,
) -> np.ndarray:
    """Return fluid voxels with ``0.5 - reach < d <= 0.5`` near the opening (voxel indices)."""
    nodes = opening.nodes
    if len(nodes) == 0:
        return nodes
    margin = int(np.ceil(reach)) + 1
    lo = np.maximum(nodes.min(axis=0) - margin, 0)
    hi = np.minimum(nodes.max(axis=0) + margin + 1, geometry.shape)
    box = tuple(slice(int(a), int(b)) for a, b in zip(lo, hi, strict=True))
    grids = np.meshgrid(*(np.arange(s.start, s.stop) for s in box), indexing="ij")
    idx = np.stack(grids, axis=-1).reshape(-1, geometry.ndim)
    rel = idx - centre
    d = rel @ normal
    rho = np.linalg.norm(rel - d[:, None] * normal, axis=-1)
    near = (d > 0.5 + _TIE - reach) & (d <= 0.5 + _TIE)
    near &= rho <= disk
    near &= ~geometry.solid[box].reshape(-1)
    return idx[near].astype(np.int64)


def _rim(opening: Opening, centre: np.ndarray, normal: np.ndarray) -> float:
    """Return the largest in-plane distance (voxels) of the opening's nodes from its centre."""
    if opening.n_nodes == 0:
        return 0.0
    rel = opening.nodes - centre
    d = rel @ normal
    return float(np.linalg.norm(rel - d[:, None] * normal, axis=-1).max())
