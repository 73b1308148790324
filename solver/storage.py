"""Storage precision of the populations, decoupled from the arithmetic precision.

With ``SimulationConfig.storage = 'auto'`` the populations are stored in the arithmetic type
(``precision``) and nothing here changes a value. With ``'float16'`` (float32 arithmetic only)
each population is stored as the IEEE binary16 number

    h_i = S (f_i - w_i rho0),        decoded as   f_i = w_i rho0 + h_i / S,

every load decodes to float32 and every store of a step rounds once, *stochastically*
(:func:`dither`; writes from the host round to nearest even). Why these choices:

- **Shift** ``w_i rho0``: the rest equilibrium. In a low-Mach flow ``f_i`` differs from it by
  ``w_i (rho - rho0 + 3 c_i.u rho + ...)``, a few per cent of ``f_i`` at most, and binary16's
  11-bit significand then resolves that *deviation* to 2^-11 of itself (the absolute error of
  storing ``f_i`` itself, 2^-11 w_i, would be larger than the whole velocity signal of a slow
  flow). Opposite directions share a weight, so a bounced population decodes with its own shift.
- **Scale** ``S = 2^14 / 2^ceil(log2 rho0)`` (``2^14`` at ``rho0 = 1``): a power of two, so
  scaling is exact and ``(f - shift) S`` rounds only once, to binary16. The largest finite
  binary16, 65504, then stands for ``|f_i - w_i rho0| < 4 rho0``: twice what any population of
  a flow inside the Mach limit of :mod:`solver.config` with ``rho < 2 rho0`` can reach (a
  larger deviation overflows to Inf and the run stops as diverged). The smallest normal
  binary16, 2^-14, stands for ``2^-28 rho0 = 3.7e-9 rho0``; below it the subnormal step
  ``2^-38 rho0`` is still far finer than the float32 spacing of the decoded value
  (``>= 2^-24 w_min rho0 = 2.8e-10 rho0`` for D3Q27's smallest weight), so the
  subnormal range costs no accuracy and no larger scale would gain any.
- **Stochastic rounding**: rounding to nearest makes a slow flow *stagnate*. Once the change a
  step makes to a population is below half a binary16 step (2^-12 |f_i - w_i rho0|), the
  rounded value reproduces itself and the flow stops developing. In a body-force channel the
  force adds ``F = 8 nu u_max / H^2`` per step while the binary16 step is ~``2^-11 w 3 u_max``,
  so the stall grows as ``H^2 / nu``: measured on the NumPy reference (D2Q9 BGK, tau 0.8,
  ``u_max`` 0.05), the profile froze 2.3 % (H = 16) and 10 % (H = 32) below the analytic one,
  ten to a hundred times the float32 error. Rounding up with probability equal to the
  discarded fraction makes every store unbiased, so the mean state follows the float32
  dynamics and the rounding becomes zero-mean noise (errors within 2x of float32:
  ``benchmarks/storage_accuracy/``). The random bits come from a counter-based
  hash of (node, direction, step): the run stays deterministic, the NumPy reference draws the
  same bits as the kernel, and resuming a checkpoint restores the step counter (the backends'
  ``set_step``).
- **Deviations**: where the collision commutes with the shift by the rest state,
  ``C(s + d) = s + C(d)`` (incompressible BGK/TRT/MRT: equilibrium affine in rho, u = j, Guo's
  forcing independent of rho; no Zou-He node, whose density is a ratio of population sums),
  both backends collide the deviations ``d_i = h_i / S`` themselves (:func:`collides_deviations`)
  and round ``S C(d)``: float32 then rounds relative to the deviations, not to the populations
  (whose spacing near ``w_i rho0``, 2^-24 w_i rho0, is as coarse as the binary16 step of a
  deviation of 2^-13 w_i rho0), and the kernel saves the shift constants' registers and, for
  BGK/TRT, which collide ``S d_i`` with rescaled constants (the same bits: S is a power of
  two), a multiply per load and per store (:mod:`solver.backends.cuda.storage`).
- **Round trip**: decoding a stored value, encoding the float32 result and decoding again gives
  the same float32 (``decode . encode . decode == decode``; checked for every finite binary16
  and every shift in the tests). A float32 population cannot hold every binary16 deviation
  (collided as deviations, a deviation far below the float32 spacing of ``w_i rho0`` is kept),
  so host read-backs and checkpoints take the exact float64 value :meth:`Storage.exact`, and
  :meth:`Storage.encode` stores a float64 value that is exactly a stored one as that value:
  a resumed run continues bit for bit.

The NumPy reference stores exactly these binary16 values (rounded at every store with the same
random bits, decoded in float32 at every load), so the GPU kernel and NumPy agree to a few
binary16 steps (they differ only where float32 arithmetic in another order moves a value
across a rounding threshold).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .lattice import Lattice

__all__ = ["STORAGES", "PRECISION_LABELS", "label_options", "precision_label", "Storage",
           "storage_for", "stored_dtype", "dither", "collides_deviations", "DEVIATION_COLLISIONS",
           "HALF_SCALE_EXPONENT", "DITHER_BITS", "GOLDEN", "key_shift"]

#: Storage settings (``SimulationConfig.storage``): 'auto' = the arithmetic precision.
STORAGES = ("auto", "float16")
#: Precision labels of the benchmarks and reports: the arithmetic (and storage) type, or
#: 'float16' for float16 storage with float32 arithmetic.
PRECISION_LABELS = ("float64", "float32", "float16")


def label_options(label: str) -> dict[str, str]:
    """SimulationConfig ``precision`` and ``storage`` of a precision label."""
    if label not in PRECISION_LABELS:
        raise ValueError(f"Unknown precision {label!r}; use one of {PRECISION_LABELS}.")
    if label == "float16":
        return {"precision": "float32", "storage": "float16"}
    return {"precision": label, "storage": "auto"}


def precision_label(precision: str, storage: str) -> str:
    """The precision label of a ``precision`` and ``storage`` setting (:data:`PRECISION_LABELS`)."""
    return "float16" if storage == "float16" else precision
#: log2 of the binary16 scale at rho0 = 1 (see the module docstring).
HALF_SCALE_EXPONENT = 14
#: float32 significand bits that binary16 drops (23 - 10): the width of the random addend.
DITHER_BITS = 13
#: 2^32 / golden ratio, odd: spreads the step counter and seeds the per-direction multipliers.
GOLDEN = 0x9E3779B9
#: Collision models that float16 storage collides as deviations (:func:`collides_deviations`).
DEVIATION_COLLISIONS = ("BGK", "TRT", "MRT")
_U32 = np.uint32


def _mix32(x: np.ndarray) -> np.ndarray:
    """Integer hash of uint32 values (two multiply-xorshift rounds; wraps modulo 2^32)."""
    x = x ^ (x >> _U32(16))
    x = x * _U32(0x7FEB352D)
    x = x ^ (x >> _U32(15))
    x = x * _U32(0x846CA68B)
    return x ^ (x >> _U32(16))


def direction_multiplier(i: int) -> int:
    """Odd multiplier that draws direction i's random bits from a node's hash: mix32(i + 1) | 1.

    Unrelated multipliers keep the directions' bits independent (multipliers in a small ratio,
    such as 1 and 3, would make one direction's bits a function of another's).
    """
    return int(_mix32(np.array([i + 1], dtype=_U32))[0]) | 1


def dither(node: np.ndarray, step: int, q: int, xp=np) -> np.ndarray:
    """Random addends in [0, 2^13) for stochastic rounding, uint32 (q, n).

    ``node`` (n,) is the global tiled node id ``tile * a**d + xyz_index``; ``step`` the step
    counter. Per node ``x = mix32(node + step * GOLDEN)``, per direction the top 13 bits of
    ``x * direction_multiplier(i)`` (all modulo 2^32), exactly as the CUDA kernel computes them.
    """
    with np.errstate(over="ignore"):
        x = _mix32(xp.asarray(node, dtype=_U32) + _U32((step * GOLDEN) & 0xFFFFFFFF))
        mult = xp.asarray([direction_multiplier(i) for i in range(q)], dtype=_U32)[:, None]
        return (x[None, :] * mult) >> _U32(32 - DITHER_BITS)


def key_shift(first_tile: int, nodes_per_tile: int) -> int:
    """Step-counter offset (uint32) that keys a launch over a tile list starting at tile
    ``first_tile`` as one launch over the whole list.

    A kernel hashes ``tile a^d + n + step GOLDEN`` (mod 2^32) with ``tile`` counted from the
    start of the list it is given; GOLDEN is odd, hence invertible mod 2^32, so adding
    ``first_tile a^d GOLDEN^-1`` to the step counter adds ``first_tile a^d`` to every key: the
    same bits as counting tiles from the start of the whole list."""
    inverse = pow(GOLDEN, -1, 1 << 32)
    return (first_tile * nodes_per_tile * inverse) & 0xFFFFFFFF


@dataclass(frozen=True, eq=False)
class Storage:
    """How populations are stored: ``dtype`` (stored), ``real`` (arithmetic), shift and scale.

    ``shift`` (q,) holds ``w_i rho0`` in ``real`` (zeros when not encoded); ``scale`` is a power
    of two (1 when not encoded); ``rounding`` is how a step's stores round.
    """

    dtype: np.dtype
    real: np.dtype
    shift: np.ndarray
    scale: float
    #: 'stochastic' (every backend) or 'nearest' (NumPy only: the ablation that shows why).
    rounding: str = "stochastic"

    @property
    def encoded(self) -> bool:
        """Whether stored values are shifted, scaled binary16 numbers (else plain ``real``)."""
        return self.dtype != self.real

    def _column(self, xp):
        return xp.asarray(self.shift.reshape(-1, 1))

    def decode(self, stored, xp=np, deviations: bool = False):
        """Populations in ``real`` from stored values (..., q, n); no copy when not encoded.
        ``deviations``: their deviations from the rest state ``f - shift`` instead (exact)."""
        if not self.encoded:
            return stored
        inv = self.real.type(1.0 / self.scale)
        if deviations:
            return stored.astype(self.real) * inv
        return stored.astype(self.real) * inv + self._column(xp)

    @property
    def checkpoint_dtype(self) -> np.dtype:
        """dtype that holds every stored value exactly: float64 when encoded, else ``real``."""
        return np.dtype(np.float64) if self.encoded else self.real

    def exact(self, stored, xp=np):
        """Populations (..., q, n) as float64, exactly the stored values (``shift + h / S``
        needs at most 47 significand bits)."""
        if not self.encoded:
            return stored.astype(np.float64)
        shift = xp.asarray(self.shift.astype(np.float64).reshape(-1, 1))
        return stored.astype(np.float64) * (1.0 / self.scale) + shift

    def encode(self, f, xp=np, dither=None, deviations: bool = False):
        """Stored values (..., q, n) of populations ``f`` (any float type, rounded to ``real``);
        ``deviations``: ``f`` holds deviations ``f - shift`` (:meth:`decode`).

        Rounds to nearest even, or stochastically with the addends ``dither`` (q, n) of
        :func:`dither`: the float32 ``(f - shift) S`` gets the addend on its 13 lowest
        significand bits and is then cut to binary16 precision (exact for the normal binary16
        range; Inf stays Inf).
        """
        if self.encoded and dither is None and not deviations \
                and getattr(f, "dtype", None) == np.float64:
            return self._encode_wide(f, xp)
        f = xp.asarray(f, dtype=self.real)
        if not self.encoded:
            return f
        scaled = (f if deviations else f - self._column(xp)) * self.real.type(self.scale)
        if dither is not None:
            bits = scaled.view(_U32) + dither
            scaled = (bits & _U32(~((1 << DITHER_BITS) - 1) & 0xFFFFFFFF)).view(self.real)
        with np.errstate(over="ignore"):  # beyond 65504: Inf, and the run reports divergence
            return scaled.astype(self.dtype)

    def _encode_wide(self, f, xp):
        """Round-to-nearest encoding of float64 ``f``: where ``f`` is exactly a stored value
        (:meth:`exact`, e.g. a checkpoint) that value, else as float32 input is rounded (so
        that float64 ``w_i rho0`` still stores as binary16 zero)."""
        shift = xp.asarray(self.shift.astype(np.float64).reshape(-1, 1))
        scaled = (xp.asarray(f) - shift) * self.scale
        with np.errstate(over="ignore", invalid="ignore"):
            wide = scaled.astype(self.dtype)
            kept = wide.astype(np.float64) == scaled
        return xp.where(kept, wide, self.encode(f.astype(self.real), xp))

    def class_shifts(self, lattice: Lattice) -> list[float]:
        """Shift per weight class ``k = |c|^2`` (k = 0..3; 0 where the lattice has none)."""
        out = [0.0] * 4
        for k, shift in zip(lattice.weight_class, self.shift.tolist(), strict=True):
            out[k] = shift
        return out


def collides_deviations(encoded: bool, collision: str, incompressible: bool,
                        boundary_code: bool) -> bool:
    """Whether a step collides deviations ``f - shift`` (module docstring, 'Deviations'):
    float16 storage (``encoded``), an incompressible model of :data:`DEVIATION_COLLISIONS`
    (by name), and no Zou-He or Ladd boundary code (``boundary_code``)."""
    return encoded and incompressible and not boundary_code and collision in DEVIATION_COLLISIONS


def stored_dtype(precision: str | np.dtype, storage: str = "auto") -> np.dtype:
    """dtype of the stored populations for arithmetic ``precision`` and ``storage``."""
    real = np.dtype(precision)
    if storage == "auto":
        return real
    if storage != "float16":
        raise ValueError(f"Unknown storage {storage!r}; use one of {STORAGES}.")
    if real != np.float32:
        raise ValueError(f"float16 storage needs float32 arithmetic, not {real.name}.")
    return np.dtype(np.float16)


def storage_for(lattice: Lattice, precision: str | np.dtype, storage: str = "auto",
                rho0: float = 1.0, rounding: str = "stochastic") -> Storage:
    """The storage of a run: ``storage`` 'auto' (= ``precision``) or 'float16' (float32 only)."""
    if rounding not in ("stochastic", "nearest"):
        raise ValueError(f"Unknown rounding {rounding!r}; use 'stochastic' or 'nearest'.")
    real = np.dtype(precision)
    dtype = stored_dtype(real, storage)
    if dtype == real:
        return Storage(real, real, np.zeros(lattice.q, dtype=real), 1.0)
    if not (math.isfinite(rho0) and rho0 > 0):
        raise ValueError(f"float16 storage needs a positive reference density, got {rho0!r}.")
    scale = 2.0 ** (HALF_SCALE_EXPONENT - math.ceil(math.log2(rho0)))
    shift = (np.asarray(lattice.w, dtype=np.float64) * rho0).astype(real)
    return Storage(dtype, real, shift, scale, rounding)
