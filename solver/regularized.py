"""Recursive regularized BGK (RR) with Guo forcing and an optional Smagorinsky eddy viscosity.

The collision of Malaspinas (2015, "Increasing stability and accuracy of the lattice Boltzmann
scheme: recursivity and regularization", arXiv:1505.06900) as analysed by Coreixas, Wissocq,
Puigt, Boussuge & Sagaut (2017, Phys. Rev. E 96, 033306): before relaxing, the non-equilibrium
part of the populations is replaced by its Hermite projection, built from the second-order
non-equilibrium moment alone; the third-order terms the lattice supports (D2Q9: xxy, xyy; D3Q19
also xxz, xzz, yyz, yzz; D3Q27 also xyz) follow from it by the recursive relation

    a3_neq[abc] = u_a A[bc] + u_b A[ac] + u_c A[ab],

and the equilibrium is the Hermite expansion to the same third-order terms. Every ghost moment
is thereby reset each step instead of relaxing at a rate near 2 (BGK, or TRT's even rate) or
near 0 (TRT's odd rate at small viscosity): this is what keeps the scheme stable towards
tau -> 1/2 at lattice speeds where BGK and TRT diverge (Coreixas et al. 2017's linear stability
analysis; here a shear layer at tau = 0.505, U = 0.2 and a tube through openings at tau = 0.51,
tests/solver/test_collision_rr.py).
Per node it needs only rho, u and the non-equilibrium stress (6 numbers in 3D), so it fits the
fused stream-collide kernel like BGK does.

Guo's forcing (Guo, Zheng & Shi 2002) enters as in :func:`solver.collision.collide`: with
``rho u = sum_i c_i g_i + F/2`` and Guo's source ``S`` (Hermite coefficients ``a1 = F``,
``a2 = u F + F u``), BGK with Guo forcing is ``feq + (1 - omega)(g - feq + S/2) + S/2``; RR
regularizes the bracket, whose second-order moment is

    A = sum_i c_i c_i g_i - rho c_s^2 I - rho u u + (u F + F u)/2,

so that ``f* = w [rho + 3 c.(rho u + F/2)] + 4.5 w H2 : (rho u u + (1 - omega) A + (uF + Fu)/2)
+ 4.5 w H3 : (rho u u u + (1 - omega) a3_neq)`` (H3 summed over the index permutations). The
incompressible model (He & Luo 1997) uses 1 for rho in the nonlinear terms, as the equilibrium
of :mod:`solver.collision` does. Mass, momentum and the viscous stress are those of BGK; only
the higher moments differ.

Smagorinsky (optional, ``smagorinsky_cs`` = C > 0): each node's relaxation time is a closed-form
function of its own non-equilibrium stress (Hou, Sterling, Chen & Doolen 1996, "A lattice
Boltzmann subgrid model for high Reynolds number flows", Fields Inst. Commun. 6, 151),

    tau = (tau0 + sqrt(tau0^2 + 18 C^2 sqrt(2 A:A) / rho)) / 2,

the eddy viscosity ``nu_t = C^2 |S|`` with ``|S| = sqrt(2 S:S)`` and filter width one lattice
spacing, the strain rate read from ``A`` without finite differences.

Functions take populations ``g`` (q, M) after streaming and return the post-collision ones
(lattice units), for ``xp`` numpy or cupy (the contract of :func:`solver.collision.collide`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache

import numpy as np

from .collision import combine_rows
from .lattice import Lattice

__all__ = ["RegularizedRates", "rr_rates", "hermite_rows", "collide", "local_tau", "RR_LATTICES",
           "SMAGORINSKY_MAX"]

#: Lattices RR runs on (D3Q13's fourth velocity moment is not isotropic, :mod:`solver.mrt`: its
#: stress projection would not give the Navier-Stokes viscous stress).
RR_LATTICES = ("D2Q9", "D3Q19", "D3Q27")
#: Largest accepted Smagorinsky constant (published values are 0.1-0.2).
SMAGORINSKY_MAX = 0.5


@dataclass(frozen=True)
class RegularizedRates:
    """RR rates: ``omega`` = 1/tau0 (1 / time steps) and the Smagorinsky constant (0 = off)."""

    omega: float
    smagorinsky: float = 0.0

    @property
    def omega_plus(self) -> float:
        """The rate of the viscous stress, 1/tau0 (as :class:`solver.collision.Relaxation`)."""
        return self.omega


def rr_rates(tau: float, smagorinsky: float = 0.0) -> RegularizedRates:
    """RR rates at relaxation time ``tau`` with Smagorinsky constant ``smagorinsky`` (0 = off);
    ValueError for a constant outside [0, SMAGORINSKY_MAX]."""
    if not 0.0 <= float(smagorinsky) <= SMAGORINSKY_MAX:
        raise ValueError(f"smagorinsky_cs = {smagorinsky} is outside [0, {SMAGORINSKY_MAX}]; "
                         "use 0 (off) or a published value such as 0.1-0.17.")
    return RegularizedRates(1.0 / float(tau), float(smagorinsky))


@cache
def hermite_rows(lattice_name: str) -> tuple[tuple, tuple, np.ndarray, np.ndarray]:
    """Second- and third-order terms of ``lattice_name``: (index pairs (a, b) with a <= b,
    index triples kept, H2 coefficients (q, n2), H3 coefficients (q, n3)).

    Coefficient [i, k] is what multiplies component k of the symmetric tensor in f_i:
    ``4.5 w_i m H_k(c_i)`` with m the number of index permutations of k (1/(2 c_s^4) = 4.5 for
    order 2, 1/(6 c_s^6) = 4.5 for order 3). Triples whose Hermite polynomial vanishes on every
    velocity of the lattice (xxx everywhere, xyz off D3Q27) are left out.
    """
    from .lattice import get_lattice

    lat = get_lattice(lattice_name)
    c = lat.c.astype(np.float64)
    w = np.asarray(lat.w, dtype=np.float64)
    d = lat.d
    pairs = tuple((a, b) for a in range(d) for b in range(a, d))
    h2 = np.stack([(c[:, a] * c[:, b] - (a == b) / 3.0) * (1 if a == b else 2)
                   for a, b in pairs], axis=1)
    triples, cols = [], []
    for t in itertools.combinations_with_replacement(range(d), 3):
        h = c[:, t[0]] * c[:, t[1]] * c[:, t[2]]
        for a, b, e in ((0, 1, 2), (1, 2, 0), (0, 2, 1)):  # - c_s^2 (delta_ab c_e + ...)
            if t[a] == t[b]:
                h = h - c[:, t[e]] / 3.0
        mult = len(set(itertools.permutations(t)))
        if np.any(np.abs(h) > 1e-12):
            triples.append(t)
            cols.append(h * mult)
    h3 = np.stack(cols, axis=1) if cols else np.zeros((lat.q, 0))
    return pairs, tuple(triples), 4.5 * w[:, None] * h2, 4.5 * w[:, None] * h3


def _stress(g, lattice: Lattice, u, rho_eff, force, xp):
    """Rows of A (n2, M): the regularized bracket's second moment, Guo-corrected (see module)."""
    pairs, _, _, _ = hermite_rows(lattice.name)
    c = lattice.c
    cc = np.stack([c[:, a] * c[:, b] for a, b in pairs])
    out = combine_rows(cc, g, xp)
    rho = g.sum(axis=0)
    for k, (a, b) in enumerate(pairs):
        uu = u[a] * u[b]
        out[k] -= uu if rho_eff is None else rho_eff * uu
        if a == b:
            out[k] -= rho / 3.0
        if force[a] or force[b]:
            out[k] += 0.5 * (u[a] * force[b] + u[b] * force[a])
    return out


