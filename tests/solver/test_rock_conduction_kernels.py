"""The fused CUDA conduction solve (solver.backends.cuda.conduction) against the NumPy one.

On the CPU its kernel text runs under g++ (one std::thread per CUDA thread, warp shuffles and
block barriers emulated, atomics behind a lock) through ``cg_solve``'s own host loop; on a GPU
machine the same solve runs on CuPy (``-m gpu``)."""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from solver.backends.cuda.conduction import SOURCE, cg_solve
from solver.rock.conduction import formation_factor

_SHIM = r"""
#include <cmath>
#include <barrier>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>
using std::sqrt;
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
static inline double atomicAdd(double* a, double v)
{ std::lock_guard<std::mutex> g(emu_atomic); double old = *a; *a += v; return old; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static thread_local  // per thread here; the kernels write it per warp
"""

_RUN = r"""
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
extern "C" {
void run_residual(int g, int b, const double* x, const int* links, const double* diag,
    const double* inv, const double* rhs, double* r, double* z, double* p, double* scal,
    long long n, int dirs)
{ emu_run(g, b, [&] { cg_residual(x, links, diag, inv, rhs, r, z, p, scal, n, dirs); }); }
void run_matvec(int g, int b, const double* p, const int* links, const double* diag, double* q,
    double* scal, const int* state, long long n, int dirs)
{ emu_run(g, b, [&] { cg_matvec(p, links, diag, q, scal, state, n, dirs); }); }
void run_update(int g, int b, double* x, double* r, double* z, const double* p, const double* q,
    const double* inv, double* scal, const int* state, long long n)
{ emu_run(g, b, [&] { cg_update(x, r, z, p, q, inv, scal, state, n); }); }
void run_scalars(int g, int b, double* scal, int* state, double limit, int cap)
{ emu_run(g, b, [&] { cg_scalars(scal, state, limit, cap); }); }
void run_direction(int g, int b, double* p, const double* z, const double* scal,
    const int* state, long long n)
{ emu_run(g, b, [&] { cg_direction(p, z, scal, state, n); }); }
}
"""


@cache
def _library():
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++ to run the CUDA kernel text on the CPU")
    # The kernels' shared arrays are per block on a GPU; here `static thread_local` gives one
    # per thread, so the block sum is emulated with a block-wide static array instead.
    source = SOURCE.replace("__shared__ double sa[32], sb[32];",
                            "static double sa[32], sb[32];")
    source = source.replace("__shared__ double sa[32];", "static double sa[32];")
    src = _SHIM + source + _RUN
    key = hashlib.sha1(src.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "lbm_kernel_emulator"
    folder.mkdir(exist_ok=True)
    lib = folder / f"conduction_{key}.so"
    if not lib.exists():
        cpp = folder / f"conduction_{key}.cpp"
        cpp.write_text(src)
        subprocess.run([compiler, "-O1", "-std=c++20", "-shared", "-fPIC", "-pthread", "-w",
                        "-o", str(lib), str(cpp)], check=True, capture_output=True)
    return ctypes.CDLL(str(lib))


def _emulated_launch(name: str, blocks: int, threads: int, args: tuple) -> None:
    lib = _library()
    c_args = []
    for a in args:
        if isinstance(a, np.ndarray):
            c_args.append(ctypes.c_void_p(a.ctypes.data))
        elif isinstance(a, np.int64):
            c_args.append(ctypes.c_longlong(int(a)))
        elif isinstance(a, np.int32):
            c_args.append(ctypes.c_int(int(a)))
        else:
            c_args.append(ctypes.c_double(float(a)))
    getattr(lib, "run_" + name.removeprefix("cg_"))(blocks, threads, *c_args)


def _system(solid: np.ndarray, axis: int):
    from solver.rock.conduction import _connected, _neighbours

    pore = _connected(~solid, axis, "wall")
    along, table = _neighbours(pore, axis, "wall")
    count, length = table.shape[1], solid.shape[axis]
    first = (along == 0).astype(float)
    last = (along == length - 1).astype(float)
    diagonal = 2.0 * (first + last) + (table != count).sum(axis=0)
    return diagonal, table, 2.0 * first, 1.0 - (along + 0.5) / length


def _pack(n: int = 12) -> np.ndarray:
    rng = np.random.default_rng(4)
    solid = rng.random((n, n, n)) < 0.3
    solid[:, n // 2, n // 2] = False  # one straight path at least
    return solid


def test_emulated_kernels_solve_as_the_numpy_conjugate_gradients():
    """Same iterations and iterate as the NumPy form (dot products summed in another order),
    on 2 blocks of 64 threads (two warps each: the block sums cross warps)."""
    from solver.rock.conduction import _solve

    diagonal, table, b, start = _system(_pack(), 0)
    x, iterations, residual = cg_solve(diagonal, table, b, start, 1e-8, 10_000, xp=np,
                                       launch=_emulated_launch, max_blocks=2, threads=64)
    ref, ref_iterations, ref_residual = _solve(np, diagonal, table, b, start, 1e-8, 10_000)
    assert abs(iterations - ref_iterations) <= 1 and residual < 1e-8
    np.testing.assert_allclose(x, ref, rtol=1e-7, atol=1e-9)
    capped = cg_solve(diagonal, table, b, start, 1e-8, 5, xp=np, launch=_emulated_launch,
                      max_blocks=2, threads=64)
    assert capped[1] == 5 and capped[2] > 1e-8


def test_emulated_kernels_stop_at_once_on_an_exact_start():
    """A straight channel's linear start is the solution: iteration 0."""
    solid = np.ones((10, 6, 6), bool)
    solid[:, 2:4, 2:4] = False
    diagonal, table, b, start = _system(solid, 0)
    x, iterations, _ = cg_solve(diagonal, table, b, start, 1e-8, 100, xp=np,
                                launch=_emulated_launch, max_blocks=2, threads=64)
    assert iterations == 0
    np.testing.assert_allclose(x, start)


@pytest.mark.gpu
def test_cupy_solve_gives_the_numpy_formation_factor():
    """On the GPU: F of a random pack from the fused kernels equals the NumPy solve's."""
    import importlib

    cupy = importlib.import_module("cupy")
    solid = _pack(24)
    reference = formation_factor(solid, 1)
    device = formation_factor(solid, 1, xp=cupy)
    assert device.formation_factor == pytest.approx(reference.formation_factor, rel=1e-9)
    assert abs(device.iterations - reference.iterations) <= 2
