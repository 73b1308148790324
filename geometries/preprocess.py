"""Preparing a geometry for a flow simulation: connectivity, buffers, cropping, coarsening.

Every function returns a new VoxelGeometry and keeps ``labels``, ``voxel_size`` and ``origin``
consistent (origin moves with cropping and buffers; voxel size scales on downsampling). ``axis``
defaults to the geometry's ``flow_axis``. Sizes are in voxels. Openings (voxel node sets) are
kept by steps that keep the grid and dropped, with a log message, by steps that change it.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Sequence
from typing import Literal

import numpy as np

from .errors import GeometryError
from .openings.opening import on_fluid
from .pores import label_pores
from .voxel import VoxelGeometry

__all__ = ["add_buffer", "crop", "downsample", "keep_connected", "majority_mask", "mirror"]

logger = logging.getLogger(__name__)

_FILLS = ("fluid", "edge")
#: keep_connected compares the labels with each joining component up to this many of them,
#: and looks them up in a table beyond.
FEW_COMPONENTS = 4


def keep_connected(geom: VoxelGeometry, axis: int | None = None,
                   links: np.ndarray | None = None,
                   components: np.ndarray | None = None) -> tuple[VoxelGeometry, int]:
    """Return (geometry with only fluid linking inlet and outlet faces, dropped fluid voxels).

    Fluid voxels connect along ``links``: the lattice's velocity set (e.g.
    ``get_lattice("D3Q19").c``, faces and edges) or a structuring element; None joins faces
    only (see :func:`geometries.pores.connectivity`). The inlet and outlet are the first and
    last layer along ``axis``. Dropped fluid becomes solid (label 0), and leaves the openings'
    node sets. ``components``: :func:`geometries.pores.pore_labels` of ``geom`` with ``links``
    when made already (one labelling serves every axis).
    """
    a = _axis(geom, axis)
    components, inlet, outlet = label_pores(geom, a, links, components)
    through = np.intersect1d(inlet, outlet)
    if through.size == 0:
        raise GeometryError(
            f"No fluid path connects the inlet and outlet faces along axis {a}. Check flow_axis, "
            "use a geometry with open pores, or add_buffer() layers before and after."
        )
    if through.size <= FEW_COMPONENTS:
        # Usually one component joins the faces: a comparison per component reads the labels
        # once each, several times faster than a lookup (5 s of a 1000³ sample's set-up).
        keep = components == through[0]
        for label in through[1:]:
            keep |= components == label
    else:
        through_id = np.zeros(int(components.max()) + 1, dtype=bool)  # a lookup, not np.isin:
        through_id[through] = True  # several times faster on a 400³ label image
        keep = through_id[components]
    dropped = geom.n_fluid - int(np.count_nonzero(keep))
    logger.info("keep_connected: dropped %d isolated fluid voxels", dropped)
    openings = on_fluid(geom.openings, ~keep)
    return dataclasses.replace(geom, solid=~keep, openings=openings), dropped


def add_buffer(
    geom: VoxelGeometry,
    before: int = 0,
    after: int = 0,
    axis: int | None = None,
    fill: Literal["fluid", "edge"] = "fluid",
) -> VoxelGeometry:
    """Return the geometry with ``before``/``after`` layers added along ``axis`` (voxels).

    ``fill="fluid"`` adds open fluid layers; ``"edge"`` repeats the first/last layer's solid
    (keeping duct or pipe walls, but no objects: labels are 0 there).
    """
    a = _axis(geom, axis)
    lo, hi = _count(before, "before"), _count(after, "after")
    if fill not in _FILLS:
        raise GeometryError(f"fill must be one of {_FILLS}, got {fill!r}.")
    width = [(0, 0)] * geom.ndim
    width[a] = (lo, hi)
    if fill == "fluid":
        solid = np.pad(geom.solid, width, constant_values=False)
    else:
        solid = np.pad(geom.solid, width, mode="edge")
    labels = None if geom.labels is None else np.pad(geom.labels, width, constant_values=0)
    return dataclasses.replace(
        geom, solid=solid, labels=labels, origin=_shift(geom, a, -lo), openings=_drop(geom)
    )


def crop(geom: VoxelGeometry, lo: Sequence[int], hi: Sequence[int]) -> VoxelGeometry:
    """Return the box ``lo[i] <= index < hi[i]`` (voxels, hi exclusive) of the geometry."""
    start, stop = _bounds(geom, lo, "lo"), _bounds(geom, hi, "hi")
    if any(s >= e for s, e in zip(start, stop, strict=True)):
        raise GeometryError(f"crop needs lo < hi on every axis, got lo={lo}, hi={hi}.")
    box = tuple(slice(s, e) for s, e in zip(start, stop, strict=True))
    origin = geom.origin
    if geom.voxel_size is not None:
        origin = tuple(o + s * geom.voxel_size for o, s in zip(origin, start, strict=True))
    labels = None if geom.labels is None else geom.labels[box]
    return dataclasses.replace(
        geom, solid=geom.solid[box], labels=labels, origin=origin, openings=_drop(geom)
    )


def downsample(geom: VoxelGeometry, factor: int) -> VoxelGeometry:
    """Return the geometry coarsened by ``factor`` per axis by majority vote (ties are fluid).

    A trailing remainder that does not fill a whole block is cut off. A coarse solid voxel takes
    the largest label id of its block.
    """
    if isinstance(factor, bool) or not isinstance(factor, int | np.integer) or factor < 1:
        raise GeometryError(f"factor must be an integer ≥ 1, got {factor!r}.")
    f = int(factor)
    coarse = tuple(n // f for n in geom.shape)
    if min(coarse) < 1:
        raise GeometryError(f"factor {f} is larger than the smallest axis {min(geom.shape)}.")
    if any(n % f for n in geom.shape):
        logger.info("downsample: cutting %s to a multiple of %d", geom.shape, f)
    solid = majority_mask(np.asarray(geom.solid, dtype=bool), f)
    labels = None
    if geom.labels is not None:
        labels = _blocks(geom.labels, f, coarse).max(axis=tuple(range(1, 2 * geom.ndim, 2)))
        labels = np.where(solid, labels, 0).astype(np.int32)
    size = None if geom.voxel_size is None else geom.voxel_size * f
    return dataclasses.replace(
        geom, solid=solid, labels=labels, voxel_size=size, openings=_drop(geom)
    )


def mirror(geom: VoxelGeometry, axis: int | None = None) -> VoxelGeometry:
    """Return the geometry followed by its mirror image along ``axis`` (twice as long).

    The mirrored copy makes the sample periodic along the axis. Its objects get new label ids
    (offset by the largest id), so an object cut by the mirror plane appears as two.
    """
    a = _axis(geom, axis)
    solid = np.concatenate([geom.solid, np.flip(geom.solid, axis=a)], axis=a)
    labels = None
    if geom.labels is not None:
        flipped = np.flip(geom.labels, axis=a)
        offset = int(geom.labels.max())
        flipped = np.where(flipped > 0, flipped + offset, 0).astype(np.int32)
        labels = np.concatenate([geom.labels, flipped], axis=a)
    return dataclasses.replace(geom, solid=solid, labels=labels, openings=_drop(geom))


def _drop(geom: VoxelGeometry) -> tuple[()]:
    """Return no openings, logging that the grid change dropped those ``geom`` had."""
    if geom.openings:
        logger.info("grid changed: dropped %d openings; detect them again", len(geom.openings))
    return ()


def _axis(geom: VoxelGeometry, axis: int | None) -> int:
    """Return ``axis`` (default: the flow axis) validated for ``geom``."""
    if axis is None:
        return geom.flow_axis
    if (
        isinstance(axis, bool)
        or not isinstance(axis, int | np.integer)
        or not 0 <= axis < geom.ndim
    ):
        raise GeometryError(f"axis must be 0..{geom.ndim - 1} or None, got {axis!r}.")
    return int(axis)


def _count(value: object, what: str) -> int:
    """Return a non-negative layer count or raise GeometryError."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise GeometryError(f"{what} must be a non-negative integer (layers), got {value!r}.")
    return int(value)