def collide(g, lattice: Lattice, rates: RegularizedRates, force, incompressible: bool, xp=np):
    """Post-collision populations (q, M) of RR with Guo forcing for streamed populations g."""
    dtype = g.dtype
    force = np.asarray(force, dtype=np.float64)
    pairs, triples, h2, h3 = hermite_rows(lattice.name)
    index = {p: k for k, p in enumerate(pairs)}
    rho = g.sum(axis=0)
    j = combine_rows(lattice.c.T, g, xp)
    j += xp.asarray(0.5 * force, dtype=dtype)[:, None]
    rho_eff = None if incompressible else rho
    u = j if incompressible else j / rho
    a2 = _stress(g, lattice, u, rho_eff, force, xp)
    keep = _keep(a2, pairs, rates, rho_eff, xp)
    b2 = xp.empty_like(a2)
    for k, (a, b) in enumerate(pairs):
        uu = u[a] * u[b]
        b2[k] = (uu if rho_eff is None else rho_eff * uu) + keep * a2[k]
        if force[a] or force[b]:
            b2[k] += 0.5 * (u[a] * force[b] + u[b] * force[a])
    b3 = xp.empty((len(triples),) + rho.shape, dtype=dtype)
    for k, (a, b, e) in enumerate(triples):
        uuu = u[a] * u[b] * u[e]
        neq = u[a] * a2[index[(b, e)]] + u[b] * a2[index[(a, e)]] + u[e] * a2[index[(a, b)]]
        b3[k] = (uuu if rho_eff is None else rho_eff * uuu) + keep * neq
    w = np.asarray(lattice.w, dtype=np.float64)
    first = xp.concatenate([rho[None], j + xp.asarray(0.5 * force, dtype=dtype)[:, None]])
    out = combine_rows(np.column_stack([w, 3.0 * w[:, None] * lattice.c]), first, xp)
    out += combine_rows(h2, b2, xp)
    if len(triples):
        out += combine_rows(h3, b3, xp)
    return out


def _keep(a2, pairs, rates: RegularizedRates, rho_eff, xp):
    """1 - omega per node: the constant 1 - 1/tau0, or Smagorinsky's local relaxation time."""
    if not rates.smagorinsky:
        return a2.dtype.type(1.0 - rates.omega)
    q = xp.zeros_like(a2[0])
    for k, (a, b) in enumerate(pairs):
        q += (a2[k] * a2[k]) * (1.0 if a == b else 2.0)
    return 1.0 - 1.0 / local_tau(rates, q, rho_eff, xp)


def local_tau(rates: RegularizedRates, stress_square, rho_eff, xp=np):
    """Relaxation time per node (time steps): Smagorinsky's closed form of the non-equilibrium
    stress ``A`` (``stress_square`` = A:A per node, lattice units; ``rho_eff`` None for the
    incompressible model), tau0 everywhere when the constant is 0."""
    tau0 = 1.0 / rates.omega
    if not rates.smagorinsky:
        return xp.full_like(stress_square, tau0)
    s = xp.sqrt(2.0 * stress_square) * (18.0 * rates.smagorinsky ** 2)
    if rho_eff is not None:
        s /= rho_eff
    return 0.5 * (tau0 + xp.sqrt(tau0 * tau0 + s))
