"""Collision operators (BGK, TRT) with Guo forcing, written once for any array module.

Functions take populations ``g`` of shape ``(q, M)`` (after streaming, before collision) and
return the post-collision populations; ``xp`` is ``numpy`` or ``cupy``. Moments follow Guo et al.
(2002): ``rho u = sum_i c_i g_i + F/2``. The incompressible model (He & Luo 1997) uses the
reference density 1 in the momentum, the quasi-compressible one the local density.

TRT relaxes the symmetric part of ``g - g_eq`` with ``omega_plus = 1/tau`` and the antisymmetric
part with ``omega_minus``, fixed by the magic parameter
``Lambda = (1/omega_plus - 1/2) (1/omega_minus - 1/2)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .lattice import Lattice

__all__ = ["Relaxation", "relaxation", "bgk_rates", "trt_rates", "equilibrium", "moments",
           "collide", "stored_moments", "combine_rows"]


def combine_rows(coeffs, rows, xp=np):
    """``coeffs @ rows`` for small ``coeffs`` (m, k) and ``rows`` (k, M), as element-wise sums.

    BLAS picks its kernel by the column count, so ``c.T @ g`` (inner size q) can round a node's
    momentum differently when the node sits in a chunk of another size (seen with OpenBLAS
    0.3.31); summing rows in a fixed order gives every node the same bits however nodes are
    grouped, so a distributed run matches one process bitwise and results do not depend on the
    tile offset. Coefficients of +-1, the lattice velocities, cost no multiply.
    """
    coeffs = np.asarray(coeffs, dtype=np.float64)
    out = xp.zeros((coeffs.shape[0],) + tuple(rows.shape[1:]), dtype=rows.dtype)
    for r, row in enumerate(coeffs):
        for k, a in enumerate(row.tolist()):
            if a == 1.0:
                out[r] += rows[k]
            elif a == -1.0:
                out[r] -= rows[k]
            elif a != 0.0:
                out[r] += rows.dtype.type(a) * rows[k]
    return out


@dataclass(frozen=True)
class Relaxation:
    """Relaxation rates (1 / time steps) of the even and odd moments."""

    omega_plus: float
    omega_minus: float


def bgk_rates(tau: float) -> Relaxation:
    """BGK: both rates 1/tau (relaxation time ``tau``, lattice units)."""
    omega = 1.0 / tau
    return Relaxation(omega, omega)


def trt_rates(tau: float, magic: float = 3 / 16) -> Relaxation:
    """TRT: even rate 1/tau, odd rate fixed by the magic parameter ``magic``."""
    return Relaxation(1.0 / tau, 1.0 / (magic / (tau - 0.5) + 0.5))


def relaxation(collision: str, tau: float, magic: float = 3 / 16) -> Relaxation:
    """Rates for ``collision`` ('BGK' or 'TRT') at relaxation time ``tau`` (lattice units);
    for callers holding a name (the registry, :mod:`solver.collisions`, holds the functions)."""
    if collision == "BGK":
        return bgk_rates(tau)
    if collision == "TRT":
        return trt_rates(tau, magic)
    raise ValueError(f"Unknown collision {collision!r}; use 'BGK' or 'TRT'.")


def moments(g, lattice: Lattice, force, incompressible: bool, xp=np):
    """Density (M,) and velocity (d, M) of populations g (q, M), Guo's half-force included."""
    rho = g.sum(axis=0)
    j = combine_rows(lattice.c.T, g, xp)
    j += xp.asarray(force, dtype=g.dtype)[:, None] * 0.5
    u = j if incompressible else j / rho
    return rho, u


def equilibrium(rho, u, lattice: Lattice, incompressible: bool, xp=np):
    """Second-order equilibrium (q, M) for density (M,) and velocity (d, M), lattice units."""
    w = xp.asarray(lattice.w, dtype=u.dtype)[:, None]
    cu = combine_rows(lattice.c, u, xp)
    usq = (u * u).sum(axis=0)
    poly = 3.0 * cu + 4.5 * cu * cu - 1.5 * usq
    if incompressible:
        return w * (rho + poly)
    return w * rho * (1.0 + poly)


def collide(g, lattice: Lattice, rates: Relaxation, force, incompressible: bool, xp=np):
    """Post-collision populations (q, M) for streamed populations g (q, M).

    TRT written in closed form: with ``g_even = (g + g_opp)/2`` and ``g_odd = (g - g_opp)/2``,
    ``out = (1 - (wp+wm)/2) g - (wp-wm)/2 g_opp + wp feq_even + wm feq_odd + forcing``; BGK is
    the case ``wp == wm``. Arithmetic is arranged in place to keep the number of passes over
    the (q, M) arrays low, which is what limits a NumPy implementation.
    """
    dtype = g.dtype
    wp, wm = rates.omega_plus, rates.omega_minus
    force = np.asarray(force, dtype=np.float64)
    w = np.asarray(lattice.w, dtype=np.float64)
    rho, u = moments(g, lattice, force, incompressible, xp)
    cu = combine_rows(lattice.c, u, xp)
    # Even part: wp * w * rho_eff * (4.5 cu^2 + r), r = rho - 1.5 u^2 (or 1 - 1.5 u^2).
    r = -1.5 * (u * u).sum(axis=0)
    r += 1.0 if not incompressible else rho
    has_force = bool(np.any(force != 0.0))
    if has_force:
        # Guo's even source w (1 - wp/2) (9 cu cF - 3 u.F), folded into the even term.
        cf = lattice.c @ force
        uf = combine_rows(force[None, :], u, xp)[0]
        r_force = (-3.0 * (1.0 / wp - 0.5)) * uf
        if not incompressible:
            r_force /= rho
        r += r_force
    t = cu * cu
    t *= 4.5
    t += r
    if not incompressible:
        t *= rho
    t *= xp.asarray(wp * w, dtype=dtype)[:, None]
    if has_force:
        t += cu * xp.asarray(9.0 * (1.0 - 0.5 * wp) * w * cf, dtype=dtype)[:, None]
        t += xp.asarray(3.0 * (1.0 - 0.5 * wm) * w * cf, dtype=dtype)[:, None]
    # Odd part: 3 wm w rho_eff cu.
    cu *= xp.asarray(3.0 * wm * w, dtype=dtype)[:, None]
    if not incompressible:
        cu *= rho
    t += cu
    out = g * dtype.type(1.0 - 0.5 * (wp + wm))
    if wp != wm:
        g_opp = g[lattice.opposite]
        g_opp *= dtype.type(0.5 * (wp - wm))
        out -= g_opp
    out += t
    return out


def stored_moments(f, lattice: Lattice, force, incompressible: bool, xp=np):
    """Density (M,) and velocity (d, M) from stored post-collision populations f (q, M).

    Collision with Guo forcing adds the full force to the momentum, so the velocity at the
    collision instant is ``(sum_i c_i f_i - F/2) / rho``.
    """
    rho = f.sum(axis=0)
    j = combine_rows(lattice.c.T, f, xp) - xp.asarray(force, dtype=f.dtype)[:, None] * 0.5
    return rho, (j if incompressible else j / rho)
