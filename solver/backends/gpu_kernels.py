"""CUDA source of the tiled stream-collide kernels, one variant at a time (no CuPy needed).

A :class:`KernelVariant` names everything fixed at compile time: lattice, precision, collision
(BGK/TRT/MRT), fluid model, in-tile layout, kernel mode (full step or one of the paper's section
4.1 probes), tile edge and the boundary code in it (none, Zou-He faces, or Zou-He faces and
Ladd's moving walls), and the storage of the populations ('auto': the arithmetic type;
'float16': the shifted, scaled binary16 of :mod:`solver.storage`, float32 arithmetic).
:func:`kernel_source` fills ``kernels/tiled_lbm.cu`` with straight-line code for that variant's
velocity set: the pull of every direction, the boundary code of
:mod:`solver.backends.gpu_boundary`, the closed form BGK/TRT collision with Guo forcing of
:mod:`solver.collision` or the moment-space MRT of :mod:`solver.backends.gpu_mrt`, and
coalesced stores. Every population load and store goes through :func:`_load` and
:func:`_store`, the only places that know the storage type: with float16 storage they decode
``shift_k + h / S`` and encode ``(f - shift_k) S`` with stochastic rounding (weight class
``k = |c_i|^2``, random bits of :func:`solver.storage.dither`) around PTX conversions; the
shifts, ``S`` and a two-slot step counter are trailing kernel arguments. Relaxation rates,
the body force and the boundary values stay kernel arguments or tables, so changing them never
recompiles; tiles per block is a launch parameter for the same reason. Runs without inlets,
outlets or moving walls use the kernel without the boundary code, and runs whose walls rest
the one without Ladd's term, so each pays only for what it uses.

The in-tile layouts and the arrays and arguments the kernel is given live in
:mod:`solver.backends.gpu_tables`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from string import Template

import numpy as np

from ..lattice import get_lattice
from ..moments import MRT_LATTICES
from ..problem import Problem
from ..storage import DITHER_BITS, GOLDEN, direction_multiplier
from .gpu_boundary import BOUNDARY_KINDS, boundary_kind, ladd_code, zou_he_code
from .gpu_mrt import mrt_collide_code, mrt_param_names
from .gpu_tables import LAYOUTS, check_tile_shape, direction_layouts, effective_layout

__all__ = ["KernelVariant", "MODES", "COLLISIONS", "STORAGE_PARAMS", "kernel_source",
           "all_variants", "collision_param_names", "storage_param_names"]

#: Kernel modes: the full step and the paper's probes (section 4.1).
MODES = {"full": 0, "propagate": 1, "readwrite": 2}
#: Collision operators the kernel implements.
COLLISIONS = ("BGK", "TRT", "MRT")
#: BGK/TRT constants (see gpu_tables.physics_args): per weight class k = |c|^2, wp w_k,
#: 9 (1 - wp/2) w_k, 3 (1 - wm/2) w_k and 3 wm w_k.
_TRT_PARAMS = ["omp", "hm", "af"] + [f"{p}{k}" for p in ("wpw", "bfw", "cfw", "wmw")
                                     for k in range(4)]
_TEMPLATE = Path(__file__).with_name("kernels") / "tiled_lbm.cu"
#: Trailing arguments of float16-storage kernels (gpu_tables.physics_args): the shift
#: w_k rho0 per weight class k = |c|^2, the scale S and 1/S; then the step-counter pair.
STORAGE_PARAMS = ["fs_shift0", "fs_shift1", "fs_shift2", "fs_shift3", "fs_scale", "fs_inv_scale"]
#: float16 storage: bit casts and conversions (PTX; the CPU emulator defines LBM_HOST_HALF and
#: its own), the hash of solver.storage.dither, and decode / encode with stochastic rounding.
_HALF_CODE = """
typedef unsigned short store_t;  // binary16 bits of S (f - shift)

__device__ __forceinline__ float half_bits_to_float(unsigned short h)
{
#ifdef LBM_HOST_HALF
    return lbm_host_half_to_float(h);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#endif
}

