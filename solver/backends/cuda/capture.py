"""The one lock of device-wide CUDA calls that must not meet a graph capture on another thread.

Held while a stream is captured into a CUDA graph, while a kernel module is loaded and while
the memory pool returns its blocks to the device: runs on other threads (the session's runner,
the rock tab's k tensor) share the device, and a cudaFree synchronises it, which a capture on
another thread's stream must not meet. No CuPy here, so the CPU tests' fake CuPy can use it.

The graph launcher both device runs share (:class:`~.tiled_run.TiledRun` and
:class:`~.compact_run.CompactRun`, :mod:`.device_run`): :class:`RunGraphs` holds a run's
captured graphs by key, :func:`capture_or_none` captures GRAPH_STEPS launches or falls back to
plain launches, :func:`replay_timed` replays the graph while whole graphs fit and launches the
rest one by one, timed by CUDA events.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CAPTURE_LOCK", "GRAPH_STEPS", "RunGraphs", "capture_graph", "capture_or_none",
           "replay_timed"]

log = logging.getLogger(__name__)

CAPTURE_LOCK = threading.RLock()
#: Launches per captured CUDA graph (even: two copies end where they began, in place the phase).
GRAPH_STEPS = 16


def capture_graph(stream: Any, launch: Callable[[], None], launches: int) -> Any:
    """A CUDA graph of ``launches`` calls of ``launch`` captured on ``stream`` under
    :data:`CAPTURE_LOCK` (nothing runs); raises what the capture raised, the stream out of
    capture. The kernels must have been launched once before: loading is not capturable."""
    with CAPTURE_LOCK, stream:
        stream.begin_capture()
        try:
            for _ in range(launches):
                launch()
        except BaseException:
            try:
                stream.end_capture()
            except Exception as exc:  # an invalidated capture also ends with an error
                log.debug("Ending the failed capture: %s", exc)
            raise  # the launch's error, not the end's
        return stream.end_capture()


def capture_or_none(stream: Any, launch: Callable[[], None], launches: int,
                    restore: Callable[[], None]) -> Any:
    """:func:`capture_graph`, or None (logged) where capture fails here: the caller then
    launches kernels one by one. ``restore()`` runs after either: capturing runs nothing, so
    the phase the launches advanced goes back."""
    try:
        return capture_graph(stream, launch, launches)
    except Exception as exc:  # capture unsupported here: plain launches from now on
        log.warning("CUDA graph capture failed (%s); launching kernels one by one.", exc)
        return None
    finally:
        restore()


def replay_timed(cuda: Any, stream: Any, n: int, graph: Any, launches: int,
                 launch: Callable[[], None]) -> float:
    """Seconds (CUDA events on ``stream``) of ``n`` launches: replays of ``graph`` (of
    ``launches`` each; None: none) while whole graphs fit, then ``launch()`` for the rest."""
    start, end = cuda.Event(), cuda.Event()
    done = 0
    with stream:
        start.record(stream)
        while graph is not None and n - done >= launches:
            graph.launch(stream)  # an even number of steps: the copies end where they began
            done += launches
        for _ in range(n - done):
            launch()
        end.record(stream)
    end.synchronize()
    return cuda.get_elapsed_time(start, end) / 1e3


class RunGraphs(dict):
    """One run's captured graphs (of GRAPH_STEPS launches each) by what they launch from;
    after a capture failed here, none for the rest of the run (plain launches)."""

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self.stream = stream
        #: Whether graphs are captured (no stream: host arrays, plain launches only).
        self.enabled = stream is not None

    def get_or_capture(self, key: Any, launch: Callable[[], None],
                       restore: Callable[[], None], prepare: Callable[[], None] | None = None
                       ) -> Any:
        """The graph of ``key``; a new key is captured (:func:`capture_or_none` of ``launch``
        and ``restore``) after ``prepare()`` (load the kernels: loading is not capturable).
        None where graphs are off or the capture failed."""
        if not self.enabled:
            return None
        if key not in self:
            if prepare is not None:
                prepare()
            graph = capture_or_none(self.stream, launch, GRAPH_STEPS, restore)
            if graph is None:
                self.enabled = False
                return None
            self[key] = graph
        return self[key]
