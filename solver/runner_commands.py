"""The commands of a :class:`~solver.runner.SimulationRunner`, called from any thread.

Each command is a message on the runner's queue (the thread that owns the simulation applies
them in order); nothing here touches the simulation itself. Kept apart from the runner's loop so
that the public API reads on one page.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from .config import SimulationConfig
from .problem import Problem
from .simulation import Simulation
from .snapshot import SliceView

__all__ = ["RunnerCommands"]

_SENDING = threading.Lock()


class RunnerCommands:
    """Queue-backed commands; the runner provides ``_queue``, ``_stop_event``, ``_thread``
    and ``_launch``."""

    _queue: queue.Queue
    _stop_event: threading.Event
    _thread: threading.Thread | None

    def _launch(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Run continuously (starts the thread on first use)."""
        self._send("run")

    def pause(self) -> None:
        """Stop stepping; the state is kept."""
        self._send("pause")

    def step(self, n: int = 1) -> None:
        """Advance ``n`` time steps and publish, then stay paused."""
        self._send("step", int(n))

    def reset(self) -> None:
        """Restart the current geometry and configuration from rest (paused)."""
        self._send("reset")

    def set_config(self, config: SimulationConfig) -> None:
        """Rebuild with ``config``; the flow carries over when the tiling is unchanged."""
        self._send("config", config)

    def load_geometry(self, geometry: Any, config: SimulationConfig | None = None,
                      problem: Problem | None = None) -> None:
        """Replace the geometry (and optionally the configuration); restarts from rest, paused.

        ``problem``: the :class:`~solver.problem.Problem` of this geometry and configuration
        already built (the app's preview): its tiling is reused, no second offset search.
        """
        self._send("geometry", (geometry, config, problem))

    def set_view(self, view: SliceView) -> None:
        """Choose the quantity and cut that snapshots carry; publishes at once."""
        if not isinstance(view, SliceView):
            raise TypeError(f"set_view needs a SliceView, got {view!r}.")
        self._send("view", view)

    def set_probes(self, probes: Any) -> None:
        """Sample a :class:`solver.probes.ProbeSet` with every snapshot (an empty one: stop);
        publishes at once."""
        self._send("probes", probes)

    def set_flow3d(self, name: str | None, interval: float = 2.0) -> None:
        """Publish the coarse 3D flow (:mod:`solver.coarse_flow`) with the scalar ``name``
        every ``interval`` seconds of running (None: stop); publishes at once."""
        self._send("flow3d", None if name is None else (name, float(interval)))

    def submit(self, fn: Callable[[Simulation], Any]) -> Future:
        """Run ``fn(simulation)`` on the runner thread; the Future holds its result."""
        future: Future = Future()
        self._send("call", (fn, future))
        return future

    def stop(self, timeout: float = 1.0) -> bool:
        """End the thread and free the simulation's memory; True if it ended within ``timeout``."""
        self._stop_event.set()
        self._queue.put(("stop", None))
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def __enter__(self) -> RunnerCommands:
        self._launch()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def sent(self) -> int:
        """Commands sent so far; a snapshot whose ``applied`` equals it has applied them all."""
        return getattr(self, "_sent", 0)

    def _send(self, command: str, payload: Any = None) -> None:
        with _SENDING:  # numbered in queue order, whichever thread sends
            self._sent = self.sent + 1
            self._queue.put((command, payload))
        self._launch()
