"""What the layers below the app read from a geometry: the :class:`GeometryLike` protocol, and
:func:`as_geometry`, which gives a plain solid mask (or a partial stand-in) the same shape once at
the entry of the solver, so nothing downstream guesses attributes with ``getattr``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["GeometryLike", "ArrayGeometry", "as_geometry"]


@runtime_checkable
class GeometryLike(Protocol):
    """A voxel geometry as the solver reads it (:class:`~geometries.voxel.VoxelGeometry` is one).

    ``solid``: True = solid, (x, y[, z]); ``voxel_size``: metres per voxel or None (unknown);
    ``origin``: metres of the lower corner of voxel 0; ``flow_axis``: the driven axis or None
    (none said); ``labels``: int32 object id per voxel or None; ``name``: short description.
    """

    solid: np.ndarray
    voxel_size: float | None
    origin: tuple[float, ...]
    flow_axis: int | None
    labels: np.ndarray | None
    name: str


@dataclass(frozen=True, eq=False)
class ArrayGeometry:
    """A bare mask as a :class:`GeometryLike`: no voxel size, origin, flow axis, labels or name.

    ``solid`` is kept as given (the solver validates it and says what to do when it is not a
    boolean 2D/3D mask)."""

    solid: Any
    voxel_size: float | None = None
    origin: tuple[float, ...] = ()
    flow_axis: int | None = None
    labels: np.ndarray | None = None
    name: str = ""


def as_geometry(geometry: Any) -> GeometryLike:
    """``geometry`` itself when it is a :class:`GeometryLike`; a plain array (or an object with a
    ``solid`` and only some of the other attributes) as an :class:`ArrayGeometry`."""
    if isinstance(geometry, GeometryLike):
        return geometry
    if not hasattr(geometry, "solid"):
        return ArrayGeometry(geometry)
    # A partial stand-in: the attributes it has, the protocol's defaults for the others.
    fields = ArrayGeometry.__dataclass_fields__
    return ArrayGeometry(**{k: getattr(geometry, k, f.default) for k, f in fields.items()})