__device__ __forceinline__ unsigned short float_to_half_bits(float f)  // nearest even
{
#ifdef LBM_HOST_HALF
    return lbm_host_float_to_half(f);
#else
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#endif
}

__device__ __forceinline__ unsigned int float_bits(float f)
{
#ifdef LBM_HOST_HALF
    return lbm_host_float_bits(f);
#else
    unsigned int u;
    asm("mov.b32 %0, %1;" : "=r"(u) : "f"(f));
    return u;
#endif
}

__device__ __forceinline__ float bits_float(unsigned int u)
{
#ifdef LBM_HOST_HALF
    return lbm_host_bits_float(u);
#else
    float f;
    asm("mov.b32 %0, %1;" : "=f"(f) : "r"(u));
    return f;
#endif
}

__device__ __forceinline__ unsigned int mix32(unsigned int x)  // solver.storage._mix32
{
    x ^= x >> 16;
    x *= 0x7FEB352Du;
    x ^= x >> 15;
    x *= 0x846CA68Bu;
    return x ^ (x >> 16);
}

__device__ __forceinline__ real decode_f(store_t h, real shift, real inv_scale)
{
    return shift + half_bits_to_float(h) * inv_scale;  // exact product: one rounding
}

// Stochastic rounding: r (13 random bits) added below binary16 precision, then cut there.
// offset = -shift * scale; the scale is a power of two, so f * scale is exact and f * scale +
// offset (one FFMA) rounds exactly as (f - shift) * scale does in solver.storage.
__device__ __forceinline__ store_t encode_f(real f, real offset, real scale, unsigned int r)
{
    const unsigned int b = (float_bits(f * scale + offset) + r) & ~((1u << DITHER_BITS) - 1u);
    return float_to_half_bits(bits_float(b));
}
"""
#: float16 storage, first thing in the kernel (full and propagate modes): the step counter of
#: the stochastic rounding, double-buffered like f (the launch that reads the copy at the lower
#: address reads slot 0; CuPy and the emulator keep both copies in one array). Every block
#: reads this launch's value; one thread writes the next launch's into the other slot.
_HALF_PROLOGUE = """    const unsigned int fs_slot = fin < fout ? 0u : 1u;
    const unsigned int fs_step = fs_seed[fs_slot];
    if (blockIdx.x == 0 && threadIdx.x == 0) fs_seed[fs_slot ^ 1u] = fs_step + 1u;
"""


@dataclass(frozen=True)
class KernelVariant:
    """Compile-time choices of one kernel; ``layout`` is the effective one ('paper'/'xyz')."""

    lattice: str = "D3Q19"
    precision: str = "float64"
    collision: str = "BGK"
    incompressible: bool = True
    layout: str = "paper"
    mode: str = "full"
    tile_edge: int = 4
    boundary: str = "none"
    storage: str = "auto"

    def canonical(self) -> KernelVariant:
        """Same kernel with the fields that do not change the code normalised (shared cache)."""
        v = replace(self, layout=effective_layout(self.lattice, self.layout, self.tile_edge))
        if v.mode != "full":  # the probes neither collide nor apply boundary conditions
            v = replace(v, collision="BGK", incompressible=True, boundary="none")
        return v

    @classmethod
    def for_problem(cls, problem: Problem, mode: str = "full") -> KernelVariant:
        """The variant that steps ``problem`` in ``mode`` (canonical)."""
        if problem.storage.encoded and problem.storage.rounding != "stochastic":
            raise ValueError("The GPU kernel rounds float16 stores stochastically only; "
                             "rounding='nearest' is a NumPy-backend ablation.")
        return cls(problem.lattice.name, problem.dtype.name, problem.collision,
                   problem.incompressible, problem.layout, mode, problem.tiling.a,
                   boundary_kind(problem) if mode == "full" else "none",
                   "float16" if problem.storage.encoded else "auto").canonical()

    @property
    def half(self) -> bool:
        """Whether populations are stored as float16 (solver.storage)."""
        return self.storage == "float16"

    @property
    def name(self) -> str:
        """Kernel (and namespace) name, unique per canonical variant."""
        v = self.canonical()
        fluid = "inc" if v.incompressible else "qc"
        prec = ("f64" if v.precision == "float64" else "f32") + ("s16" if v.half else "")
        bc = {"none": "", "zou_he": "_zh", "moving": "_mw"}[v.boundary]
        return (f"lbm_{v.mode}_{v.lattice}_{prec}_{v.collision}_{fluid}_{v.layout}"
                f"_a{v.tile_edge}{bc}")


def _lit(x: float, real: str) -> str:
    """C literal of x in the kernel's precision (no silent promotion of float to double)."""
    if real == "float":
        return f"{float(np.float32(x))!r}f"
    return repr(float(x))


