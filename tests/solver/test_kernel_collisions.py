"""The CUDA collision code (solver.backends.cuda.collisions, .mrt, .linear_sums) against NumPy.

The generated statements are C, but with literals written by ``repr`` they are also Python:
run on float64 arrays of nodes with the host constants of a run, they must give the NumPy
reference's post-collision populations to round-off. This checks the algebra of the pairing
and folding the generator does (every lattice, fluid model and collision, distinct MRT rates
per group, a body force) in milliseconds; the g++ emulation (test_kernel_compile.py) checks
the compiled kernels. The instruction counts are guarded too: a generator that stops sharing
work fails here rather than only on the GPU.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from solver.backends.cuda.collisions import cuda_collision
from solver.backends.cuda.linear_sums import linear_code
from solver.backends.cuda.mrt import mrt_collide_code
from solver.collision import collide, equilibrium, relaxation
from solver.lattice import get_lattice
from solver.moments import MRT_LATTICES, moment_basis
from solver.mrt import collide as mrt_collide
from solver.mrt import mrt_rates
from solver.regularized import RR_LATTICES, rr_rates
from solver.regularized import collide as rr_collide

#: Python literal of a constant (the kernels' ``lit`` writes C literals).
_lit = lambda x: repr(float(x))  # noqa: E731
_DECLARATION = re.compile(r"^(const\s+)?real\s+")
_OPS = re.compile(r"(?<![eE])[-+*/](?![=])")


def _python(code: str) -> str:
    """The generated C statements as Python (declarations dropped, blocks flattened, an
    ``if (x) {`` block indented under ``if x:``)."""
    lines, indent = [], ""
    for line in code.splitlines():
        line = line.strip()
        if line == "}" and indent:
            indent = ""
            continue
        if line in ("{", "}") or not line:
            continue
        branch = re.fullmatch(r"if \((.*)\) \{", line)
        if branch:
            lines.append(f"if {branch.group(1)}:")
            indent = "    "
            continue
        line = _DECLARATION.sub("", line).rstrip(";")
        lines.append(indent + re.sub(r",\s*(\w+) = ", r"; \1 = ", line))  # 'a = x, b = y'
    return "\n".join(lines)


def _run(name: str, collision: str, incompressible: bool, g: np.ndarray, constants: dict,
         force) -> np.ndarray:
    """Post-collision populations of the generated code of ``collision`` for g (q, M)."""
    lat = get_lattice(name)
    code = cuda_collision(collision).code(name, incompressible, _lit,
                                          lambda i, v: f"out[{i}] = {v};")
    out = np.full_like(g, np.nan)
    scope = {f"g{i}": g[i] for i in range(lat.q)}
    scope.update(dict(zip(("fx", "fy", "fz"), list(force) + [0.0] * (3 - len(force)),
                          strict=True)), out=out, sqrt=np.sqrt, **constants)
    exec(_python(code), {}, scope)  # noqa: S102 - our own generated arithmetic
    return out


def _state(name: str, incompressible: bool, n: int = 40, seed: int = 3):
    lat = get_lattice(name)
    rng = np.random.default_rng(seed)
    rho = 1 + 0.05 * rng.standard_normal(n)
    u = 0.05 * rng.standard_normal((lat.d, n))
    g = equilibrium(rho, u, lat, incompressible) * (1 + 0.02 * rng.standard_normal((lat.q, n)))
    force = 1e-3 * np.array([1.0, -2.0, 0.5][: lat.d])
    return lat, g, force


@pytest.mark.parametrize("name", ["D2Q9", "D3Q13", "D3Q19", "D3Q27"])
@pytest.mark.parametrize("collision", ["BGK", "TRT"])
@pytest.mark.parametrize("incompressible", [True, False])
def test_closed_form_code_is_the_numpy_collision(name, collision, incompressible) -> None:
    lat, g, force = _state(name, incompressible)
    rates = relaxation(collision, 0.83)
    entry = cuda_collision(collision)
    problem = SimpleNamespace(lattice=lat, force=tuple(force), rates=rates)
    constants = dict(zip(entry.param_names(name), entry.constants(problem), strict=True))
    got = _run(name, collision, incompressible, g, constants, force)
    ref = collide(g, lat, rates, force, incompressible)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", MRT_LATTICES)
@pytest.mark.parametrize("incompressible", [True, False])
def test_mrt_code_is_the_numpy_collision_with_distinct_rates(name, incompressible) -> None:
    """Every relaxation group at its own rate, so a factor folded into the wrong row's
    constant cannot cancel out."""
    lat, g, force = _state(name, incompressible)
    groups = [x for x in moment_basis(name).group_names() if x not in ("rho", "j")]
    rates = mrt_rates(name, 0.8, {x: 0.7 + 0.17 * k for k, x in enumerate(groups)})
    entry = cuda_collision("MRT")
    problem = SimpleNamespace(lattice=lat, force=tuple(force), rates=rates)
    constants = dict(zip(entry.param_names(name), entry.constants(problem), strict=True))
    got = _run(name, "MRT", incompressible, g, constants, force)
    ref = mrt_collide(g, lat, rates, force, incompressible)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", RR_LATTICES)
@pytest.mark.parametrize("incompressible", [True, False])
@pytest.mark.parametrize("smagorinsky", [0.0, 0.17])
def test_rr_code_is_the_numpy_collision(name, incompressible, smagorinsky) -> None:
    """Near tau = 1/2, with a body force, with and without the Smagorinsky branch."""
    lat, g, force = _state(name, incompressible)
    rates = rr_rates(0.51, smagorinsky)
    entry = cuda_collision("RR")
    problem = SimpleNamespace(lattice=lat, force=tuple(force), rates=rates)
    constants = dict(zip(entry.param_names(name), entry.constants(problem), strict=True))
    got = _run(name, "RR", incompressible, g, constants, force)
    ref = rr_collide(g, lat, rates, force, incompressible)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-14)
    if smagorinsky:  # the branch ran: the eddy viscosity changed the result
        plain = rr_collide(g, lat, rr_rates(0.51), force, incompressible)
        assert np.abs(plain - ref).max() > 1e-6


def _operations(code: str) -> int:
    """Floating-point operations of straight-line code: binary operators, where a multiply
    directly followed by an add or subtract counts once (a fused multiply-add)."""
    total = 0
    for line in _python(code).splitlines():
        for statement in line.split(";"):
            expr = statement.split("=", 1)[-1] if "=" in statement else statement
            ops = _OPS.findall(expr.replace("(-", "(").lstrip(" -"))
            fused = len(re.findall(r"\*\s*[\w.]+\s*[-+]|[-+]\s*[\w.]+\s*\*", expr))
            total += len(ops) - min(fused, ops.count("*"))
    return total


@pytest.mark.parametrize("seed", range(4))
def test_shared_sums_compute_the_matrix_product(seed) -> None:
    rng = np.random.default_rng(seed)
    matrix = rng.choice([-4, -2, -1, 0, 0, 1, 1, 2, 3, 8], size=(12, 9)).astype(float)
    names = [f"x{j}" for j in range(9)]
    code = linear_code(matrix, names, "t")
    x = rng.standard_normal((9, 5))
    scope = {n: x[j] for j, n in enumerate(names)}
    exec(_python("\n".join(code.lines(_lit))), {}, scope)  # noqa: S102
    got = np.array([eval(code.expr(k, _lit) or "0.0 * x0", {}, scope)  # noqa: S307
                    for k in range(12)])
    np.testing.assert_allclose(got, matrix @ x, rtol=1e-13, atol=1e-13)
    assert code.temps, "random 12 x 9 matrices share some pair of terms"


def test_collision_code_shares_work() -> None:
    """D3Q19, incompressible, counted on the generated code (SASS agrees within a few %):
    the closed form per pair of directions costs 130 operations (178 BGK and 197 TRT one
    direction at a time), MRT with shared moment sums 210 (321 row by row), RR 266 (stress,
    second- and third-order Hermite coefficients, the Smagorinsky branch)."""
    store = lambda i, v: f"out[{i}] = {v};"  # noqa: E731
    bgk = _operations(cuda_collision("BGK").code("D3Q19", True, _lit, store))
    trt = _operations(cuda_collision("TRT").code("D3Q19", True, _lit, store))
    mrt = _operations(mrt_collide_code("D3Q19", True, _lit, store))
    rr = _operations(cuda_collision("RR").code("D3Q19", True, _lit, store))
    assert bgk == trt <= 140
    assert mrt <= 220 and mrt < 1.7 * bgk
    assert rr <= 270  # 266, of which 16 in the Smagorinsky branch (skipped when off)
