"""Multiple-relaxation-time (MRT) collision with Guo forcing in moment space.

``m = M f`` (:mod:`solver.moments`); each moment relaxes to its equilibrium at its own rate
``s_k`` and Guo's force term enters in moment space with the factor ``(1 - s_k/2)``:

    m* = m - S (m - m_eq) + (I - S/2) M F_bar,   f* = M^-1 m*,

with ``m_eq = M E b`` and ``M F_bar = M E b_F`` (``b``, ``b_F`` in :mod:`solver.moments`). The
populations never leave population space in the NumPy reference: with ``A = M^-1 S M``,
``f* = (I - A) g + A E b + (I - A/2) E b_F``, two small matrix products per chunk.

Default rates (1 / time step), overridable per group through ``SimulationConfig.mrt_rates``:

=========  ==========================================  =========================================
lattice    group: rate                                 source
=========  ==========================================  =========================================
D2Q9       nu: 1/tau; e: 1.64; eps: 1.54; q: TRT       Lallemand & Luo (2000), s2=1.64, s3=1.54
D3Q19      nu: 1/tau; e: 1.19; eps: 1.4; pi: 1.4;      d'Humieres et al. (2002), sec. 2
           q, m: TRT
D3Q13      nu: 2/(8 nu + 1); nu_off: 2/(4 nu + 1);     Tolke & Krafczyk (2008), eq. 7; e = 1 as
           e: 1; h: TRT-like (see below)               "a good choice is to set these to one"
=========  ==========================================  =========================================

"TRT" means the odd (energy-flux) rates equal TRT's ``omega_minus`` for the configured magic
parameter (3/16 by default) instead of the papers' 1.9 / 1.2 / 1.98: it puts halfway
bounce-back walls where TRT puts them, independent of tau (Ginzburg & d'Humieres 2003). D3Q13
has no single even rate; its wall position is set by the shear rate ``s'_v`` and the third-order
rate ``s_h``, and ``(1/s'_v - 1/2)(1/s_h - 1/2) = 4/3 Lambda`` (= 1/4 at the default
Lambda = 3/16) makes body-force Poiseuille flow exact at every tau (measured; the paper's
``s_h = 1`` leaves a tau-dependent wall slip of ~0.3 % at 16 nodes).
Conserved moments (rho, j) get the rate 1/tau; their value drops out of the result because
``m_j - m_j,eq = -F/2``. So MRT with every rate equal to 1/tau *is* BGK (a test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from .collision import relaxation
from .lattice import Lattice
from .moments import MRT_LATTICES, equilibrium_matrix, moment_basis, pair_index

__all__ = ["MRTRates", "mrt_rates", "default_group_rates", "collide", "operator"]

_PAPER_RATES = {
    "D2Q9": {"e": 1.64, "eps": 1.54},
    "D3Q19": {"e": 1.19, "eps": 1.4, "pi": 1.4},
    "D3Q13": {"e": 1.0},
}
_ODD_GROUPS = {"D2Q9": ("q",), "D3Q19": ("q", "m"), "D3Q13": ()}


@dataclass(frozen=True)
class MRTRates:
    """Relaxation rate of every moment row (q,), 1 / time steps, for lattice ``lattice``."""

    lattice: str
    s: tuple[float, ...]


def default_group_rates(lattice: str, tau: float, magic: float = 3 / 16) -> dict[str, float]:
    """Default rate of each relaxation group of ``lattice`` at relaxation time ``tau``."""
    basis = moment_basis(lattice)
    nu = (tau - 0.5) / 3.0
    rates = {"rho": 1.0 / tau, "j": 1.0 / tau}
    rates.update(_PAPER_RATES[lattice])
    if lattice == "D3Q13":
        s_off = 2.0 / (4.0 * nu + 1.0)
        rates.update(nu=2.0 / (8.0 * nu + 1.0), nu_off=s_off,
                     h=1.0 / (4.0 / 3.0 * magic / (1.0 / s_off - 0.5) + 0.5))
    else:
        rates["nu"] = 1.0 / tau
    odd = relaxation("TRT", tau, magic).omega_minus
    rates.update({g: odd for g in _ODD_GROUPS[lattice]})
    missing = set(basis.group_names()) - set(rates)
    assert not missing, missing
    return rates


def mrt_rates(lattice: str, tau: float, overrides: dict[str, float] | None = None,
              magic: float = 3 / 16) -> MRTRates:
    """Per-row rates for ``lattice``: defaults at ``tau`` updated by ``overrides`` (group: rate).

    Raises ValueError for a lattice without MRT, an unknown group or a rate outside (0, 2).
    """
    if lattice not in MRT_LATTICES:
        raise ValueError(f"MRT is available for {', '.join(MRT_LATTICES)}, not {lattice}; "
                         "choose BGK or TRT.")
    rates = default_group_rates(lattice, tau, magic)
    basis = moment_basis(lattice)
    for group, value in (overrides or {}).items():
        if group not in rates or group in ("rho", "j"):
            free = [g for g in basis.group_names() if g not in ("rho", "j")]
            raise ValueError(f"Unknown MRT rate group {group!r} for {lattice}; "
                             f"use one of {', '.join(free)}.")
        if not 0.0 < float(value) < 2.0:
            raise ValueError(f"MRT rate {group} = {value} is unstable; use a value in (0, 2).")
        rates[group] = float(value)
    return MRTRates(lattice, tuple(float(rates[g]) for g in basis.groups))


@cache
def operator(rates: MRTRates) -> tuple[np.ndarray, np.ndarray]:
    """Matrices ``I - A`` (q, q) and ``[A E, (I - A/2) E]`` (q, 2 nb) of the MRT update."""
    basis = moment_basis(rates.lattice)
    a = basis.inverse @ np.diag(rates.s) @ basis.matrix
    e = equilibrium_matrix(rates.lattice)
    eye = np.eye(a.shape[0])
    return eye - a, np.concatenate([a @ e, (eye - 0.5 * a) @ e], axis=1)


def _basis_rows(rho, j, force, incompressible: bool, xp):
    """Stacked equilibrium and forcing bases (2 nb, M) for density (M,) and momentum (d, M)."""
    d = j.shape[0]
    inv = 1.0 if incompressible else 1.0 / rho
    pairs = pair_index(d)
    rows = [rho] + [j[a] for a in range(d)]
    rows += [j[a] * j[b] * inv for a, b in pairs]
    zero = xp.zeros_like(rho)
    rows += [zero] + [xp.full_like(rho, force[a]) for a in range(d)]
    rows += [(j[a] * force[b] + j[b] * force[a]) * inv for a, b in pairs]
    return xp.stack(rows)


#: Multiply-adds per NumPy matmul call. OpenBLAS hands larger gemms to its own threads, which
#: oversubscribes the NumPy backend's chunk threads (measured 10x slower on 2 cores).
_GEMM_WORK = 200_000


def _matmul_into(out, a, b, xp, accumulate: bool) -> None:
    """``out (+)= a @ b`` in column blocks small enough to stay single-threaded in BLAS."""
    if xp is not np:
        if accumulate:
            out += a @ b
        else:
            out[...] = a @ b
        return
    step = max(64, _GEMM_WORK // (a.shape[0] * a.shape[1]))
    for s in range(0, b.shape[1], step):
        block = a @ b[:, s : s + step]
        if accumulate:
            out[:, s : s + step] += block
        else:
            out[:, s : s + step] = block


def collide(g, lattice: Lattice, rates: MRTRates, force, incompressible: bool, xp=np):
    """Post-collision populations (q, M) for streamed populations g (q, M), MRT + Guo.

    Same contract as :func:`solver.collision.collide`: ``rho u = sum_i c_i g_i + F/2``, the
    incompressible model uses reference density 1 in the momentum, lattice units throughout.
    """
    if rates.lattice != lattice.name:
        raise ValueError(f"MRT rates are for {rates.lattice}, the lattice is {lattice.name}.")
    dtype = g.dtype
    force = np.asarray(force, dtype=np.float64)
    keep, source = operator(rates)
    rho = g.sum(axis=0)
    j = xp.asarray(lattice.c.T, dtype=dtype) @ g
    j += xp.asarray(0.5 * force, dtype=dtype)[:, None]
    b = _basis_rows(rho, j, force, incompressible, xp)
    out = xp.empty_like(g)
    _matmul_into(out, xp.asarray(keep, dtype=dtype), g, xp, accumulate=False)
    _matmul_into(out, xp.asarray(source, dtype=dtype), b, xp, accumulate=True)
    return out
