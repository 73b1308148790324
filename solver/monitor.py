"""One run monitor for every way of running: the dashboard runner, ``python -m solver run`` and
``validate`` (in the spirit of lettuce's reporters, called from the simulation loop).

A :class:`RunMonitor` turns one :meth:`Simulation.health` look (a few scalars from the device)
into a :class:`Reading`: the health verdict with ONE divergence threshold
(:data:`DIVERGENCE_SPEED`) and ONE message (:func:`divergence_message`), the residual
(:func:`solver.observables.residual`: relative change of the superficial mean velocity per time
step), the permeability (:func:`solver.observables.darcy_permeability`, the one formula), and a
steady-state test on k itself (:class:`KConvergence`): converged when k changes by less than
``k_tolerance`` (0.1 %) per ``k_window`` (1000) steps, with an estimate of the steps still
needed from the geometric decay of successive changes. :func:`k_verdict` says whether a k may
be presented as the answer (converged, positive, Darcy flow).

A flow through openings has its own steady state (:class:`FlowConvergence`, the one definition
for the dashboard, the CLI and validation): every opening's flow rate, relative to the total
inflow, every opening's mean density and the pressure drop, relative to the pressure drop,
change by less than ``flow_tolerance`` (0.1 %) per ``flow_window`` steps, once the soft start
is over (:mod:`solver.soft_start`). The window comes from the flow (:func:`steady_window`):
:data:`FLOW_WINDOW_FRACTION` of its settling time, the smaller of one flow-through and one
viscous time across the inlet, and at least :data:`FLOW_WINDOW_MIN` steps; a fixed window of
1000 steps was a resolution-dependent share of the flow's time (1/59 of a flow-through of a
stenosis at Re 500 and d = 32 voxels, 1/29 at Re 100 and d = 10), so the runs of one
convergence study stopped at different distances from their steady states. Lattice units
throughout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import observables
from .collisions import AUTO, chosen_collision, collision_model
from .lattice import CS2
from .lattice_parameters import TAU_MIN
from .observables import Permeability
from .opening_kinds import DENSITY, SPEED, opening_kind
from .problem import Problem
from .stability import WARN_TAU, DivergenceError

__all__ = ["DIVERGENCE_SPEED", "K_TOLERANCE", "K_WINDOW", "DARCY_REYNOLDS", "Reading",
           "RunMonitor", "KConvergence", "FlowConvergence", "FLOW_TOLERANCE", "History",
           "divergence_message", "check_health", "k_verdict", "FlowWindow", "steady_window",
           "FLOW_WINDOW_FRACTION", "FLOW_WINDOW_MIN"]

#: Speed |u| (lattice units) above which a run counts as diverged: Mach ~0.5, far outside the
#: validity of the lattice (the one threshold of the dashboard, the CLI and validation).
DIVERGENCE_SPEED = 0.3
#: Default steady-state tolerance on k: relative change per :data:`K_WINDOW` steps.
K_TOLERANCE = 1e-3
#: Steps over which the change of k is measured.
K_WINDOW = 1000
#: Darcy's law holds for creeping flow: Reynolds number Re_k = |<u>| sqrt(k) / nu below this.
DARCY_REYNOLDS = 1.0
#: Default steady-state tolerance of a flow through openings: relative change of the flow rates
#: (to the inflow) and pressures (to the pressure drop) per :data:`K_WINDOW` steps.
FLOW_TOLERANCE = 1e-3
#: The openings' steady state is judged over this fraction of the flow's settling time
#: (:func:`steady_window`): the same relative drift per flow-through (0.1 % per window = 2 %
#: per settling time) on every grid; the stenosis and expansion validation (45 runs, Re 100
#: to 500, three resolutions each) reached its steady states with it.
FLOW_WINDOW_FRACTION = 0.05
#: Fewest steps the openings' steady state is judged over: the pressure waves of the soft
#: start cross a box of a few hundred voxels in about as many steps (c_s = 0.58 voxel/step).
FLOW_WINDOW_MIN = 1000
#: Points kept in the dashboard's time series.
HISTORY_LENGTH = 2000


def divergence_message(tau: float, force: np.ndarray, finite: bool, max_speed: float,
                       limit: float = DIVERGENCE_SPEED, *, openings: bool = False,
                       collision: str = "", finer: str = "") -> str:
    """What went wrong in a diverged run and what to change (lattice units, one wording).

    A run driven through ``openings`` is never told to raise tau (at its voxel size a larger
    tau raises the lattice speed, past the Mach limit): it is pointed to the collision 'auto'
    chooses near 1/2 (RR) when it collides with another (``collision``), and to a finer grid,
    ``finer`` (:attr:`solver.lattice_parameters.LatticeChoice.finer`) where known.
    """
    if not finite:
        what = "NaN or Inf in the fluid"
    else:
        what = (f"max |u| = {max_speed:.3g} > limit {limit:g} lattice units "
                f"(Mach {max_speed * 3**0.5:.2f})")
    if openings:
        return f"The simulation diverged: {what}. " + _openings_advice(tau, collision, finer)
    causes = []
    if tau < WARN_TAU:
        causes.append(f"tau = {tau:g} is too close to 0.5 (use 0.6 or more)")
    force = np.asarray(force, dtype=float)
    magnitude = float(np.linalg.norm(force)) if np.all(np.isfinite(force)) else math.inf
    if magnitude > 0:
        causes.append(f"the lattice Mach number |u|/c_s grew too high: the body force |F| = "
                      f"{magnitude:.3g} (lattice units) is too large for this geometry; reduce "
                      "it (or the pressure gradient) about tenfold")
    else:
        causes.append("the lattice Mach number |u|/c_s grew too high: lower the driving "
                      "velocity or pressure difference")
    return f"The simulation diverged: {what}. Likely causes: " + "; ".join(causes) + "."


def _openings_advice(tau: float, collision: str, finer: str) -> str:
    """What to change after a run through openings diverged: the collision, then the grid."""
    advice = ["Likely cause: the flow is too fast for this grid or this collision."]
    near = chosen_collision(AUTO, tau, True)
    if collision and collision_model(collision) is not near:
        advice.append(f"Collide with {near.name} (collision 'auto' chooses it at tau = "
                      f"{tau:g}; {collision} is fragile this close to 1/2).")
    grid = (f"{finer}, where tau >= {TAU_MIN} keeps the expected peak under the Mach target"
            if finer else "at the same tau, half the voxel size halves the lattice speed")
    advice.append(f"Use a finer grid ({grid}), or lower the inflow or pressure difference. "
                  "Raising tau at this voxel size would raise the lattice speed past the Mach "
                  "limit.")
    return " ".join(advice)


def check_health(health: dict, tau: float, force: np.ndarray,
                 u_limit: float = DIVERGENCE_SPEED) -> None:
    """Raise DivergenceError when :meth:`Simulation.health` reports NaN/Inf or max |u| > limit."""
    if not health["finite"] or not health["max_speed"] <= u_limit:
        raise DivergenceError(divergence_message(tau, force, health["finite"],
                                                 health["max_speed"], u_limit))


@dataclass(frozen=True)
class Reading:
    """One look at a run (lattice units): health, residual per step, k and its convergence.

    ``k_change`` is the relative change of k per ``window`` steps (None until the run has a
    window of history); ``steps_to_converge`` the estimated steps still needed (0 once
    converged, None when it cannot be told yet).
    """

    step: int
    finite: bool
    max_speed: float
    mean_velocity: np.ndarray
    residual: float
    permeability: Permeability | None
    k_change: float | None = None
    converged: bool = False
    steps_to_converge: int | None = None
    message: str | None = None
    tolerance: float = K_TOLERANCE
    window: int = K_WINDOW
    viscosity: float = 1.0
    #: Flow through openings: largest relative change of its flow rates and pressures per
    #: window (None until a window of history after the soft start), whether it is steady, and
    #: what to tell the user (:class:`FlowConvergence`).
    flow_change: float | None = None
    steady: bool = False
    steady_label: str = ""

    @property
    def healthy(self) -> bool:
        """No NaN and no speed above the divergence threshold."""
        return self.message is None

    @property
    def verdict(self) -> tuple[bool, str]:
        """(whether k may be presented as the answer, why) — see :func:`k_verdict`."""
        return k_verdict(self)


def k_verdict(reading: Reading) -> tuple[bool, str]:
    """Whether the reading's k is an answer (converged, positive, Darcy flow) and a label."""
    k = reading.permeability
    tolerance = f"{100 * reading.tolerance:.3g} % per {reading.window} steps"
    if k is None or not math.isfinite(k.lattice):
        return False, "no permeability: nothing drives the flow along the flow axis"
    if k.lattice <= 0:
        return False, ("negative permeability: the mean flow runs against the drive (not "
                       "steady, or not a Darcy flow); not an answer")
    reynolds = abs(k.superficial_velocity) * math.sqrt(k.lattice) / reading.viscosity
    if reynolds > DARCY_REYNOLDS:
        return False, (f"inertial flow (Re_k = {reynolds:.3g} > {DARCY_REYNOLDS:g}): Darcy's "
                       "law does not apply; reduce the drive")
    if reading.k_change is None:
        return False, f"not converged yet: k is compared over {reading.window} steps"
    if not reading.converged:
        more = ("" if reading.steps_to_converge is None
                else f"; about {reading.steps_to_converge:,} more steps")
        return False, (f"not converged: k changes {100 * reading.k_change:.3g} % per "
                       f"{reading.window} steps (target < {tolerance}){more}")
    return True, f"converged: k changes < {tolerance} (Darcy flow, Re_k = {reynolds:.2g})"


