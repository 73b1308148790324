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


def wall_nodes(problem: Any) -> WallNodes:
    """Wall nodes, normals and gather tables of ``problem`` (host, built once per geometry)."""
    tiling, lat = problem.tiling, problem.lattice
    solid = tiling.scatter(tiling.solid[..., None], fill=True)[..., 0]
    shape = np.asarray(solid.shape)
    # Candidates: fluid voxels with a solid voxel among their 3^d neighbours (a superset of the
    # lattice's wall links, and a thin shell: memory scales with the wall, not the volume).
    near = ndimage.binary_dilation(solid, np.ones((3,) * solid.ndim, dtype=bool)) & ~solid
    for opening in getattr(problem, "openings", ()):  # the openings' planes are no wall
        near[tuple(opening.nodes.T)] = False
    fluid = np.argwhere(near)
    c = lat.c.astype(np.int64)
    src = fluid[None, :, :] - c[:, None, :]  # (q, n, d)
    outside = np.zeros(src.shape[:2], dtype=bool)
    for ax, periodic in enumerate(problem.periodic):
        if periodic:
            src[..., ax] %= shape[ax]
        else:
            outside |= (src[..., ax] < 0) | (src[..., ax] >= shape[ax])
    safe = np.where(outside[..., None], 0, src)
    hit = outside | solid[tuple(np.moveaxis(safe, -1, 0))]
    is_wall = hit.any(axis=0)
    voxels = fluid[is_wall]
    hit, safe = hit[:, is_wall], safe[:, is_wall]
    smooth = ndimage.gaussian_filter(solid.astype(np.float64), 1.0, mode="nearest")
    grad = np.stack(np.gradient(smooth), axis=-1)[tuple(voxels.T)]
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
    return WallNodes(voxels, normals, tile, direction, node)


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