def _signed_sum(coeffs, names) -> str:
    """C expression sum_k coeffs[k] * names[k] for coefficients in {-1, 0, 1}; '0' if empty."""
    terms = ""
    for c, name in zip(coeffs, names, strict=True):
        if c:
            terms += (" + " if c > 0 else " - ") + name if terms else ("" if c > 0 else "-") + name
    return terms or "0"


def _class(lattice: str, i: int) -> int:
    """Weight class |c_i|^2 of direction i (its float16 shift is fs_shift<class>)."""
    return int((get_lattice(lattice).c[i] ** 2).sum())


def _load(v: KernelVariant, i: int, index: str) -> str:
    """C expression: population of direction i (or its opposite) at ``fin[index]``, as real."""
    if not v.half:
        return f"fin[{index}]"
    return f"decode_f(fin[{index}], fs_shift{_class(v.lattice, i)}, fs_inv_scale)"


def _store(v: KernelVariant, i: int, value: str, kind: str) -> str:
    """C statement: store ``value`` as direction i of this node (in-tile slot of ``kind``)."""
    if v.half:  # random bits: solver.storage.dither
        r = f"(fs_hash * {direction_multiplier(i):#010x}u) >> (32 - DITHER_BITS)"
        value = f"encode_f({value}, fs_offset{_class(v.lattice, i)}, fs_scale, {r})"
    return f"    fout[base + {i} * NPT + slot_{kind}(n)] = {value};"


def _gather(v: KernelVariant, real: str) -> str:
    lat, a = get_lattice(v.lattice), v.tile_edge
    kinds = direction_layouts(v.lattice, v.layout, a)
    he = a + 2
    lines = []
    for i, c in enumerate(lat.c.tolist()):
        opp = int(lat.opposite[i])
        if not any(c):
            at = f"base + {i} * NPT + slot_{kinds[i]}(n)"
            lines.append(f"    const real g{i} = {_load(v, i, at)};")
            continue
        shift = sum(ci * he**ax for ax, ci in enumerate(c))
        lines += [
            f"    real g{i};",
            "    {",
            f"        const int s = s_src[centre - ({shift})];",
            f"        const size_t at = s >= 0 ? ((size_t)((unsigned)s / NPT) * Q + {i}) * NPT"
            f" + slot_{kinds[i]}((int)((unsigned)s % NPT))",
            f"                                 : base + {opp} * NPT + slot_{kinds[opp]}(n);",
            f"        g{i} = {_load(v, i, 'at')};",
            "    }",
        ]
    if v.boundary == "moving":  # group of this node's solid neighbours, NO_WALL if none moves
        lines.insert(0, "    const int wgroup = wall_group[tile * NPT + n];")
        lines.append(ladd_code(v.lattice, he))
    if v.half:  # this node's random bits for the step (solver.storage.dither), store offsets
        classes = sorted({_class(v.lattice, i) for i in range(lat.q)})
        lines[:0] = [f"    const unsigned int fs_hash = mix32((unsigned int)(tile * NPT + n)"
                     f" + fs_step * {GOLDEN:#x}u);"]
        lines[1:1] = [f"    const real fs_offset{k} = -fs_shift{k} * fs_scale;" for k in classes]
    return "\n".join(lines)


