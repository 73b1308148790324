"""The Panel dashboard of porous-lbm.

``python -m panel serve app`` serves it (see :mod:`app.main`); in a notebook display
``app.Dashboard()``. The import is lazy so that ``panel serve`` and tools that only need the
settings do not load the plotting stack twice.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Dashboard"]


def __getattr__(name: str) -> Any:
    if name == "Dashboard":
        from app.dashboard import Dashboard

        return Dashboard
    raise AttributeError(f"module 'app' has no attribute {name!r}")
