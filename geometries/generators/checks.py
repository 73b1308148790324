"""Argument checks shared by the generators; each failure is a GeometryError saying the fix."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import GeometryError

__all__ = ["MAX_GENERATED_VOXELS", "check_axis", "check_fraction", "check_int", "check_positive",
           "check_shape", "check_size"]

#: Largest box a generator builds (voxels): the loaders' default limit. A 2000³ request built
#: 7.5 GiB before the memory verdict could refuse it.
MAX_GENERATED_VOXELS = 512**3


def check_int(value: object, what: str, minimum: int = 1) -> int:
    """Return ``value`` as an int ≥ ``minimum`` (voxels) or raise GeometryError."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise GeometryError(f"{what} must be an integer ≥ {minimum}, got {value!r}.")
    return int(value)


def check_positive(value: object, what: str, minimum: float = 0.0) -> float:
    """Return ``value`` as a finite float > ``minimum`` or raise GeometryError."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise GeometryError(f"{what} must be a number, got {value!r}.") from exc
    if not np.isfinite(number) or number <= minimum:
        raise GeometryError(f"{what} must be a finite number > {minimum}, got {value!r}.")
    return number


def check_fraction(value: object, what: str, high: float = 1.0) -> float:
    """Return ``value`` as a float in (0, ``high``] (exclusive of 1) or raise GeometryError."""
    number = check_positive(value, what)
    if number > high or number >= 1.0:
        top = f"≤ {high:.4g}" if high < 1.0 else "< 1"
        raise GeometryError(f"{what} must be > 0 and {top}, got {value!r}.")
    return number


def check_shape(shape: Sequence[int], what: str = "shape", minimum: int = 1) -> tuple[int, ...]:
    """Return a 2D/3D shape of ints ≥ ``minimum`` (voxels) or raise GeometryError."""
    try:
        dims = tuple(shape)
    except TypeError as exc:
        raise GeometryError(f"{what} must be 2 or 3 integers (voxels), got {shape!r}.") from exc
    if len(dims) not in (2, 3):
        raise GeometryError(f"{what} must be 2 or 3 integers (voxels), got {shape!r}.")
    return check_size(tuple(check_int(n, f"every entry of {what}", minimum) for n in dims))


def check_size(dims: Sequence[int]) -> tuple[int, ...]:
    """Return ``dims`` if the box has at most MAX_GENERATED_VOXELS voxels, else GeometryError."""
    count = 1
    for n in dims:
        count *= int(n)
    if count > MAX_GENERATED_VOXELS:
        raise GeometryError(
            f"A {' × '.join(str(n) for n in dims)} box has {count:,} voxels, more than the "
            f"{MAX_GENERATED_VOXELS:,} a generator builds. Choose a smaller box."
        )
    return tuple(int(n) for n in dims)


def check_axis(axis: object, ndim: int, what: str = "axis") -> int:
    """Return ``axis`` as an int in ``range(ndim)`` or raise GeometryError."""
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer) or not 0 <= axis < ndim:
        raise GeometryError(f"{what} must be 0..{ndim - 1} for a {ndim}D box, got {axis!r}.")
    return int(axis)
