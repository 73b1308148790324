"""CUDA source of the Windkessel outlets' update in the openings' pass (no CuPy here).

Three tiny kernels run after ``iolet_write`` each step (captured in the CUDA graphs with it);
each first tests the device step counter (already advanced: the steps completed) against the
update interval and returns at once between updates:

- ``wk_partial``: per outlet :data:`solver.windkessel.PARTIALS` threads, thread ``p`` summing
  in double the mass flux of the outlet's links ``p, p + P, ...`` of the pass just run;
- ``wk_update``: one thread per outlet sums its partials in order, takes the exact RCR step
  and writes the state (capacitor, pressure, flow, density) and the trace slot;
- ``wk_values``: one thread per outlet link writes the new density as the link's value, read
  by the next pass.

The arithmetic and its order are :func:`solver.windkessel.windkessel_update`'s (compiled with
the openings' ``--fmad=false``), so CuPy and NumPy agree bit for bit on the same flux. The tests
compile this text with g++ and run it thread after thread (no barriers, no shared memory).
"""

from __future__ import annotations

from functools import cache

from ...windkessel import PARTIALS, TRACE

__all__ = ["WINDKESSEL_KERNELS", "windkessel_source"]

#: Kernel names, in launch order.
WINDKESSEL_KERNELS = ("wk_partial", "wk_update", "wk_values")


@cache
def windkessel_source(precision: str) -> str:
    """CUDA C source of the three kernels for the arithmetic ``precision`` of the flux and the
    link values ('float32' or 'float64'); the state is double."""
    real = "double" if precision == "float64" else "float"
    return f"""
typedef {real} wk_real;

extern "C" __global__ void wk_partial(
    const wk_real* __restrict__ flux, const long long* __restrict__ start,
    const long long* __restrict__ stop, double* __restrict__ partial,
    const long long* __restrict__ step, const long long every, const int n)
{{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n * {PARTIALS} || step[0] % every != 0) return;
    const int o = t / {PARTIALS};
    double s = 0.0;
    for (long long k = start[o] + t % {PARTIALS}; k < stop[o]; k += {PARTIALS})
        s = s + (double)flux[k];
    partial[t] = s;
}}

extern "C" __global__ void wk_update(
    const double* __restrict__ partial, double* __restrict__ state,
    const double* __restrict__ rp, const double* __restrict__ rd,
    const double* __restrict__ pd, const double* __restrict__ decay,
    const double rho_ref, const double rho0, double* __restrict__ trace,
    const long long* __restrict__ step, const long long every, const int n)
{{
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n || step[0] % every != 0) return;
    double total = 0.0;
    for (int p = 0; p < {PARTIALS}; ++p) total = total + partial[o * {PARTIALS} + p];
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
    value[link[t]] = (wk_real)state[3 * n + outlet[t]];
}}
"""
