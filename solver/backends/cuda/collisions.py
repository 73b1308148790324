"""The registry of collision models in the CUDA kernel: the twin of :mod:`solver.collisions`.

Each :class:`CudaCollision` is registered under the name of its host model and knows the lattices
its code is written for, the names of its kernel constants, their values for a run (computed in
double on the host and rounded once, as the NumPy reference rounds them) and the CUDA code of the
collision itself. :mod:`.kernels` and :mod:`.tables` go through :func:`cuda_collision` only.

BGK and TRT share the closed form of :func:`solver.collision.collide` with Guo forcing
(:func:`closed_form_code`); MRT is the moment-space code of :mod:`.mrt`, RR the recursive
regularized code of :mod:`.regularized`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...lattice import LATTICE_NAMES, get_lattice
from ...moments import MRT_LATTICES
from ...mrt import MRTRates
from ...problem import Problem
from ...registry import Registry
from ...regularized import RR_LATTICES
from .mrt import mrt_collide_code, mrt_param_names, mrt_params
from .regularized import rr_collide_code, rr_constants, rr_param_names

__all__ = ["CudaCollision", "CUDA_COLLISIONS", "PROBE_COLLISION", "cuda_collision",
           "closed_form_code", "signed_sum"]

#: ``code(lattice, incompressible, lit, store)``: the collision's CUDA statements, from the
#: gathered populations ``g<i>`` and force ``f<x>`` to ``store(i, value)`` of every direction;
#: ``lit(x)`` writes a literal in the kernel's precision.
CodeFn = Callable[[str, bool, Callable[[float], str], Callable[[int, str], str]], str]


@dataclass(frozen=True)
class CudaCollision:
    """One collision model in the CUDA kernel (keyed like :data:`solver.collisions.COLLISIONS`)."""

    name: str
    lattices: tuple[str, ...]
    param_names: Callable[[str], list[str]]
    constants: Callable[[Problem], list[float]]
    code: CodeFn
    #: float16 storage: (name pattern, power of S) of the kernel arguments that make the
    #: collision of S-scaled deviations yield S times its result (:func:`.storage.half_form`
    #: 'scaled'); empty where the model has no such form (it collides plain deviations).
    scale_powers: tuple[tuple[str, int], ...] = ()


CUDA_COLLISIONS: Registry[CudaCollision] = Registry("CUDA collision", "collision")
#: The model the probes and the in-place decoding are compiled as (they do not collide).
PROBE_COLLISION = "BGK"


register = CUDA_COLLISIONS.register


def cuda_collision(name: str) -> CudaCollision:
    """The CUDA twin of the collision model called ``name``."""
    return CUDA_COLLISIONS.named(name)


def signed_sum(coeffs, names) -> str:
    """C expression sum_k coeffs[k] * names[k] for coefficients in {-1, 0, 1}; '0' if empty."""
    terms = ""
    for c, name in zip(coeffs, names, strict=True):
        if c:
            terms += (" + " if c > 0 else " - ") + name if terms else ("" if c > 0 else "-") + name
    return terms or "0"


# ---------------------------------------------------------------- BGK / TRT (closed form)
#: BGK/TRT constants (see :func:`closed_form_constants`): the keep factors, Guo's even force
#: factor, then per weight class k = |c|^2: wp w_k, 4.5 wp w_k and 3 wm w_k; then Guo's
#: forcing per pair of opposite directions (:func:`_forcing_param_names`).
_TRT_PARAMS = ["kr", "kp", "km", "af"] + [f"{p}{k}" for p in ("wpw", "eqw", "wmw")
                                         for k in range(4)]


def _pairs(lattice: str) -> list[tuple[int, int]]:
    """Pairs (i, opposite(i)) of moving directions, i < opposite(i), in lattice order."""
    lat = get_lattice(lattice)
    return [(i, int(o)) for i, (c, o) in enumerate(zip(lat.c.tolist(), lat.opposite.tolist(),
                                                       strict=True)) if any(c) and i < o]


def _forcing_param_names(lattice: str) -> list[str]:
    """Guo's forcing of the BGK/TRT kernels per pair (i, o) of opposite directions, constants
    of a run: ``fe<i>`` = 9 (1 - wp/2) w_i c_i.F (times c_i.u) and ``fo<i>`` = 3 (1 - wm/2)
    w_i c_i.F, each rounded once from double on the host as the NumPy reference rounds them;
    direction o's are fe_o = fe_i (even, with c_o.u = -c_i.u) and fo_o = -fo_i."""
    first = [i for i, _ in _pairs(lattice)]
    return [f"fe{i}" for i in first] + [f"fo{i}" for i in first]