class KConvergence:
    """Steady-state test on k: relative change per ``window`` steps below ``tolerance``."""

    def __init__(self, tolerance: float = K_TOLERANCE, window: int = K_WINDOW) -> None:
        self.tolerance, self.window = float(tolerance), int(window)
        self.points: list[tuple[int, float]] = []

    def _before(self, step: int) -> tuple[int, float] | None:
        """The latest recorded (step, k) at or before ``step``."""
        found = None
        for point in self.points:
            if point[0] > step:
                break
            found = point
        return found

    def _change(self, a: tuple[int, float], b: tuple[int, float]) -> float:
        """Relative change of k from ``a`` to ``b`` scaled to one window."""
        return abs(b[1] - a[1]) / abs(b[1]) * self.window / (b[0] - a[0])

    def update(self, step: int, k: float) -> tuple[float | None, bool, int | None]:
        """Record k at ``step``; return (change per window, converged, steps still needed)."""
        if self.points and step <= self.points[-1][0]:
            self.points = [p for p in self.points if p[0] < step]
        self.points.append((step, k))
        if len(self.points) > 4 * HISTORY_LENGTH:
            del self.points[: len(self.points) - 4 * HISTORY_LENGTH]
        now = self.points[-1]
        ref = self._before(step - self.window)
        if ref is None or k == 0 or not math.isfinite(k):
            return None, False, None
        change = self._change(ref, now)
        if change < self.tolerance:
            return change, True, 0
        earlier = self._before(ref[0] - self.window)
        if earlier is None:
            return change, False, None
        previous = self._change(earlier, ref)
        if not previous > change > 0:
            return change, False, None  # not decaying (yet): no estimate
        # Geometric decay of the change: c(t) = c_now exp(-(t - t_now) / T).
        decay = (0.5 * (ref[0] + now[0]) - 0.5 * (earlier[0] + ref[0])) / math.log(
            previous / change)
        return change, False, int(math.ceil(decay * math.log(change / self.tolerance)))