def _shift(geom: VoxelGeometry, axis: int, layers: int) -> tuple[float, ...]:
    """Return the origin moved by ``layers`` voxels along ``axis`` (unchanged if size unknown)."""
    if geom.voxel_size is None:
        return geom.origin
    origin = list(geom.origin)
    origin[axis] += layers * geom.voxel_size
    return tuple(origin)


def _bounds(geom: VoxelGeometry, corner: Sequence[int], what: str) -> tuple[int, ...]:
    """Return a corner index validated against the geometry's shape."""
    try:
        values = tuple(int(v) for v in corner)
    except (TypeError, ValueError) as exc:
        raise GeometryError(f"{what} must be {geom.ndim} integers, got {corner!r}.") from exc
    if len(values) != geom.ndim or any(
        not 0 <= v <= n for v, n in zip(values, geom.shape, strict=True)
    ):
        raise GeometryError(
            f"{what} must be {geom.ndim} integers within the shape {geom.shape}, got {corner!r}."
        )
    return values


def majority_mask(solid: np.ndarray, factor: int) -> np.ndarray:
    """A solid mask (True = solid) coarsened by ``factor`` per axis by majority vote, ties
    fluid, a trailing remainder cut off (:func:`downsample`'s rule; a slab's coarse layers
    depend on its own ``factor`` layers only, which a slab-wise source relies on)."""
    f, ndim = int(factor), solid.ndim
    coarse = tuple(n // f for n in solid.shape)
    # Solid voxels per block, one strided slice of each in-block offset at a time: summing
    # the blocked view over its block axes is about 15x slower at 400³.
    blocks = _blocks(np.asarray(solid, dtype=bool).view(np.uint8), f, coarse)
    counts = np.zeros(coarse, dtype=np.min_scalar_type(f**ndim))
    for inner in itertools.product(range(f), repeat=ndim):
        counts += blocks[tuple(i for pair in zip([slice(None)] * ndim, inner, strict=True)
                               for i in pair)]
    return counts > f**ndim // 2  # majority; ties are fluid


def _blocks(array: np.ndarray, f: int, coarse: tuple[int, ...]) -> np.ndarray:
    """Return ``array`` cut to whole blocks and reshaped to (n0, f, n1, f[, n2, f])."""
    trimmed = array[tuple(slice(0, n * f) for n in coarse)]
    return trimmed.reshape([d for n in coarse for d in (n, f)])