def closed_form_param_names(lattice: str) -> list[str]:
    """Names of the BGK/TRT kernel constants on ``lattice``."""
    return _TRT_PARAMS + _forcing_param_names(lattice)


def closed_form_constants(problem: Problem) -> list[float]:
    """BGK/TRT constants in double, named by :func:`closed_form_param_names`: kr = 1 - wp,
    kp = (1 - wp)/2, km = (1 - wm)/2, af = -3 (1/wp - 1/2), then per weight class k: wp w_k,
    4.5 wp w_k, 3 wm w_k, then Guo's forcing per pair (i, o) of opposite directions (lattice
    order of i): 9 (1 - wp/2) w_i c_i.F, then 3 (1 - wm/2) w_i c_i.F."""
    lat = problem.lattice
    force = list(problem.force) + [0.0] * (3 - len(problem.force))
    w = [0.0] * 4
    for k, weight in zip(lat.weight_class, lat.w.tolist(), strict=True):
        w[k] = weight
    wp, wm = problem.rates.omega_plus, problem.rates.omega_minus
    values = [1.0 - wp, 0.5 * (1.0 - wp), 0.5 * (1.0 - wm), -3.0 * (1.0 / wp - 0.5)]
    for factor in (wp, 4.5 * wp, 3.0 * wm):
        values += [factor * wk for wk in w]
    first = [i for i, _ in _pairs(lat.name)]
    cf = lat.c[first] @ np.asarray(force[: lat.d], dtype=np.float64)
    for factor in (9.0 * (1.0 - 0.5 * wp), 3.0 * (1.0 - 0.5 * wm)):  # Guo: even, odd
        values += (factor * np.asarray(lat.w, dtype=np.float64)[first] * cf).tolist()
    return values


