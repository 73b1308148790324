"""Run the generated opening-pass kernels (:mod:`solver.backends.cuda.iolets`) on the CPU.

The kernel text is compiled unchanged by g++ behind a tiny shim (one CUDA thread after another:
the kernels have no barriers; g++'s ``_Float16`` in place of the PTX half conversions), so the
tests check the real CUDA source against the NumPy pass on machines without a GPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import tempfile
from functools import cache
from pathlib import Path

import numpy as np

from solver.backends.cuda.iolets import iolet_plan, iolet_source, wave_columns

from .gxx_cache import compile_once

__all__ = ["emulated_pass"]

_SHIM = r"""
#include <bit>
#include <cmath>
using std::cos; using std::sin; using std::floor;
struct emu_dim3 { unsigned x = 0, y = 0, z = 0; };
static emu_dim3 threadIdx, blockIdx, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define LBM_HOST_HALF
"""

_RUN = r"""
extern "C" void emu_pass(int m, int n, store_t* f, const long long* own_j,
    const long long* donor, const long long* write, const long long* node_own,
    const int* link_node, real* node_u, const signed char* code, const int* dir,
    const real* value, const real* shift, real scale, real inv_scale, real* out, real* flux,
    long long* step, long long ramp_steps, const double* wave, double period,
    const int* wave_col, double* phase, int mw, int moment_threads)
{
    blockDim.x = 1;
    for (int t = 0; t < moment_threads; ++t) {
        blockIdx.x = t;
        iolet_moments(f, node_own, shift, inv_scale, node_u, n, step, phase, period);
    }
    for (int t = 0; t < m; ++t) {
        blockIdx.x = t;
        iolet_values(f, own_j, donor, code, dir, value, link_node, node_u, shift, inv_scale,
                     out, flux, m, n, step, ramp_steps, wave, wave_col, phase, mw);
    }
    for (int t = 0; t < m; ++t) {
        blockIdx.x = t;
        iolet_write(f, write, dir, out, shift, scale, m, step);
    }
}
"""


@cache
def _load(source: str):
    src = _SHIM + source + _RUN
    key = hashlib.sha1(src.encode()).hexdigest()[:16]
    lib = Path(tempfile.gettempdir()) / "lbm_iolet_emulator" / f"iolets_{key}.so"
    compile_once(src, lib, ["-O1", "-std=c++20", "-ffp-contract=off", "-shared", "-fPIC", "-w"])
    return ctypes.CDLL(str(lib)).emu_pass


def emulated_pass(problem, flat: np.ndarray, parity: int = 0,
                  slots: np.ndarray | None = None, step: int | None = None) -> np.ndarray:
    """Apply the kernel pass to the stored copy ``flat`` (1-D, in place) before step ``step``
    (the device counter's value, the soft start's clock; None: past the ramp); return the
    flux."""
    tables, lat, storage = problem.iolets, problem.lattice, problem.storage
    real = np.dtype(problem.dtype)
    plan = iolet_plan(tables, lat.q, problem.tiling.nodes_per_tile, slots, parity)
    run = _load(iolet_source(lat.name, real.name, storage.encoded, problem.incompressible,
                             tuple(float(x) for x in problem.force), float(tables.rho0),
                             tables.harmonics))
    arrays = [plan.own_j, plan.donor, plan.write, plan.node_own, plan.link_node,
              np.zeros((lat.d, max(plan.n_nodes, 1)), dtype=real)]
    code = np.ascontiguousarray(tables.code, dtype=np.int8)
    direction = np.ascontiguousarray(tables.direction, dtype=np.int32)
    value = np.ascontiguousarray(tables.value, dtype=real)
    shift = np.ascontiguousarray(storage.shift, dtype=real)
    out = np.zeros(tables.n_links, dtype=real)
    flux = np.zeros(tables.n_links, dtype=real)
    scalar = ctypes.c_double if real == np.float64 else ctypes.c_float
    step = tables.ramp_steps if step is None else step
    col, wave = wave_columns(tables)
    col, wave = np.ascontiguousarray(col), np.ascontiguousarray(wave, dtype=np.float64)
    phase = np.zeros(max(2 * tables.harmonics, 1))
    counter = np.array([step], dtype=np.int64)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    assert flat.flags.c_contiguous
    run(ctypes.c_int(tables.n_links), ctypes.c_int(plan.n_nodes), ptr(flat),
        *(ptr(a) for a in arrays), ptr(code),
        ptr(direction), ptr(value), ptr(shift), scalar(storage.scale),
        scalar(1.0 / storage.scale), ptr(out), ptr(flux), ptr(counter),
        ctypes.c_longlong(tables.ramp_steps), ptr(wave), ctypes.c_double(tables.wave_period),
        ptr(col), ptr(phase), ctypes.c_int(wave.shape[1] if wave.ndim == 2 else 0),
        ctypes.c_int(max(plan.n_nodes, tables.harmonics)))
    assert counter[0] == step + 1  # the write kernel advanced the clock once
    return flux
