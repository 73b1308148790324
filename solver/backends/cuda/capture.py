"""The one lock of device-wide CUDA calls that must not meet a graph capture on another thread.

Held while a stream is captured into a CUDA graph, while a kernel module is loaded and while
the memory pool returns its blocks to the device: runs on other threads (the session's runner,
the rock tab's k tensor) share the device, and a cudaFree synchronises it, which a capture on
another thread's stream must not meet. No CuPy here, so the CPU tests' fake CuPy can use it.
"""

from __future__ import annotations

import threading

__all__ = ["CAPTURE_LOCK"]

CAPTURE_LOCK = threading.RLock()
