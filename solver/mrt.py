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
D2Q9       nu: 1/tau; e: 1.64; eps: 1.54; q: 1.2       Lallemand & Luo (2000) for e, eps; q as
                                                       d'Humieres et al. (2002) give for D3Q19
D3Q19      nu: 1/tau; e: 1.19; eps: 1.4; q: 1.2;       d'Humieres et al. (2002), sec. 2
           pi: 1.4; m: 1.98
D3Q13      nu: 2/(8 nu + 1); nu_off: 2/(4 nu + 1);     Tolke & Krafczyk (2008), eq. 7, and "a
           e: 1; h: 1                                  good choice is to set these to one"
=========  ==========================================  =========================================

Measured on the Re = 100 cylinder (D2Q9, tau = 0.53, U = 0.1): q = 1.2 runs, q = 1.9 and TRT's
small odd rate diverge. The odd rates also fix where halfway bounce-back puts a wall; with the
papers' rates it moves with tau as for BGK. :func:`magic_rates` gives the odd rates that make
it tau independent (TRT's ``omega_minus`` for q and m; for D3Q13
``(1/s_nu_off - 1/2)(1/s_h - 1/2) = 4/3 Lambda``, found by measuring plane Poiseuille flow) —
use them, or TRT, for permeability. Conserved moments (rho, j) get the rate 1/tau; their value
drops out because ``m_j - m_j,eq = -F/2``. So MRT with every rate equal to 1/tau *is* BGK (a
test checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from .collision import combine_rows, trt_rates
from .lattice import Lattice
from .moments import MRT_LATTICES, equilibrium_matrix, moment_basis, pair_index

__all__ = ["MRTRates", "mrt_rates", "default_group_rates", "magic_rates", "collide",
           "operator"]

_PAPER_RATES = {
    "D2Q9": {"e": 1.64, "eps": 1.54, "q": 1.2},
    "D3Q19": {"e": 1.19, "eps": 1.4, "q": 1.2, "pi": 1.4, "m": 1.98},
    "D3Q13": {"e": 1.0, "h": 1.0},
}


@dataclass(frozen=True)
class MRTRates:
    """Relaxation rate of every moment row (q,), 1 / time steps, for lattice ``lattice``."""

    lattice: str
    s: tuple[float, ...]


def default_group_rates(lattice: str, tau: float) -> dict[str, float]:
    """Default rate of each relaxation group of ``lattice`` at relaxation time ``tau``."""
    nu = (tau - 0.5) / 3.0
    rates = {"rho": 1.0 / tau, "j": 1.0 / tau}
    rates.update(_PAPER_RATES[lattice])
    if lattice == "D3Q13":
        rates.update(nu=2.0 / (8.0 * nu + 1.0), nu_off=2.0 / (4.0 * nu + 1.0))
    else:
        rates["nu"] = 1.0 / tau
    return rates


def magic_rates(lattice: str, tau: float, magic: float = 3 / 16) -> dict[str, float]:
    """Odd-moment rates that put bounce-back walls where TRT with ``magic`` puts them."""
    if lattice == "D3Q13":
        s_off = default_group_rates(lattice, tau)["nu_off"]
        return {"h": 1.0 / (4.0 / 3.0 * magic / (1.0 / s_off - 0.5) + 0.5)}
    odd = trt_rates(tau, magic).omega_minus
    return {g: odd for g in ("q", "m") if g in moment_basis(lattice).group_names()}


def mrt_rates(lattice: str, tau: float, overrides: dict[str, float] | None = None) -> MRTRates:
    """Per-row rates for ``lattice``: defaults at ``tau`` updated by ``overrides`` (group: rate).

    Raises ValueError for a lattice without MRT, an unknown group or a rate outside (0, 2).
    """
    if lattice not in MRT_LATTICES:
        raise ValueError(f"MRT is available for {', '.join(MRT_LATTICES)}, not {lattice}; "
                         "choose BGK or TRT.")
    rates = default_group_rates(lattice, tau)
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
    j = combine_rows(lattice.c.T, g, xp)
    j += xp.asarray(0.5 * force, dtype=dtype)[:, None]
    b = _basis_rows(rho, j, force, incompressible, xp)
    out = xp.empty_like(g)
    _matmul_into(out, xp.asarray(keep, dtype=dtype), g, xp, accumulate=False)
    _matmul_into(out, xp.asarray(source, dtype=dtype), b, xp, accumulate=True)
    return out
