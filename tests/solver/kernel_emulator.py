"""Run the generated CUDA kernels on the CPU: g++, one std::thread per CUDA thread.

The kernel source is compiled unchanged behind a small shim (``threadIdx``/``blockIdx`` per
thread, ``__syncthreads`` and ``__syncwarp`` as std::barrier, ``__ballot_sync`` of full warps
through a per-warp word between warp barriers, the dynamic shared memory as one global array;
for float16 storage, g++'s ``_Float16`` and ``std::bit_cast`` in place of the PTX conversions
and bit casts), and blocks run one after another (in reverse order on request: in-place kernels
must not depend on it). A warp that does not reach a warp barrier or ballot with all 32 lanes
hangs here, as it would be undefined on the GPU. It is slow and only meant for small test
geometries, but it checks the real kernel text -- indexing, periodic wrap, layouts, collision,
the in-place AA pattern, float16 storage -- against the NumPy reference on machines without a
GPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import tempfile
from dataclasses import replace
from functools import cache
from pathlib import Path

import numpy as np

from solver.backends.cuda.kernels import (
    KernelVariant,
    kernel_source,
    real_args,
    real_param_names,
)
from solver.backends.cuda.streaming import next_phase
from solver.backends.cuda.tables import (
    device_tables,
    geometry_args,
    launch_shape,
    physics_args,
    slot_table,
)
from solver.problem import Problem

from .gxx_cache import compile_once
from .porous_cases import as_stored

__all__ = ["compiler", "load", "EmulatedKernel", "emulate"]

_SHIM = r"""
#include <cmath>
using std::sqrt;  // CUDA's sqrt overloads (RR's Smagorinsky branch)
#include <atomic>
#include <barrier>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>
#include <cstddef>
struct emu_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local emu_dim3 threadIdx, blockIdx;
static emu_dim3 blockDim;
static std::barrier<>* emu_block;
static std::vector<std::unique_ptr<std::barrier<>>> emu_warps;
static inline void __syncthreads() { emu_block->arrive_and_wait(); }
static inline void __syncwarp() { emu_warps[threadIdx.x / 32]->arrive_and_wait(); }
static std::atomic<unsigned> emu_votes[32];  // one ballot word per warp of a block
static inline unsigned __ballot_sync(unsigned mask, bool pred)
{
    if (mask != 0xffffffffu) std::abort();  // the kernel only votes with whole warps
    const unsigned w = threadIdx.x / 32;
    __syncwarp();  // every lane has read the previous vote
    if (threadIdx.x % 32 == 0) emu_votes[w].store(0u);
    __syncwarp();
    if (pred) emu_votes[w].fetch_or(1u << (threadIdx.x % 32));
    __syncwarp();
    return emu_votes[w].load();
}
extern "C" { alignas(16) int lbm_smem[1 << 16]; }
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(...)
#define __maxnreg__(...)
template <class T> static inline T __ldg(const T* p) { return *p; }  // read-only cache: none
#include <bit>
#define LBM_HOST_HALF
static inline float lbm_host_half_to_float(unsigned short h)
{ return (float)std::bit_cast<_Float16>(h); }
static inline unsigned short lbm_host_float_to_half(float f)  // round to nearest even
{ return std::bit_cast<unsigned short>((_Float16)f); }
static inline unsigned int lbm_host_float_bits(float f) { return std::bit_cast<unsigned int>(f); }
static inline float lbm_host_bits_float(unsigned int u) { return std::bit_cast<float>(u); }
"""

_LAUNCH = r"""
extern "C" void emu_run(int grid, int block, int reverse, const STORE* fin, STORE* fout,
    const unsigned char* types, const int* tiles, const int* tile_map,
    const unsigned long long* fluid_masks, const unsigned char* wall_group, const REAL* bc,
    const int* ia, const REAL* ra,
    unsigned int* seeds)
{
    blockDim.x = block;
    std::barrier<> bar(block), end(block);
    emu_block = &bar;
    emu_warps.clear();
    for (int w = 0; w < block / 32; ++w) emu_warps.emplace_back(new std::barrier<>(32));
    std::vector<std::thread> threads;
    for (int t = 0; t < block; ++t) {
        threads.emplace_back([&, t] {
            threadIdx.x = t;
            for (int b = 0; b < grid; ++b) {
                blockIdx.x = reverse ? grid - 1 - b : b;
                KERNEL(fin, fout, types, tiles, tile_map, fluid_masks, wall_group, bc, ARGS);
                end.arrive_and_wait();  // shared memory is reused by the next block
            }
        });
    }
    for (auto& th : threads) th.join();
}
"""


def compiler() -> str | None:
    """Path of a C++20 compiler (g++), or None."""
    return shutil.which("g++")


@cache
def load(source: str, name: str, real: str, n_reals: int, store: str | None = None):
    """Compile kernel ``source`` (kernel ``name``, scalar type ``real``) for the CPU; its runner.

    The runner takes (blocks, threads, reverse, fin, fout, types, tiles, tile_map, fluid_masks,
    wall_group, bc, ints, reals, seeds) with the 12 integer and ``n_reals`` floating arguments
    of the kernel packed in two arrays; ``reverse`` runs the blocks last to first. ``store``
    is the C type of the stored populations (default ``real``); with 'unsigned short'
    (float16 storage) the kernel also gets ``seeds``, its step-counter pair.
    """
    args = ", ".join([f"ia[{k}]" for k in range(12)] + [f"ra[{k}]" for k in range(n_reals)]
                     + (["seeds"] if store == "unsigned short" else []))
    src = (_SHIM + source + f"\n#define REAL {real}\n#define STORE {store or real}\n"
           f"#define KERNEL {name}::{name}\n#define ARGS {args}\n" + _LAUNCH)
    key = hashlib.sha1(src.encode()).hexdigest()[:16]
    lib = Path(tempfile.gettempdir()) / "lbm_kernel_emulator" / f"{name}_{key}.so"
    compile_once(src, lib, ["-O1", "-std=c++20", "-shared", "-fPIC", "-pthread", "-w"],
                 compiler())
    return ctypes.CDLL(str(lib)).emu_run


def _runner(variant: KernelVariant):
    real = "double" if variant.precision == "float64" else "float"
    return load(kernel_source(variant), variant.name, real, len(real_param_names(variant)),
                "unsigned short" if variant.half else None)


class EmulatedKernel:
    """The populations in device layout and storage (two copies, or one in place), stepped by
    the kernel.

    ``current`` is the copy with the latest values, or in place the phase of the one copy
    (:mod:`solver.backends.cuda.streaming`), and ``seeds`` the float16 step-counter pair,
    exactly as in the CuPy backend's state.
    """

    def __init__(self, problem: Problem, tiles_per_block: int = 1,
                 reverse_blocks: bool = False, wide_sources: bool | None = None) -> None:
        self.problem, self.tpb, self.reverse = problem, tiles_per_block, reverse_blocks
        self.wide_sources = wide_sources  # None: as the problem needs (64-bit halo sources)
        self.tables = device_tables(problem)
        self.reals = np.array(physics_args(problem), dtype=problem.dtype)
        lat, a = problem.lattice, problem.tiling.a
        self.slots = slot_table(lat.name, problem.layout, a)
        self.seeds = np.zeros(2, dtype=np.uint32)  # float16 storage: the kernel's step counter
        self.f = np.empty((problem.population_copies, problem.tiling.n_tiles, lat.q, a**lat.d),
                          dtype=problem.storage_dtype)
        self.current = 0

    @property
    def in_place(self) -> bool:
        """Whether one copy is updated in place (AA pattern)."""
        return self.f.shape[0] == 1

    def set_populations(self, f: np.ndarray) -> None:
        """Store XYZ-ordered populations (n_tiles, q, a**d) in device layout and storage
        (rounded to nearest), solid nodes as they are too (tests poison them); :func:`emulate`
        applies the backends' rule."""
        if self.in_place and self.current == 1:
            self.step(1, "swap")  # natural layout, the step counter with it (as CuPy does)
        q = np.arange(self.problem.lattice.q)[:, None]
        self.f[self.current][:, q, self.slots] = self.problem.storage.encode(f)

    def set_step(self, step: int) -> None:
        """Set the float16 stochastic-rounding step counter the next launch reads."""
        self.seeds[self.current] = step

    def populations(self) -> np.ndarray:
        """Latest populations in XYZ order, decoded, float64 (in place: decoded to phase 0
        first)."""
        if self.in_place and self.current == 1:
            self.step(1, "swap")
        q = np.arange(self.problem.lattice.q)[:, None]
        stored = self.f[0 if self.in_place else self.current][:, q, self.slots]
        return self.problem.storage.decode(stored).astype(np.float64)

    def step(self, n: int = 1, mode: str = "full", tiles: tuple[int, int] | None = None
             ) -> None:
        """Advance n launches of ``mode`` over the tile range ``tiles`` (default all)."""
        first, end = tiles if tiles is not None else (0, self.problem.tiling.n_tiles)
        ints = np.array(geometry_args(self.problem, (first, end)), dtype=np.int32)
        blocks, threads, _ = launch_shape(self.problem, self.tpb, mode, end - first)
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        for _ in range(n):
            variant = KernelVariant.for_problem(self.problem, mode, self.current)
            if self.wide_sources is not None:
                variant = replace(variant, wide_sources=self.wide_sources).canonical()
            run = _runner(variant)
            reals = np.array(real_args(variant, list(self.reals)), dtype=self.problem.dtype)
            if self.in_place:
                src = dst = self.f[0]
            else:
                src, dst = self.f[self.current], self.f[1 - self.current]
            run(ctypes.c_int(blocks), ctypes.c_int(threads), ctypes.c_int(self.reverse),
                ptr(src), ptr(dst), *(ptr(t) for t in self.tables.values()), ptr(ints),
                ptr(reals), ptr(self.seeds))
            self.current = next_phase(self.problem.streaming, mode, self.current)


def emulate(problem: Problem, f0: np.ndarray, steps: int, tiles_per_block: int = 1,
            mode: str = "full", reverse_blocks: bool = False,
            wide_sources: bool | None = None) -> np.ndarray:
    """Populations (XYZ, float64) after ``steps`` emulated launches from ``f0``.

    Started as the backends start: every copy at rest, then ``f0`` with the rest equilibrium
    in its solid nodes (``set_populations``, :mod:`solver.backends.base`).
    """
    emu = EmulatedKernel(problem, tiles_per_block, reverse_blocks, wide_sources)
    emu.set_populations(problem.initial_populations())  # every copy at rest, as allocate()
    emu.f[:] = emu.f[emu.current]
    emu.set_populations(as_stored(problem, f0))
    emu.step(steps, mode)
    return emu.populations()