def _collide(v: KernelVariant, real: str) -> str:
    lat = get_lattice(v.lattice)
    kinds = direction_layouts(v.lattice, v.layout, v.tile_edge)
    g = [f"g{i}" for i in range(lat.q)]
    if v.mode == "propagate":
        return "\n".join(_store(v, i, g[i], kinds[i]) for i in range(lat.q))
    lit = lambda x: _lit(x, real)  # noqa: E731
    if v.collision == "MRT":
        return mrt_collide_code(v.lattice, v.incompressible, lit,
                                lambda i, value: _store(v, i, value, kinds[i]))
    axes = "xyz"[: lat.d]
    force = [f"f{ax}" for ax in axes]
    out = [f"    const real rho = {' + '.join(g)};"]
    for ax, col in zip(axes, lat.c.T.tolist(), strict=True):
        out.append(f"    real u{ax} = ({_signed_sum(col, g)}) + f{ax} * {lit(0.5)};")
    usq = " + ".join(f"u{ax} * u{ax}" for ax in axes)
    ufd = " + ".join(f"f{ax} * u{ax}" for ax in axes)
    if v.incompressible:
        out += [f"    real r = {lit(-1.5)} * ({usq}) + rho;",
                f"    r += af * ({ufd});"]
        rho_mul = ""
    else:
        out += [f"    const real inv_rho = {lit(1.0)} / rho;"]
        out += [f"    u{ax} *= inv_rho;" for ax in axes]
        out += [f"    real r = {lit(-1.5)} * ({usq}) + {lit(1.0)};",
                f"    r += af * ({ufd}) * inv_rho;"]
        rho_mul = " * rho"
    trt = v.collision == "TRT"
    for i, c in enumerate(lat.c.tolist()):
        k = sum(ci * ci for ci in c)  # weight class: the coefficients arrive per class
        cu = _signed_sum(c, [f"u{ax}" for ax in axes])
        cf = _signed_sum(c, force)
        keep = f"{g[i]} * omp" + (f" - hm * {g[int(lat.opposite[i])]}" if trt else "")
        if not any(c):
            out.append(_store(v, i, f"{keep} + r{rho_mul} * wpw0", kinds[i]))
            continue
        out += [
            "    {",
            f"        const real cu = {cu};",
            f"        const real cF = {cf};",
            f"        real t = ({lit(4.5)} * cu * cu + r){rho_mul} * wpw{k};",
            f"        t += cu * (bfw{k} * cF) + cfw{k} * cF;",
            f"        t += cu * wmw{k}{rho_mul};",
            "    " + _store(v, i, f"{keep} + t", kinds[i]),
            "    }",
        ]
    return "\n".join(out)


def _readwrite(v: KernelVariant) -> str:
    lat = get_lattice(v.lattice)
    kinds = direction_layouts(v.lattice, v.layout, v.tile_edge)
    lines = []
    for i in range(lat.q):
        at = f"base + {i} * NPT + slot_{kinds[i]}(n)"
        lines.append(f"        fout[{at}] = fin[{at}];")
    return "\n".join(lines)


@cache
def _template() -> Template:
    return Template(_TEMPLATE.read_text())


def collision_param_names(v: KernelVariant) -> list[str]:
    """Names of the collision constants the kernel takes after the body force."""
    v = v.canonical()
    return mrt_param_names(v.lattice) if v.collision == "MRT" else list(_TRT_PARAMS)


def storage_param_names(v: KernelVariant) -> list[str]:
    """Names of the storage constants the kernel takes after the collision constants (then,
    with float16 storage, the pointer ``fs_seed`` to the two-slot step counter)."""
    return list(STORAGE_PARAMS) if v.half else []


