"""Stepping one rank's owned tiles in two phases, boundary first, on a backend state.

A :class:`RankStepper` owns the state a backend allocated for a rank-local
:class:`~solver.problem.Problem` (owned + halo tiles, ``owned`` mask set). One time step is
``boundary()`` (stream-collide the owned tiles other ranks read; the copy being written is then
ready to pack), ``interior(progress)`` (the remaining owned tiles, calling ``progress`` between
pieces so that MPI can move the messages meanwhile) and ``finish()`` (the written copy becomes
the current one). The exchange reads and writes the flat copies through :meth:`target`.

:class:`NumpyPhases` allocates one NumPy state per phase — the rank-local problem with
``owned`` set to the boundary tiles (local tiles ``[0, n_b)``), or to one piece of the
interior — and lets all of them share one pair of copies. Each phase is then an ordinary
``backend.step(part, 1)`` on its own pull table, so the arithmetic per node (and whatever the
backend does per chunk, such as boundary conditions) is the one of a single process. Results are
bitwise equal to one process as long as the backend's arithmetic does not depend on how nodes
are grouped into chunks; NumPy's BGK/TRT collision does not, except for a chunk of a single node
(matrix-vector instead of matrix-matrix product), which a table of ``1 mod CHUNK_NODES`` nodes
produces, in one process as in a phase.

The exchange moves halo values through the stepper: ``device_index`` turns the plan's XYZ flat
indices into the backend's (once), ``host_buffer`` allocates the host side of a message,
``gather`` packs values into it and ``scatter`` unpacks them, ``synchronize`` makes packed
values visible to MPI and ``idle`` waits for all queued work (before the host reads the state
or a clock). Steppers of GPU backends also offer the NCCL transport's device side:
``device_buffer`` (device message buffers), ``gather_on_device`` / ``scatter_on_device``
(queued on ``halo_stream``, the stream NCCL sends and receives on).

Other backends plug in by providing ``phase_stepper(problem, n_boundary_tiles, n_owned_tiles)``
that allocates the rank-local problem and returns an object with this interface. The CuPy one
(:mod:`solver.backends.cuda.phases`) launches the tiled kernel over the tile range ``[0, n_b)``
on a high-priority communication stream and over ``[n_b, n_owned)`` on the compute stream,
both from ``boundary()``, so the interior is queued on the GPU before the host waits for the
packed halo or for MPI; ``interior()`` then only polls MPI.

A stepper may also capture whole steps: ``capture_steps(run)`` returns a replayable graph of
the work ``run`` enqueues (running nothing) and ``replay(graph)`` enqueues it; with an exchange
that is ``capturable`` (NCCL), :class:`~solver.distributed.replay.StepGraphs` then runs long
runs as replays. The CuPy stepper captures CUDA graphs; the NumPy one cannot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ..backends import Backend
from ..config import ConfigError
from ..problem import Problem
from .halo import RankLayout

__all__ = ["RankStepper", "NumpyPhases", "stepper_for", "tile_pieces", "INTERIOR_PIECES"]

#: Interior pieces of the NumPy stepper; MPI requests are polled between pieces.
INTERIOR_PIECES = 4


class RankStepper(Protocol):
    """Two-phase stepping of one rank (see the module docstring)."""

    overlaps: bool
    #: The backend state holding the rank's populations (for populations / set_populations).
    state: Any

    def target(self) -> Any:
        """Flat view of the copy the running step writes (the next current copy)."""

    def current(self) -> Any:
        """Flat view of the copy holding the latest populations."""

    def device_index(self, index: np.ndarray) -> Any:
        """Host XYZ-layout flat indices as indices into the backend's flat copies."""

    def host_buffer(self, n: int) -> np.ndarray:
        """Host array of ``n`` values of the storage dtype for messages (page-locked on GPUs)."""

    def gather(self, f: Any, index: Any, out: np.ndarray) -> None:
        """Start ``out[:] = f[index]`` (``index`` from :meth:`device_index`); complete after
        :meth:`synchronize`."""

    def scatter(self, f: Any, index: Any, values: np.ndarray) -> None:
        """``f[index] = values`` ordered before the next step; ``values`` is free on return."""

    def synchronize(self) -> None:
        """Block until the boundary tiles and gathered values are visible to the exchange."""

    def idle(self) -> None:
        """Block until every queued step and copy has finished."""

    def boundary(self) -> None:
        """Stream-collide the owned tiles that other ranks read."""

    def interior(self, progress: Callable[[], None]) -> None:
        """Stream-collide the other owned tiles, calling ``progress`` between pieces."""

    def finish(self) -> None:
        """Make the written copy the current one."""

    def set_step(self, step: int) -> None:
        """Set the step counter of the state (the openings' soft start and waveforms)."""

    def release(self) -> None:
        """Free the state."""


