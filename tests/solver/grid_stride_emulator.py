"""Run grid-stride CUDA kernels (warp shuffles, block sums, atomics) on the CPU under g++.

One std::thread per CUDA thread of a block, blocks one after another; ``__shfl_down_sync`` of
doubles through a per-warp slot array between warp barriers, ``__syncthreads`` as a block
barrier, atomics behind one lock, ``__shared__`` arrays as statics (blocks run one at a time).
Slow: for the small test systems of the rock kernels' tests only."""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import tempfile
from functools import cache
from pathlib import Path

import numpy as np

from .gxx_cache import compile_once

__all__ = ["compiler", "load", "launch_args", "run_template"]

SHIM = r"""
#include <cmath>
#include <algorithm>
#include <barrier>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
using std::sqrt;
using std::isfinite;
using std::fmax;
using std::min;
using std::max;
struct emu_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local emu_dim3 threadIdx, blockIdx;
static emu_dim3 blockDim, gridDim;
static std::barrier<>* emu_block;
static std::vector<std::unique_ptr<std::barrier<>>> emu_warps;
static double emu_lanes[1024];
static std::mutex emu_atomic;
static inline void __syncthreads() { emu_block->arrive_and_wait(); }
static inline double __shfl_down_sync(unsigned, double v, int o)
{
    auto& warp = *emu_warps[threadIdx.x / 32];
    emu_lanes[threadIdx.x] = v;
    warp.arrive_and_wait();
    const unsigned lane = threadIdx.x % 32;
    const double out = lane + o < 32 ? emu_lanes[threadIdx.x + o] : v;
    warp.arrive_and_wait();
    return out;
}
template <class T> static inline T atomicAdd(T* a, T v)
{ std::lock_guard<std::mutex> g(emu_atomic); T old = *a; *a += v; return old; }
template <class T> static inline T atomicMax(T* a, T v)
{ std::lock_guard<std::mutex> g(emu_atomic); T old = *a; if (v > old) *a = v; return old; }
static inline long long __double_as_longlong(double v)
{ long long out; std::memcpy(&out, &v, 8); return out; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
"""

RUN = r"""
template <class F> static void emu_run(int grid, int block, F f)
{
    blockDim.x = block; gridDim.x = grid;
    std::barrier<> bar(block), end(block);
    emu_block = &bar;
    emu_warps.clear();
    for (int w = 0; w < (block + 31) / 32; ++w) emu_warps.emplace_back(new std::barrier<>(32));
    std::vector<std::thread> threads;
    for (int t = 0; t < block; ++t)
        threads.emplace_back([&, t] {
            threadIdx.x = t;
            for (int b = 0; b < grid; ++b) { blockIdx.x = b; f(); end.arrive_and_wait(); }
        });
    for (auto& th : threads) th.join();
}
"""


def compiler() -> str | None:
    """Path of a C++20 compiler (g++), or None."""
    return shutil.which("g++")


def run_template(name: str, params: str, args: str) -> str:
    """An ``extern "C" run_<name>(grid, block, params)`` wrapper launching kernel ``name``."""
    return (f'extern "C" void run_{name}(int g, int b, {params})\n'
            f"{{ emu_run(g, b, [&] {{ {name}({args}); }}); }}\n")


@cache
def load(source: str, wrappers: str, stem: str) -> ctypes.CDLL:
    """Compile kernel ``source`` behind the shim with the ``wrappers`` (:func:`run_template`)."""
    src = SHIM + source + RUN + wrappers
    key = hashlib.sha1(src.encode()).hexdigest()[:16]
    lib = Path(tempfile.gettempdir()) / "lbm_kernel_emulator" / f"{stem}_{key}.so"
    compile_once(src, lib, ["-O1", "-std=c++20", "-shared", "-fPIC", "-pthread", "-w"],
                 compiler())
    return ctypes.CDLL(str(lib))


def launch_args(args: tuple) -> list:
    """ctypes values of kernel arguments: arrays as pointers, NumPy scalars as their C type."""
    out = []
    for a in args:
        if isinstance(a, np.ndarray):
            out.append(ctypes.c_void_p(a.ctypes.data))
        elif isinstance(a, np.int64):
            out.append(ctypes.c_longlong(int(a)))
        elif isinstance(a, np.int32):
            out.append(ctypes.c_int(int(a)))
        else:
            out.append(ctypes.c_double(float(a)))
    return out
