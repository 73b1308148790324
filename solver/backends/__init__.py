"""Compute backends; :func:`get_backend` is the one place that decides which one runs."""

from __future__ import annotations

import logging

from .base import Backend, DeviceInfo

__all__ = ["Backend", "DeviceInfo", "get_backend", "gpu_available"]

log = logging.getLogger(__name__)


def gpu_available() -> tuple[bool, str]:
    """Whether the CuPy backend can run here, and why not if it cannot."""
    try:
        from .cuda.device import probe_device
    except Exception as exc:  # ImportError, or a CUDA library failing to load
        return False, f"CuPy is not usable ({exc.__class__.__name__}: {exc})"
    return probe_device()


def get_backend(name: str = "auto") -> Backend:
    """Backend ``'numpy'``, ``'cupy'`` or ``'auto'`` (CuPy when a GPU is usable)."""
    if name not in ("auto", "numpy", "cupy"):
        raise ValueError(f"Unknown backend {name!r}; use 'auto', 'numpy' or 'cupy'.")
    if name in ("auto", "cupy"):
        ok, why = gpu_available()
        if ok:
            from .cuda.backend import CupyBackend

            return CupyBackend()
        if name == "cupy":
            raise RuntimeError(f"The CuPy backend was requested but {why}; use backend='numpy'.")
        log.info("No usable GPU (%s); falling back to the NumPy backend.", why)
    from .numpy_backend import NumpyBackend

    return NumpyBackend()