def tile_pieces(layout: RankLayout, pieces: int) -> list[tuple[int, int]]:
    """Local tile ranges: the boundary tiles, then the interior cut into ``pieces`` ranges of
    about equal fluid nodes (empty ranges dropped)."""
    fluid = (~layout.tiling.solid[: layout.n_owned]).sum(axis=1)
    interior = np.cumsum(fluid[layout.n_boundary:])
    cuts = np.searchsorted(interior, interior[-1] * np.arange(1, pieces) / pieces) \
        if interior.size else np.empty(0, int)
    edges = [0, layout.n_boundary, *(layout.n_boundary + cuts + 1), layout.n_owned]
    ranges = [(int(lo), int(hi)) for lo, hi in zip(edges[:-1], edges[1:], strict=True)]
    return [ranges[0]] + [r for r in ranges[1:] if r[1] > r[0]]


class NumpyPhases:
    """Boundary / interior phases on the NumPy backend (see the module docstring)."""

    overlaps = True

    def __init__(self, backend: Backend, problem: Problem, layout: RankLayout) -> None:
        self.backend = backend
        self._parts = []
        for lo, hi in tile_pieces(layout, INTERIOR_PIECES):
            owned = np.zeros(layout.tiling.n_tiles, dtype=bool)
            owned[lo:hi] = True
            # The openings' pass rewrites all of the rank's links at once, before the first
            # phase reads the copy (as one process computes every link from the unchanged
            # state): the boundary phase carries the rank's links, the others none.
            part = backend.allocate(dataclasses.replace(problem, owned=owned).use_iolets(
                None if self._parts else problem.iolets))
            if self._parts:
                part.f = self._parts[0].f  # every phase steps the same two copies
            self._parts.append(part)
        self.state = self._parts[0]
        self._current = self.state.current

    @property
    def pull_tables(self) -> list:
        """Pull tables of the phases (together: every owned fluid node once)."""
        return [part.problem.pull_table for part in self._parts]

    def target(self) -> np.ndarray:
        """Flat view of the copy being written."""
        return self.state.f[1 - self._current].reshape(-1)

    def current(self) -> np.ndarray:
        """Flat view of the latest copy."""
        return self.state.f[self._current].reshape(-1)

    def device_index(self, index: np.ndarray) -> np.ndarray:
        """Host indices are the backend's indices."""
        return np.ascontiguousarray(index, dtype=np.intp)

    def host_buffer(self, n: int) -> np.ndarray:
        """A plain host array of the storage dtype."""
        return np.empty(n, dtype=self.state.f.dtype)

    def gather(self, f: np.ndarray, index: np.ndarray, out: np.ndarray) -> None:
        """``out[:] = f[index]``."""
        np.take(f, index, out=out)

    def scatter(self, f: np.ndarray, index: np.ndarray, values: np.ndarray) -> None:
        """``f[index] = values``."""
        f[index] = values

    def synchronize(self) -> None:
        """NumPy has finished when it returns."""

    def idle(self) -> None:
        """NumPy has finished when it returns."""

    def _run(self, part) -> None:
        part.current = self._current  # step() reads f[current], writes f[1 - current], flips it
        self.backend.step(part, 1)

    def boundary(self) -> None:
        """Owned boundary tiles, f[current] -> f[1 - current]."""
        self._run(self._parts[0])

    def interior(self, progress: Callable[[], None]) -> None:
        """Owned interior tiles in pieces, polling ``progress`` between them."""
        for part in self._parts[1:]:
            self._run(part)
            progress()

    def finish(self) -> None:
        """Swap the copies."""
        self._current = 1 - self._current
        self.state.current = self._current

    def set_step(self, step: int) -> None:
        """Set every phase's step counter (float16 rounding, the openings' soft start)."""
        for part in self._parts:
            self.backend.set_step(part, step)

    def release(self) -> None:
        """Free the copies."""
        for part in self._parts:
            self.backend.release(part)


def stepper_for(backend: Backend, problem: Problem, layout: RankLayout) -> RankStepper:
    """Allocate ``problem`` (rank-local) on ``backend`` behind its two-phase stepper."""
    if backend.name == "numpy":
        return NumpyPhases(backend, problem, layout)
    factory = backend.phase_stepper
    if factory is None:
        raise ConfigError(f"The {backend.name} backend cannot run distributed yet (it has no "
                          "phase_stepper; see solver/distributed/stepper.py); use "
                          "backend='numpy' under MPI.")
    return factory(problem, layout.n_boundary, layout.n_owned)