@dataclass(frozen=True)
class FlowWindow:
    """The window (steps) a flow through openings is judged steady over, and its basis."""

    steps: int
    basis: str


def _main_opening(problem: Problem) -> tuple[object | None, float]:
    """(the opening setting the flow's scale, the lattice speed through it): the velocity
    opening carrying the largest flow at its mean speed (as the soft start and
    :func:`solver.lattice_parameters.demand_of_specs` pick it), else the widest open one at
    Bernoulli's speed of the largest density difference (0 without one)."""
    by_id = {o.id: o for o in problem.openings}
    conditions = {oid: c for oid, c in problem.opening_conditions.items() if oid in by_id}
    inlets = [(abs(c.value) * by_id[oid].area, oid) for oid, c in conditions.items()
              if opening_kind(c.kind).quantity == SPEED and c.value]
    if inlets:
        oid = max(inlets)[1]
        return by_id[oid], abs(conditions[oid].value)
    densities = [c.value for c in conditions.values()
                 if opening_kind(c.kind).quantity == DENSITY and c.value is not None]
    drop = max(densities) - min(densities) if densities else 0.0
    speed = math.sqrt(2.0 * CS2 * drop / problem.rho0) if drop > 0 else 0.0
    open_ = [by_id[oid] for oid, c in conditions.items() if opening_kind(c.kind).flux]
    return (max(open_, key=lambda o: o.area) if open_ else None), speed


