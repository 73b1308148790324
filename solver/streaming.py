"""Pull-streaming tables on the tiled layout, built once per geometry (NumPy reference).

For every fluid node and direction ``i`` the stored post-collision population ``f_i`` at node
``x - c_i`` is pulled to ``x``. When ``x - c_i`` is solid, or outside a non-periodic domain face,
halfway bounce-back pulls ``f_opp(i)`` from the node itself instead (the stored values are
post-collision, so this is the standard link-wise bounce-back with the wall half a node out).

Indices address one copy of the state viewed flat: ``(tile * q + i) * a**d + node``, i.e. the
layout ``f[copy][tile][i][node_in_tile]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .lattice import Lattice
from .tiling import Tiling

__all__ = ["PullTable", "build_pull_table", "pull_table_bytes"]


@dataclass(frozen=True)
class PullTable:
    """Gather/scatter indices of all fluid nodes, each (q, n_fluid).

    ``src`` is where the streamed population comes from, ``dst`` where the post-collision value
    is stored, ``bounce`` marks links that hit a wall; ``tile`` and ``node`` locate each fluid
    node (n_fluid,) in the tiled layout, in tile order.
    """

    src: np.ndarray = field(repr=False)
    dst: np.ndarray = field(repr=False)
    bounce: np.ndarray = field(repr=False)
    tile: np.ndarray = field(repr=False)
    node: np.ndarray = field(repr=False)

    @property
    def n_fluid(self) -> int:
        """Number of fluid nodes."""
        return int(self.tile.size)

    def take(self, order: np.ndarray) -> PullTable:
        """The same table with its fluid nodes (columns) in ``order``."""
        # C order keeps per-chunk arithmetic identical however the table is split (MPI ranks).
        def rows(a: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(a[:, order])

        return PullTable(src=rows(self.src), dst=rows(self.dst), bounce=rows(self.bounce),
                         tile=self.tile[order], node=self.node[order])


def _index_dtype(size: int) -> type:
    return np.int32 if size < np.iinfo(np.int32).max else np.int64


def build_pull_table(tiling: Tiling, lattice: Lattice, periodic: tuple[bool, ...],
                     owned: np.ndarray | None = None) -> PullTable:
    """Source/destination indices for fused pull stream-collide with halfway bounce-back.

    ``owned`` (bool, (n_tiles,)) limits the table to the fluid nodes of those tiles; the other
    tiles are read-only sources (the halo of one rank of a distributed run).
    """
    q, n_node = lattice.q, tiling.nodes_per_tile
    shape = np.array(tiling.shape)
    fluid = ~tiling.solid if owned is None else ~tiling.solid & owned[:, None]
    tile, node = np.nonzero(fluid)
    coords = tiling.node_coordinates()[tile, node]
    solid_grid = tiling.scatter(tiling.solid[..., None], fill=True)[..., 0]
    idx_t = _index_dtype(tiling.n_tiles * q * n_node)
    src = np.empty((q, tile.size), dtype=idx_t)
    dst = np.empty_like(src)
    bounce = np.empty((q, tile.size), dtype=bool)
    own = tile.astype(np.int64) * q
    for i in range(q):
        source = coords - lattice.c[i]
        outside = np.zeros(tile.size, dtype=bool)
        for ax, is_periodic in enumerate(periodic):
            if is_periodic:
                source[:, ax] %= shape[ax]
            else:
                outside |= (source[:, ax] < 0) | (source[:, ax] >= shape[ax])
        safe = np.where(outside[:, None], coords, source)
        hit = outside | solid_grid[tuple(safe.T)]
        src_tile, src_node = tiling.locate(safe)
        pulled = (src_tile.astype(np.int64) * q + i) * n_node + src_node
        bounced = (own + lattice.opposite[i]) * n_node + node
        src[i] = np.where(hit, bounced, pulled)
        dst[i] = (own + i) * n_node + node
        bounce[i] = hit
    return PullTable(src=src, dst=dst, bounce=bounce, tile=tile, node=node)


def pull_table_bytes(n_fluid: int, q: int, n_tiles: int, nodes_per_tile: int) -> int:
    """Bytes of the NumPy backend's pull table: src/dst indices, bounce mask, tile/node ids."""
    index_bytes = 4 if n_tiles * q * nodes_per_tile < np.iinfo(np.int32).max else 8
    return n_fluid * (q * (2 * index_bytes + 1) + 2 * 8)
