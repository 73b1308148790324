"""Validation framework: result rows, the case registry and helpers shared by the cases.

A case is a function ``run(size, backend) -> list[CaseResult]``; ``size`` is ``"ci"`` (small,
minutes on two CPU cores, what the test suite runs) or ``"full"`` (GPU sizes with the papers'
accuracy targets). The tests under ``tests/solver/validation`` and ``python -m solver
validate`` call the same registered functions, so the numbers in a report are the ones the
tests check. All quantities are in lattice units.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..collision import equilibrium
from ..monitor import RunMonitor
from ..observables import ConvergenceMonitor
from ..simulation import Simulation

__all__ = ["CaseResult", "Case", "CASES", "register", "run_case", "run_steady",
           "start_flow", "SIZES", "Timer"]

log = logging.getLogger(__name__)

#: Problem sizes every case knows.
SIZES = ("ci", "full")


@dataclass(frozen=True)
class CaseResult:
    """One checked number: measured vs reference with a tolerance.

    ``relative`` errors are ``|measured - reference| / |reference|``; otherwise absolute
    (e.g. a velocity deviation in units of the lid speed, or a Strouhal number range where
    ``reference`` is the centre and ``tolerance`` the half-width). A row with ``tolerance``
    None is information shown next to the checked ones (e.g. BGK's tau dependence).
    """

    case: str
    quantity: str
    measured: float
    reference: float
    tolerance: float | None
    size: str
    steps: int
    seconds: float
    relative: bool = True
    note: str = ""

    @property
    def error(self) -> float:
        """Deviation from the reference (relative or absolute, see ``relative``)."""
        diff = abs(self.measured - self.reference)
        return diff / abs(self.reference) if self.relative else diff

    @property
    def checked(self) -> bool:
        """Whether this row has a tolerance (False: information only)."""
        return self.tolerance is not None

    @property
    def passed(self) -> bool:
        """Whether the deviation is within the tolerance (NaN fails; unchecked rows pass)."""
        if self.tolerance is None:
            return True
        return bool(math.isfinite(self.measured) and self.error <= self.tolerance)


@dataclass(frozen=True)
class Case:
    """A registered validation case."""

    name: str
    run: Callable[[str, str], list[CaseResult]]
    slow: bool
    description: str
    sizes: tuple[str, ...] = SIZES


#: All validation cases by name, in registration order.
CASES: dict[str, Case] = {}


def register(name: str, description: str, slow: bool = False,
             sizes: tuple[str, ...] = SIZES, **params):
    """Decorator: register ``fn(size, backend, **params)`` as case ``name`` for ``sizes``."""
    def wrap(fn):
        if name in CASES:
            raise ValueError(f"Validation case {name!r} registered twice.")
        CASES[name] = Case(name, lambda size, backend: fn(size, backend, name=name, **params),
                           slow, description, tuple(sizes))
        return fn
    return wrap


def run_case(name: str, size: str = "ci", backend: str = "numpy") -> list[CaseResult]:
    """Run validation case ``name`` at ``size`` on ``backend``."""
    if name not in CASES:
        raise ValueError(f"Unknown validation case {name!r}; choose from {', '.join(CASES)}.")
    if size not in SIZES:
        raise ValueError(f"Unknown size {size!r}; use one of {', '.join(SIZES)}.")
    if size not in CASES[name].sizes:
        raise ValueError(f"Case {name!r} runs at size {', '.join(CASES[name].sizes)} only "
                         f"(too long for {size!r}).")
    log.info("validation case %s (%s, %s)", name, size, backend)
    return CASES[name].run(size, backend)


class Timer:
    """Wall-clock seconds since creation."""

    def __init__(self) -> None:
        self.start = time.perf_counter()

    def __call__(self) -> float:
        """Seconds elapsed."""
        return time.perf_counter() - self.start


def run_steady(sim: Simulation, every: int, tol: float, max_steps: int,
               min_steps: int = 0, measure: str = "velocity") -> float:
    """Step until the mean velocity changes by less than ``tol`` (relative) per ``every`` steps.

    ``measure`` as in :class:`~solver.observables.ConvergenceMonitor`; the change per ``every``
    steps is ``every`` times :func:`solver.observables.residual`. Every check also goes through
    the run monitor (:mod:`solver.monitor`): a diverged run raises DivergenceError with the
    same message as the dashboard and the CLI. Returns the last change per ``every`` steps; a
    run that hits ``max_steps`` first logs a warning and returns it (the case then reports it
    in its note).
    """
    monitor = ConvergenceMonitor(measure)
    health = RunMonitor(sim.problem, sim.config.tau)
    residual = math.inf
    while sim.time_step < max_steps:
        sim.step(every)
        health.check(sim.time_step, sim.health())
        residual = monitor.update(sim.fields())
        if residual < tol and sim.time_step >= min_steps:
            return residual
    log.warning("no steady state after %d steps (residual %.2g)", sim.time_step, residual)
    return residual


def start_flow(sim: Simulation, velocity) -> None:
    """Set every node to equilibrium at ``velocity``: a vector (d,) or a field (d, *shape).

    Starting from the far-field flow instead of rest skips most of the start-up transient.
    """
    sim.allocate()
    problem = sim.problem
    tiling, lattice = problem.tiling, problem.lattice
    t, q, n = tiling.n_tiles, lattice.q, tiling.nodes_per_tile
    velocity = np.asarray(velocity, dtype=np.float64)
    if velocity.ndim == 1:
        u = np.repeat(velocity[:, None], t * n, axis=1)
    else:
        u = tiling.gather(np.moveaxis(velocity, 0, -1), fill=0.0).reshape(t * n, -1).T
    rho = np.full(t * n, problem.rho0)
    f = equilibrium(rho, u, lattice, problem.incompressible)
    sim.backend.set_populations(sim.state, f.reshape(q, t, n).transpose(1, 0, 2).copy())