def steady_window(problem: Problem) -> FlowWindow:
    """The steady-state window of ``problem``'s flow through openings (module text): a
    fraction of the smaller of one flow-through (the box's longest side at the main inlet's
    mean speed, as :meth:`solver.lattice_parameters.LatticeChoice.steps_per_flow_through`)
    and one viscous time ``D^2 / nu`` across that inlet (creeping flows settle by diffusion
    long before a flow-through), at least :data:`FLOW_WINDOW_MIN` steps."""
    opening, speed = _main_opening(problem)
    h = 1.0 if problem.voxel_size is None else float(problem.voxel_size)
    times = []
    if speed > 0:
        times.append((math.ceil(max(problem.tiling.shape) / speed), "flow-through"))
    nu = problem.kinematic_viscosity
    if opening is not None and nu > 0:
        times.append(((opening.diameter / h) ** 2 / nu, "viscous time across the inlet"))
    if not times:
        return FlowWindow(FLOW_WINDOW_MIN, "nothing drives the flow")
    settle, what = min(times)
    steps = max(FLOW_WINDOW_MIN, round(FLOW_WINDOW_FRACTION * settle))
    basis = (f"{100 * FLOW_WINDOW_FRACTION:g} % of one {what} ({settle:,.0f} steps)"
             if steps > FLOW_WINDOW_MIN else
             f"the least window ({100 * FLOW_WINDOW_FRACTION:g} % of one {what} is "
             f"{FLOW_WINDOW_FRACTION * settle:,.0f} steps)")
    return FlowWindow(int(steps), basis)