@cache
def kernel_source(variant: KernelVariant) -> str:
    """Complete CUDA C++ source of one variant; its kernel is ``extern "C"`` ``variant.name``."""
    v = variant.canonical()
    if v.mode not in MODES:
        raise ValueError(f"Unknown kernel mode {v.mode!r}; use one of {tuple(MODES)}.")
    if v.precision not in ("float32", "float64"):
        raise ValueError(f"Unknown precision {v.precision!r}; use 'float32' or 'float64'.")
    if v.collision not in COLLISIONS:
        raise ValueError(f"Unknown collision {v.collision!r}; use one of {COLLISIONS}.")
    if v.storage not in ("auto", "float16"):
        raise ValueError(f"Unknown storage {v.storage!r}; use 'auto' or 'float16'.")
    if v.half and v.precision != "float32":
        raise ValueError(f"float16 storage needs float32 arithmetic, not {v.precision}.")
    if v.boundary not in BOUNDARY_KINDS:
        raise ValueError(f"Unknown boundary code {v.boundary!r}; use one of {BOUNDARY_KINDS}.")
    if v.collision == "MRT" and v.lattice not in MRT_LATTICES:
        raise ValueError(f"MRT is implemented for {', '.join(MRT_LATTICES)}, not {v.lattice}.")
    lat = get_lattice(v.lattice)
    check_tile_shape(v.lattice, v.tile_edge, 1)
    real = "double" if v.precision == "float64" else "float"
    a, d = v.tile_edge, lat.d
    params = ",\n".join(f"    const real {p}"
                         for p in collision_param_names(v) + storage_param_names(v))
    if v.half:
        params += ",\n    unsigned int* __restrict__ fs_seed"
    full = v.mode == "full"
    return _template().substitute(
        namespace=v.name, kernel=v.name, real=real, d=d,
        storage_code=(f"constexpr int DITHER_BITS = {DITHER_BITS};" + _HALF_CODE) if v.half
        else "typedef real store_t;",
        storage_prologue=_HALF_PROLOGUE if v.half and v.mode != "readwrite" else "",
        q=lat.q, a=a, npt=a**d,
        halo_nodes=(a + 2) ** d, neighbours=3**d, mode=MODES[v.mode],
        skip_corners="true" if int(np.abs(lat.c).sum(axis=1).max()) < d else "false",
        # Only big tiles need a register cap for their block size; a cap at 256 threads makes
        # ptxas trade registers for occupancy and spill, which costs more than it gains here.
        launch_bounds=f"__launch_bounds__({min(1024, 4 * a**d)}) " if a**d > 64 else "",
        readwrite=_readwrite(v) if v.mode == "readwrite" else "",
        gather=_gather(v, real) if v.mode != "readwrite" else "",
        collide=_collide(v, real) if v.mode != "readwrite" else "",
        collision_params=params,
        zou_he=zou_he_code(v.lattice, v.incompressible, lambda x: _lit(x, real))
        if full and v.boundary != "none" else "",
    )


def all_variants(tile_edges: dict[str, tuple[int, ...]] | None = None) -> list[KernelVariant]:
    """Every distinct kernel variant (canonical) for the given tile edges per lattice."""
    edges = tile_edges or {"D2Q9": (8,), "D3Q19": (4,), "D3Q27": (4,), "D3Q13": (4,)}
    seen: dict[str, KernelVariant] = {}
    for lattice, a_values in edges.items():
        collisions = ("MRT",) if lattice == "D3Q13" else (
            ("BGK", "TRT", "MRT") if lattice in MRT_LATTICES else ("BGK", "TRT"))
        for a, (prec, store), coll, inc, layout, mode, bc in itertools.product(
            a_values, (("float32", "auto"), ("float64", "auto"), ("float32", "float16")),
            collisions, (True, False), LAYOUTS, MODES, BOUNDARY_KINDS,
        ):
            v = KernelVariant(lattice, prec, coll, inc, layout, mode, a, bc, store).canonical()
            seen.setdefault(v.name, v)
    return list(seen.values())
