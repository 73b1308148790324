"""How the tiled GPU kernel stores a population value: the arithmetic type, or float16.

With kernel storage ``'auto'`` a stored value is the arithmetic type ``real`` and nothing here
adds code. With ``'float16'`` (float32 arithmetic; :mod:`solver.storage` for the scheme and its
reasons) each stored value is the binary16 bits of ``S (f_i - w_k rho0)``, ``k = |c_i|^2``:

- :func:`decode` is the C expression every load goes through, :func:`encode` the one every
  store goes through (stochastic rounding with the random bits of
  :func:`solver.storage.dither`). Where a value is loaded from or stored to is the business of
  :mod:`solver.backends.cuda.streaming`; opposite directions share a weight class, so a value
  read from its neighbour's slot (in-place streaming, bounce-back) decodes with its own shift.
- The shifts per weight class, ``S``, ``1/S`` and ``-1.5/S`` are trailing kernel arguments
  (:data:`STORAGE_PARAMS`, filled by :func:`solver.backends.cuda.tables.physics_args`), then the
  pointer ``fs_seed`` to a two-slot step counter (uint32) that seeds the random bits.
- What the arithmetic sees (:func:`half_form`, chosen per kernel): ``'populations'``, the
  decoded ``f_i = w_k rho0 + h_i / S`` (one FFMA per load) and ``S f_i - S w_k rho0`` to store
  (one FFMA per store); or the deviations ``d_i = h_i / S`` (one FMUL per load, exact: S is a
  power of two) where :func:`solver.storage.collides_deviations` allows it (the collision
  commutes with the shift by the rest state: incompressible BGK/TRT/MRT without Zou-He or
  Ladd code; the NumPy reference collides the same deviations). MRT, whose conserved rows
  carry literals, collides those deviations and multiplies by S on store (``'deviations'``).
  BGK and TRT collide the scaled deviations ``S d_i``, the bare conversion of h_i
  (``'scaled'``: nothing per load but the conversion, nothing per store): their collision is
  linear in the populations but for the quadratic terms, so with the constants of
  :func:`kernel_constants` every value it computes is S times the one of the deviations
  form, and its result the ``S (f*_i - w_k rho0)`` to round and store. S being a power of two,
  every rounding is S times that form's: the stored bits are the same (float32 subnormals
  aside). Either way no shift constant is held in registers, and float32 rounds relative to
  the deviations.
- The counter is double-buffered like the populations: a launch reads the slot of the phase it
  reads (:func:`solver.backends.cuda.streaming.phase_code`: the copy, or the in-place layout),
  and one thread writes the value the next launch reads into the other slot: the step + 1
  after a step, the same step after the in-place decoding 'swap' (which steps nothing). The
  read/write probe neither reads nor writes it. So CUDA graph replays advance it, and two-copy
  and in-place runs draw the same bits at the same step.
"""

from __future__ import annotations

import re

from ...lattice import Lattice
from ...storage import (
    DITHER_BITS,
    GOLDEN,
    collides_deviations,
    direction_multiplier,
)
from .collisions import cuda_collision

__all__ = ["KERNEL_STORAGES", "STORAGE_PARAMS", "HALF_FORMS", "storage_param_names",
           "storage_signature", "storage_code", "counter_code", "node_code", "decode", "encode",
           "rest_value", "half_form", "kernel_constants", "kinetic", "is_float16"]

#: Kernel storages: the arithmetic type, or shifted, scaled binary16 (float32 arithmetic).
KERNEL_STORAGES = ("auto", "float16")
#: Trailing floating arguments of float16-storage kernels (tables.physics_args): the shift
#: w_k rho0 per weight class k = |c|^2, the scale S, 1/S and -1.5/S (form 'scaled': the -1.5
#: of u.u in the closed form's r; an argument, since computing it in the kernel cost 8
#: registers a thread).
STORAGE_PARAMS = ["fs_shift0", "fs_shift1", "fs_shift2", "fs_shift3", "fs_scale", "fs_inv_scale",
                  "fs_kinetic"]
