"""Macroscopic fields from the tiled state, computed where the state lives.

The dashboard asks for a slice many times a second and the headless run checks for divergence
every chunk; moving all ``q`` populations to the host for that would cost more than the steps on
a GPU. These functions run on the backend's array module (``xp``): moments are reduced over the
populations on the device, and only a slice (or two scalars) crosses to the host. Arithmetic is
float64 whatever the storage precision, in chunks of tiles to bound the temporary memory. A cut
alone needs only the tiles it passes through (:func:`locate_cut`): a 256^2 slice of a 256^3 box
touches 1/64 of the tiles.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .collision import combine_rows
from .lattice import Lattice
from .tiling import Tiling

if TYPE_CHECKING:  # annotations only: the problem is built from fields' neighbours
    from .problem import Problem

__all__ = ["tile_moments", "slice_indices", "speed", "Cut", "locate_cut", "moments_bytes",
           "gather_bytes", "cut_bytes"]

#: Tiles per chunk of the float64 moment reduction (~4M nodes, ~600 MB temporaries for D3Q19).
TILE_CHUNK = 1 << 16


def tile_moments(f, lattice: Lattice, force, incompressible: bool, xp=np):
    """Density (T, N) and velocity (d, T, N), float64, from stored populations f (T, q, N).

    Stored populations are post-collision; Guo forcing makes the velocity at the collision
    instant ``(sum_i c_i f_i - F/2) / rho`` (``rho`` replaced by 1 for the incompressible model).
    """
    n_tiles, _, n_node = f.shape
    half_force = np.asarray(force, dtype=np.float64) * 0.5
    rho = xp.empty((n_tiles, n_node), dtype=xp.float64)
    u = xp.empty((lattice.d, n_tiles, n_node), dtype=xp.float64)
    signs = _unit_directions(lattice)
    for start in range(0, n_tiles, TILE_CHUNK):
        part = f[start:start + TILE_CHUNK].astype(xp.float64)
        here = slice(start, start + TILE_CHUNK)
        rho[here] = part.sum(axis=1)
        j = _momentum(part, lattice, signs, xp)  # (T, d, N)
        for a in range(lattice.d):  # Python floats: no host-to-device copy per call
            if half_force[a]:
                j[:, a] -= float(half_force[a])
        u[:, here] = (j if incompressible else j / rho[here][:, None, :]).transpose(1, 0, 2)
    return rho, u


def _unit_directions(lattice: Lattice) -> tuple[np.ndarray, np.ndarray] | None:
    """Per axis the directions of ``lattice`` whose velocity component is +1 and -1, (d, k)
    each; None where a component is another value or the counts differ."""
    if lattice.name not in _UNIT_DIRECTIONS:
        c, found = np.asarray(lattice.c), None
        plus = [np.flatnonzero(c[:, a] == 1) for a in range(c.shape[1])]
        minus = [np.flatnonzero(c[:, a] == -1) for a in range(c.shape[1])]
        if np.isin(c, (-1, 0, 1)).all() and len({len(i) for i in plus + minus}) == 1:
            found = (np.stack(plus), np.stack(minus))
        _UNIT_DIRECTIONS[lattice.name] = found
    return _UNIT_DIRECTIONS[lattice.name]


#: Lattice name -> its unit directions per axis (:func:`_unit_directions`).
_UNIT_DIRECTIONS: dict[str, tuple[np.ndarray, np.ndarray] | None] = {}


def _momentum(part, lattice: Lattice, signs, xp):
    """``sum_i c_i f_i`` (T, d, N) of float64 populations ``part`` (T, q, N).

    Fixed-order sums, not BLAS: the same node gives the same bits in any tile order. With
    unit speeds each axis sums its +1 and its -1 directions in one reduction each over a
    (T, k, N) gather whatever T is: 6 launches an axis, where a row-by-row sum took about 60
    in all and was most of a live view's cut and of a chunked health check on a GPU. One axis
    at a time, so the gathered copy is k/q of the populations' float64 copy (two of all axes
    at once raised the NumPy peak of a health check past its estimate, solver.memory).
    """
    if signs is None:
        return combine_rows(lattice.c.T, part.transpose(1, 0, 2), xp).transpose(1, 0, 2)
    plus, minus = _on(xp, lattice.name, signs)
    j = xp.empty((part.shape[0], lattice.d, part.shape[2]), dtype=part.dtype)
    for a in range(lattice.d):
        j[:, a] = part[:, plus[a]].sum(axis=1)
        j[:, a] -= part[:, minus[a]].sum(axis=1)
    return j


def _on(xp, name: str, signs: tuple[np.ndarray, np.ndarray]) -> tuple[Any, Any]:
    """``signs`` as ``xp`` arrays, copied to the current device once (not per chunk)."""
    if xp is np:
        return signs
    device = xp.cuda.Device().id if hasattr(xp, "cuda") else None
    key = (name, xp.__name__, device)
    if key not in _ON_DEVICE:
        _ON_DEVICE[key] = tuple(xp.asarray(s) for s in signs)
    return _ON_DEVICE[key]


#: (lattice name, array module, device) -> the unit directions as that module's arrays.
_ON_DEVICE: dict[tuple, tuple[Any, Any]] = {}


def slice_indices(tiling: Tiling, axis: int, index: int) -> np.ndarray:
    """Flat tile-node index of every node of a slice (2D: the whole field), -1 for solids."""
    shape = list(tiling.shape)
    if tiling.ndim == 3:
        grids = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
        coords = np.stack([np.take(g, index, axis=axis) for g in grids], axis=-1)
    else:
        coords = np.stack(np.meshgrid(*[np.arange(n) for n in shape], indexing="ij"), axis=-1)
    tile, node = tiling.locate(coords)
    flat = tile.astype(np.int64) * tiling.nodes_per_tile + node
    solid = np.where(tile >= 0, tiling.solid.reshape(-1)[np.maximum(flat, 0)], True)
    return np.where(solid, -1, flat)


def speed(u, xp=np):
    """Velocity magnitude (...) of a velocity array (d, ...)."""
    return xp.sqrt((u * u).sum(axis=0))


class Cut(NamedTuple):
    """Where the nodes of a cut (shape (n_a, n_b)) live in the tiled state.

    ``nodes``: flat tile-node index in the whole state; ``tiles``: the tiles the cut passes
    through (None: all of them); ``local``: flat index within ``f[tiles]``; ``solid``: host
    boolean mask of solid nodes (their indices are 0, a valid dummy). Index arrays are ``xp``.
    """

    nodes: Any
    tiles: Any
    local: Any
    solid: np.ndarray


def locate_cut(tiling: Tiling, axis: int, index: int, xp=np) -> Cut:
    """The :class:`Cut` normal to ``axis`` at ``index`` (3D) or of the whole field (2D)."""
    flat = slice_indices(tiling, axis, index)
    solid = flat < 0
    nodes = np.maximum(flat, 0)
    n = tiling.nodes_per_tile
    tiles = np.unique(nodes[~solid] // n) if (~solid).any() else np.zeros(1, dtype=np.int64)
    if tiles.size == tiling.n_tiles:
        return Cut(xp.asarray(nodes), None, xp.asarray(nodes), solid)
    local = np.where(solid, 0, np.searchsorted(tiles, nodes // n) * n + nodes % n)
    return Cut(xp.asarray(nodes), xp.asarray(tiles), xp.asarray(local), solid)


def moments_bytes(problem: Problem, chunk_tiles: int = TILE_CHUNK) -> int:
    """Bytes of the moment computation of a health check or slice (:func:`fields.tile_moments`
    and :meth:`Simulation.health`): a float64 copy of the populations of up to ``chunk_tiles``
    tiles, then density and velocity, their momentum and fluid-masked copies, all float64."""
    t, q, d = problem.tiling, problem.lattice.q, problem.lattice.d
    nodes = t.n_tiles * t.nodes_per_tile
    chunk = min(t.n_tiles, chunk_tiles) * t.nodes_per_tile
    return int(chunk * 8 * q + nodes * (8 + 16 * d))


def gather_bytes(problem: Problem, chunk_tiles: int = TILE_CHUNK) -> int:
    """Bytes of one axis's gathered unit directions and their sum in :func:`_momentum`, float64,
    for up to ``chunk_tiles`` tiles: a GPU pool keeps these blocks beside the moments' (on an
    H100 a 96³ box peaked 13 % above :func:`moments_bytes` without them), NumPy's peak does
    not hold them together with the rest (its estimate stays within 3 % without them)."""
    t = problem.tiling
    chunk = min(t.n_tiles, chunk_tiles) * t.nodes_per_tile
    signs = _unit_directions(problem.lattice)
    return 0 if signs is None else int(chunk * 8 * (signs[0].shape[1] + 1))


def cut_bytes(problem: Problem) -> int:
    """Bytes of the float64 density and velocity of the tiles one cut (a slice normal to an
    axis) can pass through: at most the tiles of one layer of the tile grid."""
    t, d = problem.tiling, problem.lattice.d
    grid = t.tile_map.shape
    layer = max(int(np.prod(grid)) // g for g in grid)
    return int(min(t.n_tiles, layer) * t.nodes_per_tile * 8 * (1 + d))
