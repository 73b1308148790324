"""The registry of collision models in the CUDA kernel: the twin of :mod:`solver.collisions`.

Each :class:`CudaCollision` is registered under the name of its host model and knows the lattices
its code is written for, the names of its kernel constants, their values for a run (computed in
double on the host and rounded once, as the NumPy reference rounds them) and the CUDA code of the
collision itself. :mod:`.kernels` and :mod:`.tables` go through :func:`cuda_collision` only.

BGK and TRT share the closed form of :func:`solver.collision.collide` with Guo forcing
(:func:`closed_form_code`); MRT is the moment-space code of :mod:`.mrt`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from ...lattice import LATTICE_NAMES, get_lattice
from ...moments import MRT_LATTICES
from ...mrt import MRTRates
from ...problem import Problem
from ...registry import Registry
from .mrt import mrt_collide_code, mrt_param_names, mrt_params

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
#: BGK/TRT constants (see :func:`closed_form_constants`): per weight class k = |c|^2, wp w_k
#: and 3 wm w_k; then Guo's forcing per moving direction i (:func:`_forcing_param_names`).
_TRT_PARAMS = ["omp", "hm", "af"] + [f"{p}{k}" for p in ("wpw", "wmw") for k in range(4)]


def _forcing_param_names(lattice: str) -> list[str]:
    """Guo's forcing of the BGK/TRT kernels per moving direction i, constants of a run:
    ``fe<i>`` = 9 (1 - wp/2) w_i c_i.F (times c_i.u) and ``fo<i>`` = 3 (1 - wm/2) w_i c_i.F,
    each rounded once from double on the host as the NumPy reference rounds them."""
    moving = [i for i, c in enumerate(get_lattice(lattice).c.tolist()) if any(c)]
    return [f"fe{i}" for i in moving] + [f"fo{i}" for i in moving]


def closed_form_param_names(lattice: str) -> list[str]:
    """Names of the BGK/TRT kernel constants on ``lattice``."""
    return _TRT_PARAMS + _forcing_param_names(lattice)


def closed_form_constants(problem: Problem) -> list[float]:
    """BGK/TRT constants in double: omp = 1 - (wp + wm)/2, hm = (wp - wm)/2,
    af = -3 (1/wp - 1/2), then per weight class k: wp w_k, 3 wm w_k, then Guo's forcing per
    moving direction i (lattice order): 9 (1 - wp/2) w_i c_i.F, then 3 (1 - wm/2) w_i c_i.F."""
    lat = problem.lattice
    force = list(problem.force) + [0.0] * (3 - len(problem.force))
    w = [0.0] * 4
    for k, weight in zip(lat.weight_class, lat.w.tolist(), strict=True):
        w[k] = weight
    wp, wm = problem.rates.omega_plus, problem.rates.omega_minus
    values = [1.0 - 0.5 * (wp + wm), 0.5 * (wp - wm), -3.0 * (1.0 / wp - 0.5)]
    for factor in (wp, 3.0 * wm):
        values += [factor * wk for wk in w]
    moving = np.any(lat.c != 0, axis=1)
    cf = (lat.c @ np.asarray(force[: lat.d], dtype=np.float64))[moving]
    for factor in (9.0 * (1.0 - 0.5 * wp), 3.0 * (1.0 - 0.5 * wm)):  # Guo: even, odd
        values += (factor * np.asarray(lat.w, dtype=np.float64)[moving] * cf).tolist()
    return values


def closed_form_code(lattice: str, incompressible: bool, lit, store, *, trt: bool) -> str:
    """CUDA of :func:`solver.collision.collide` with Guo forcing; ``trt``: whether the odd part
    relaxes at its own rate (the ``hm`` term; BGK has hm = 0 and leaves it out)."""
    lat = get_lattice(lattice)
    g = [f"g{i}" for i in range(lat.q)]
    axes = "xyz"[: lat.d]
    out = [f"    const real rho = {' + '.join(g)};"]
    for ax, col in zip(axes, lat.c.T.tolist(), strict=True):
        out.append(f"    real u{ax} = ({signed_sum(col, g)}) + f{ax} * {lit(0.5)};")
    usq = " + ".join(f"u{ax} * u{ax}" for ax in axes)
    ufd = " + ".join(f"f{ax} * u{ax}" for ax in axes)
    if incompressible:
        out += [f"    real r = {lit(-1.5)} * ({usq}) + rho;",
                f"    r += af * ({ufd});"]
        rho_mul = ""
    else:
        out += [f"    const real inv_rho = {lit(1.0)} / rho;"]
        out += [f"    u{ax} *= inv_rho;" for ax in axes]
        out += [f"    real r = {lit(-1.5)} * ({usq}) + {lit(1.0)};",
                f"    r += af * ({ufd}) * inv_rho;"]
        rho_mul = " * rho"
    for i, c in enumerate(lat.c.tolist()):
        k = lat.weight_class[i]  # the coefficients arrive per class
        cu = signed_sum(c, [f"u{ax}" for ax in axes])
        keep = f"{g[i]} * omp" + (f" - hm * {g[int(lat.opposite[i])]}" if trt else "")
        if not any(c):
            out.append(store(i, f"{keep} + r{rho_mul} * wpw0"))
            continue
        out += [
            "    {",
            f"        const real cu = {cu};",
            f"        real t = ({lit(4.5)} * cu * cu + r){rho_mul} * wpw{k};",
            f"        t += cu * fe{i} + fo{i};",
            f"        t += cu * wmw{k}{rho_mul};",
            "    " + store(i, f"{keep} + t"),
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


register(CudaCollision("BGK", LATTICE_NAMES, closed_form_param_names, closed_form_constants,
                       partial(closed_form_code, trt=False)))
register(CudaCollision("TRT", LATTICE_NAMES, closed_form_param_names, closed_form_constants,
                       partial(closed_form_code, trt=True)))
register(CudaCollision("MRT", MRT_LATTICES, mrt_param_names, mrt_constants, mrt_collide_code))
