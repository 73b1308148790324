"""CUDA source of the Windkessel outlets' update in the openings' pass (no CuPy here).

Three tiny kernels run after ``iolet_write`` each step (captured in the CUDA graphs with it);
each first tests the device step counter (already advanced: the steps completed) against the
update interval and returns at once between updates:

- ``wk_sum``: one thread per outlet link (each outlet's links padded to whole warps) turns the
  link's mass flux of the pass just run into fixed point (:data:`solver.windkessel.FIXED`,
  rounded to nearest), sums the warp's 32 values with shuffles and adds the warp's sum to its
  outlet's 64-bit accumulator with one atomic: integer sums are exact in any order, so the
  total is the same bits whatever the order the warps arrive in (a run is deterministic) and the
  NumPy reference's sum (:func:`solver.windkessel.windkessel_update`);
- ``wk_update``: one thread per outlet reads and clears its accumulator, takes the exact RCR
  step and writes the state (capacitor, pressure, flow, density) and the trace slot;
- ``wk_values``: one thread per outlet link writes the new density as the link's value, read
  by the next pass.

A first version summed each outlet's links in 128 strided partial sums, one thread each: on
the 15 M node vessel (about 55,000 links per outlet) every thread waited on 430 dependent loads
in turn. The arithmetic after the sum is :func:`solver.windkessel.windkessel_update`'s
(compiled with the openings' ``--fmad=false``). The tests compile this text with g++ and run it
thread after thread: there ``WK_HOST`` makes the warp sum the thread's own value and the atomic
a plain addition, the same integer total.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ...windkessel import FIXED, TRACE, WindkesselTable

__all__ = ["WINDKESSEL_KERNELS", "windkessel_source", "windkessel_links", "WARP"]

#: Kernel names, in launch order.
WINDKESSEL_KERNELS = ("wk_sum", "wk_update", "wk_values")
#: Threads of a warp: each outlet's links are padded to a multiple of it.
WARP = 32


def windkessel_links(table: WindkesselTable) -> tuple[np.ndarray, np.ndarray]:
    """(link (L,) int64, outlet (L,) int32) of the kernels' threads: each outlet's links in
    order, padded with -1 to a multiple of :data:`WARP` (a warp sums one outlet's links)."""
    links, outlets = [], []
    for o, (a, b) in enumerate(zip(table.start, table.stop, strict=True)):
        pad = -(b - a) % WARP
        links.append(np.concatenate([np.arange(a, b, dtype=np.int64),
                                     np.full(pad, -1, dtype=np.int64)]))
        outlets.append(np.full(b - a + pad, o, dtype=np.int32))
    if not links:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    return np.concatenate(links), np.concatenate(outlets)


@cache
def windkessel_source(precision: str) -> str:
    """CUDA C source of the three kernels for the arithmetic ``precision`` of the flux and the
    link values ('float32' or 'float64'); the state is double."""
    real = "double" if precision == "float64" else "float"
    return f"""
typedef {real} wk_real;

#ifdef WK_HOST
#define WK_WARP_SUM(v) (v)
#define WK_LEADER true
#define WK_ADD(p, v) (*(p) += (unsigned long long)(v))
#else
__device__ __forceinline__ long long wk_warp_sum(long long v)
{{
    for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
    return v;
}}
#define WK_WARP_SUM(v) wk_warp_sum(v)
#define WK_LEADER ((threadIdx.x & 31) == 0)
#define WK_ADD(p, v) atomicAdd((p), (unsigned long long)(v))
#endif

extern "C" __global__ void wk_sum(
    const wk_real* __restrict__ flux, const long long* __restrict__ link,
    const int* __restrict__ outlet, unsigned long long* __restrict__ acc,
    const long long* __restrict__ step, const long long every, const int links)
{{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= links || step[0] % every != 0) return;  // whole warps: links is a multiple of 32
    const long long k = link[t];
    long long v = (k >= 0) ? llrint((double)flux[k] * {FIXED!r}) : 0LL;
    v = WK_WARP_SUM(v);
    if (WK_LEADER) WK_ADD(&acc[outlet[t]], v);
}}

extern "C" __global__ void wk_update(
    unsigned long long* __restrict__ acc, double* __restrict__ state,
    const double* __restrict__ rp, const double* __restrict__ rd,
    const double* __restrict__ pd, const double* __restrict__ decay,
    const double rho_ref, const double rho0, double* __restrict__ trace,
    const long long* __restrict__ step, const long long every, const int n)
{{
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n || step[0] % every != 0) return;
    const double total = (double)(long long)acc[o] / {FIXED!r};
    acc[o] = 0ULL;
    const double q = -(total / rho_ref);
    const double target = pd[o] + rd[o] * q;
    const double cap = target + (state[o] - target) * decay[o];
    const double pressure = cap + rp[o] * q;
    state[o] = cap;
    state[n + o] = pressure;
    state[2 * n + o] = q;
    state[3 * n + o] = rho0 + 3.0 * pressure;
    const long long slot = (step[0] / every) % {TRACE};
    trace[(slot * 2) * n + o] = q;
    trace[(slot * 2 + 1) * n + o] = pressure;
}}

extern "C" __global__ void wk_values(
    wk_real* __restrict__ value, const long long* __restrict__ link,
    const int* __restrict__ outlet, const double* __restrict__ state,
    const long long* __restrict__ step, const long long every, const int links, const int n)
{{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= links || step[0] % every != 0) return;
    const long long k = link[t];
    if (k >= 0) value[k] = (wk_real)state[3 * n + outlet[t]];
}}
"""
