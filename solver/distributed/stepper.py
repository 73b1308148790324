"""Stepping one rank's owned tiles in two phases, boundary first, on a backend state.

A :class:`RankStepper` wraps the state a backend allocated for a rank-local
:class:`~solver.problem.Problem` (owned + halo tiles, ``owned`` mask set). One time step is
``boundary()`` (stream-collide the owned tiles other ranks read; the copy being written is then
ready to pack), ``interior(progress)`` (the remaining owned tiles, calling ``progress`` between
pieces so that MPI can move the messages meanwhile) and ``finish()`` (the written copy becomes
the current one). The exchange reads and writes the flat copies through :meth:`target`.

:class:`NumpyPhases` runs the NumPy reference on subsets of its pull table: the nodes of the
boundary tiles (local tiles ``[0, n_b)``, listed first) form the boundary phase, the others
the interior. A view of the state with its own chunk list runs each phase with the backend's
own ``step``, so the arithmetic per node is the one of a single process, bit for bit.

Other backends plug in by providing ``phase_stepper(state, n_boundary_tiles, n_owned_tiles)``
returning an object with this interface. For the CuPy backend: one launch of the tiled kernel
over the tile range ``[0, n_b)`` on a communication stream and one over ``[n_b, n_owned)`` on
the compute stream (the kernel needs a first-tile argument); ``target`` returns the flat device
copy, ``device_index`` uploads an index array once and maps XYZ node order to the in-tile slot
layout (``slot = slots[i, node]``), ``synchronize`` waits for the communication stream before
the buffers go to MPI.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ..backends import Backend
from ..config import ConfigError
from .halo import RankLayout

__all__ = ["RankStepper", "NumpyPhases", "stepper_for", "node_chunks", "INTERIOR_PIECES"]

#: Interior pieces of the NumPy stepper; MPI requests are polled between pieces.
INTERIOR_PIECES = 4


class RankStepper(Protocol):
    """Two-phase stepping of one rank (see the module docstring)."""

    overlaps: bool

    def target(self) -> Any:
        """Flat view of the copy the running step writes (the next current copy)."""

    def current(self) -> Any:
        """Flat view of the copy holding the latest populations."""

    def device_index(self, index: np.ndarray) -> Any:
        """Host XYZ-layout flat indices as indices into the backend's flat copies."""

    def synchronize(self) -> None:
        """Block until values written so far are visible to the exchange."""

    def boundary(self) -> None:
        """Stream-collide the owned tiles that other ranks read."""

    def interior(self, progress: Callable[[], None]) -> None:
        """Stream-collide the other owned tiles, calling ``progress`` between pieces."""

    def finish(self) -> None:
        """Make the written copy the current one."""


def node_chunks(start: int, stop: int, size: int) -> list[slice]:
    """Slices of at most ``size`` nodes covering [start, stop), none of a single node.

    A lone node would take NumPy's matrix-vector path, whose sums may round differently from
    the matrix-matrix path; merging it into the previous chunk keeps results bitwise equal to a
    single process (whose chunks have the same property unless its fluid count is 1 mod size).
    """
    edges = list(range(start, stop, size)) + [stop]
    if len(edges) > 2 and edges[-1] - edges[-2] == 1:
        del edges[-2]
    return [slice(a, b) for a, b in zip(edges[:-1], edges[1:], strict=True) if b > a]


class NumpyPhases:
    """Boundary / interior phases on a NumPy backend state (see the module docstring)."""

    overlaps = True

    def __init__(self, backend: Backend, state: Any, layout: RankLayout) -> None:
        from ..backends.numpy_backend import CHUNK_NODES

        self.backend, self.state = backend, state
        # Phase of every pull-table node; runs of one phase are chunked like the backend does.
        boundary = state.problem.pull_table.tile < layout.n_boundary
        edges = [0, *(np.flatnonzero(np.diff(boundary)) + 1), boundary.size]
        phases: dict[bool, list[slice]] = {True: [], False: []}
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            phases[bool(boundary[lo])] += node_chunks(int(lo), int(hi), CHUNK_NODES)
        inner = phases[False]
        pieces = np.array_split(np.arange(len(inner)), min(INTERIOR_PIECES, len(inner)) or 1)
        self._boundary = phases[True]
        self._interior = [[inner[k] for k in piece] for piece in pieces if piece.size]
        self._view = dataclasses.replace(state, chunks=[])  # shares f with the state

    def target(self) -> np.ndarray:
        """Flat view of the copy being written."""
        return self.state.f[1 - self.state.current].reshape(-1)

    def current(self) -> np.ndarray:
        """Flat view of the latest copy."""
        return self.state.f[self.state.current].reshape(-1)

    def device_index(self, index: np.ndarray) -> np.ndarray:
        """Host indices are the backend's indices."""
        return np.ascontiguousarray(index, dtype=np.intp)

    def synchronize(self) -> None:
        """NumPy has finished when it returns."""

    def _run(self, chunks: list[slice]) -> None:
        if chunks:
            self._view.chunks = chunks
            self._view.current = self.state.current
            self.backend.step(self._view, 1)

    def boundary(self) -> None:
        """Owned boundary tiles, f[current] -> f[1 - current]."""
        self._run(self._boundary)

    def interior(self, progress: Callable[[], None]) -> None:
        """Owned interior tiles in pieces, polling ``progress`` between them."""
        for piece in self._interior:
            self._run(piece)
            progress()

    def finish(self) -> None:
        """Swap the copies."""
        self.state.current = 1 - self.state.current


def stepper_for(backend: Backend, state: Any, layout: RankLayout) -> RankStepper:
    """The two-phase stepper of ``backend`` for a rank-local state."""
    if backend.name == "numpy":
        return NumpyPhases(backend, state, layout)
    factory = getattr(backend, "phase_stepper", None)
    if factory is None:
        raise ConfigError(f"The {backend.name} backend cannot run distributed yet (it has no "
                          "phase_stepper; see solver/distributed/stepper.py); use "
                          "backend='numpy' under MPI.")
    return factory(state, layout.n_boundary, layout.n_owned)
