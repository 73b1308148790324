"""Triangle surfaces to voxel masks by ray parity.

One ray runs along the last axis through every column of voxel centres. A voxel centre is inside
the surface when the ray crosses the surface an odd number of times below it. The crossings are
found by rasterising every triangle's projection onto the plane of the first two axes, with the
same half-open ("top-left") rule a GPU rasteriser uses: a shared edge's intercept is computed from
its two end points in a fixed order, so a ray through an edge or a vertex is counted by exactly
the right number of triangles. The ray grid is also shifted by a tiny irrational jitter so that
grid-aligned meshes do not put rays exactly on edges.

For surfaces with holes the scan runs along all three axes and each voxel takes the majority
vote, which repairs the streaks a single direction leaves behind an opening.

All coordinates here are in voxel units: voxel ``i`` has its centre at ``i``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np

__all__ = ["voxelize_triangles"]

logger = logging.getLogger(__name__)

# A jitter far below voxel resolution but not a simple fraction, so that ray positions never
# coincide with vertices of meshes built on a regular grid.
_JITTER = (1.2345678e-6, 2.7182818e-6)
# Bounds the temporary arrays of one batch (entries, not bytes).
_BATCH = 2_000_000


def voxelize_triangles(
    triangles: np.ndarray, shape: tuple[int, ...], *, directions: int = 1
) -> np.ndarray:
    """Return the bool mask (shape, voxel units) of voxel centres inside closed triangles (T, 3, 3).

    ``directions=1`` casts rays along the last axis only (exact for watertight surfaces);
    ``directions=3`` casts along all three axes and takes the majority vote (for surfaces with
    holes).
    """
    triangles = np.asarray(triangles, dtype=np.float64)
    if triangles.ndim != 3 or triangles.shape[1:] != (3, 3):
        raise ValueError(f"triangles must have shape (T, 3, 3), got {triangles.shape}")
    if len(shape) != 3:
        raise ValueError(f"shape must have three entries, got {shape}")
    if directions not in (1, 3):
        raise ValueError(f"directions must be 1 or 3, got {directions}")
    if directions == 1:
        return _scan_axis(triangles, shape, axis=2)
    votes = np.zeros(shape, dtype=np.uint8)
    for axis in range(3):
        votes += _scan_axis(triangles, shape, axis=axis)
    return votes >= 2


def _scan_axis(triangles: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray:
    """Return the parity mask for rays along ``axis`` (voxel units)."""
    perm = [a for a in range(3) if a != axis] + [axis]
    tri = triangles[:, :, perm]
    tri[:, :, 0] += _JITTER[0]
    tri[:, :, 1] += _JITTER[1]
    nx, ny, nz = (int(shape[a]) for a in perm)
    toggles = np.zeros(nx * ny * (nz + 1), dtype=np.uint8)
    for keys in _crossing_keys(tri, nx, ny, nz):
        # Only the parity of each column's crossings below a voxel matters.
        uniq, counts = np.unique(keys, return_counts=True)
        toggles[uniq[counts & 1 == 1]] ^= 1
    parity = np.cumsum(toggles.reshape(nx, ny, nz + 1), axis=2, dtype=np.uint8)[:, :, :nz]
    # cumsum in uint8 wraps at 256, which keeps the parity.
    inside = (parity & 1).astype(bool)
    return inside.transpose(np.argsort(perm))


def _crossing_keys(tri: np.ndarray, nx: int, ny: int, nz: int) -> Iterator[np.ndarray]:
    """Yield flat toggle indices ``(i * ny + j) * (nz + 1) + k`` of all ray crossings."""
    order = np.argsort(tri[:, :, 1], axis=1, kind="stable")
    tri = np.take_along_axis(tri, order[:, :, None], axis=1)
    y0, y2 = tri[:, 0, 1], tri[:, 2, 1]
    jlo = np.clip(np.ceil(y0), 0, ny).astype(np.int64)
    jhi = np.clip(np.ceil(y2), 0, ny).astype(np.int64)
    nrows = np.maximum(jhi - jlo, 0)
    keep = nrows > 0
    tri, jlo, nrows = tri[keep], jlo[keep], nrows[keep]
    for sl in _batches(nrows):
        t, j = _expand(jlo[sl], nrows[sl])
        yield from _row_crossings(tri[sl], t, j, nx, ny, nz)


def _row_crossings(
    tri: np.ndarray, t: np.ndarray, j: np.ndarray, nx: int, ny: int, nz: int
) -> Iterator[np.ndarray]:
    """Yield toggle indices for the (triangle ``t``, row ``j``) pairs of one batch."""
    v0, v1, v2 = tri[:, 0], tri[:, 1], tri[:, 2]
    jf = j.astype(np.float64)
    x_long = _intercept(v0, v2, t, jf)
    upper = jf >= v1[t, 1]
    x_short = np.where(upper, _intercept(v1, v2, t, jf), _intercept(v0, v1, t, jf))
    ilo = np.clip(np.ceil(np.minimum(x_long, x_short)), 0, nx).astype(np.int64)
    ihi = np.clip(np.ceil(np.maximum(x_long, x_short)), 0, nx).astype(np.int64)
    ncols = np.maximum(ihi - ilo, 0)
    keep = ncols > 0
    t, j, ilo, ncols = t[keep], j[keep], ilo[keep], ncols[keep]
    normal = np.cross(v1 - v0, v2 - v0)
    zmin, zmax = tri[:, :, 2].min(axis=1), tri[:, :, 2].max(axis=1)
    for sl in _batches(ncols):
        r, i = _expand(ilo[sl], ncols[sl])
        tt, jj = t[sl][r], j[sl][r]
        n = normal[tt]
        # Plane through v0: n . (p - v0) = 0, solved for the ray coordinate.
        z = v0[tt, 2] - (n[:, 0] * (i - v0[tt, 0]) + n[:, 1] * (jj - v0[tt, 1])) / n[:, 2]
        z = np.clip(z, zmin[tt], zmax[tt])
        k = np.clip(np.floor(z).astype(np.int64) + 1, 0, nz)
        yield (i * ny + jj) * (nz + 1) + k


def _intercept(a: np.ndarray, b: np.ndarray, t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Return x where edge a-b (a below b) meets the row at ``y``; identical for shared edges."""
    ax, ay, bx, by = a[t, 0], a[t, 1], b[t, 0], b[t, 1]
    dy = by - ay
    slope = np.divide(bx - ax, dy, out=np.zeros_like(dy), where=dy != 0)
    return ax + (y - ay) * slope


def _expand(start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (owner index, value) for ranges ``start[o] .. start[o] + count[o] - 1``."""
    owner = np.repeat(np.arange(len(count)), count)
    first = np.cumsum(count) - count
    values = start[owner] + (np.arange(owner.size) - first[owner])
    return owner, values


def _batches(counts: np.ndarray) -> Iterator[slice]:
    """Yield slices of ``counts`` whose sums stay near the batch budget."""
    total = np.cumsum(counts)
    start = 0
    while start < len(counts):
        base = total[start - 1] if start else 0
        stop = int(np.searchsorted(total, base + _BATCH, side="right"))
        stop = max(stop, start + 1)
        yield slice(start, stop)
        start = stop
