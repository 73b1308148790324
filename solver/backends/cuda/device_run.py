"""The one protocol of a run on the GPU: what the CuPy backend, a distributed rank and the
readers of a run ask of its device state, whichever storage the execution plan chose.

Two implementations: :class:`~.tiled_run.TiledRun` (every node of the non-empty tiles) and
:class:`~.compact_run.CompactRun` (fluid nodes only, popcount slots). Both step through the one
graph launcher (:class:`~.capture.RunGraphs`, :func:`~.capture.replay_timed`), hand their
populations out through the one readout below (the tiled XYZ layout, decoded, chunk by chunk;
chosen nodes straight from the stored layout) and are read and written by the backend through
the one state access (:class:`~.state_access.StateAccess`, which only delegates here). A
distributed rank (:class:`~.phases.CupyPhases`) steps tile ranges and addresses its halo
through the same protocol. No CuPy here: the CPU tests check the shape.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from ...problem import Problem
from ..base import NodeIndex

__all__ = ["DeviceRun"]


@runtime_checkable
class DeviceRun(Protocol):
    """A run's populations on the device, stepped and read whatever its storage."""

    #: The problem it runs.
    problem: Problem
    #: Which copy (two copies) or phase (in place) holds the latest populations.
    current: int
    #: Whether one copy is updated in place (AA pattern, :mod:`.streaming`).
    in_place: bool
    #: The stored copies, indexed by copy (``f[c].reshape(-1)``: the flat copy a halo
    #: index of :meth:`value_index` addresses).
    f: Any
    #: The stream its steps run on (None: host arrays, plain launches).
    stream: Any
    #: Its captured CUDA graphs (:class:`~.capture.RunGraphs`).
    graphs: Any
    #: The openings' pass (:mod:`.iolet_launch`), None without driven openings.
    iolets: Any
    #: Tiles per readout chunk: all of them where reading converts nothing (tiled), fewer
    #: where it does (compact: bounded temporaries, :mod:`.compact_readout`).
    readout_tiles: int

    # -- stepping (the one graph launcher) ---------------------------------------------------
    def step(self, n: int = 1) -> float:
        """Advance ``n`` steps (captured graphs where ``n`` allows); their seconds."""

    def launch_tiles(self, first: int, end: int) -> None:
        """Enqueue one full step of tiles ``[first, end)`` on the current stream, from the
        current copy into the other, without swapping them (a distributed rank's phase)."""

    def load_range_kernels(self, ranges: tuple[tuple[int, int], ...]) -> None:
        """Compile and load every kernel :meth:`launch_tiles` launches over the tile ranges
        ``ranges`` in either copy or phase, before a capture (which cannot load a module)."""

    def value_index(self, flat: np.ndarray) -> np.ndarray:
        """Indices (int64) into a flat stored copy of tiled XYZ flat indices
        ``(tile q + i) a^d + node`` (a halo plan's)."""

    # -- the one readout ---------------------------------------------------------------------
    def latest(self) -> Any:
        """The copy holding the latest populations exactly as stored, in the natural layout
        (in place in phase 1 it is first decoded where it lies), after the queued steps."""

    def populations(self) -> np.ndarray:
        """Latest populations, host float64 (n_tiles, q, a**d) in XYZ order, exact."""

    def device_populations(self, tiles: Any = None) -> Any:
        """Latest populations on the device (of ``tiles``: a slice or index array), XYZ order,
        arithmetic precision, solid nodes at rest."""

    def node_index(self, tile: np.ndarray, node: np.ndarray, solid: np.ndarray) -> NodeIndex:
        """Where host (tile, XYZ in-tile node) pairs lie in the stored copies."""

    def node_populations(self, index: NodeIndex) -> Any:
        """Latest populations (q, n) of ``index``'s nodes from the stored layout."""

    def fluid_populations(self, part: slice) -> Any:
        """Latest populations (q, k) of the fluid nodes ``part`` in tile order, read as stored
        (asked only where the readout is chunked)."""

    # -- writing -----------------------------------------------------------------------------
    def set_populations(self, f: Any, tiles: slice | None = None) -> None:
        """Overwrite the latest populations from tiled XYZ ones (host or device), rounded to
        the storage, of the tiles ``tiles`` only when given; solid nodes at rest."""

    def set_step(self, step: int) -> None:
        """Set the step counter (float16 stochastic rounding, the openings' soft start)."""

    def release(self) -> None:
        """Drop the device arrays (the backend frees its memory pool)."""
