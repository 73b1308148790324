"""The CUDA device through CuPy: whether it is usable, its name, the measured copy bandwidth,
and the kernels compiled for it by NVRTC (once per canonical variant and device)."""

from __future__ import annotations

from functools import cache

import cupy as cp
import numpy as np

from ..base import DeviceInfo
from .capture import CAPTURE_LOCK
from .kernels import KernelVariant, kernel_source

__all__ = ["probe_device", "device_name", "compile_kernel", "copy_bandwidth", "device_info",
           "free_pool", "ATTR_MEMORY_CLOCK_KHZ", "ATTR_BUS_WIDTH_BITS", "CAPTURE_LOCK"]

#: cudaDeviceAttr values (CUDA 13 dropped the matching cudaDeviceProp fields).
ATTR_MEMORY_CLOCK_KHZ, ATTR_BUS_WIDTH_BITS = 36, 37
_NVRTC_OPTIONS = ("-std=c++17",)


def probe_device() -> tuple[bool, str]:
    """Whether a CUDA device is usable through CuPy, and a reason or its name."""
    try:
        count = cp.cuda.runtime.getDeviceCount()
        if count < 1:
            return False, "no CUDA device was found"
        float(cp.ones(4, dtype=np.float32).sum())  # a real allocation and launch
        return True, device_name()
    except Exception as exc:  # a missing driver surfaces as several CUDA/CuPy error types
        return False, f"CUDA is not usable ({exc.__class__.__name__}: {exc})"


def device_name() -> str:
    """Name of the current CUDA device."""
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


@cache
def _compiled(variant: KernelVariant, device: int):
    module = cp.RawModule(code=kernel_source(variant), options=_NVRTC_OPTIONS)
    return module.get_function(variant.name)


def compile_kernel(variant: KernelVariant):
    """The compiled kernel of ``variant`` on the current device (compiled once, cached)."""
    with CAPTURE_LOCK:
        return _compiled(variant.canonical(), cp.cuda.Device().id)


def free_pool() -> None:
    """Return CuPy's unused memory-pool blocks to the device (never during another capture)."""
    with CAPTURE_LOCK:
        cp.get_default_memory_pool().free_all_blocks()


@cache
def copy_bandwidth(device: int = 0, nbytes: int = 1 << 30, repeats: int = 10) -> float:
    """Measured device-to-device copy bandwidth, bytes read + written per second (cached)."""
    with cp.cuda.Device(device):
        free = cp.cuda.runtime.memGetInfo()[0]
        nbytes = int(min(nbytes, free // 8)) // 1024 * 1024
        src = cp.full(nbytes // 4, 1.5, dtype=np.float32)
        dst = cp.empty_like(src)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for k in range(repeats + 2):
            start.record()
            dst[...] = src
            end.record()
            end.synchronize()
            if k >= 2:  # warm-up copies stay out of the numbers
                times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        del src, dst
        return 2.0 * nbytes / float(np.median(times))


def device_info() -> DeviceInfo:
    """GPU name, memory (bytes), theoretical and measured copy bandwidth (bytes/s)."""
    dev = cp.cuda.Device().id
    free, total = cp.cuda.runtime.memGetInfo()
    try:
        clock = cp.cuda.runtime.deviceGetAttribute(ATTR_MEMORY_CLOCK_KHZ, dev) * 1e3
        bus = cp.cuda.runtime.deviceGetAttribute(ATTR_BUS_WIDTH_BITS, dev)
        peak = 2.0 * clock * bus / 8.0  # double data rate
    except Exception:  # attribute missing on some drivers: report unknown, not a guess
        peak = None
    return DeviceInfo(name=device_name(), memory=int(total), memory_used=int(total - free),
                      peak_bandwidth=peak, copy_bandwidth=copy_bandwidth(dev))