#: What the arithmetic of a float16 kernel works on (:func:`half_form`): populations, or
#: deviations (scaled by S on store), or S times the deviations ('scaled': the collision's
#: constants rescaled, :func:`kernel_constants`).
HALF_FORMS = ("populations", "deviations", "scaled")

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

// Stochastic rounding of y = S (f - shift): r (13 random bits) added below binary16
// precision, then cut there.
__device__ __forceinline__ store_t encode_scaled(real y, unsigned int r)
{
    const unsigned int b = (float_bits(y) + r) & ~((1u << DITHER_BITS) - 1u);
    return float_to_half_bits(bits_float(b));
}

// The sector fill's store: keep = 0 (a solid lane) stores binary16 +0, the rest state, whatever
// y is, through the mask (cheaper than selecting the stored bits: 15 of 454 BGK node
// instructions).
__device__ __forceinline__ store_t encode_kept(real y, unsigned int r, unsigned int keep)
{
    const unsigned int b = (float_bits(y) + r) & ~((1u << DITHER_BITS) - 1u) & keep;
    return float_to_half_bits(bits_float(b));
}

// offset = -shift * scale; the scale is a power of two, so f * scale is exact and f * scale +
// offset (one FFMA) rounds exactly as (f - shift) * scale does in solver.storage.
__device__ __forceinline__ store_t encode_f(real f, real offset, real scale, unsigned int r)
{
    return encode_scaled(f * scale + offset, r);
}
"""


def is_float16(storage: str) -> bool:
    """Whether kernel storage ``storage`` ('auto' or 'float16') stores binary16 values."""
    return storage == "float16"


def _half(storage: str) -> bool:
    if storage not in KERNEL_STORAGES:
        raise ValueError(f"Unknown storage {storage!r}; use one of {KERNEL_STORAGES}.")
    return is_float16(storage)


def _class(lattice: Lattice, i: int) -> int:
    """Weight class |c_i|^2 of direction i (its float16 shift is fs_shift<class>)."""
    return int((lattice.c[i] ** 2).sum())


def storage_param_names(storage: str) -> list[str]:
    """Names of the floating storage constants after the collision constants."""
    return list(STORAGE_PARAMS) if _half(storage) else []


def storage_signature(storage: str) -> str:
    """Kernel parameters after the collision constants (with the leading comma), or ''."""
    if not _half(storage):
        return ""
    return "".join(f",\n    const real {p}" for p in STORAGE_PARAMS) + \
        ",\n    unsigned int* __restrict__ fs_seed"


def storage_code(storage: str) -> str:
    """Definitions at namespace scope: ``store_t`` and, for float16, decode / encode."""
    if not _half(storage):
        return "typedef real store_t;"
    return f"constexpr int DITHER_BITS = {DITHER_BITS};" + _HALF_CODE


def counter_code(storage: str, mode: str, phase: str) -> str:
    """First lines of the kernel: this launch's step counter ``fs_step`` (float16 storage).

    ``phase`` is the C expression of the slot this launch reads
    (:func:`~solver.backends.cuda.streaming.phase_code`); one thread writes the next launch's
    value into the other slot: step + 1 after a step or the propagation probe, the same step
    after 'swap' (it moves the in-place layout to the other phase without stepping). The
    read/write probe has none.
    """
    if not _half(storage) or mode == "readwrite":
        return ""
    advance = "0u" if mode == "swap" else "1u"
    return (f"    const unsigned int fs_slot = {phase};\n"
            "    const unsigned int fs_step = fs_seed[fs_slot];\n"
            "    if (blockIdx.x == 0 && threadIdx.x == 0) "
            f"fs_seed[fs_slot ^ 1u] = fs_step + {advance};\n")


def half_form(storage: str, collision: str, incompressible: bool, boundary: str,
              mode: str) -> str:
    """What the arithmetic of a kernel works on (:data:`HALF_FORMS`): deviations in float16
    full steps of the models :func:`solver.storage.collides_deviations` allows ('scaled'
    where their output is linear in their constants), else populations."""
    deviations = mode == "full" and collides_deviations(_half(storage), collision,
                                                        incompressible, boundary != "none")
    if not deviations:
        return "populations"
    return "scaled" if cuda_collision(collision).scale_powers else "deviations"


def kernel_constants(form: str, collision: str, names: list[str], values: list) -> list:
    """Floating kernel arguments ``values`` (named ``names``) for a kernel of ``form``: in
    'scaled' the collision's constants times their power of S (its ``scale_powers`` in
    :mod:`.collisions`; exact: S is a power of two)."""
    if form not in HALF_FORMS:
        raise ValueError(f"Unknown float16 form {form!r}; use one of {HALF_FORMS}.")
    if form != "scaled":
        return list(values)
    scale = values[names.index("fs_scale")]
    factors = {+1: scale, -1: 1 / scale}
    powers = [(re.compile(pattern), p) for pattern, p in cuda_collision(collision).scale_powers]
    return [next((v * factors[p] for pattern, p in powers if pattern.fullmatch(name)), v)
            for name, v in zip(names, values, strict=True)]


def kinetic(form: str) -> str | None:
    """C name of the -1.5 of u.u in the closed form's r in ``form`` ('scaled': the argument
    -1.5 / S), or None (the literal)."""
    return "fs_kinetic" if form == "scaled" else None


def node_code(storage: str, lattice: Lattice, form: str = "populations") -> list[str]:
    """Per-node lines before the loads: the node's hash for the step and the store offsets."""
    if not _half(storage):
        return []
    classes = sorted({_class(lattice, i) for i in range(lattice.q)})
    offsets = [f"    const real fs_offset{k} = -fs_shift{k} * fs_scale;" for k in classes]
    return ([f"    const unsigned int fs_hash = mix32((unsigned int)(tile * NPT + n)"
             f" + fs_step * {GOLDEN:#x}u);"] + (offsets if form == "populations" else []))


