"""CUDA registry of opening kinds: each kind's link rule as kernel code, keyed like
:data:`solver.opening_kinds.OPENING_KIND_REGISTRY`.

The openings' pass (:mod:`solver.backends.cuda.iolets`) asks :func:`link_rule_code` for the
part of ``iolet_values`` that depends on a link's kind: the soft start's scaling of the value
and the written population ``o``, one branch per kind with a link rule, each taking the
integer code :func:`solver.opening_kinds.link_code` gives its links. The arithmetic and its
order are the NumPy rules' (:mod:`solver.link_rules`). In the kernel: ``k`` the link, ``j``
its direction, ``fj`` the bounced population, ``v`` its value, ``s`` and ``r0`` the ramp's
factor and initial density, ``node_u`` the velocities of the pressure links' nodes (row
``link_node[k]``), ``f``/``donor``/``shift`` the state and the outflow donor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...lattice import Lattice
from ...opening_kinds import link_kinds
from ...registry import Registry

__all__ = ["CudaOpeningKind", "CUDA_OPENING_KINDS", "CodeContext", "link_rule_code",
           "registered_link_kinds"]


@dataclass(frozen=True)
class CodeContext:
    """What a kind's kernel code is written for: the lattice, arithmetic type ``real``, its
    literal writer ``lit`` and the fluid model."""

    lattice: Lattice
    real: str
    lit: Callable[[float], str]
    incompressible: bool


@dataclass(frozen=True)
class CudaOpeningKind:
    """One opening kind in the openings' pass.

    ``ramp``: the C expression of the ramped value from ``s``, ``v`` and ``r0`` (None: the
    value is unused or not ramped); ``write(ctx)``: the lines that set ``o``, the written
    population (None: the kind has no link rule, its links keep bounce-back).
    """

    name: str
    ramp: str | None = None
    write: Callable[[CodeContext], list[str]] | None = None


def _velocity(ctx: CodeContext) -> list[str]:
    """Ladd: ``o = f*_j + value`` (:data:`solver.link_rules.LADD_VELOCITY`)."""
    return ["o = fj + v;"]


def _pressure(ctx: CodeContext) -> list[str]:
    """Anti-bounce-back with the node's velocity (:data:`solver.link_rules.ANTI_BOUNCE_BACK`)."""
    lat, lit = ctx.lattice, ctx.lit
    q, d = lat.q, lat.d
    c = lat.c.astype(int)
    w2 = ", ".join(lit(2.0 * float(w)) for w in np.asarray(lat.w, dtype=np.float64))
    lines = [f"const real W2[{q}] = {{{w2}}};"]
    for a in range(d):
        lines.append(f"const real C{a}[{q}] = {{"
                     + ", ".join(lit(float(c[i, a])) for i in range(q)) + "};")
    lines += ["const int p = link_node[k];", "real cu = (real)0;", "real uu = (real)0;"]
    for a in range(d):
        lines += [f"const real u{a} = node_u[{a} * n + p];", f"cu += C{a}[j] * u{a};",
                  f"uu += u{a} * u{a};"]
    lines.append(f"const real quad = {lit(4.5)} * cu * cu - {lit(1.5)} * uu;")
    lines.append("o = W2[j] * (v + quad) - fj;" if ctx.incompressible else
                 f"o = W2[j] * v * ({lit(1.0)} + quad) - fj;")
    return lines


def _outflow(ctx: CodeContext) -> list[str]:
    """Zero gradient: the donor's population (:data:`solver.link_rules.ZERO_GRADIENT`)."""
    return ["o = IO_LOAD(f[donor[k]], shift[j]);"]


CUDA_OPENING_KINDS: Registry[CudaOpeningKind] = Registry("CUDA opening kind")
register = CUDA_OPENING_KINDS.register
register(CudaOpeningKind("velocity", "s * v", _velocity))
register(CudaOpeningKind("pressure", "r0 + s * (v - r0)", _pressure))
register(CudaOpeningKind("outflow", None, _outflow))
register(CudaOpeningKind("closed"))


def _branches(pieces: list[tuple[int, list[str]]], indent: str) -> list[str]:
    """``if (code[k] == c) { ... } else if ...`` over (code, lines)."""
    out = []
    for n, (code, lines) in enumerate(pieces):
        out.append(f"{indent}{'else ' if n else ''}if (code[k] == {code}) {{")
        out += [f"{indent}    {line}" for line in lines]
        out.append(f"{indent}}}")
    return out


def registered_link_kinds() -> tuple[tuple[str, CudaOpeningKind | None], ...]:
    """(name, CUDA entry) of every kind with a link rule, in code order: what the generated
    pass depends on (a cache key)."""
    return tuple((kind.name, CUDA_OPENING_KINDS.get(kind.name)) for kind in link_kinds())


def link_rule_code(ctx: CodeContext) -> tuple[list[str], list[str]]:
    """(the soft start's lines scaling ``v``, the lines setting ``o``) of every kind with a
    link rule, by its code. ``o`` starts as ``fj`` (bounce-back) for a code no kind has."""
    kinds = [CUDA_OPENING_KINDS.named(kind.name) for kind in link_kinds()]
    missing = [k.name for k in kinds if k.write is None]
    if missing:
        raise ValueError(f"Opening kinds {missing} have a link rule but no CUDA code; register "
                         "it in solver/backends/cuda/opening_kinds.py.")
    ramp = _branches([(code, [f"v = {k.ramp};"]) for code, k in enumerate(kinds)
                      if k.ramp is not None], " " * 12)
    write = ["    real o = fj;"] + _branches(
        [(code, k.write(ctx)) for code, k in enumerate(kinds)], "    ")
    return ramp, write
