"""The interface every compute backend implements.

A backend is chosen once (:func:`solver.backends.get_backend`) and owns the array module, the
device and the storage precision; nothing outside ``solver/backends`` asks which one it is. The
state it allocates holds two copies of the populations in the layout
``f[copy][tile][i][node_in_tile]``; ``state.current`` says which copy holds the latest values.
The CuPy backend can instead keep one copy updated in place (``Problem.streaming``, see
:mod:`solver.backends.gpu_streaming`); its readers return the same populations either way.

Solid nodes (tile padding included) carry no physics, but every backend keeps the same values
there so that parity tests and checkpoints compare whole arrays exactly: the rest equilibrium
``w_i rho0`` (:meth:`~solver.problem.Problem.rest_populations`, in the storage dtype) in every
copy, at all times. ``allocate`` starts from it everywhere, ``set_populations`` puts it back
into the solid nodes of every copy (:func:`with_rest_solids`), and a step writes nothing else
there: the NumPy backend, the paper-layout and the in-place kernels leave solid nodes alone,
the two-copy XYZ-layout kernels store exactly this value into the solid nodes whose 32-byte
sector of the written copy also holds a fluid node (``kernels/tiled_lbm.cu``). Observables
read fluid nodes only.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from ..problem import Problem

__all__ = ["Backend", "DeviceInfo", "with_rest_solids"]


class DeviceInfo(dict):
    """Name, memory (bytes) and peak bandwidth (bytes/s, None if unknown) of a device."""


def with_rest_solids(problem: Problem, f, xp: Any = np):
    """``f`` (n_tiles, q, a**d, XYZ order) in the storage dtype, rest equilibrium in solid nodes.

    The rule of the module doc; returns a new ``xp`` array.
    """
    rest = xp.asarray(problem.rest_populations().astype(problem.dtype))[None, :, None]
    solid = xp.asarray(problem.tiling.solid)[:, None, :]
    return xp.where(solid, rest, xp.asarray(f, dtype=problem.dtype))


class Backend(Protocol):
    """A compute backend: allocation, stepping and host read-back."""

    name: str
    #: Array module of the state (``numpy`` or ``cupy``).
    xp: Any

    def allocate(self, problem: Problem) -> Any:
        """Allocate and initialise the state of ``problem`` (equilibrium at rest)."""

    def step(self, state: Any, n: int) -> float:
        """Advance ``state`` by ``n`` time steps; return the elapsed device time in seconds."""

    def populations(self, state: Any) -> np.ndarray:
        """Latest populations as a host float64 array (n_tiles, q, a**d)."""

    def device_populations(self, state: Any) -> Any:
        """Latest populations as a backend array (n_tiles, q, a**d), XYZ in-tile order."""

    def to_host(self, array: Any) -> np.ndarray:
        """Copy a backend array to a host NumPy array."""

    def set_populations(self, state: Any, f: np.ndarray) -> None:
        """Overwrite the latest populations from a host or backend array (n_tiles, q, a**d).

        Solid nodes of both copies get the rest equilibrium, whatever ``f`` holds there.
        """

    def device_info(self) -> DeviceInfo:
        """What the backend runs on."""

    def release(self, state: Any) -> None:
        """Free the state's memory."""
