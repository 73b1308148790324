"""MRT collision in the tiled GPU kernel: generated moment-space code and its host constants.

The CUDA port of :func:`solver.mrt.collide` (``templates/PHYSICS_FOR_GPU.md``, section 3). NumPy
applies ``f* = (I - A) g + A E b + (I - A/2) E b_F`` with dense ``q x q`` matrices; the kernel
does the same update in moment space, where it is sparse:

1. pair sums and differences ``g_i +- g_opp(i)``: every row of ``M`` is an even or an odd
   polynomial of ``c``, so even moments need only the sums and odd ones the differences;
2. ``m = M g`` with the integer entries of ``M`` as literals, ``rho`` and ``j = sum c g + F/2``;
3. per non-conserved row ``k``: ``r_k = A_k m_k + B_k m_eq,k + C_k m_F,k`` with
   ``m_eq = (M E) b``, ``m_F = (M E) b_F`` (literal, sparse ``M E``) and the run's constants
   ``A_k = (1 - s_k)/|M_k|^2``, ``B_k = s_k/|M_k|^2``, ``C_k = (1 - s_k/2)/|M_k|^2`` (kernel
   arguments, so other rates never recompile); conserved rows give ``rho`` and ``m_j + F``
   whatever their rate;
4. ``f* = M^T r`` (``M^-1 = M^T diag(1/|M_k|^2)``, the scale folded into ``r``), again by
   even and odd halves.

The same code serves D2Q9, D3Q19 and D3Q13 (both D3Q13 sublattices live in the tiles).
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from functools import cache

import numpy as np

from ...lattice import get_lattice
from ...moments import equilibrium_matrix, moment_basis, pair_index
from ...mrt import MRTRates

__all__ = ["mrt_param_names", "mrt_params", "mrt_collide_code"]

_CONSERVED = ("rho", "j")


def _clean(x: float) -> float:
    """x snapped to a nearby simple fraction (M E carries round-off such as 1e-17 or 2/3)."""
    frac = Fraction(float(x)).limit_denominator(1000)
    return float(frac) if abs(float(frac) - x) < 1e-12 else float(x)


@cache
def _structure(name: str):
    """Rows to relax, parity of each row, row norms and the cleaned ``M E``."""
    basis = moment_basis(name)
    lat = get_lattice(name)
    m = basis.matrix
    parity = []
    for row in m:
        even = np.array_equal(row, row[lat.opposite])
        odd = np.array_equal(row, -row[lat.opposite])
        if not (even or odd):
            raise AssertionError(f"{name}: a moment row is neither even nor odd")
        parity.append("even" if even else "odd")
    me = np.vectorize(_clean)(m @ equilibrium_matrix(name))
    relaxed = [k for k, g in enumerate(basis.groups) if g not in _CONSERVED]
    return basis, tuple(parity), np.diag(m @ m.T).copy(), me, tuple(relaxed)


def mrt_param_names(lattice: str) -> list[str]:
    """Kernel parameter names of the MRT constants: A_k, B_k, C_k per relaxed row k."""
    relaxed = _structure(lattice)[4]
    return [f"m{x}{k}" for k in relaxed for x in "ABC"]


def mrt_params(rates: MRTRates) -> list[float]:
    """Values (float64) for :func:`mrt_param_names`, from the per-row rates ``rates.s``."""
    _, _, norm, _, relaxed = _structure(rates.lattice)
    out = []
    for k in relaxed:
        s = rates.s[k]
        out += [(1.0 - s) / norm[k], s / norm[k], (1.0 - 0.5 * s) / norm[k]]
    return out


def _combination(coeffs, names, lit) -> str:
    """C expression sum_k coeffs[k] * names[k], grouped by equal coefficient; '' if all zero."""
    groups: dict[float, list[str]] = defaultdict(list)
    for c, name in zip(coeffs, names, strict=True):
        if c:
            groups[float(c)].append(name)
    terms = []
    for c, members in groups.items():
        inner = " + ".join(members)
        inner = f"({inner})" if len(members) > 1 else inner
        if c == 1.0:
            terms.append(inner)
        elif c == -1.0:
            terms.append(f"-{inner}")
        else:
            terms.append(f"{lit(c)} * {inner}")
    return " + ".join(terms).replace("+ -", "- ")


def mrt_collide_code(name: str, incompressible: bool, lit, store) -> str:
    """CUDA statements: MRT + Guo collision of ``g0..`` into stores ``store(i, value)``."""
    lat = get_lattice(name)
    basis, parity, norm, me, relaxed = _structure(name)
    m, d = basis.matrix, lat.d
    rest = int(np.flatnonzero(~lat.c.any(axis=1))[0])
    pairs = [i for i in range(lat.q) if i < lat.opposite[i] and i != rest]
    out = []
    for i in pairs:
        o = lat.opposite[i]
        out.append(f"    const real ps{i} = g{i} + g{o}, pd{i} = g{i} - g{o};")
    for k in range(lat.q):
        if parity[k] == "even":
            expr = _combination([m[k, rest]] + [m[k, i] for i in pairs],
                                [f"g{rest}"] + [f"ps{i}" for i in pairs], lit)
        else:
            expr = _combination([m[k, i] for i in pairs], [f"pd{i}" for i in pairs], lit)
        out.append(f"    const real m{k} = {expr or lit(0.0)};")
    axes = "xyz"[:d]
    jrow = {ax: basis.names.index(f"j{ax}") for ax in axes}
    out.append(f"    const real rho = m{basis.names.index('rho')};")
    out += [f"    const real j{ax} = m{jrow[ax]} + f{ax} * {lit(0.5)};" for ax in axes]
    out.append(f"    const real inv = {lit(1.0) if incompressible else f'{lit(1.0)} / rho'};")
    pairs_ab = pair_index(d)
    basis_names = ["rho"] + [f"j{ax}" for ax in axes] + [f"jj{a}{b}" for a, b in pairs_ab]
    force_names = [""] + [f"f{ax}" for ax in axes] + [f"fj{a}{b}" for a, b in pairs_ab]
    for a, b in pairs_ab:
        ja, jb, fa, fb = f"j{axes[a]}", f"j{axes[b]}", f"f{axes[a]}", f"f{axes[b]}"
        out.append(f"    const real jj{a}{b} = {ja} * {jb} * inv;")
        out.append(f"    const real fj{a}{b} = ({ja} * {fb} + {jb} * {fa}) * inv;")
    # Scaled post-collision moments r_k = m*_k / |M_k|^2.
    for k in range(lat.q):
        group = basis.groups[k]
        if group == "rho":
            out.append(f"    const real r{k} = rho * {lit(1.0 / norm[k])};")
        elif group == "j":
            ax = basis.names[k][1]
            out.append(f"    const real r{k} = (m{k} + f{ax}) * {lit(1.0 / norm[k])};")
        else:
            eq = _combination(me[k], basis_names, lit) or lit(0.0)
            src = _combination(me[k, 1:], force_names[1:], lit)
            line = f"    const real r{k} = mA{k} * m{k} + mB{k} * ({eq})"
            out.append(line + (f" + mC{k} * ({src});" if src else ";"))
    assert set(relaxed) == {k for k in range(lat.q) if basis.groups[k] not in _CONSERVED}
    even = [k for k in range(lat.q) if parity[k] == "even"]
    odd = [k for k in range(lat.q) if parity[k] == "odd"]
    rows = lambda ks, i: _combination([m[k, i] for k in ks], [f"r{k}" for k in ks], lit)  # noqa: E731
    out.append(store(rest, rows(even, rest) or lit(0.0)))
    for i in pairs:
        o = lat.opposite[i]
        out += ["    {",
                f"        const real e = {rows(even, i) or lit(0.0)};",
                f"        const real o = {rows(odd, i) or lit(0.0)};",
                "    " + store(i, "e + o"),
                "    " + store(o, "e - o"),
                "    }"]
    return "\n".join(out)
