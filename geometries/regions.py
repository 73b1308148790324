"""Voxel images read or generated one slab at a time: a slab of a large image without the whole.

A distributed run of a 1600³ image cannot hold the image on every rank (4.1e9 voxels, twice
that mirrored). A *region source* gives the solid mask (True = solid, axes (x, y, z), sizes in
voxels) of any slab of layers ``[start, stop)`` along an axis, every voxel the same whichever
slab it is asked in:

- :class:`ArrayRegions`: an array in memory, or a ``.npy`` file opened as a memory map
  (:meth:`ArrayRegions.from_npy`): only the slab's bytes are read;
- :class:`ImageRegions`: a voxel image file (``.npy``, or a headerless ``.raw`` with its
  layout) memory-mapped and segmented slab by slab as its loader segments the whole; it
  travels between processes as its path and options (each process maps the file itself);
- :class:`TiffRegions`: a (z, y, x) TIFF stack on a trusted path (a cluster's file system,
  not an upload: no worker process isolates tifffile here), segmented slab by slab as the
  TIFF loader segments the whole (:func:`geometries.segment.segment`);
- :class:`GrainRegions`: a rock-like Boolean model of overlapping solid balls of one radius
  (grains) at integer centres drawn from a seed, stamped only where a slab needs them;
- :class:`MirroredRegions`: a source followed by its mirror image along an axis (the mirrored
  permeability protocol's box, :func:`geometries.preprocess.mirror`);
- :class:`CoarsenedRegions`: a source coarsened by an integer factor per axis by majority vote
  (:func:`geometries.preprocess.downsample`'s rule): coarse layers ``[start, stop)`` read the
  fine layers ``[f start, f stop)`` and nothing else, so a slab needs no overlap with its
  neighbours' (a coarse start of a permeability run over ranks);
- :class:`CachedRegions`: a source whose slabs along one axis are kept once read (up to a
  byte budget), so that the coarse levels of that start read the fine layers a rank has read
  already from memory instead of reading (or stamping) them again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from .errors import GeometryError
from .generators.checks import check_fraction, check_int, check_positive
from .preprocess import majority_mask
from .segment import segment

__all__ = ["RegionSource", "ArrayRegions", "ImageRegions", "TiffRegions", "GrainRegions",
           "MirroredRegions", "CoarsenedRegions", "CachedRegions", "check_slab"]

#: Balls stamped per batch (temporaries ~ batch x ball voxels x 13 bytes: 16 MB at diameter
#: 21): small temporaries are reused by the allocator, large ones are fresh pages every batch
#: (a 1600² x 64 slab: 14-18 ns per voxel with 256, ~4x that with 4096, on a loaded 2-core
#: machine; stamping runs along the last axis into counts was no faster).
_BATCH = 256


@runtime_checkable
class RegionSource(Protocol):
    """A voxel image that gives its solid mask one slab at a time (sizes in voxels)."""

    shape: tuple[int, ...]

    def slab(self, axis: int, start: int, stop: int) -> np.ndarray:
        """Solid mask (bool, True = solid) of layers ``[start, stop)`` along ``axis``."""
        ...


def check_slab(shape: Sequence[int], axis: int, start: int, stop: int) -> None:
    """Raise GeometryError unless ``[start, stop)`` is a non-empty layer range of ``axis``."""
    if not 0 <= axis < len(shape):
        raise GeometryError(f"axis {axis} does not exist in a {len(shape)}D image; use "
                            f"0..{len(shape) - 1}.")
    if not 0 <= start < stop <= shape[axis]:
        raise GeometryError(f"layers {start}..{stop} are outside the {shape[axis]} layers along "
                            f"axis {axis}.")


class ArrayRegions:
    """Slabs of a solid mask held in memory or memory-mapped from a ``.npy`` file."""

    def __init__(self, solid: np.ndarray) -> None:
        if np.ndim(solid) not in (2, 3):
            raise GeometryError(f"A region source needs a 2D or 3D mask, got shape "
                                f"{np.shape(solid)}.")
        self.solid = solid
        self.shape = tuple(int(n) for n in np.shape(solid))

    @classmethod
    def from_npy(cls, path: str | Path) -> ArrayRegions:
        """A ``.npy`` mask opened as a memory map: a slab reads only its own bytes."""
        data = np.load(Path(path), mmap_mode="r", allow_pickle=False)
        if data.dtype != bool and not np.issubdtype(data.dtype, np.integer):
            raise GeometryError(f"{path} holds {data.dtype} values; save a boolean solid mask "
                                "(True = solid).")
        return cls(data)

    def slab(self, axis: int, start: int, stop: int) -> np.ndarray:
        """Solid mask of layers ``[start, stop)`` along ``axis`` (a copy, bool)."""
        check_slab(self.shape, axis, start, stop)
        index = [slice(None)] * len(self.shape)
        index[axis] = slice(start, stop)
        return np.asarray(self.solid[tuple(index)]).astype(bool)


class ImageRegions:
    """Slabs of a voxel image file memory-mapped: a ``.npy`` array in (x, y[, z]) order, or a
    headerless ``.raw`` volume of ``shape`` (nx, ny[, nz]) voxels of ``dtype`` (``order``
    'F': x fastest, after ``header_bytes``); each slab segmented with
    :func:`~geometries.segment.segment`'s options, as the whole-image loader segments the
    whole (the same booleans). Pickled as its path and options: a process that receives it maps
    the file itself (a distributed rank reads only its slab's bytes). The file is mapped for
    each slab and unmapped after it: the pages read do not stay in the process's resident set."""

    def __init__(self, path: str | Path, *, shape: Sequence[int] | None = None,
                 dtype: str = "uint8", byte_order: str = "little", header_bytes: int = 0,
                 order: str = "F", pore_value: float | Sequence[float] | None = None,
                 threshold: float | None = None, pore_below: bool = True) -> None:
        self.path = Path(path)
        self.layout = {"shape": None if shape is None else tuple(int(n) for n in shape),
                       "dtype": dtype, "byte_order": byte_order,
                       "header_bytes": int(header_bytes), "order": order}
        self.options = {"pore_value": pore_value, "threshold": threshold,
                        "pore_below": pore_below}
        image = self.image()
        if image.ndim not in (2, 3) or image.dtype.kind not in "biuf":
            raise GeometryError(f"{self.path} holds a {image.ndim}D {image.dtype} array; a "
                                "voxel image is a 2D or 3D bool, integer or float array.")
        self.shape = tuple(int(n) for n in image.shape)

    def image(self) -> np.ndarray:
        """The file's voxels as a read-only memory map (a new map at each call)."""
        if self.layout["shape"] is None:  # .npy: its header gives shape, dtype and order
            return np.load(self.path, mmap_mode="r", allow_pickle=False)
        dims = self.layout["shape"]
        dt = np.dtype(self.layout["dtype"]).newbyteorder(
            {"little": "<", "big": ">"}[self.layout["byte_order"]])
        expected = self.layout["header_bytes"] + int(np.prod(dims)) * dt.itemsize
        size = self.path.stat().st_size
        if size != expected:
            raise GeometryError(f"The raw file {self.path} has {size} bytes but shape {dims} "
                                f"of {dt.name} after a {self.layout['header_bytes']}-byte "
                                f"header needs {expected}. Check shape=, dtype= and "
                                "header_bytes=.")
        return np.memmap(self.path, dtype=dt, mode="r", offset=self.layout["header_bytes"],
                         shape=dims, order=self.layout["order"])

    def slab(self, axis: int, start: int, stop: int) -> np.ndarray:
        """Solid mask (bool) of layers ``[start, stop)`` along ``axis``: only their bytes read."""
        check_slab(self.shape, axis, start, stop)
        index = [slice(None)] * len(self.shape)
        index[axis] = slice(start, stop)
        image = self.image()
        mask = segment(np.asarray(image[tuple(index)]), **self.options)
        mask = np.require(mask, dtype=bool, requirements=["W", "O"])  # never the map's view
        del image  # unmapped: its pages leave this process's resident set
        return mask


class TiffRegions:
    """Slabs of a (z, y, x) TIFF stack, one page per z slice (the TIFF loader's convention),
    segmented with :func:`~geometries.segment.segment`'s options. A slab along z reads only
    its pages; along x or y every page is read once and cut to the slab (memory: the slab)."""

    def __init__(self, path: str | Path, *, pore_value: float | Sequence[float] | None = None,
                 threshold: float | None = None, pore_below: bool = True) -> None:
        import tifffile  # where TIFF is read: `import geometries` works without it

        self.path = Path(path)
        self.options = {"pore_value": pore_value, "threshold": threshold,
                        "pore_below": pore_below}
        from .loaders.tiff import tiff_voxel_size

        with tifffile.TiffFile(self.path) as tif:
            zyx = tuple(int(n) for n in tif.series[0].shape)
            pages = len(tif.pages)
            #: Voxel edge (m) of the file's ImageJ calibration, as the TIFF loader reads it.
            self.voxel_size = tiff_voxel_size(tif)
        if len(zyx) != 3 or pages != zyx[0]:
            raise GeometryError(f"{self.path} is not a single-channel stack of 2D pages (shape "
                                f"{zyx}); save one page per z slice.")
        self.shape = zyx[::-1]

    def slab(self, axis: int, start: int, stop: int) -> np.ndarray:
        """Solid mask of layers ``[start, stop)`` along ``axis`` (x, y, z order)."""
        import tifffile

        check_slab(self.shape, axis, start, stop)
        with tifffile.TiffFile(self.path) as tif:
            if axis == 2:
                zyx = np.asarray(tif.asarray(key=range(start, stop)))
                zyx = zyx.reshape(stop - start, self.shape[1], self.shape[0])
            else:
                cut = (slice(None), slice(start, stop)) if axis == 0 else \
                    (slice(start, stop), slice(None))
                zyx = np.stack([np.asarray(page.asarray())[cut] for page in tif.pages])
        return segment(zyx.transpose(2, 1, 0), **self.options)


def ball_offsets(radius: float, ndim: int = 3) -> np.ndarray:
    """Integer offsets (k, ndim) within ``radius`` voxels of a voxel, int32."""
    r = int(math.floor(radius))
    grid = np.stack(np.meshgrid(*[np.arange(-r, r + 1)] * ndim, indexing="ij"), -1)
    grid = grid.reshape(-1, ndim)
    return grid[(grid.astype(np.float64) ** 2).sum(axis=1) <= radius**2].astype(np.int32)


class GrainRegions:
    """A Boolean model of solid balls (rock grains) at a target porosity, evaluated by slab.

    ``count = round(ln(1 / porosity) V' / v)`` balls of ``v`` voxels (diameter ``diameter``)
    at integer centres drawn uniformly (``seed``) from the box grown by the radius on every
    side (``V'`` voxels), so the box edges are as dense as its middle; the fluid fraction is
    then ``porosity`` in expectation (the balls cover a fraction ``1 - exp(-count v / V')``).
    A voxel is solid when a centre lies within the radius: any slab gives the same voxels.
    """

    def __init__(self, shape: Sequence[int], porosity: float, diameter: float = 21,
                 seed: int = 0) -> None:
        # Per-entry checks only: the whole box is never built (check_shape prices it).
        self.shape = tuple(check_int(n, "every entry of shape") for n in shape)
        if len(self.shape) not in (2, 3):
            raise GeometryError(f"shape must be 2 or 3 integers (voxels), got {shape!r}.")
        self.porosity = check_fraction(porosity, "porosity")
        self.diameter = check_positive(diameter, "diameter")
        self.seed = int(seed)
        self.radius = self.diameter / 2
        self.offsets = ball_offsets(self.radius, len(self.shape))
        margin = int(math.floor(self.radius))
        grown = [n + 2 * margin for n in self.shape]
        self.count = int(round(math.log(1 / self.porosity) * math.prod(grown)
                               / len(self.offsets)))
        rng = np.random.default_rng(self.seed)
        self.centres = (rng.integers(0, grown, size=(self.count, len(grown)))
                        - margin).astype(np.int32)
        self.margin = margin

    @property
    def name(self) -> str:
        """Short description with the parameters that reproduce the image."""
        return (f"grains d={self.diameter:g} porosity~{self.porosity:g} seed {self.seed} "
                f"{'x'.join(map(str, self.shape))}")

    def slab(self, axis: int, start: int, stop: int) -> np.ndarray:
        """Solid mask of layers ``[start, stop)`` along ``axis``: the balls reaching them."""
        check_slab(self.shape, axis, start, stop)
        dims = list(self.shape)
        dims[axis] = stop - start
        solid = np.zeros(dims, dtype=bool)
        c = self.centres[:, axis]
        near = self.centres[(c >= start - self.margin) & (c < stop + self.margin)]
        near = near - np.array([start if a == axis else 0 for a in range(len(dims))],
                               dtype=np.int32)
        flat = solid.reshape(-1)
        strides = np.array([math.prod(dims[a + 1:]) for a in range(len(dims))], dtype=np.int64)
        reach = int(np.abs(self.offsets).max(initial=0))
        inside = np.all((near >= reach) & (near < np.array(dims) - reach), axis=1)
        # Balls wholly inside the slab: one add and one store per voxel (most of a large slab).
        steps = self.offsets.astype(np.int64) @ strides
        whole = near[inside].astype(np.int64) @ strides
        for first in range(0, len(whole), _BATCH):
            flat[(whole[first:first + _BATCH, None] + steps[None, :]).reshape(-1)] = True
        cut = near[~inside]
        for first in range(0, len(cut), _BATCH):
            part = cut[first:first + _BATCH]
            index = np.zeros((len(part), len(self.offsets)), dtype=np.int64)
            keep = np.ones(index.shape, dtype=bool)
            for a, n in enumerate(dims):
                x = part[:, a, None] + self.offsets[None, :, a]
                keep &= (x >= 0) & (x < n)
                index += x.astype(np.int64) * strides[a]
            flat[index[keep]] = True
        return solid


class MirroredRegions:
    """``source`` followed by its mirror image along ``axis`` (twice as long), by slab."""

    def __init__(self, source: RegionSource, axis: int) -> None:
        if not 0 <= axis < len(source.shape):
            raise GeometryError(f"axis {axis} does not exist in a {len(source.shape)}D image.")
        self.source, self.axis = source, int(axis)
        shape = list(source.shape)
        shape[axis] *= 2
        self.shape = tuple(shape)

    def slab(self, axis: int, start: int, stop: int) -> np.ndarray:
        """Solid mask of layers ``[start, stop)``; layer ``m >= n`` is the source's
        ``2n - 1 - m``."""
        check_slab(self.shape, axis, start, stop)
        if axis != self.axis:
            raw = self.source.slab(axis, start, stop)
            return np.concatenate([raw, np.flip(raw, axis=self.axis)], axis=self.axis)
        n = self.source.shape[axis]
        parts = []
        if start < n:
            parts.append(self.source.slab(axis, start, min(stop, n)))
        if stop > n:
            lo, hi = max(start, n), stop
            parts.append(np.flip(self.source.slab(axis, 2 * n - hi, 2 * n - lo), axis=axis))
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)