class FlowConvergence:
    """Steady state of a flow through openings (module text): flow rates relative to the total
    inflow, mean densities and the pressure drop relative to the pressure drop, each changing
    by less than ``tolerance`` per ``window`` steps, after step ``start`` (the soft start)."""

    def __init__(self, tolerance: float = FLOW_TOLERANCE, window: int = FLOW_WINDOW_MIN,
                 start: int = 0) -> None:
        self.tolerance, self.window, self.start = float(tolerance), int(window), int(start)
        self.points: list[tuple[int, np.ndarray]] = []

    @staticmethod
    def _vector(flows) -> np.ndarray:
        """Flow rates, mean densities and the pressure drop of one look."""
        rates = np.array([f.flow_rate for f in flows], dtype=float)
        rho = np.array([f.mean_density for f in flows], dtype=float)
        finite = rho[np.isfinite(rho)]
        drop = float(finite.max() - finite.min()) if finite.size > 1 else 0.0
        return np.concatenate([rates, rho, [drop]])

    def update(self, step: int, flows) -> tuple[float | None, bool]:
        """Record the openings' ``flows`` at ``step``; return (largest relative change per
        window, steady)."""
        if step < self.start or not flows:
            return None, False
        if self.points and step <= self.points[-1][0]:
            self.points = [p for p in self.points if p[0] < step]
        now = (int(step), self._vector(flows))
        self.points.append(now)
        del self.points[: max(0, len(self.points) - 4 * HISTORY_LENGTH)]
        ref = None
        for point in self.points:
            if point[0] > step - self.window:
                break
            ref = point
        if ref is None:
            return None, False
        n = len(flows)
        a, b = ref[1], now[1]
        inflow = float(np.sum(np.clip(b[:n], 0.0, None)))
        drop = b[-1]
        scale = np.concatenate([np.full(n, inflow), np.full(n + 1, drop)])
        diff = np.abs(b - a)
        # A quantity with no scale (no inflow, no pressure drop) must simply not move.
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(scale > 0, diff / scale, np.where(diff > 0, np.inf, 0.0))
        rel = rel[np.isfinite(a) & np.isfinite(b)]  # an opening without nodes has no density
        change = float(rel.max()) * self.window / (now[0] - ref[0]) if rel.size else 0.0
        return change, bool(change < self.tolerance)

    def label(self, change: float | None, steady: bool, step: int) -> str:
        """What the run says about its openings' steady state."""
        target = f"{100 * self.tolerance:.3g} % per {self.window} steps"
        if step < self.start:
            return f"soft start: the openings reach their values at step {self.start}"
        if change is None:
            return f"not steady yet: flow rates and pressures are compared over {self.window} steps"
        if steady:
            return (f"converged: the openings' flow rates, pressures and the pressure drop "
                    f"change less than {target} (largest {100 * change:.2g} %)")
        return (f"not steady: the openings' flows or pressures change {100 * change:.3g} % per "
                f"{self.window} steps (target < {target})")


class History:
    """Bounded time series of (sample, step, mflups, residual, permeability, k_change)."""

    KEYS = ("sample", "step", "mflups", "residual", "permeability", "k_change")

    def __init__(self) -> None:
        self.rows: list[tuple[float, ...]] = []
        self.samples = 0
        self._arrays: dict[str, np.ndarray] | None = None  # arrays() until the next record

    def record(self, reading: Reading, mflups: float) -> None:
        """Add a reading unless its step is not newer than the last one."""
        if self.rows and reading.step <= self.rows[-1][1]:
            return
        k = reading.permeability

        def number(value: float | None) -> float:
            return np.nan if value is None or not math.isfinite(value) else float(value)

        self.rows.append((self.samples, reading.step, mflups, number(reading.residual),
                          number(None if k is None else k.lattice), number(reading.k_change)))
        self.samples += 1
        del self.rows[:-HISTORY_LENGTH]
        self._arrays = None

    def arrays(self) -> dict[str, np.ndarray]:
        """The series as read-only float arrays keyed by :attr:`KEYS`, made once per record:
        every snapshot carries them, and building them from 2000 rows took milliseconds of
        each publish."""
        if self._arrays is None:
            data = np.array(self.rows, dtype=float).reshape(-1, len(self.KEYS))
            self._arrays = {key: data[:, i].copy() for i, key in enumerate(self.KEYS)}
            for array in self._arrays.values():
                array.setflags(write=False)
        return self._arrays