def decode(storage: str, lattice: Lattice, i: int, stored: str,
           form: str = "populations") -> str:
    """C expression: the stored value ``stored`` of direction i (or its opposite), as real:
    the population, in form 'deviations' its deviation from the rest state, in 'scaled' S
    times that (the bare conversion)."""
    if not _half(storage):
        return stored
    if form == "scaled":
        return f"half_bits_to_float({stored})"
    if form == "deviations":
        return f"half_bits_to_float({stored}) * fs_inv_scale"
    return f"decode_f({stored}, fs_shift{_class(lattice, i)}, fs_inv_scale)"


def encode(storage: str, lattice: Lattice, i: int, value: str,
           form: str = "populations", fill: bool = False) -> str:
    """C expression: ``value`` (real: the population, its deviation, or in form 'scaled' S
    times its deviation) as direction i of this node's stored value (store_t); ``fill``: the
    sector fill's store, binary16 zero (the rest state) in a solid lane, through the mask.

    (The mask as a per-node variable instead saved 16 more instructions of the BGK node path
    but took 40 registers, not 32: held through the gather.)"""
    if not _half(storage):
        return value
    r = f"(fs_hash * {direction_multiplier(i):#010x}u) >> (32 - DITHER_BITS)"
    if fill:  # the same float32 value as below, then kept or zeroed
        y = {"scaled": value, "deviations": f"({value}) * fs_scale",
             "populations": f"({value}) * fs_scale + fs_offset{_class(lattice, i)}"}[form]
        return f"encode_kept({y}, {r}, solid ? 0u : ~0u)"
    if form == "scaled":
        return f"encode_scaled({value}, {r})"
    if form == "deviations":
        return f"encode_scaled(({value}) * fs_scale, {r})"
    return f"encode_f({value}, fs_offset{_class(lattice, i)}, fs_scale, {r})"


def rest_value(storage: str, k: int) -> str:
    """C expression (store_t): the rest equilibrium ``w_k rho0`` of weight class k as stored.

    The kernel argument ``rest<k>``; with float16 storage binary16 zero, exactly, whatever the
    rounding: the shift is the rest state (:func:`solver.storage.storage_for`), which is also
    what :func:`solver.backends.base.with_rest_solids` stores.
    """
    return f"rest{k}" if not _half(storage) else "(store_t)0u"