class CoarsenedRegions:
    """``source`` coarsened by ``factor`` per axis by majority vote (ties fluid; a trailing
    remainder cut off), by slab: coarse layer ``m`` is fine layers ``[f m, f m + f)``."""

    def __init__(self, source: RegionSource, factor: int = 2) -> None:
        self.source, self.factor = source, check_int(factor, "factor")
        self.shape = tuple(int(n) // self.factor for n in source.shape)
        if min(self.shape) < 1:
            raise GeometryError(f"factor {factor} is larger than the smallest axis of "
                                f"{source.shape}; coarsen less.")

    def slab(self, axis: int, start: int, stop: int) -> np.ndarray:
        """Solid mask of coarse layers ``[start, stop)`` along ``axis``."""
        check_slab(self.shape, axis, start, stop)
        f = self.factor
        return majority_mask(self.source.slab(axis, f * start, f * stop), f)


class CachedRegions:
    """``source`` whose slabs along ``axis`` are kept as read (blocks of layers, at most
    ``budget`` bytes; past it slabs are read and not kept); a slab covered by kept blocks is
    assembled from them, the layers missing read from ``source`` (and kept)."""

    def __init__(self, source: RegionSource, axis: int, budget: int = 8 << 30) -> None:
        self.source, self.axis, self.budget = source, int(axis), int(budget)
        self.shape = tuple(source.shape)
        self.blocks: list[tuple[int, int, np.ndarray]] = []  # (start, stop, mask), disjoint
        self.kept = 0
        self.reads = 0  # layers read from the source (a test's and a report's number)

    def slab(self, axis: int, start: int, stop: int) -> np.ndarray:
        """Solid mask of layers ``[start, stop)`` along ``axis`` (a copy)."""
        check_slab(self.shape, axis, start, stop)
        if axis != self.axis:
            return self.source.slab(axis, start, stop)
        parts, at = [], start
        for lo, hi, mask in sorted(self.blocks, key=lambda b: b[0]):
            if hi <= at or lo >= stop:
                continue
            if lo > at:
                parts.append(self._read(at, lo))
            parts.append(np.take(mask, np.arange(max(lo, at) - lo, min(hi, stop) - lo),
                                 axis=axis))
            at = min(hi, stop)
        if at < stop:
            parts.append(self._read(at, stop))
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=axis)

    def _read(self, start: int, stop: int) -> np.ndarray:
        """Layers ``[start, stop)`` from the source, kept while the budget allows."""
        mask = self.source.slab(self.axis, start, stop)
        self.reads += stop - start
        if self.kept + mask.nbytes <= self.budget:
            self.blocks.append((start, stop, mask))
            self.kept += mask.nbytes
            return mask.copy()  # the caller's to change
        return mask

    def clear(self) -> None:
        """Drop every kept block (their memory)."""
        self.blocks, self.kept = [], 0
