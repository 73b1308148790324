"""Compute backends; :func:`get_backend` is the one place that decides which one runs."""

from __future__ import annotations

import logging

from ..config import BACKENDS
from .base import Backend, DeviceInfo

__all__ = ["Backend", "DeviceInfo", "get_backend", "gpu_available", "may_use_gpu",
           "device_capacity"]

log = logging.getLogger(__name__)


def gpu_available() -> tuple[bool, str]:
    """Whether the CuPy backend can run here, and why not if it cannot."""
    try:
        from .cuda.device import probe_device
    except Exception as exc:  # ImportError, or a CUDA library failing to load
        return False, f"CuPy is not usable ({exc.__class__.__name__}: {exc})"
    return probe_device()


def may_use_gpu(name: str) -> bool:
    """Whether the backend option ``name`` (:data:`solver.config.BACKENDS`) may pick the GPU."""
    return name in ("auto", "cupy")


def get_backend(name: str = "auto") -> Backend:
    """Backend ``'numpy'``, ``'cupy'`` or ``'auto'`` (CuPy when a GPU is usable)."""
    if name not in BACKENDS:
        options = ", ".join(f"'{b}'" for b in BACKENDS[:-1])
        raise ValueError(f"Unknown backend {name!r}; use {options} or '{BACKENDS[-1]}'.")
    if may_use_gpu(name):
        ok, why = gpu_available()
        if ok:
            from .cuda.backend import CupyBackend

            return CupyBackend()
        if name == "cupy":
            raise RuntimeError(f"The CuPy backend was requested but {why}; use backend='numpy'.")
        log.info("No usable GPU (%s); falling back to the NumPy backend.", why)
    from .numpy_backend import NumpyBackend

    return NumpyBackend()


def device_capacity(backend: Backend) -> int | None:
    """Bytes of memory of ``backend``'s device (its ``memory_capacity``), None where it has
    none to give (NumPy; a distributed wrapper): what ``Problem.device_capacity`` holds for
    the plan (:func:`solver.backends.plan.plan_for`)."""
    capacity = backend.memory_capacity()
    return None if capacity is None else int(capacity)