class RunMonitor:
    """Turns the health looks of one run into :class:`Reading` s (lattice units)."""

    def __init__(self, problem: Problem, tau: float, *, u_limit: float = DIVERGENCE_SPEED,
                 k_tolerance: float = K_TOLERANCE, k_window: int = K_WINDOW,
                 axis: int | None = None, voxel_size: float | None = None,
                 flow_tolerance: float = FLOW_TOLERANCE, flow_window: int | None = None,
                 finer: str = "") -> None:
        self.problem, self.tau, self.u_limit = problem, float(tau), float(u_limit)
        self.finer = finer  # the grid that meets the Mach target, for a divergence message
        self.axis = observables.flow_axis(problem, axis)
        self.voxel_size = voxel_size
        self.k = KConvergence(k_tolerance, k_window)
        tables = problem.iolets if problem.opening_conditions else None
        # The window of a flow through openings comes from the flow unless one is given.
        if flow_window is not None:
            self.window = FlowWindow(int(flow_window), "given")
        elif tables is not None:
            self.window = steady_window(problem)
        else:
            self.window = FlowWindow(FLOW_WINDOW_MIN, "no flow through openings")
        self.flows = FlowConvergence(flow_tolerance, self.window.steps,
                                     0 if tables is None else tables.ramp_steps)
        self._last: tuple[int, np.ndarray] | None = None
        self._residual = math.inf

    def permeability(self, health: dict) -> Permeability | None:
        """k of a healthy look by :func:`solver.observables.darcy_permeability`, None if
        nothing drives the flow."""
        try:
            return observables.darcy_permeability(
                self.problem, float(health["mean_momentum"][self.axis]), self.axis,
                health.get("layer_density"), self.voxel_size)
        except ValueError:
            return None

    def observe(self, step: int, health: dict, flows=None) -> Reading:
        """The reading of :meth:`Simulation.health` ``health`` at ``step``; with ``flows``
        (:meth:`Simulation.opening_flows`) also the openings' steady state."""
        finite, speed = bool(health["finite"]), float(health["max_speed"])
        mean = np.asarray(health["mean_velocity"], dtype=float)
        base = dict(step=int(step), finite=finite, max_speed=speed, mean_velocity=mean,
                    tolerance=self.k.tolerance, window=self.k.window,
                    viscosity=self.problem.kinematic_viscosity)
        if not finite or not speed <= self.u_limit:
            message = divergence_message(
                self.tau, self.problem.force, finite, speed, self.u_limit,
                openings=bool(self.problem.opening_conditions),
                collision=self.problem.collision.name, finer=self.finer)
            return Reading(residual=math.nan, permeability=None, message=message, **base)
        previous = self._last
        if previous is not None and step < previous[0]:
            previous = None  # the run went back (restored or restarted)
        if previous is not None and step == previous[0]:
            residual = self._residual  # the same state looked at again
        else:
            residual = (math.inf if previous is None else
                        observables.residual(mean, previous[1], step - previous[0]))
            self._last, self._residual = (int(step), mean), residual
        k = self.permeability(health)
        change, converged, remaining = (self.k.update(step, k.lattice) if k is not None
                                        else (None, False, None))
        driven = [f for f in flows or () if opening_kind(f.kind).flux]
        flow_change, steady = self.flows.update(step, driven) if driven else (None, False)
        label = self.flows.label(flow_change, steady, step) if driven else ""
        return Reading(residual=residual, permeability=k, k_change=change, converged=converged,
                       steps_to_converge=remaining, flow_change=flow_change, steady=steady,
                       steady_label=label, **base)

    def state(self) -> dict:
        """What a checkpoint keeps so that a resumed run judges convergence as an unbroken one."""
        last = None if self._last is None else [self._last[0], self._last[1].tolist()]
        return {"last": last, "residual": self._residual, "k_points": list(self.k.points),
                "flow_points": [[s, v.tolist()] for s, v in self.flows.points]}

    def restore(self, state: dict | None) -> None:
        """Continue from :meth:`state` (None: from scratch)."""
        if not state:
            return
        last = state.get("last")
        self._last = None if last is None else (int(last[0]), np.asarray(last[1], dtype=float))
        self._residual = float(state.get("residual", math.inf))
        self.k.points = [(int(s), float(k)) for s, k in state.get("k_points", [])]
        self.flows.points = [(int(s), np.asarray(v, dtype=float))
                             for s, v in state.get("flow_points", [])]

    def check(self, step: int, health: dict, flows=None) -> Reading:
        """:meth:`observe`, raising DivergenceError with the message when unhealthy."""
        reading = self.observe(step, health, flows)
        if not reading.healthy:
            raise DivergenceError(reading.message)
        return reading
