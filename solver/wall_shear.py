"""Wall shear stress on the fluid nodes next to a wall, from the non-equilibrium stress.

At each wall node (a fluid node with a solid neighbour along a lattice direction) the streamed
populations ``g_i`` are gathered from the stored post-collision state exactly as the next pull
step reads them (halfway bounce-back where ``x - c_i`` is not fluid). Their non-equilibrium
momentum flux ``Pi_ab = sum_i c_ia c_ib (g_i - g_i^eq)`` gives the viscous stress
``sigma = -(1 - omega/2) Pi`` (``omega = 1/tau`` from the kinematic viscosity, the symmetric
relaxation rate of BGK/TRT and the shear rate of MRT; with a Smagorinsky model the node's own
relaxation time, so the eddy stress counts): a local second-order quantity, no
finite differences across the staircase. The wall normal is the gradient of the smoothed solid
indicator (``scipy.ndimage.gaussian_filter``, sigma one voxel), pointing into the fluid; the
shear stress is the tangential part of the traction ``sigma n``. Values are at the node, half a
voxel from the halfway wall (in a channel of width ``H`` they differ from the wall's by ``1/H``
relative). Lattice units (``rho0 c^2``); :meth:`solver.units.UnitSystem.stress_to_si` gives Pa.
Only the wall nodes' ``q`` populations leave the device.

The wall nodes are found in slabs of voxel rows along axis 0 (:data:`SLAB_BYTES`), each slab's
solid scattered from its own tiles with a halo of :data:`HALO` rows on cut faces (the Gaussian's
radius 4 and the central difference's 1): the result equals the whole grid's bit for bit and in
the same order, the grid's own faces keep ``mode="nearest"`` and the one-sided differences, and
sources wrapped round a periodic axis read the rows across the seam. Host memory is a slab plus
the wall shell, not float64 arrays of the whole box.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import ndimage

from .collision import equilibrium, moments
from .regularized import local_tau

__all__ = ["WallNodes", "wall_nodes", "wall_shear_stress", "wall_shear_vector"]


@dataclass(frozen=True, eq=False)
class WallNodes:
    """The wall nodes of a geometry: voxel indices (n, d), unit normals into the fluid (n, d),
    and the flat (tile, direction, node) gather of their streamed populations (q, n) each."""

    voxels: np.ndarray
    normals: np.ndarray
    tile: np.ndarray
    direction: np.ndarray
    node: np.ndarray


#: Host bytes of float64 temporaries a slab of :func:`wall_nodes` may hold (its solid rows as
#: float64 and their Gaussian along the slab axis, 16 bytes a voxel): a 1000³ vessel image's
#: wall nodes then need ~0.35 GB (20 rows with the halo) besides the wall shell, not the tens of
#: GB of whole-grid arrays (measured 66 bytes a voxel of the box at 256³), on rank 0 under MPI
#: and in the app alike.
SLAB_BYTES = 64 * 2**20
#: Halo rows on a slab's cut faces: the Gaussian's radius (sigma 1, scipy's truncate 4.0) plus
#: the central difference's one row, so that every output equals the whole grid's bit for bit.
HALO = 5


def wall_nodes(problem: Any, slab_rows: int | None = None) -> WallNodes:
    """Wall nodes, normals and gather tables of ``problem`` (host, built once per geometry),
    computed in slabs of ``slab_rows`` voxel rows along axis 0 (default: from
    :data:`SLAB_BYTES`), each exactly as on the whole grid (same values, same order)."""
    tiling = problem.tiling
    n0 = tiling.shape[0]
    if slab_rows is None:
        row = int(np.prod(tiling.shape[1:]))
        # At least 2 HALO rows a slab, so the halo's repeated Gaussian stays under twice the work.
        slab_rows = max(2 * HALO, SLAB_BYTES // (16 * row) - 2 * HALO)
    if slab_rows < 1:
        raise ValueError(f"slab_rows must be a positive number of voxel rows, got {slab_rows}.")
    rows = _SolidRows(tiling)
    parts = [_slab_walls(problem, rows, r0, min(n0, r0 + slab_rows))
             for r0 in range(0, n0, slab_rows)]
    return WallNodes(*(np.concatenate([p[k] for p in parts], axis=0 if k < 2 else 1)
                       for k in range(5)))


class _SolidRows:
    """Rows ``[lo, hi)`` along axis 0 of the tiling's solid grid (outside the tiles solid), from
    the tiles of the layers covering them alone (:meth:`solver.tiling.Tiling.scatter_slab`)."""

    def __init__(self, tiling: Any) -> None:
        self.tiling = tiling
        self.order = np.argsort(tiling.tiles[:, 0], kind="stable")
        self.layer = tiling.tiles[self.order, 0]

    def __call__(self, lo: int, hi: int) -> np.ndarray:
        t, a, off = self.tiling, self.tiling.a, self.tiling.offset[0]
        first, end = (lo + off) // a, (hi - 1 + off) // a + 1
        pick = self.order[np.searchsorted(self.layer, first):np.searchsorted(self.layer, end)]
        slab = t.scatter_slab(t.solid[pick][..., None], t.tiles[pick], 0, first, end,
                              fill=True)[..., 0]
        base = t.slab_cells(0, first, end)[0]
        return slab[lo - base:hi - base]


def _slab_walls(problem: Any, rows: _SolidRows, r0: int, r1: int) -> tuple[np.ndarray, ...]:
    """The five :class:`WallNodes` arrays of the wall nodes in rows ``[r0, r1)`` along axis 0."""
    tiling, lat = problem.tiling, problem.lattice
    shape = np.asarray(tiling.shape)
    n0 = int(shape[0])
    e0, e1 = max(0, r0 - HALO), min(n0, r1 + HALO)  # the grid's own faces are not cut
    solid = rows(e0, e1)  # rows [e0, e1)
    # Candidates: fluid voxels with a solid voxel among their 3^d neighbours (a superset of the
    # lattice's wall links, and a thin shell: memory scales with the wall, not the volume).
    d0, d1 = max(0, r0 - 1) - e0, min(n0, r1 + 1) - e0
    near = ndimage.binary_dilation(solid[d0:d1], np.ones((3,) * solid.ndim, dtype=bool))
    near = near[r0 - e0 - d0:r1 - e0 - d0] & ~solid[r0 - e0:r1 - e0]
    for opening in getattr(problem, "openings", ()):  # the openings' planes are no wall
        nodes = opening.nodes[(opening.nodes[:, 0] >= r0) & (opening.nodes[:, 0] < r1)]
        near[tuple((nodes - np.eye(1, nodes.shape[1], dtype=nodes.dtype) * r0).T)] = False
    fluid = np.argwhere(near)
    fluid[:, 0] += r0
    c = lat.c.astype(np.int64)
    src = fluid[None, :, :] - c[:, None, :]  # (q, n, d)
    outside = np.zeros(src.shape[:2], dtype=bool)
    for ax, periodic in enumerate(problem.periodic):
        if periodic:
            src[..., ax] %= shape[ax]
        else:
            outside |= (src[..., ax] < 0) | (src[..., ax] >= shape[ax])
    safe = np.where(outside[..., None], 0, src)
    hit = outside | _solid_at(rows, solid, e0, safe)
    is_wall = hit.any(axis=0)
    voxels = fluid[is_wall]
    hit, safe = hit[:, is_wall], safe[:, is_wall]
    grad = _smooth_gradient(solid, voxels - np.eye(1, voxels.shape[1], dtype=np.int64) * e0)
    length = np.linalg.norm(grad, axis=1, keepdims=True)
    normals = -grad / np.where(length > 0, length, 1.0)
    own_tile, own_node = tiling.locate(voxels)
    src_tile, src_node = tiling.locate(safe)
    q = lat.q
    dirs = np.repeat(np.arange(q)[:, None], len(voxels), axis=1)
    opp = np.asarray(lat.opposite)[:, None]
    tile = np.where(hit, own_tile[None, :], src_tile)
    direction = np.where(hit, np.broadcast_to(opp, hit.shape), dirs)
    node = np.where(hit, own_node[None, :], src_node)
    return voxels, normals, tile, direction, node


def _solid_at(rows: _SolidRows, solid: np.ndarray, e0: int, at: np.ndarray) -> np.ndarray:
    """Solid flags at grid voxels ``at`` (..., d), from the slab ``solid`` (its first row the
    grid's ``e0``) and, for lattice sources wrapped round a periodic axis 0, those rows."""
    row = at[..., 0]
    inside = (row >= e0) & (row < e0 + len(solid))
    local = np.where(inside[..., None], at, 0)
    local[..., 0] -= np.where(inside, e0, 0)
    flags = solid[tuple(np.moveaxis(local, -1, 0))] & inside
    if not inside.all():  # a few rows across the periodic seam: fetch each once
        for r in np.unique(row[~inside]):
            here = row == r
            flags[here] = rows(int(r), int(r) + 1)[0][tuple(np.moveaxis(at[here][:, 1:], -1, 0))]
    return flags


def _smooth_gradient(solid: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Gradient (n, d) at the slab's voxels ``at`` (n, d) of the solid indicator smoothed as on
    the whole grid: ``gaussian_filter(sigma 1, mode="nearest")`` then :func:`numpy.gradient`
    (central differences, one-sided at the slab's ends: the grid's own faces, as the halo keeps
    the outputs' rows 5 from a cut). The same operations in the same order, so bit-identical."""
    smooth = solid.astype(np.float64)
    lo, hi = max(0, int(at[:, 0].min(initial=1)) - 1), int(at[:, 0].max(initial=0)) + 2
    smooth = ndimage.gaussian_filter1d(smooth, 1.0, axis=0, mode="nearest")
    smooth = smooth[lo:min(hi, len(smooth))]  # the rows the differences read, then the rest
    for axis in range(1, solid.ndim):
        smooth = ndimage.gaussian_filter1d(smooth, 1.0, axis=axis, mode="nearest")
    grad = np.empty(at.shape, dtype=np.float64)
    local = at.copy()
    local[:, 0] -= lo
    ends = (at[:, 0] == 0, at[:, 0] == len(solid) - 1)  # slab ends: rows in [lo, hi) only
    for axis in range(solid.ndim):
        n = len(solid) if axis == 0 else solid.shape[axis]
        idx = at[:, axis]
        first, last = (ends if axis == 0 else (idx == 0, idx == n - 1))
        up, down = local.copy(), local.copy()
        up[:, axis] += np.where(last, 0, 1)
        down[:, axis] -= np.where(first, 0, 1)
        diff = smooth[tuple(up.T)] - smooth[tuple(down.T)]
        grad[:, axis] = np.where(first | last, diff / 1.0, diff / 2.0)
    return grad


def wall_shear_stress(problem: Any, populations: Any, walls: WallNodes, xp: Any = np) -> Any:
    """Shear stress magnitude (n,) at the wall nodes, lattice units, from the backend's latest
    populations (n_tiles, q, a^d) in XYZ order (a backend array; the result stays there)."""
    tangential = wall_shear_vector(problem, populations, walls, xp)
    return xp.sqrt((tangential * tangential).sum(axis=1))


def wall_shear_vector(problem: Any, populations: Any, walls: WallNodes, xp: Any = np) -> Any:
    """Shear stress vector (n, d) at the wall nodes (the traction's tangential part), lattice
    units, as :func:`wall_shear_stress` (the result stays on the backend)."""
    lat = problem.lattice
    g = populations[xp.asarray(walls.tile), xp.asarray(walls.direction),
                    xp.asarray(walls.node)].astype(xp.float64)  # (q, n)
    rho, u = moments(g, lat, problem.force, problem.incompressible, xp)
    neq = g - equilibrium(rho, u, lat, problem.incompressible, xp)
    c = xp.asarray(lat.c, dtype=xp.float64)
    pi = xp.einsum("ia,ib,in->nab", c, c, neq)
    sigma = -(1.0 - 0.5 / _relaxation_time(problem, pi, rho, xp))[:, None, None] * pi
    n = xp.asarray(walls.normals)
    traction = xp.einsum("nab,nb->na", sigma, n)
    return traction - (traction * n).sum(axis=1, keepdims=True) * n


def _relaxation_time(problem: Any, pi: Any, rho: Any, xp: Any) -> Any:
    """Relaxation time per wall node (n,): the viscosity's, or with a Smagorinsky model the
    local one its collision used, so that the stress holds the eddy part too."""
    if problem.collision.takes_smagorinsky:
        rho_eff = None if problem.incompressible else rho
        return local_tau(problem.rates, xp.einsum("nab,nab->n", pi, pi), rho_eff, xp)
    return xp.full(pi.shape[0], 3.0 * problem.kinematic_viscosity + 0.5)