def closed_form_code(lattice: str, incompressible: bool, lit, store, *,
                     kinetic: str | None = None) -> str:
    """CUDA of :func:`solver.collision.collide` with Guo forcing (BGK is TRT with wp = wm).

    Worked per pair (i, o) of opposite directions, from ``s = g_i + g_o`` and ``d = g_i - g_o``
    (which also give rho and the momentum): c_o = -c_i, so with ``cu = c_i.u`` the even part
    ``E = kp s + cu (4.5 wp w cu + fe_i) + r wp w`` and the odd part ``O = km d + cu 3 wm w +
    fo_i`` are computed once and ``f*_i = E + O``, ``f*_o = E - O`` (times rho where
    compressible, folded into the per-class factors): about half the instructions of one
    closed form per direction, and TRT costs what BGK does. The rounding order differs from
    the NumPy reference's by a few ulp (within the backends' tolerances). ``kinetic``: the C
    expression of the -1.5 that multiplies u.u in ``r`` (incompressible; default that literal),
    for float16 storage's S-scaled deviations (:func:`.storage.kernel_constants`).
    """
    lat = get_lattice(lattice)
    axes = "xyz"[: lat.d]
    rest = next(i for i, c in enumerate(lat.c.tolist()) if not any(c))
    pairs = _pairs(lattice)
    out = [f"    const real s{i} = g{i} + g{o}, d{i} = g{i} - g{o};" for i, o in pairs]
    out.append(f"    const real rho = {' + '.join([f'g{rest}'] + [f's{i}' for i, _ in pairs])};")
    for a, ax in enumerate(axes):
        mom = signed_sum([lat.c[i][a] for i, _ in pairs], [f"d{i}" for i, _ in pairs])
        out.append(f"    real u{ax} = ({mom}) + f{ax} * {lit(0.5)};")
    usq = " + ".join(f"u{ax} * u{ax}" for ax in axes)
    ufd = " + ".join(f"f{ax} * u{ax}" for ax in axes)
    if incompressible:
        out += [f"    real r = {kinetic or lit(-1.5)} * ({usq}) + rho;"]
    else:
        out += [f"    const real inv_rho = {lit(1.0)} / rho;"]
        out += [f"    u{ax} *= inv_rho;" for ax in axes]
        # r rho: (1 - 1.5 u^2) rho + af u.F (the reference's af u.F / rho times rho)
        out += [f"    real r = ({lit(-1.5)} * ({usq}) + {lit(1.0)}) * rho;"]
    out.append(f"    r += af * ({ufd});")
    classes = sorted({lat.weight_class[i] for i, _ in pairs})
    if incompressible:
        eq, od = "eqw", "wmw"  # the constants themselves
    else:  # per weight class, times rho: once per node, not per pair
        eq, od = "eqr", "wmr"
        out += [f"    const real eqr{k} = eqw{k} * rho, wmr{k} = wmw{k} * rho;" for k in classes]
    out.append(store(rest, f"g{rest} * kr + r * wpw{lat.weight_class[rest]}"))
    for i, o in pairs:
        k = lat.weight_class[i]  # the coefficients arrive per class; o has the same class
        cu = signed_sum(lat.c[i].tolist(), [f"u{ax}" for ax in axes])
        out += [
            "    {",
            f"        const real cu = {cu};",
            f"        const real E = (cu * (cu * {eq}{k} + fe{i}) + r * wpw{k}) + s{i} * kp;",
            f"        const real O = (cu * {od}{k} + fo{i}) + d{i} * km;",
            "    " + store(i, "E + O"),
            "    " + store(o, "E - O"),
            "    }",
        ]
    return "\n".join(out)


# ---------------------------------------------------------------- MRT (moment space)
def mrt_constants(problem: Problem) -> list[float]:
    """MRT constants A_k, B_k, C_k per relaxed moment row (:func:`.mrt.mrt_params`)."""
    lat = problem.lattice
    if not isinstance(problem.rates, MRTRates) or problem.rates.lattice != lat.name:
        raise ValueError(f"MRT needs MRT rates for {lat.name} (solver.mrt.mrt_rates), got "
                         f"{problem.rates!r}.")
    return list(mrt_params(problem.rates))


#: Powers of S of the closed form's arguments that make the collision of S-scaled deviations
#: g' = S g yield S f* (every value S times the unscaled one): with u' = S u (the force times
#: S: u = j + F/2), the terms linear in the populations (g kr, s kp, d km, r wpw_k, cu wmw_k)
#: keep their constants; the quadratic ones divide theirs by S (cu^2 eqw_k; af F.u, with F
#: times S; the -1.5 of u.u: the storage argument fs_kinetic); of the population-free ones
#: fo_i multiplies by S, fe_i keeps (it is added to cu eqw_k, then multiplied by cu).
CLOSED_FORM_SCALE_POWERS = ((r"f[xyz]|fo\d+", 1), (r"af|eqw\d", -1))

register(CudaCollision("BGK", LATTICE_NAMES, closed_form_param_names, closed_form_constants,
                       closed_form_code, CLOSED_FORM_SCALE_POWERS))
register(CudaCollision("TRT", LATTICE_NAMES, closed_form_param_names, closed_form_constants,
                       closed_form_code, CLOSED_FORM_SCALE_POWERS))
register(CudaCollision("MRT", MRT_LATTICES, mrt_param_names, mrt_constants, mrt_collide_code))
register(CudaCollision("RR", RR_LATTICES, rr_param_names, rr_constants, rr_collide_code))
