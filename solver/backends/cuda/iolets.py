"""CUDA twin of :mod:`solver.iolets`: the opening links' pass as two small generated kernels.

Before every step the backend launches ``iolet_values`` (one thread per crossing link: decode
the node's post-collision populations and the outflow donor, compute the new bounced value and
the link's mass flux, exactly the arithmetic and order of :func:`solver.iolets.iolet_values`)
and then ``iolet_write`` (encode and store the values). Two launches because a link reads
slots that another link of the same node, or a neighbour's outflow link, writes: every value is
computed from the unchanged state, as on the NumPy reference. Both launches are captured in the
backend's CUDA graphs; the main kernels are untouched.

The kernels are compiled with ``--fmad=false`` so that no multiply-add is contracted: the same
roundings as NumPy, hence CuPy == NumPy in float64 to round-off. Float16 storage decodes as
:mod:`solver.storage` does and stores rounded to nearest (the NumPy pass does the same). This
module holds no CuPy: the backend compiles :func:`iolet_source` (``import cupy`` stays in
``backend.py``), and the tests compile it with nvcc and run it through g++.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ...iolets import PRESSURE, VELOCITY
from ...lattice import get_lattice

__all__ = ["IOLET_KERNELS", "iolet_source", "NVCC_OPTIONS"]

#: Kernel names, in launch order.
IOLET_KERNELS = ("iolet_values", "iolet_write")
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


@cache
def iolet_source(lattice_name: str, precision: str, half: bool, incompressible: bool,
                 force: tuple[float, ...]) -> str:
    """CUDA C source of the two kernels for a lattice, arithmetic ``precision`` ('float32' or
    'float64'), float16 storage or not, fluid model and body force (lattice units)."""
    lat = get_lattice(lattice_name)
    real = "double" if precision == "float64" else "float"
    q, d = lat.q, lat.d
    c = lat.c.astype(int)
    w2 = ", ".join(_lit(2.0 * float(w), real) for w in np.asarray(lat.w, dtype=np.float64))
    cx = [", ".join(_lit(float(c[i, a]), real) for i in range(q)) for a in range(d)]
    lines = [f"typedef {real} real;", _HALF if half else _PLAIN,
             "extern \"C\" __global__ void iolet_values(",
             "    const store_t* __restrict__ f, const long long* __restrict__ own,",
             "    const long long* __restrict__ donor, const signed char* __restrict__ code,",
             "    const int* __restrict__ dir, const real* __restrict__ value,",
             "    const real* __restrict__ shift, const real scale, const real inv_scale,",
             "    real* __restrict__ out, real* __restrict__ flux, const int m)",
             "{",
             "    const int k = blockIdx.x * blockDim.x + threadIdx.x;",
             "    if (k >= m) return;",
             f"    const real W2[{q}] = {{{w2}}};",
             *[f"    const real C{a}[{q}] = {{{cx[a]}}};" for a in range(d)],
             f"    real g[{q}];",
             f"    for (int i = 0; i < {q}; ++i)",
             "        g[i] = IO_LOAD(f[own[(long long)i * m + k]], shift[i]);",
             "    const int j = dir[k];",
             "    const real fj = g[j];",
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
    lines += ["    real cu = (real)0;", "    real uu = (real)0;"]
    for a in range(d):
        lines += [f"    cu += C{a}[j] * u{a};", f"    uu += u{a} * u{a};"]
    lines += ["    const real v = value[k];",
              f"    const real quad = {_lit(4.5, real)} * cu * cu - {_lit(1.5, real)} * uu;",
              ("    const real p = W2[j] * (v + quad);" if incompressible else
               f"    const real p = W2[j] * v * ({_lit(1.0, real)} + quad);"),
              "    real o;",
              f"    if (code[k] == {VELOCITY}) o = fj + v;",
              f"    else if (code[k] == {PRESSURE}) o = p - fj;",
              "    else o = IO_LOAD(f[donor[k]], shift[j]);",
              "    out[k] = o;",
              "    flux[k] = o - fj;",
              "}",
              "",
              "extern \"C\" __global__ void iolet_write(",
              "    store_t* __restrict__ f, const long long* __restrict__ write,",
              "    const int* __restrict__ dir, const real* __restrict__ out,",
              "    const real* __restrict__ shift, const real scale, const int m)",
              "{",
              "    const int k = blockIdx.x * blockDim.x + threadIdx.x;",
              "    if (k >= m) return;",
              "    f[write[k]] = IO_STORE(out[k], shift[dir[k]]);",
              "}"]
    return "\n".join(lines) + "\n"
