"""CUDA twin of :mod:`solver.iolets`: the opening links' pass as three small generated kernels.

Before every step the backend launches ``iolet_moments`` (one thread per distinct source node
of a pressure link: its velocity from its post-collision populations, computed once rather than
per link), ``iolet_values`` (one thread per crossing link: the new bounced value and the link's
mass flux from the unchanged state; velocity and outflow links read only the one or two
populations they use) and ``iolet_write`` (encode and store the values). The arithmetic and its
order are :func:`solver.iolets.iolet_values`'. Values are all computed before any is written
because a link reads slots that another link of the same node, or a neighbour's outflow link,
writes. The launches are captured in the backend's CUDA graphs; the main kernels are untouched.

Soft start (:mod:`solver.soft_start`): ``iolet_values`` reads the run's step from a device
counter and scales the values by the smoothstep of it in double, as NumPy does; thread 0 of
``iolet_write`` advances the counter once the values are written, so CUDA graph replays ramp
without any host update (the backend sets the counter on resume and rollback).

Pulsatile inlets (:mod:`solver.waveform`): with ``harmonics`` K > 0 the first K threads of
``iolet_moments`` put ``cos(theta_k)`` and ``sin(theta_k)`` of the step (the same counter) in a
device array, once per step, and ``iolet_values`` adds to each waveform link's value the double
sum ``sum_k wave[k] cos(theta_k) + wave[K + k] sin(theta_k)`` of
:meth:`solver.iolets.IoletTables.wave_sum` before the ramp, reading the coefficients of the
waveform links alone (:func:`wave_columns`). Evaluating the 2K double ``cos``/``sin`` per link
and reading the full (2K, m) table cost 3.3 % of a step on the 15 M node H100 vessel. NumPy
and the device agree to the last bits of ``cos``/``sin`` (not bitwise: libm and CUDA's double
``cos`` may differ by an ulp).

The kernels are compiled with ``--fmad=false`` so that no multiply-add is contracted: the same
roundings as NumPy, hence CuPy == NumPy in float64 to round-off. Float16 storage decodes as
:mod:`solver.storage` does and stores rounded to nearest (the NumPy pass does the same). This
module holds no CuPy: the backend compiles :func:`iolet_source` with the addresses of
:func:`iolet_plan` (``import cupy`` stays in ``iolet_launch.py``), and the tests compile it with
nvcc and run it through g++.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ...iolets import IoletTables
from ...lattice import get_lattice
from ...opening_kinds import links_by_kind
from .opening_kinds import CodeContext, link_rule_code, registered_link_kinds

__all__ = ["IOLET_KERNELS", "IoletPlan", "iolet_plan", "iolet_source", "NVCC_OPTIONS",
           "wave_columns"]

#: Kernel names, in launch order.
IOLET_KERNELS = ("iolet_moments", "iolet_values", "iolet_write")
#: Compiler options: no contraction into FMA (bitwise the NumPy order of roundings).
NVCC_OPTIONS = ("--fmad=false",)

_HALF = r"""
typedef unsigned short store_t;
#ifdef LBM_HOST_HALF
static inline float io_h2f(unsigned short h) { return (float)std::bit_cast<_Float16>(h); }
static inline unsigned short io_f2h(float f) { return std::bit_cast<unsigned short>((_Float16)f); }
#else
__device__ __forceinline__ float io_h2f(unsigned short h)
{ float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short io_f2h(float f)
{ unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#endif
#define IO_LOAD(s, shift) ((real)io_h2f(s) * inv_scale + (shift))
#define IO_STORE(v, shift) io_f2h(((v) - (shift)) * scale)
"""

_PLAIN = r"""
typedef real store_t;
#define IO_LOAD(s, shift) (s)
#define IO_STORE(v, shift) (v)
"""


def _lit(x: float, real: str) -> str:
    """C literal of ``x`` in type ``real`` (the double's exact repr, cast)."""
    return f"(({real}){float(x)!r})"


@dataclass(frozen=True)
class IoletPlan:
    """What the three kernels read, for one layout and AA phase (host arrays).

    ``own_j`` (m,): the address of each link's bounced population ``f*_j(x)``; ``donor`` (m,),
    ``write`` (m,) as in :class:`solver.iolets.IoletAddresses`; ``node_own`` (q, n): the
    populations of the ``n`` distinct source nodes of links whose rule reads the node's
    velocity (pressure); ``link_node`` (m,): each link's row in them (-1 for other kinds).
    """

    own_j: np.ndarray
    donor: np.ndarray
    write: np.ndarray
    node_own: np.ndarray
    link_node: np.ndarray

    @property
    def n_nodes(self) -> int:
        """Distinct source nodes of pressure links."""
        return int(self.node_own.shape[1])


def iolet_plan(tables: IoletTables, q: int, nodes_per_tile: int, slots: np.ndarray | None,
               parity: int) -> IoletPlan:
    """The kernels' addresses: a pressure node's velocity is computed once, not per link (a
    node has up to 9 crossing links; reading its q populations per link cost 6 % of a step on
    a 15 M node vessel)."""
    addr = tables.addresses(q, nodes_per_tile, slots, parity)
    m = tables.n_links
    own_j = addr.own[tables.direction, np.arange(m)]
    pressure = np.concatenate([links for kind, links in links_by_kind(tables.code)
                               if kind.link_rule.reads_velocity] or [np.empty(0, np.int64)])
    pressure.sort()
    link_node = np.full(m, -1, dtype=np.int32)
    if pressure.size:
        node_own, inverse = np.unique(addr.own[:, pressure].T, axis=0, return_inverse=True)
        link_node[pressure] = inverse.ravel()
        node_own = node_own.T
    else:
        node_own = np.zeros((q, 0), dtype=np.int64)
    as64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
    return IoletPlan(as64(own_j), as64(addr.donor), as64(addr.write), as64(node_own),
                     np.ascontiguousarray(link_node))


def wave_columns(tables: IoletTables) -> tuple[np.ndarray, np.ndarray]:
    """(``wave_col`` (m,) int32: each link's column of the compact table, -1 for links without
    harmonics; the compact table (2K, mw) float64, at least one element): the pass reads the
    coefficients of the waveform links alone (the (2K, m) table read 30 MB per step on a 15 M
    node vessel, mostly zeros of the outlets' links). Skipping an all-zero column adds the same
    exact 0 the full sum adds."""
    if not tables.harmonics:
        return np.full(tables.n_links, -1, dtype=np.int32), np.zeros(1)
    links = np.flatnonzero(np.any(tables.wave != 0.0, axis=0))
    col = np.full(tables.n_links, -1, dtype=np.int32)
    col[links] = np.arange(links.size, dtype=np.int32)
    wave = np.ascontiguousarray(tables.wave[:, links]) if links.size else np.zeros(1)
    return col, wave


def _phase_lines(harmonics: int) -> list[str]:
    """The phases' cosines and sines of :meth:`solver.iolets.IoletTables.wave_sum`, once per
    step (thread ``h`` of ``iolet_moments`` for harmonic ``h + 1``), not once per link."""
    if harmonics <= 0:
        return []
    return [f"    if (k < {harmonics}) {{  // solver.waveform.harmonic_phases",
            "        double x = (double)step[0] / period;",
            "        x = x - floor(x);",
            f"        const double th = ({2.0 * np.pi!r} * x) * (double)(k + 1);",
            "        phase[k] = cos(th);",
            f"        phase[{harmonics} + k] = sin(th);",
            "    }"]


def _wave_lines(harmonics: int) -> list[str]:
    """The waveform sum of :meth:`solver.iolets.IoletTables.wave_sum`, in its order, over the
    waveform links alone (``wave_col`` >= 0: their column of the (2K, mw) table)."""
    if harmonics <= 0:
        return []
    return ["    const int wc = wave_col[k];",
            "    if (wc >= 0) {  // pulsatile inlet: IoletTables.wave_sum",
            "        double w = 0.0;",
            f"        for (int h = 0; h < {harmonics}; ++h) {{",
            "            w = w + wave[(long long)h * mw + wc] * phase[h];",
            f"            w = w + wave[(long long)({harmonics} + h) * mw + wc]"
            f" * phase[{harmonics} + h];",
            "        }",
            "        v = v + (real)w;",
            "    }"]


def iolet_source(lattice_name: str, precision: str, half: bool, incompressible: bool,
                 force: tuple[float, ...], rho0: float = 1.0, harmonics: int = 0) -> str:
    """CUDA C source of the three kernels for a lattice, arithmetic ``precision`` ('float32' or
    'float64'), float16 storage or not, fluid model, body force, the density a pressure
    opening ramps from (lattice units) and the number of waveform harmonics, with the branch
    of every registered opening kind (:mod:`solver.backends.cuda.opening_kinds`)."""
    return _iolet_source(lattice_name, precision, half, incompressible, tuple(force),
                         float(rho0), int(harmonics), registered_link_kinds())


@cache
def _iolet_source(lattice_name: str, precision: str, half: bool, incompressible: bool,
                  force: tuple[float, ...], rho0: float, harmonics: int, kinds: tuple) -> str:
    """:func:`iolet_source`, cached per the registered kinds ``kinds`` as well (a kind
    registered later gets its branch)."""
    lat = get_lattice(lattice_name)
    real = "double" if precision == "float64" else "float"
    q, d = lat.q, lat.d
    c = lat.c.astype(int)
    ramp, write = link_rule_code(CodeContext(lat, real, lambda x: _lit(x, real),
                                             incompressible))
    lines = [f"typedef {real} real;", _HALF if half else _PLAIN,
             "extern \"C\" __global__ void iolet_moments(",
             "    const store_t* __restrict__ f, const long long* __restrict__ node_own,",
             "    const real* __restrict__ shift, const real inv_scale,",
             "    real* __restrict__ node_u, const int n, const long long* __restrict__ step,",
             "    double* __restrict__ phase, const double period)",
             "{",
             "    const int k = blockIdx.x * blockDim.x + threadIdx.x;",
             *_phase_lines(harmonics),
             "    if (k >= n) return;",
             f"    real g[{q}];",
             f"    for (int i = 0; i < {q}; ++i)",
             "        g[i] = IO_LOAD(f[node_own[(long long)i * n + k]], shift[i]);",
             "    real rho = (real)0;"]
    lines += [f"    real m{a} = (real)0;" for a in range(d)]
    for i in range(q):  # sequential sums in the reference's order (solver.iolets)
        lines.append(f"    rho += g[{i}];")
        for a in range(d):
            if c[i, a]:
                lines.append(f"    m{a} {'+' if c[i, a] > 0 else '-'}= g[{i}];")
    for a in range(d):
        fa = force[a] if a < len(force) else 0.0
        lines.append(f"    real u{a} = m{a} + {_lit(0.5 * fa, real)};")
        if not incompressible:
            lines.append(f"    u{a} = u{a} / rho;")
        lines.append(f"    node_u[{a} * n + k] = u{a};")
    lines += ["}", "",
              "extern \"C\" __global__ void iolet_values(",
              "    const store_t* __restrict__ f, const long long* __restrict__ own_j,",
              "    const long long* __restrict__ donor, const signed char* __restrict__ code,",
              "    const int* __restrict__ dir, const real* __restrict__ value,",
              "    const int* __restrict__ link_node, const real* __restrict__ node_u,",
              "    const real* __restrict__ shift, const real inv_scale,",
              "    real* __restrict__ out, real* __restrict__ flux, const int m, const int n,",
              "    const long long* __restrict__ step, const long long ramp_steps,",
              "    const double* __restrict__ wave, const int* __restrict__ wave_col,",
              "    const double* __restrict__ phase, const int mw)",
              "{",
              "    const int k = blockIdx.x * blockDim.x + threadIdx.x;",
              "    if (k >= m) return;",
              "    const int j = dir[k];",
              "    const real fj = IO_LOAD(f[own_j[k]], shift[j]);",
              "    real v = value[k];",
              *_wave_lines(harmonics),
              "    if (ramp_steps > 0) {  // soft start: solver.soft_start.ramp_factor",
              "        const double x = (double)(step[0] + 1) / (double)ramp_steps;",
              "        if (x < 1.0) {",
              "            const real s = (real)(x * x * (3.0 - 2.0 * x));",
              f"            const real r0 = {_lit(rho0, real)};",
              *ramp,
              "        }",
              "    }",
              *write,
              "    out[k] = o;",
              "    flux[k] = o - fj;",
              "}",
              "",
              "extern \"C\" __global__ void iolet_write(",
              "    store_t* __restrict__ f, const long long* __restrict__ write,",
              "    const int* __restrict__ dir, const real* __restrict__ out,",
              "    const real* __restrict__ shift, const real scale, const int m,",
              "    long long* __restrict__ step)",
              "{",
              "    const int k = blockIdx.x * blockDim.x + threadIdx.x;",
              "    if (k == 0) step[0] += 1;  // after every link's value: the next step's count",
              "    if (k >= m) return;",
              "    f[write[k]] = IO_STORE(out[k], shift[dir[k]]);",
              "}"]
    return "\n".join(lines) + "\n"
