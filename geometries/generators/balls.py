"""Stamping balls (spheres, discs) into a voxel grid, with or without periodic wrap.

Continuous coordinates are in voxels with the box spanning [0, n) along each axis: voxel ``i``
fills [i, i + 1) and has its centre at ``i + 0.5``. A voxel belongs to a ball when its centre
is within the radius (minimum-image distance when periodic).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["ball_region"]

Index = tuple[np.ndarray | slice, ...]


def ball_region(
    center: Sequence[float], radius: float, shape: Sequence[int], *, periodic: bool
) -> tuple[Index, np.ndarray]:
    """Return (index into the grid, bool mask of that block) for the voxels of one ball."""
    indices, squares = [], []
    for c, n in zip(center, shape, strict=True):
        idx, dist = _axis_range(float(c), float(radius), int(n), periodic)
        indices.append(idx)
        squares.append(dist * dist)
    total = squares[0]
    for sq in squares[1:]:
        total = np.add.outer(total, sq)
    return _as_index(indices), total <= radius * radius


def _axis_range(c: float, r: float, n: int, periodic: bool) -> tuple[np.ndarray, np.ndarray]:
    """Return grid indices along one axis and their signed distances to the ball centre."""
    lo = int(np.ceil(c - r - 0.5))
    hi = int(np.floor(c + r - 0.5))
    if periodic and hi - lo + 1 >= n:
        # The ball spans the whole period: every index once, at its minimum-image distance.
        idx = np.arange(n)
        return idx, (idx + 0.5 - c + n / 2) % n - n / 2
    idx = np.arange(lo, hi + 1)
    dist = idx + 0.5 - c
    if periodic:
        return idx % n, dist
    keep = (idx >= 0) & (idx < n)
    return idx[keep], dist[keep]


def _as_index(indices: list[np.ndarray]) -> Index:
    """Return basic slices when every range is contiguous (fast), else an open mesh."""
    if all(len(i) and i[-1] - i[0] + 1 == len(i) for i in indices):
        return tuple(slice(int(i[0]), int(i[-1]) + 1) for i in indices)
    return np.ix_(*indices)
