"""The one lock of device-wide CUDA calls that must not meet a graph capture on another thread.

Held while a stream is captured into a CUDA graph, while a kernel module is loaded and while
the memory pool returns its blocks to the device: runs on other threads (the session's runner,
the rock tab's k tensor) share the device, and a cudaFree synchronises it, which a capture on
another thread's stream must not meet. No CuPy here, so the CPU tests' fake CuPy can use it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CAPTURE_LOCK", "capture_graph"]

log = logging.getLogger(__name__)

CAPTURE_LOCK = threading.RLock()


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
