"""Recursive regularized collision (RR) in the tiled GPU kernel: the CUDA of
:func:`solver.regularized.collide` and its host constants.

Per node: pair sums ``s = g_i + g_o`` and differences ``d = g_i - g_o`` give rho, the momentum
(odd) and the second moments (even); the stress ``A`` (6 numbers in 3D), the second- and
third-order Hermite coefficients ``B2``, ``B3`` follow; each pair of opposite directions then
costs one even and one odd sum of those coefficients with literal weights, ``f*_i = E + O`` and
``f*_o = E - O`` (``H2`` is even in c, ``c`` and ``H3`` odd). Smagorinsky's local relaxation time
is computed behind a branch on the run's constant ``rr_c18`` (uniform across the launch). The
constants are rounded once from double on the host; only the order of additions, hence the last
bits, differs from the NumPy reference.
"""

from __future__ import annotations

from ...lattice import get_lattice
from ...problem import Problem
from ...regularized import RegularizedRates, hermite_rows

__all__ = ["rr_param_names", "rr_constants", "rr_collide_code"]

_AXES = "xyz"


def rr_param_names(lattice: str) -> list[str]:
    """Kernel constants of RR: 1 - 1/tau0, tau0, tau0^2 and 18 C^2 (Smagorinsky; 0 = off)."""
    return ["rr_keep", "rr_tau", "rr_tau2", "rr_c18"]


def rr_constants(problem: Problem) -> list[float]:
    """RR constants in double, named by :func:`rr_param_names`."""
    rates = problem.rates
    if not isinstance(rates, RegularizedRates):
        raise ValueError(f"RR needs RR rates (solver.regularized.rr_rates), got {rates!r}.")
    tau = 1.0 / rates.omega
    return [1.0 - rates.omega, tau, tau * tau, 18.0 * rates.smagorinsky ** 2]


def _pairs(lat) -> list[tuple[int, int]]:
    return [(i, int(o)) for i, (c, o) in enumerate(zip(lat.c.tolist(), lat.opposite.tolist(),
                                                       strict=True)) if any(c) and i < o]


def _sum(terms: list[tuple[float, str]], lit) -> str:
    """C expression of sum coeff * name, coefficients +-1 without a multiply; '0' if empty."""
    out = ""
    for coeff, name in terms:
        if coeff == 0.0:
            continue
        mag = abs(coeff)
        term = name if mag == 1.0 else f"{lit(mag)} * {name}"
        out += (" - " if coeff < 0 else " + ") + term if out else ("-" if coeff < 0 else "") + term
    return out or lit(0.0)


def rr_collide_code(lattice: str, incompressible: bool, lit, store) -> str:
    """CUDA statements of RR with Guo forcing, from ``g<i>`` and ``f<x>`` to ``store``."""
    lat = get_lattice(lattice)
    axes = _AXES[: lat.d]
    pairs2, triples, h2, h3 = hermite_rows(lattice)
    rest = next(i for i, c in enumerate(lat.c.tolist()) if not any(c))
    pairs = _pairs(lat)
    c = lat.c.tolist()
    out = [f"    const real s{i} = g{i} + g{o}, d{i} = g{i} - g{o};" for i, o in pairs]
    out.append(f"    const real rho = {' + '.join([f'g{rest}'] + [f's{i}' for i, _ in pairs])};")
    for a, ax in enumerate(axes):
        mom = _sum([(float(c[i][a]), f"d{i}") for i, _ in pairs], lit)
        out.append(f"    const real j{ax} = ({mom}) + f{ax} * {lit(0.5)};")
    if incompressible:
        out += [f"    const real u{ax} = j{ax};" for ax in axes]
        weighted = lambda expr: expr  # noqa: E731 - rho_eff = 1
    else:
        out.append(f"    const real inv_rho = {lit(1.0)} / rho;")
        out += [f"    const real u{ax} = j{ax} * inv_rho;" for ax in axes]
        weighted = lambda expr: f"rho * ({expr})"  # noqa: E731
    names = [f"{axes[a]}{axes[b]}" for a, b in pairs2]
    for (a, b), nm in zip(pairs2, names, strict=True):
        second = _sum([(float(c[i][a] * c[i][b]), f"s{i}") for i, _ in pairs], lit)
        uf = f"{lit(0.5)} * (u{axes[a]} * f{axes[b]} + u{axes[b]} * f{axes[a]})"
        iso = f" - rho * {lit(1.0 / 3.0)}" if a == b else ""
        out.append(f"    const real p{nm} = {uf};")
        out.append(f"    const real A{nm} = (({second}){iso} - "
                   f"{weighted(f'u{axes[a]} * u{axes[b]}')}) + p{nm};")
    # Smagorinsky (Hou et al. 1996): tau from the node's own stress; rr_c18 = 0 skips it.
    out.append("    real keep = rr_keep;")
    out.append(f"    if (rr_c18 > {lit(0.0)}) {{")
    qsum = " + ".join(f"A{nm} * A{nm}" if a == b else f"{lit(2.0)} * (A{nm} * A{nm})"
                      for (a, b), nm in zip(pairs2, names, strict=True))
    out.append(f"        const real sq = sqrt({lit(2.0)} * ({qsum})) * rr_c18;")
    sq = "sq" if incompressible else "sq * inv_rho"
    out.append(f"        const real tau = {lit(0.5)} * (rr_tau + sqrt(rr_tau2 + {sq}));")
    out.append(f"        keep = {lit(1.0)} - {lit(1.0)} / tau;")
    out.append("    }")
    for (a, b), nm in zip(pairs2, names, strict=True):
        out.append(f"    const real B{nm} = ({weighted(f'u{axes[a]} * u{axes[b]}')} + keep * "
                   f"A{nm}) + p{nm};")
    index = {p: nm for p, nm in zip(pairs2, names, strict=True)}
    tnames = []
    for t in triples:
        nm = "".join(axes[k] for k in t)
        tnames.append(nm)
        x, y, z = (axes[k] for k in t)
        neq = (f"u{x} * A{index[(t[1], t[2])]} + u{y} * A{index[(t[0], t[2])]} + "
               f"u{z} * A{index[(t[0], t[1])]}")
        out.append(f"    const real T{nm} = {weighted(f'u{x} * u{y} * u{z}')} + keep * "
                   f"({neq});")
    out += [f"    const real J{ax} = j{ax} + f{ax} * {lit(0.5)};" for ax in axes]
    w = lat.w.tolist()
    even_rest = _sum([(float(h2[rest, k]), f"B{nm}") for k, nm in enumerate(names)], lit)
    out.append(store(rest, f"{lit(w[rest])} * rho + ({even_rest})"))
    for i, o in pairs:
        even = _sum([(float(h2[i, k]), f"B{nm}") for k, nm in enumerate(names)], lit)
        odd = _sum([(3.0 * w[i] * c[i][a], f"J{ax}") for a, ax in enumerate(axes)]
                   + [(float(h3[i, k]), f"T{nm}") for k, nm in enumerate(tnames)], lit)
        out += [
            "    {",
            f"        const real E = {lit(w[i])} * rho + ({even});",
            f"        const real O = {odd};",
            "    " + store(i, "E + O"),
            "    " + store(o, "E - O"),
            "    }",
        ]
    return "\n".join(out)
