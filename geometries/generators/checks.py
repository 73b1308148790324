"""Argument checks shared by the generators; each failure is a GeometryError saying the fix."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..errors import GeometryError

__all__ = ["GENERATOR_BYTES_PER_VOXEL", "available_memory", "check_axis", "check_fraction",
           "check_int", "check_positive", "check_shape", "check_size", "max_generated_voxels"]

#: Bytes a generator holds per voxel of its box at its peak, with room to spare: the boolean
#: mask and one stamping pass's working arrays (random_sphere_pack peaks at 1.1 B per voxel,
#: measured with tracemalloc at 128³ and 200³). A 2000³ request used to build 7.5 GiB before
#: the memory verdict could refuse it; now the box is priced against free memory first.
GENERATOR_BYTES_PER_VOXEL = 4


def available_memory() -> int:
    """Bytes of memory the machine can still give (Linux MemAvailable, else free pages)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def max_generated_voxels() -> int:
    """The largest box (voxels) a generator builds on this machine now: free memory's worth."""
    return available_memory() // GENERATOR_BYTES_PER_VOXEL


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
    """Return ``dims`` if the box fits in free memory (max_generated_voxels), else
    GeometryError, before anything is allocated."""
    count = 1
    for n in dims:
        count *= int(n)
    limit = max_generated_voxels()
    if count > limit:
        gib = 2.0**30
        raise GeometryError(
            f"A {' × '.join(str(n) for n in dims)} box has {count:,} voxels: building it needs "
            f"about {count * GENERATOR_BYTES_PER_VOXEL / gib:.1f} GiB, more than the "
            f"{available_memory() / gib:.1f} GiB free here, so at most {limit:,} voxels is what "
            "a generator builds on this machine. Choose a smaller box or a larger machine."
        )
    return tuple(int(n) for n in dims)


def check_axis(axis: object, ndim: int, what: str = "axis") -> int:
    """Return ``axis`` as an int in ``range(ndim)`` or raise GeometryError."""
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer) or not 0 <= axis < ndim:
        raise GeometryError(f"{what} must be 0..{ndim - 1} for a {ndim}D box, got {axis!r}.")
    return int(axis)
