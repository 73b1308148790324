"""MRT collision in the tiled GPU kernel: generated moment-space code and its host constants.

The CUDA port of :func:`solver.mrt.collide` (``templates/PHYSICS_FOR_GPU.md``, section 3). NumPy
applies ``f* = (I - A) g + A E b + (I - A/2) E b_F`` with dense ``q x q`` matrices; the kernel
does the same update in moment space, where it is sparse:

1. pair sums and differences ``g_i +- g_opp(i)``: every row of ``M`` is an even or an odd
   polynomial of ``c``, so even moments need only the sums and odd ones the differences;
2. ``m = M g`` with the integer entries of ``M`` as literals and partial sums shared between
   rows (:mod:`.linear_sums`: D3Q19 45 operations instead of 90), ``rho`` and
   ``j = sum c g + F/2``;
3. per non-conserved row ``k``: ``r_k = A_k m_k + B_k m_eq,k + C_k m_F,k`` with
   ``m_eq = (M E) b``, ``m_F = (M E) b_F`` (literal, sparse ``M E``) and the run's constants
   ``A_k = (1 - s_k)/|M_k|^2``, ``B_k = s_k/|M_k|^2``, ``C_k = (1 - s_k/2)/|M_k|^2`` (kernel
   arguments, so other rates never recompile), each times the factor the kernel leaves out of
   the combination it multiplies (:class:`_Plan`: fewer multiplies, and rows proportional to
   each other share one combination); zero terms are left out; conserved rows give ``rho``
   and ``m_j + F`` whatever their rate;
4. ``f* = M^T r`` (``M^-1 = M^T diag(1/|M_k|^2)``, the scale folded into ``r``), again by
   even and odd halves with shared partial sums (D3Q19 43 operations instead of 89).

About 0.65x the operations of the row-by-row form (D3Q19: 210 against 321 per node, the
closed-form BGK 130); only the order of additions, hence the last bits, differs.

The same code serves D2Q9, D3Q19 and D3Q13 (both D3Q13 sublattices live in the tiles).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cache

import numpy as np

from ...lattice import get_lattice
from ...moments import equilibrium_matrix, moment_basis, pair_index
from ...mrt import MRTRates
from .linear_sums import LinearCode, combination, leading_factor, linear_code

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


def _source_rows(me: np.ndarray, d: int) -> np.ndarray:
    """``M E`` on the kernel's source basis ``(F, fj)``: Guo's source is ``(M E) (0, F,
    d(jj)/dj . F)``; the kernel's diagonal entries ``fj<a><a>`` hold j_a F_a, half the
    derivative, so their columns are doubled here."""
    out = me[:, 1:].copy()
    for col, (a, b) in enumerate(pair_index(d), start=d):
        if a == b:
            out[:, col] *= 2.0
    return out


@dataclass(frozen=True)
class _Plan:
    """The moment-space code of one lattice: ``m = M g`` by halves (even rows from the pair
    sums, odd ones from the differences) with shared partial sums, and per row ``k`` the
    factors divided out of its combinations and folded into its host constants: ``fm[k]``
    of ``m_k`` (relaxed rows only), ``fe[k]`` of ``m_eq,k``, ``fs[k]`` of ``m_F,k``."""

    even: tuple[int, ...]
    odd: tuple[int, ...]
    forward: tuple[LinearCode, LinearCode]
    fm: tuple[Fraction, ...]
    fe: tuple[Fraction, ...]
    fs: tuple[Fraction, ...]


@cache
def _plan(name: str) -> _Plan:
    """The :class:`_Plan` of lattice ``name`` (code generation and constants share it)."""
    lat = get_lattice(name)
    basis, parity, _, me, relaxed = _structure(name)
    m = basis.matrix
    rest, pairs = _rest_and_pairs(name)
    even = tuple(k for k in range(lat.q) if parity[k] == "even")
    odd = tuple(k for k in range(lat.q) if parity[k] == "odd")
    forward = (linear_code(m[np.ix_(even, [rest] + pairs)], _even_inputs(rest, pairs), "se"),
               linear_code(m[np.ix_(odd, pairs)], [f"pd{i}" for i in pairs], "so"))
    row_of = {k: (half, n) for half, ks in enumerate((even, odd)) for n, k in enumerate(ks)}
    one = Fraction(1)
    fm = tuple(leading_factor(forward[row_of[k][0]].rows[row_of[k][1]]) if k in relaxed
               else one for k in range(lat.q))
    source = _source_rows(me, lat.d)
    clean = lambda row: [Fraction(float(x)).limit_denominator(1000) for x in row]  # noqa: E731
    fe = tuple(leading_factor(clean(me[k])) for k in range(lat.q))
    fs = tuple(leading_factor(clean(source[k])) for k in range(lat.q))
    return _Plan(even, odd, forward, fm, fe, fs)


def _rest_and_pairs(name: str) -> tuple[int, list[int]]:
    """The rest direction and the first direction i < opp(i) of every moving pair."""
    lat = get_lattice(name)
    rest = int(np.flatnonzero(~lat.c.any(axis=1))[0])
    return rest, [i for i in range(lat.q) if i < lat.opposite[i] and i != rest]


def _even_inputs(rest: int, pairs: list[int]) -> list[str]:
    return [f"g{rest}"] + [f"ps{i}" for i in pairs]


def mrt_param_names(lattice: str) -> list[str]:
    """Kernel parameter names of the MRT constants: A_k, B_k, C_k per relaxed row k."""
    relaxed = _structure(lattice)[4]
    return [f"m{x}{k}" for k in relaxed for x in "ABC"]


def mrt_params(rates: MRTRates) -> list[float]:
    """Values (float64) for :func:`mrt_param_names`, from the per-row rates ``rates.s``:
    ``(1 - s_k)/|M_k|^2``, ``s_k/|M_k|^2`` and ``(1 - s_k/2)/|M_k|^2``, each times the factor
    the kernel leaves out of the combination it multiplies (:class:`_Plan`)."""
    _, _, norm, _, relaxed = _structure(rates.lattice)
    plan = _plan(rates.lattice)
    out = []
    for k in relaxed:
        s = rates.s[k]
        out += [float(plan.fm[k]) * (1.0 - s) / norm[k], float(plan.fe[k]) * s / norm[k],
                float(plan.fs[k]) * (1.0 - 0.5 * s) / norm[k]]
    return out


def mrt_collide_code(name: str, incompressible: bool, lit, store) -> str:
    """CUDA statements: MRT + Guo collision of ``g0..`` into stores ``store(i, value)``."""
    lat = get_lattice(name)
    basis, parity, norm, me, relaxed = _structure(name)
    plan = _plan(name)
    m, d = basis.matrix, lat.d
    rest, pairs = _rest_and_pairs(name)
    out = [f"    const real ps{i} = g{i} + g{lat.opposite[i]}, pd{i} = g{i} - g{lat.opposite[i]};"
           for i in pairs]
    # m = M g by halves, partial sums shared between rows; relaxed rows without their factor
    moments = {}
    for ks, code in zip((plan.even, plan.odd), plan.forward, strict=True):
        out += code.lines(lit)
        moments.update({k: code.expr(n, lit, plan.fm[k]) for n, k in enumerate(ks)})
    out += [f"    const real m{k} = {moments[k] or lit(0.0)};" for k in range(lat.q)]
    axes = "xyz"[:d]
    jrow = {ax: basis.names.index(f"j{ax}") for ax in axes}
    out.append(f"    const real rho = m{basis.names.index('rho')};")
    out += [f"    const real j{ax} = m{jrow[ax]} + f{ax} * {lit(0.5)};" for ax in axes]
    out.append(f"    const real inv = {lit(1.0) if incompressible else f'{lit(1.0)} / rho'};")
    pairs_ab = pair_index(d)
    basis_names = ["rho"] + [f"j{ax}" for ax in axes] + [f"jj{a}{b}" for a, b in pairs_ab]
    force_names = [f"f{ax}" for ax in axes] + [f"fj{a}{b}" for a, b in pairs_ab]
    for a, b in pairs_ab:
        ja, jb, fa, fb = f"j{axes[a]}", f"j{axes[b]}", f"f{axes[a]}", f"f{axes[b]}"
        out.append(f"    const real jj{a}{b} = {ja} * {jb} * inv;")
        fj = f"{ja} * {fa}" if a == b else f"({ja} * {fb} + {jb} * {fa})"
        out.append(f"    const real fj{a}{b} = {fj} * inv;")
    # Scaled post-collision moments r_k = m*_k / |M_k|^2; each distinct equilibrium or
    # source combination (without its factor, which is in mB_k, mC_k) computed once.
    source = _source_rows(me, d)
    shared: dict[str, str] = {}

    def once(expr: str) -> str:
        if expr not in shared:
            shared[expr] = f"ce{len(shared)}"
            out.append(f"    const real {shared[expr]} = {expr};")
        return shared[expr]

    rows = []
    for k in range(lat.q):
        group = basis.groups[k]
        if group == "rho":
            rows.append(f"    const real r{k} = rho * {lit(1.0 / norm[k])};")
        elif group == "j":
            ax = basis.names[k][1]
            rows.append(f"    const real r{k} = (m{k} + f{ax}) * {lit(1.0 / norm[k])};")
        else:
            line = f"    const real r{k} = mA{k} * m{k}"
            eq = combination([x / float(plan.fe[k]) for x in me[k]], basis_names, lit)
            src = combination([x / float(plan.fs[k]) for x in source[k]], force_names, lit)
            line += f" + mB{k} * {once(eq)}" if eq else ""
            line += f" + mC{k} * {once(src)}" if src else ""
            rows.append(line + ";")
    out += rows
    assert set(relaxed) == {k for k in range(lat.q) if basis.groups[k] not in _CONSERVED}
    # f* = M^T r by halves, again with shared partial sums
    e = linear_code(m[np.ix_(plan.even, [rest] + pairs)].T, [f"r{k}" for k in plan.even],
                    "te")
    o = linear_code(m[np.ix_(plan.odd, pairs)].T, [f"r{k}" for k in plan.odd], "to")
    out += e.lines(lit) + o.lines(lit)
    out.append(store(rest, e.expr(0, lit) or lit(0.0)))
    for n, i in enumerate(pairs):
        out += ["    {",
                f"        const real e = {e.expr(n + 1, lit) or lit(0.0)};",
                f"        const real o = {o.expr(n, lit) or lit(0.0)};",
                "    " + store(i, "e + o"),
                "    " + store(lat.opposite[i], "e - o"),
                "    }"]
    return "\n".join(out)
