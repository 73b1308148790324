"""What a :class:`~solver.runner.SimulationRunner` publishes: host-side snapshots of a run.

A :class:`Snapshot` is an immutable bundle of NumPy arrays and numbers (lattice units) that a
user interface can read without touching the simulation: a cut through the fields chosen by a
:class:`SliceView`, counters, the bounded time series of MFLUPS, residual and permeability, and
the run's status. :class:`FlowSummary` turns one device-side look at a run (the cut and, at
times, its health: no full field ever crosses to the host) into those numbers through the run
monitor (:mod:`solver.monitor`), which also explains a diverged run to the user.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .monitor import History, Reading, RunMonitor
from .simulation import QUANTITIES
from .vessel import OpeningFlow, mass_balance

__all__ = ["Snapshot", "OpeningFlow", "SliceView", "History", "FlowSummary", "STATUSES",
           "resolve_view"]

#: Values of :attr:`Snapshot.status`.
STATUSES = ("starting", "paused", "running", "diverged", "error", "stopped")



@dataclass(frozen=True)
class SliceView:
    """Which cut a snapshot carries: quantity, normal axis (0-2) and index (None = middle)."""

    quantity: str = "umag"
    axis: int = 2
    index: int | None = None

    def __post_init__(self) -> None:
        if self.quantity not in QUANTITIES:
            raise ValueError(f"Unknown quantity {self.quantity!r}; choose one of {QUANTITIES}.")
        if self.axis not in (0, 1, 2):
            raise ValueError(f"Slice axis must be 0, 1 or 2, got {self.axis!r}.")


@dataclass(frozen=True)
class Snapshot:
    """What the runner published last; arrays are host NumPy in lattice units, NaN in solids.

    ``plane`` is the chosen quantity on the cut, shape (n_a, n_b) over the two in-plane axes
    ``plane_axes`` (in x, y, z order); ``plane_velocity`` (2, n_a, n_b) holds the in-plane
    velocity components. ``history`` maps ``sample, step, mflups, residual, permeability,
    k_change`` to 1D arrays (:class:`~solver.monitor.History`). ``run_id`` changes whenever
    the run restarts from rest; ``build`` whenever the simulation is rebuilt (Reset, Apply
    even with the flow carried over, a new geometry).
    """

    seq: int = 0
    run_id: int = 0
    #: Simulations the runner has built so far (a new one on Reset, Apply, a new geometry).
    build: int = 0
    #: Commands the runner has applied so far (compare with ``SimulationRunner.sent``).
    applied: int = 0
    status: str = "starting"
    message: str = ""
    error: str | None = None
    step: int = 0
    view: SliceView = field(default_factory=SliceView)
    plane: np.ndarray | None = None
    plane_velocity: np.ndarray | None = None
    plane_axes: tuple[str, str] = ("x", "y")
    #: A pulsatile run's openings' flow over the last and the current heart cycle
    #: (:class:`solver.pulsatile.CycleView`), None for steady openings.
    cycle: Any = None
    shape: tuple[int, ...] = ()
    metrics: dict = field(default_factory=dict)
    steps_per_second: float = 0.0
    max_speed: float = 0.0
    mean_velocity: tuple[float, ...] = ()
    permeability: float | None = None
    #: Relative change of k per 1000 steps (see :class:`solver.monitor.KConvergence`).
    k_change: float | None = None
    k_converged: bool = False
    #: Estimated steps until k is converged (0 once converged, None: cannot tell yet).
    steps_to_converge: int | None = None
    #: Whether k may be shown as the answer (converged, positive, Darcy flow), and why.
    k_answer: bool = False
    k_label: str = ""
    history: dict = field(default_factory=dict)
    #: Flow through each driven opening (empty without openings).
    openings: tuple[OpeningFlow, ...] = ()
    #: Net flow over inflow through the openings (0 at a mass-conserving steady state).
    mass_balance: float | None = None
    #: Steady state of the openings' flow (:class:`solver.monitor.FlowConvergence`): whether
    #: reached, and what the run says about it (empty without openings).
    steady: bool = False
    steady_label: str = ""
    device: dict = field(default_factory=dict)
    memory_bytes: int = 0
    config: dict = field(default_factory=dict)
    geometry_name: str = ""
    #: The probes' and lines' latest :class:`solver.probes.Readings` (None: none are set).
    probes: Any = None
    #: The latest :class:`solver.coarse_flow.CoarseFlow` (None: no 3D flow view asked for it).
    flow3d: Any = None


@dataclass(frozen=True)
class FlowSummary:
    """One device-side look at a run (:meth:`Simulation.view`): the cut a snapshot shows and,
    when checked, the :class:`~solver.monitor.Reading` of the run's health (lattice units).

    The reading's ``mean_velocity`` is the superficial mean over the whole box (zero in
    solids), the Darcy velocity; its permeability comes from :mod:`solver.observables` (None
    without a drive). Without a check there is no reading and :attr:`healthy` is True.
    """

    view: SliceView
    plane: np.ndarray
    velocity: np.ndarray
    axes: tuple[str, str]
    reading: Reading | None = None
    #: Flow through the openings the config lists (:meth:`Simulation.opening_flows`).
    openings: tuple[OpeningFlow, ...] = ()
    #: The :class:`solver.probes.Readings` gathered with the cut (None: no probes asked).
    probes: Any = None

    @classmethod
    def of(cls, sim: Any, view: SliceView, health: bool = True,
           monitor: RunMonitor | None = None, probes: Any = None) -> FlowSummary:
        """The cut ``view`` of a :class:`~solver.simulation.Simulation`, read by ``monitor``
        (one made for ``sim`` if None) when ``health``, and ``probes`` (a ProbeSet inside the
        grid, or None) sampled with the cut; only the planes, the probed values and a few
        scalars leave the device."""
        view = resolve_view(view, sim.solid.shape)
        look = sim.view(view.axis, view.index, view.quantity, health=health, probes=probes)
        # A few numbers per opening: the per-link fluxes and opening densities are small.
        flow = cls(view, look["plane"], look["velocity"], look["axes"],
                   openings=sim.opening_flows(), probes=look.get("probes"))
        if not health:
            return flow
        monitor = monitor if monitor is not None else RunMonitor(sim.problem, sim.config.tau)
        return replace(flow, reading=monitor.observe(sim.time_step, look, flow.openings))

    @property
    def checked(self) -> bool:
        """Whether this look carries a health reading."""
        return self.reading is not None

    @property
    def healthy(self) -> bool:
        """No NaN and no runaway speed (True when not checked)."""
        return self.reading is None or self.reading.healthy

    def snapshot_fields(self) -> dict[str, Any]:
        """The :class:`Snapshot` fields this look provides (the health ones only if checked)."""
        out = dict(view=self.view, plane=self.plane, plane_velocity=self.velocity,
                   plane_axes=self.axes, openings=self.openings,
                   mass_balance=mass_balance(self.openings))
        r = self.reading
        if r is not None and r.healthy:
            answer, label = r.verdict
            out.update(max_speed=r.max_speed,
                       permeability=None if r.permeability is None else r.permeability.lattice,
                       mean_velocity=tuple(float(m) for m in r.mean_velocity),
                       k_change=r.k_change, k_converged=r.converged,
                       steps_to_converge=r.steps_to_converge, k_answer=answer, k_label=label,
                       steady=r.steady, steady_label=r.steady_label)
        elif r is not None:
            out.update(max_speed=r.max_speed)
        return out


def resolve_view(view: SliceView, shape: tuple[int, ...]) -> SliceView:
    """``view`` with a concrete index inside ``shape`` (the middle for None); 2D: the field."""
    if len(shape) == 2:
        return replace(view, axis=2, index=0)
    index = view.index if view.index is not None else shape[view.axis] // 2
    return replace(view, index=int(min(max(index, 0), shape[view.axis] - 1)))
