"""The voxel geometry every loader, generator and preprocessing step returns.

A :class:`VoxelGeometry` is a boolean solid mask on a regular grid of cubic voxels in (x, y, z)
axis order (2D: (x, y)), with the physical size of a voxel, the position of the box, the axis the
flow is driven along, optional integer object ids so that the solver can report the drag of each
object, and the openings where fluid may enter or leave (:mod:`geometries.openings`). It is stored
as ``.npz`` without pickles.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .errors import GeometryError
from .npyfile import read_npz
from .openings.opening import (
    ARRAY_NAMES,
    Opening,
    check_openings,
    openings_from_arrays,
    openings_to_arrays,
)

__all__ = ["VoxelGeometry"]

_FORMAT_VERSION = 1
_AXES = "xyz"


#: Longest geometry name a saved archive may hold, characters (file names stay far below).
MAX_NAME_CHARS = 1024


@dataclass(eq=False)
class VoxelGeometry:
    """Solid mask (x, y[, z]) of cubic voxels; True = solid; sizes in metres.

    Attributes
    ----------
    solid : np.ndarray
        bool, shape (nx, ny, nz) or (nx, ny); True where the voxel is solid. Any memory layout
        (loaders of x-fastest files return Fortran-ordered views rather than copy).
    voxel_size : float or None
        Edge of one voxel in metres; None when the source does not say.
    origin : tuple of float
        Position in metres of the lower corner of voxel (0, 0[, 0]); zeros by default.
    flow_axis : int
        Axis (0 = x) along which the flow is driven; inlet at index 0, outlet at index -1.
    labels : np.ndarray or None
        int32, same shape as ``solid``; object id per voxel, 0 = no object.
    name : str
        Short human-readable description.
    notes : tuple of str
        What the loader guessed or repaired, in user words (e.g. the STL unit it assumed); shown
        with the preview, not saved.
    openings : tuple of Opening
        Planar openings with their fluid node sets (voxel indices into this grid); empty when
        none were detected. Steps that change the grid drop them (detect them again).
    """

    solid: np.ndarray
    voxel_size: float | None = None
    origin: tuple[float, ...] = field(default=())
    flow_axis: int = 0
    labels: np.ndarray | None = None
    name: str = ""
    notes: tuple[str, ...] = ()
    openings: tuple[Opening, ...] = ()

    def __post_init__(self) -> None:
        self.solid = _as_mask(self.solid)
        ndim = self.solid.ndim
        self.origin = _as_origin(self.origin, ndim)
        self.flow_axis = _as_axis(self.flow_axis, ndim)
        self.voxel_size = _as_voxel_size(self.voxel_size)
        if self.labels is not None:
            self.labels = _as_labels(self.labels, self.solid.shape)
        self.name = str(self.name)
        self.notes = tuple(str(n) for n in self.notes)
        self.openings = check_openings(self.openings, self.solid.shape)

    @property
    def shape(self) -> tuple[int, ...]:
        """Grid shape in voxels, (nx, ny[, nz])."""
        return tuple(self.solid.shape)

    @property
    def ndim(self) -> int:
        """Number of dimensions, 2 or 3."""
        return self.solid.ndim

    @property
    def n_fluid(self) -> int:
        """Number of fluid voxels."""
        return int(self.solid.size - np.count_nonzero(self.solid))

    @property
    def porosity(self) -> float:
        """Fluid fraction of the whole box (dimensionless)."""
        return self.n_fluid / self.solid.size

    def in_frame(
        self, voxel_size: float | None = None, origin: Sequence[float] | None = None
    ) -> VoxelGeometry:
        """The same voxels placed with another ``voxel_size`` and/or ``origin`` (metres).

        Openings keep their nodes; their centres, areas and diameters follow the new frame (a
        voxel size the geometry lacked counts as 1 m per voxel before).
        """
        new_size = self.voxel_size if voxel_size is None else voxel_size
        new_origin = self.origin if origin is None else origin
        old_h = 1.0 if self.voxel_size is None else self.voxel_size
        new_h = 1.0 if new_size is None else float(new_size)
        scale = new_h / old_h
        old0, new0 = np.asarray(self.origin, float), np.asarray(new_origin, float)
        openings = tuple(
            replace(o, centre=tuple(new0 + (np.asarray(o.centre) - old0) * scale),
                    area=o.area * scale ** (self.ndim - 1), diameter=o.diameter * scale)
            for o in self.openings
        )
        return replace(self, voxel_size=new_size, origin=new_origin, openings=openings)

    def summary(self) -> str:
        """Return one short paragraph: shape, voxel size, porosity, fluid voxels, mask memory."""
        dims = " × ".join(str(n) for n in self.shape)
        size = "unknown voxel size" if self.voxel_size is None else f"voxel {self.voxel_size:.3g} m"
        objects = ""
        if self.labels is not None:
            objects = f", {len(np.unique(self.labels[self.labels > 0]))} labelled objects"
        if self.openings:
            objects += f", {len(self.openings)} openings"
        title = f"{self.name}: " if self.name else ""
        return (
            f"{title}{self.ndim}D box of {dims} voxels ({size}), porosity {self.porosity:.4f}, "
            f"{self.n_fluid:,} fluid voxels, mask {_mib(self.solid.nbytes)}, "
            f"flow along {_AXES[self.flow_axis]}{objects}."
        )

    def save(self, path: str | os.PathLike | BinaryIO, *, compress: bool = True) -> None:
        """Write the geometry to ``path`` (or a binary file object) as ``.npz``."""
        arrays = {
            "version": np.int64(_FORMAT_VERSION),
            "solid": self.solid,
            "voxel_size": np.float64(np.nan if self.voxel_size is None else self.voxel_size),
            "origin": np.asarray(self.origin, dtype=np.float64),
            "flow_axis": np.int64(self.flow_axis),
            "name": np.str_(self.name),
        }
        if self.labels is not None:
            arrays["labels"] = self.labels
        arrays.update(openings_to_arrays(self.openings))
        write = np.savez_compressed if compress else np.savez
        if hasattr(path, "write"):  # an open binary file, e.g. the loader worker's buffer
            write(path, **arrays)
            return
        with open(path, "wb") as fh:
            write(fh, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike, *, max_voxels: int | None = None) -> VoxelGeometry:
        """Read a geometry written by :meth:`save` from a trusted ``path``."""
        return cls.from_npz(Path(path).read_bytes(), max_voxels=max_voxels)

    @classmethod
    def from_npz(cls, data: bytes, *, max_voxels: int | None = None) -> VoxelGeometry:
        """Build a geometry from ``.npz`` bytes written by :meth:`save` (safe for uploads)."""
        limit = max_voxels if max_voxels is not None else 1024**3
        arrays = read_npz(
            data,
            max_items=limit,
            names=("solid", "voxel_size", "origin", "flow_axis", "name"),
            optional=("labels", *ARRAY_NAMES),
            # bool mask; ids (int64 from older files); a name of up to 1024 characters (UCS-4)
            item_bytes={"solid": 1, "labels": 8, "name": 4 * MAX_NAME_CHARS},
        )
        try:
            size = float(arrays["voxel_size"].reshape(-1)[0]) if arrays["voxel_size"].size else 0.0
            return cls(
                solid=arrays["solid"].copy(),
                voxel_size=None if np.isnan(size) else size,
                origin=tuple(float(v) for v in arrays["origin"].reshape(-1)),
                flow_axis=int(arrays["flow_axis"].reshape(-1)[0]),
                labels=arrays["labels"].copy() if "labels" in arrays else None,
                name=str(arrays["name"].reshape(-1)[0]) if arrays["name"].size else "",
                openings=openings_from_arrays(arrays, arrays["solid"].ndim),
            )
        except GeometryError:
            raise
        # A string where a number belongs ("abc" as voxel_size: ValueError) is malformed too.
        except (IndexError, TypeError, OverflowError, ValueError) as exc:
            raise GeometryError(
                f"The .npz archive holds malformed metadata ({exc}). "
                "Use a file written by VoxelGeometry.save."
            ) from exc


def _as_mask(solid: object) -> np.ndarray:
    """Return ``solid`` as a bool array, accepting 0/1 numbers."""
    arr = np.asarray(solid)
    if arr.ndim not in (2, 3):
        raise GeometryError(
            f"A geometry must be 2D or 3D, got an array of shape {arr.shape}. "
            "Pass an (nx, ny) or (nx, ny, nz) mask."
        )
    if arr.size == 0:
        raise GeometryError(f"The geometry has an empty shape {arr.shape}; give every axis ≥ 1.")
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind not in "biuf" or not np.isin(arr, (0, 1)).all():
        raise GeometryError(
            f"solid must be a boolean mask (True = solid); got dtype {arr.dtype} with values "
            "other than 0 and 1. Segment the image first (pore_value= or threshold=)."
        )
    return arr.astype(bool)


def _as_origin(origin: object, ndim: int) -> tuple[float, ...]:
    """Return the origin as ``ndim`` finite floats (zeros when empty)."""
    values = tuple(float(v) for v in np.asarray(origin, dtype=np.float64).reshape(-1))
    if not values:
        return (0.0,) * ndim
    if len(values) != ndim or not np.all(np.isfinite(values)):
        raise GeometryError(
            f"origin must be {ndim} finite numbers (metres) for a {ndim}D geometry, got {origin}."
        )
    return values


def _as_axis(axis: object, ndim: int) -> int:
    """Return ``axis`` as an int in ``range(ndim)``."""
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer) or not 0 <= axis < ndim:
        raise GeometryError(
            f"flow_axis must be 0..{ndim - 1} for a {ndim}D geometry, got {axis!r}."
        )
    return int(axis)


def _as_voxel_size(size: object) -> float | None:
    """Return the voxel size as a positive float or None."""
    if size is None:
        return None
    try:
        value = float(size)
    except (TypeError, ValueError) as exc:
        raise GeometryError(f"voxel_size must be a number in metres, got {size!r}.") from exc
    if not np.isfinite(value) or value <= 0:
        raise GeometryError(f"voxel_size must be positive (metres), got {size!r}; or pass None.")
    return value


def _as_labels(labels: object, shape: tuple[int, ...]) -> np.ndarray:
    """Return ``labels`` as int32 of ``shape`` with non-negative ids."""
    arr = np.asarray(labels)
    if arr.shape != shape:
        raise GeometryError(
            f"labels has shape {arr.shape} but solid has shape {shape}; give one id per voxel."
        )
    if arr.dtype.kind not in "biu" or (arr.size and arr.min() < 0):
        raise GeometryError(
            f"labels must hold non-negative integer object ids (0 = none), got dtype {arr.dtype}."
        )
    if arr.size and arr.max() > np.iinfo(np.int32).max:
        raise GeometryError("labels hold ids too large for int32; renumber the objects from 1.")
    return arr.astype(np.int32, copy=False)


def _mib(nbytes: int) -> str:
    """Return a byte count as a short human string."""
    if nbytes < 1024**2:
        return f"{nbytes / 1024:.1f} KiB"
    return f"{nbytes / 1024**2:.1f} MiB"
