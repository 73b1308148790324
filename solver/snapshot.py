"""What a :class:`~solver.runner.SimulationRunner` publishes: host-side snapshots of a run.

A :class:`Snapshot` is an immutable bundle of NumPy arrays and numbers (lattice units) that a
user interface can read without touching the simulation: a cut through the fields chosen by a
:class:`SliceView`, counters, the bounded time series of MFLUPS, residual and permeability, and
the run's status. :class:`FlowSummary` turns one device-side look at a run (the cut and, at
times, its health: no full field ever crosses to the host) into those numbers, and
:func:`divergence_message` explains a diverged run to the user.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .config import SimulationConfig
from .simulation import QUANTITIES
from .units import darcy_permeability

__all__ = [
    "Snapshot", "SliceView", "History", "FlowSummary", "STATUSES", "RUNAWAY_SPEED", "resolve_view",
    "config_permeability", "divergence_message",
]

#: Values of :attr:`Snapshot.status`.
STATUSES = ("starting", "paused", "running", "diverged", "error", "stopped")

#: Speed (lattice units) above which a run is declared runaway: Mach ~0.5, far outside validity.
RUNAWAY_SPEED = 0.3
#: Points kept in the time series.
HISTORY_LENGTH = 2000


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
    velocity components. ``history`` maps ``sample, step, mflups, residual, permeability`` to
    1D arrays. ``run_id`` changes whenever the run restarts from rest.
    """

    seq: int = 0
    run_id: int = 0
    status: str = "starting"
    message: str = ""
    error: str | None = None
    step: int = 0
    view: SliceView = field(default_factory=SliceView)
    plane: np.ndarray | None = None
    plane_velocity: np.ndarray | None = None
    plane_axes: tuple[str, str] = ("x", "y")
    shape: tuple[int, ...] = ()
    metrics: dict = field(default_factory=dict)
    steps_per_second: float = 0.0
    max_speed: float = 0.0
    mean_velocity: tuple[float, ...] = ()
    permeability: float | None = None
    history: dict = field(default_factory=dict)
    device: dict = field(default_factory=dict)
    memory_bytes: int = 0
    config: dict = field(default_factory=dict)
    geometry_name: str = ""


class History:
    """Bounded time series of (sample, step, mflups, residual, permeability).

    The residual is the relative change of the mean velocity vector between two samples per
    time step, |<u>_new - <u>_old| / |<u>_new| / (step_new - step_old).
    """

    KEYS = ("sample", "step", "mflups", "residual", "permeability")

    def __init__(self) -> None:
        self.rows: list[tuple[float, ...]] = []
        self.samples = 0
        self._last: tuple[int, np.ndarray] | None = None

    def record(
        self, step: int, mflups: float, mean_velocity: np.ndarray, permeability: float | None
    ) -> None:
        """Add a sample unless ``step`` is not newer than the last one."""
        residual = np.nan
        if self._last is not None:
            last_step, last_mean = self._last
            if step <= last_step:
                return
            norm = float(np.linalg.norm(mean_velocity))
            if norm > 0:
                residual = float(np.linalg.norm(mean_velocity - last_mean)) / norm / (
                    step - last_step)
        self._last = (step, np.array(mean_velocity, dtype=float))
        value = np.nan if permeability is None else permeability
        self.rows.append((self.samples, step, mflups, residual, value))
        self.samples += 1
        del self.rows[:-HISTORY_LENGTH]

    def arrays(self) -> dict[str, np.ndarray]:
        """The series as float arrays keyed by :attr:`KEYS`."""
        data = np.array(self.rows, dtype=float).reshape(-1, len(self.KEYS))
        return {key: data[:, i].copy() for i, key in enumerate(self.KEYS)}


@dataclass(frozen=True)
class FlowSummary:
    """One device-side look at a run (:meth:`Simulation.view`): the cut a snapshot shows and,
    when ``checked``, the run's health (lattice units).

    ``mean_velocity`` is the superficial mean over the whole box (zero in solids), the Darcy
    velocity; ``permeability`` follows from it and the body force (None without a force).
    Without a check the health numbers are absent and :attr:`healthy` is True.
    """

    view: SliceView
    plane: np.ndarray
    velocity: np.ndarray
    axes: tuple[str, str]
    checked: bool
    finite: bool = True
    max_speed: float = 0.0
    mean_velocity: np.ndarray | None = None
    permeability: float | None = None

    @classmethod
    def of(cls, sim: Any, view: SliceView, health: bool = True) -> FlowSummary:
        """The cut ``view`` of a :class:`~solver.simulation.Simulation`, with its health if
        ``health``; only the planes and a few scalars leave the device."""
        view = resolve_view(view, sim.solid.shape)
        look = sim.view(view.axis, view.index, view.quantity, health=health)
        flow = cls(view, look["plane"], look["velocity"], look["axes"], health)
        if not health:
            return flow
        mean = np.asarray(look["mean_velocity"], dtype=float)
        return replace(flow, finite=look["finite"], max_speed=look["max_speed"],
                       mean_velocity=mean,
                       permeability=config_permeability(sim.config, mean, sim.solid.ndim))

    @property
    def healthy(self) -> bool:
        """No NaN and no runaway speed (True when not checked)."""
        return self.finite and self.max_speed <= RUNAWAY_SPEED

    def snapshot_fields(self) -> dict[str, Any]:
        """The :class:`Snapshot` fields this look provides (the health ones only if checked)."""
        out = dict(view=self.view, plane=self.plane, plane_velocity=self.velocity,
                   plane_axes=self.axes)
        if self.checked:
            out.update(max_speed=self.max_speed, permeability=self.permeability,
                       mean_velocity=tuple(float(m) for m in self.mean_velocity))
        return out


def resolve_view(view: SliceView, shape: tuple[int, ...]) -> SliceView:
    """``view`` with a concrete index inside ``shape`` (the middle for None); 2D: the field."""
    if len(shape) == 2:
        return replace(view, axis=2, index=0)
    index = view.index if view.index is not None else shape[view.axis] // 2
    return replace(view, index=int(min(max(index, 0), shape[view.axis] - 1)))


def divergence_message(
    config: SimulationConfig, step: int, finite: bool, max_speed: float, good_step: int
) -> str:
    """A user-facing explanation of a diverged run and what to change."""
    what = ("NaN values appeared" if not finite else
            f"the speed reached {max_speed:.3g} (above {RUNAWAY_SPEED} lattice units, Mach "
            f"{max_speed * 3**0.5:.2f})")
    causes = []
    if config.tau < 0.55:
        causes.append(f"tau = {config.tau:g} is too close to 0.5; use tau >= 0.6")
    force = float(np.linalg.norm(config.body_force))
    if force > 0:
        causes.append(f"the body force |F| = {force:.3g} (lattice units) is too large for this "
                      "geometry; reduce it (or the pressure gradient) about tenfold")
    if not causes:
        causes.append("the flow is too fast for the lattice; lower the driving velocity or force")
    return (f"Run paused at step {step}: {what}. Likely cause: {'; '.join(causes)}. "
            f"The last good state (step {good_step}) was restored.")


def config_permeability(config: SimulationConfig, mean: np.ndarray, ndim: int) -> float | None:
    """Darcy permeability (nodes^2) along the dominant body-force axis, None without force."""
    force = np.asarray(config.body_force[:ndim], dtype=float)
    if not force.any():
        return None
    axis = int(np.argmax(np.abs(force)))
    return darcy_permeability(float(mean[axis]), float(force[axis]), config.viscosity,
                              config.initial_density)
