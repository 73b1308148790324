"""What a run needs in memory and whether it fits: one verdict for the app and the CLI.

The backend answers both questions (:meth:`memory_required` for a
:class:`~solver.problem.Problem`, :meth:`free_memory` of its device); :func:`judge` turns the
two numbers into a :class:`MemoryVerdict` ('ok', 'warning' above half the free memory,
'refused' above :data:`REFUSE_SHARE` of it) with a sentence that gives both numbers and what to
do. Everything is decided before anything is allocated. Bytes throughout.

The estimates count the allocations of a run at its peak (measured against the peak resident
set of NumPy runs by ``benchmarks/memory/numpy_memory_peak.py``): the tiled state, the NumPy
backend's gather tables, and the float64 moments that every health check and slice computes
(:func:`moments_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import numpy as np

from .backends import device_capacity
from .backends.cuda.footprint import device_bytes
from .config import SimulationConfig
from .fields import cut_bytes, moments_bytes
from .lattice import get_lattice
from .problem import Problem
from .tiling import default_tile_edge

__all__ = ["MemoryVerdict", "REFUSE_SHARE", "WARN_SHARE", "judge", "assess_memory",
           "precheck_memory", "device_bytes", "cut_bytes", "MemoryRefused", "check_memory",
           "moments_bytes", "format_bytes"]

#: A run needing more than this share of the free memory is refused (the rest is for the
#: process itself, the user interface and the operating system).
REFUSE_SHARE = 0.9
#: Above this share of the free memory the verdict warns.
WARN_SHARE = 0.5


def format_bytes(n: float) -> str:
    """Human-readable size in binary units, e.g. 1.5 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.3g} GiB"


@dataclass(frozen=True)
class MemoryVerdict:
    """Whether a run of ``required`` bytes fits in ``free`` bytes (None = unknown) of ``device``."""

    required: int
    free: int | None
    device: str = "device"

    @property
    def level(self) -> str:
        """'ok', 'warning' (over half the free memory) or 'refused'."""
        if not self.free:
            return "ok"
        if self.required > REFUSE_SHARE * self.free:
            return "refused"
        return "warning" if self.required > WARN_SHARE * self.free else "ok"

    @property
    def message(self) -> str:
        """One sentence with both numbers (and, when refused, what to do)."""
        need = f"about {format_bytes(self.required)} ({self.required} bytes)"
        if not self.free:
            return f"The case needs {need}."
        have = f"{format_bytes(self.free)} ({self.free} bytes) free"
        if self.level == "refused":
            return (f"The case needs {need} but the {self.device} has only {have}, of which "
                    f"{REFUSE_SHARE:.0%} may be used; use a smaller or cropped geometry, "
                    "precision float32 (and storage float16), or a device with more memory.")
        if self.level == "warning":
            return (f"The case needs {need} of the {have} on the {self.device}; other "
                    "programs may run short.")
        return f"The case needs {need} of the {have} on the {self.device}."

    def check(self) -> MemoryVerdict:
        """Raise MemoryRefused with :attr:`message` when refused; return self otherwise."""
        if self.level == "refused":
            raise MemoryRefused(self.message)
        return self


class MemoryRefused(MemoryError):
    """The case needs more memory than the device has free; the message gives both numbers."""


def check_memory(required: int, free: int | None, device: str = "device") -> None:
    """Raise MemoryRefused when :func:`judge` refuses ``required`` bytes with ``free`` bytes
    free (None = unknown, pass)."""
    judge(required, free, device).check()


def judge(required: int, free: int | None, device: str = "device") -> MemoryVerdict:
    """THE memory verdict of a run needing ``required`` bytes with ``free`` bytes free."""
    return MemoryVerdict(int(required), None if free is None else int(free), device)


@cache
def _backend(name: str) -> Any:
    """One backend object per name, to ask memory questions (allocates nothing)."""
    from .backends import get_backend

    return get_backend(name)


def assess_memory(problem: Problem, backend: Any, reclaimable: int = 0) -> MemoryVerdict:
    """The verdict for running ``problem`` on ``backend`` (an object or a backend name).

    ``reclaimable``: bytes a run that this one replaces frees first (the app's current run).
    """
    if isinstance(backend, str):
        backend = _backend(backend)
    capacity = device_capacity(backend) if problem.device_capacity is None else None
    if capacity is not None:  # the plan the run will get (the Simulation fills it alike)
        problem = replace(problem, device_capacity=capacity).use_iolets(problem.iolets)
    need = backend.memory_required(problem)
    if need is None:  # a backend without an estimate (e.g. a distributed wrapper): the state
        return judge(problem.tiled_state_bytes(), None)
    free = backend.free_memory()
    device = "GPU" if backend.name == "cupy" else "host"
    return judge(need, None if free is None else free + int(reclaimable), device)


@dataclass(frozen=True)
class _PackedTiles:
    """The fewest tiles a mask's fluid nodes can fill (eta_t = 1): what a memory bound reads
    of a :class:`~solver.tiling.Tiling` (shape, tile counts, state bytes), without tiling."""

    shape: tuple[int, ...]
    a: int
    n_fluid: int

    @property
    def ndim(self) -> int:
        """Dimensions of the box."""
        return len(self.shape)

    @property
    def eta_t(self) -> float:
        """Fluid share of the tiled nodes: 1, as packed as tiles can be."""
        return 1.0

    @property
    def nodes_per_tile(self) -> int:
        """Nodes per tile, a**d."""
        return self.a ** self.ndim

    @property
    def n_tiles(self) -> int:
        """Tiles of perfectly packed fluid nodes."""
        return -(-self.n_fluid // self.nodes_per_tile)

    def memory_bytes(self, q: int, value_bytes: int, copies: int = 2) -> int:
        """State bytes of the packed tiles (tile map and list left out: a lower bound)."""
        return self.n_tiles * self.nodes_per_tile * (copies * q * value_bytes + 1)


def precheck_memory(solid: np.ndarray, config: SimulationConfig, backend: Any,
                    reclaimable: int = 0) -> MemoryVerdict:
    """The verdict for a lower bound of the run's need, from the mask alone (bytes).

    Tiling a large geometry (the offset search, ~30 bytes per voxel) costs memory itself, so
    a case that cannot fit even with perfectly packed tiles is refused before it is tiled;
    :func:`assess_memory` then judges the real tiling.
    """
    solid = np.asarray(solid)
    lattice = get_lattice(config.lattice)
    a = config.tile_edge or default_tile_edge(solid.ndim)
    n_fluid = int(solid.size - np.count_nonzero(solid))
    bound = Problem(lattice=lattice, tiling=_PackedTiles(tuple(solid.shape), a, n_fluid),
                    rates=None, force=np.zeros(lattice.d), incompressible=True,
                    rho0=float(config.initial_density), periodic=(True,) * solid.ndim,
                    dtype=np.dtype(config.precision), collision=config.collision_model(),
                    storage_kind=config.storage, streaming=config.streaming)
    return assess_memory(bound, backend, reclaimable)
