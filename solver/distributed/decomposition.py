"""Slab decomposition of the non-empty tiles, balanced by fluid tiles, not by volume.

The tile grid is cut into ``n_ranks`` slabs of whole tile layers along one axis. Work per step
scales with the non-empty tiles a rank steps (every such tile moves ``2 q a**d`` values), so the
cuts follow the cumulative number of non-empty tiles per tile layer: cut ``k`` is placed at the
layer boundary whose cumulative count is nearest to ``k / n_ranks`` of the total. Each rank then
holds its fair share to within one tile layer (at most ``max(layer_counts)`` tiles off).

The default axis is the longest one of the tile grid (fewest faces to exchange per tile);
``"flow"`` picks the axis of the largest body-force component, an integer forces one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ConfigError
from ..tiling import Tiling

__all__ = ["AXIS_CHOICES", "SlabDecomposition", "layer_counts", "cut_layers", "resolve_axis",
           "grid_axis",
           "decompose", "rank_layers"]

#: Named axis choices; an integer 0 <= axis < d is accepted as well.
AXIS_CHOICES = ("longest", "flow")


@dataclass(frozen=True)
class SlabDecomposition:
    """Tile layers ``[bounds[r], bounds[r + 1])`` along ``axis`` belong to rank ``r``.

    ``owner`` is the rank of every non-empty tile, int32 (n_tiles,); ``counts`` the non-empty
    tiles per tile layer, int64 (n_layers,).
    """

    axis: int
    bounds: tuple[int, ...]
    owner: np.ndarray
    counts: np.ndarray

    @property
    def n_ranks(self) -> int:
        """Number of slabs."""
        return len(self.bounds) - 1

    def tiles_of(self, rank: int) -> np.ndarray:
        """Global indices of the tiles ``rank`` owns, ascending, int64."""
        return np.flatnonzero(self.owner == rank)

    def tiles_per_rank(self) -> np.ndarray:
        """Non-empty tiles owned by each rank, int64 (n_ranks,)."""
        return np.bincount(self.owner, minlength=self.n_ranks)

    def imbalance(self) -> float:
        """Largest rank load over the mean load (1 is perfect balance)."""
        per_rank = self.tiles_per_rank()
        return float(per_rank.max() / per_rank.mean())


def layer_counts(tiling: Tiling, axis: int) -> np.ndarray:
    """Non-empty tiles in every tile layer normal to ``axis``, int64 (n_layers,)."""
    return np.bincount(tiling.tiles[:, axis], minlength=tiling.tile_map.shape[axis])


def cut_layers(counts: np.ndarray, n_ranks: int) -> np.ndarray:
    """Layer bounds (n_ranks + 1,) cutting the cumulative tile count nearest to equal shares.

    Every slab keeps at least one layer; ties go to the lower cut. Raises ConfigError when
    there are fewer layers than ranks.
    """
    counts = np.asarray(counts, dtype=np.int64)
    n_layers = counts.size
    if n_ranks > n_layers:
        raise ConfigError(f"{n_ranks} ranks cannot split {n_layers} tile layers into slabs; run "
                          f"on at most {n_layers} ranks or choose a longer decomposition axis.")
    before = np.concatenate([[0], np.cumsum(counts)])  # tiles left of cut position b
    total = before[-1]
    bounds = [0]
    for k in range(1, n_ranks):
        lo, hi = bounds[-1] + 1, n_layers - (n_ranks - k)  # keep a layer for every slab
        candidates = np.arange(lo, hi + 1)
        miss = np.abs(before[candidates] * n_ranks - k * total)  # exact integer comparison
        bounds.append(int(candidates[np.argmin(miss)]))
    bounds.append(n_layers)
    return np.array(bounds, dtype=np.int64)


def resolve_axis(tiling: Tiling, axis: int | str, force: np.ndarray | None = None) -> int:
    """Decomposition axis from a name in AXIS_CHOICES or an integer."""
    return grid_axis(tiling.tile_map.shape, axis, force)


def grid_axis(grid: tuple[int, ...], axis: int | str, force: np.ndarray | None = None) -> int:
    """Decomposition axis of a tile grid of shape ``grid`` (tiles per axis), as
    :func:`resolve_axis` picks it (ranks that never hold the whole tiling)."""
    d = len(grid)
    if isinstance(axis, str):
        if axis not in AXIS_CHOICES:
            raise ConfigError(f"Unknown decomposition axis {axis!r}; use one of {AXIS_CHOICES} "
                              f"or an integer in [0, {d}).")
        if axis == "flow" and force is not None and np.any(np.asarray(force) != 0):
            return int(np.argmax(np.abs(np.asarray(force)[:d])))
        return int(max(range(d), key=lambda ax: (grid[ax], ax)))  # ties: the slowest axis
    if not 0 <= int(axis) < d:
        raise ConfigError(f"Decomposition axis {axis} does not exist in {d}D; use 0..{d - 1}.")
    return int(axis)


def decompose(tiling: Tiling, n_ranks: int, axis: int | str = "longest",
              force: np.ndarray | None = None) -> SlabDecomposition:
    """Split the non-empty tiles of ``tiling`` into ``n_ranks`` fluid-balanced slabs."""
    if n_ranks < 1:
        raise ConfigError(f"Need at least one rank, got {n_ranks}.")
    ax = resolve_axis(tiling, axis, force)
    counts = layer_counts(tiling, ax)
    bounds = cut_layers(counts, n_ranks)
    owner = (np.searchsorted(bounds, tiling.tiles[:, ax], side="right") - 1).astype(np.int32)
    decomposition = SlabDecomposition(ax, tuple(int(b) for b in bounds), owner, counts)
    empty = np.flatnonzero(decomposition.tiles_per_rank() == 0)
    if empty.size:
        raise ConfigError(f"Rank(s) {empty.tolist()} would get no fluid tile: the fluid spans "
                          f"too few tile layers along axis {ax} for {n_ranks} ranks; use fewer "
                          "ranks or another decomposition axis.")
    return decomposition


def rank_layers(bounds: np.ndarray, rank: int, periodic: bool) -> list[tuple[int, int]]:
    """Tile-layer runs ``[first, end)`` a rank reads: its slab and one layer each side (the
    halo, wrapped when ``periodic``), merged and ascending."""
    n_layers, n_ranks = int(bounds[-1]), len(bounds) - 1
    lo, hi = int(bounds[rank]), int(bounds[rank + 1])
    layers = set(range(lo, hi))
    if n_ranks > 1:
        for layer in (lo - 1, hi):
            if periodic:
                layers.add(layer % n_layers)
            elif 0 <= layer < n_layers:
                layers.add(layer)
    ordered = sorted(layers)
    runs, first = [], ordered[0]
    for prev, nxt in zip(ordered, ordered[1:] + [None], strict=True):
        if nxt != prev + 1:
            runs.append((first, prev + 1))
            first = nxt
    return runs
