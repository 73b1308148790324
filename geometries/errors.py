"""The exception and warning types the geometry layer uses for user input."""

from __future__ import annotations

__all__ = ["GeometryError", "GeometryWarning"]


class GeometryError(ValueError):
    """A geometry or its source is unusable; the message says what was wrong and what to do."""


class GeometryWarning(UserWarning):
    """A geometry was built but may not be what was meant (e.g. a mesh that is not watertight)."""
