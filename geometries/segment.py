"""Turning a voxel image into a solid mask.

Defaults, used by every image loader (.npy, .raw, .tif, .vti, ...):

- bool images: True = solid, False = pore;
- integer images: 0 = pore, any other value = solid (the usual labelled micro-CT convention);
- float images holding only 0 and 1: as integers; any other float image needs ``threshold=``.

``pore_value=`` (one value or several) names the label(s) of pore space; everything else is
solid. ``threshold=`` splits a grey-scale image: with ``pore_below=True`` (default) values below
the threshold are pore, otherwise values above it are pore.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import GeometryError

__all__ = ["segment"]


def segment(
    image: np.ndarray,
    *,
    pore_value: float | Sequence[float] | None = None,
    threshold: float | None = None,
    pore_below: bool = True,
) -> np.ndarray:
    """Return the bool solid mask (True = solid) of a voxel image, same shape."""
    if pore_value is not None and threshold is not None:
        raise GeometryError("Give either pore_value= or threshold=, not both.")
    if image.dtype.kind not in "biuf":
        raise GeometryError(
            f"The image has dtype {image.dtype}; a voxel image must hold bool, integer or float "
            "values. Convert it to a single-channel label or grey-scale image."
        )
    if pore_value is not None:
        values = np.atleast_1d(np.asarray(pore_value, dtype=np.float64))
        if values.ndim != 1 or not np.all(np.isfinite(values)):
            raise GeometryError(f"pore_value must be a number or a list of numbers, got {pore_value!r}.")
        if values.size == 1:
            return image != values[0]
        return ~np.isin(image, values)
    if threshold is not None:
        limit = float(threshold)
        if not np.isfinite(limit):
            raise GeometryError(f"threshold must be a finite number, got {threshold!r}.")
        # NaN voxels compare False both ways and so end up solid.
        return ~(image < limit) if pore_below else ~(image > limit)
    if image.dtype == bool:
        return image
    if image.dtype.kind == "f" and not np.isin(image, (0.0, 1.0)).all():
        raise GeometryError(
            "The image holds float values other than 0 and 1, so pore space is ambiguous. "
            "Pass threshold= (values below it are pore; pore_below=False for the reverse) "
            "or pore_value=."
        )
    return image != 0
