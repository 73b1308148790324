"""State of one dashboard session and the actions its buttons trigger.

:class:`Controller` owns the session's :class:`~solver.runner.SimulationRunner` and the pending
:class:`~solver.config.SimulationConfig` that the sidebar widgets edit; views watch its
parameters (``snapshot`` above all) and never touch the runner or the simulation. ``poll`` is
called by a periodic callback and publishes the runner's latest snapshot; actions send commands
and turn every failure into a status message instead of a traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import param

from geometries import VoxelGeometry, generators
from solver.config import SimulationConfig
from solver.probes import Probe, ProbeSet
from solver.runner import SimulationRunner
from solver.slice_frames import fullest_layer
from solver.snapshot import SliceView, Snapshot

from . import exports
from .estimates import specific_surface
from .geometry_sources import DEFAULT_FORCE, GeometryPreview, config_for

__all__ = ["Controller", "default_case", "copy_config", "DEFAULT_FORCE", "QUANTITY_CHOICES",
           "LEVELS"]

log = logging.getLogger(__name__)

QUANTITY_CHOICES = {"|u|": "umag", "u_x": "ux", "u_y": "uy", "u_z": "uz", "density": "rho",
                    "pressure": "pressure", "vorticity |ω|": "vorticity", "Q-criterion": "qcrit",
                    "wall shear stress": "wss"}
LEVELS = ("info", "success", "warning", "danger")
EXPORT_TIMEOUT_S = 60.0


def default_case() -> tuple[VoxelGeometry, SimulationConfig]:
    """The case a fresh session runs: a 48^3 periodic sphere pack, D3Q19, force along x
    (collision 'auto': TRT here; RR once openings drive the flow at tau < 0.55)."""
    geometry = generators.random_sphere_pack((48, 48, 48), porosity=0.6, diameter=12, seed=0)
    config = SimulationConfig(lattice="D3Q19", collision="auto", tau=0.8,
                              body_force=(DEFAULT_FORCE, 0.0, 0.0), backend="auto")
    return geometry, config


def copy_config(config: SimulationConfig) -> SimulationConfig:
    """An independent copy of a configuration (same values)."""
    return SimulationConfig(**{k: v for k, v in config.param.values().items() if k != "name"})


class Controller(param.Parameterized):
    """One session's simulation: commands, pending settings, slice choice and status."""

    quantity = param.Selector(objects=QUANTITY_CHOICES, default="umag", doc="Shown quantity.")
    axis = param.Selector(objects={"x": 0, "y": 1, "z": 2}, default=2, doc="Slice normal.")
    position = param.Integer(default=0, bounds=(0, 1), doc="Slice index along the normal.")
    arrows = param.Boolean(default=False, doc="Overlay in-plane velocity arrows.")
    snapshot = param.ClassSelector(class_=Snapshot, default=Snapshot(), precedence=-1)
    geometry = param.Parameter(precedence=-1, doc="The geometry being simulated.")
    surface = param.Number(default=0.0, precedence=-1, doc="Specific surface, 1/voxel.")
    status = param.String(default="Starting the simulation", precedence=-1)
    level = param.Selector(objects=list(LEVELS), default="info", precedence=-1)
    settings_changed = param.Boolean(default=False, precedence=-1)
    probes = param.ClassSelector(class_=ProbeSet, default=ProbeSet(), precedence=-1,
                                 doc="Point probes and lines sampled with each snapshot.")
    probes_dropped = param.Parameter(default=(), precedence=-1, doc=(
        "The probes and lines (solver.probes Probe/Line) the last new geometry left outside "
        "its box and that were removed; empty otherwise."))

    def __init__(
        self, geometry: VoxelGeometry | None = None, config: SimulationConfig | None = None,
        autostart: bool | None = True, idle_timeout: float | None = None,
        reader: Callable[[], bool] | None = None, **params: Any,
    ) -> None:
        if geometry is None:
            geometry, default = default_case()
            config = config or default
        config = config_for(geometry, config or SimulationConfig())
        self.runner: SimulationRunner | None = None
        super().__init__(geometry=geometry, **params)
        self.config = config
        self._applied = copy_config(config)
        self._set_geometry_stats(geometry)
        self._fit_position()
        self.runner = SimulationRunner(geometry, copy_config(config), view=self._view(),
                                       idle_timeout=idle_timeout, reader=reader)
        self._last_error: str | None = None
        self._pending: tuple[int, str] | None = None  # (command count, message) of an action
        self._last_state: tuple[str, str] = ("", "")
        # An error stays in the status bar until the next action: the runner's state changes
        # ("Paused · …") must not replace it a moment later.
        self._holding_error = False
        self.config.param.watch(self._config_edited, [p for p in config.param if p != "name"])
        # None: no thread yet (a served page starts it once a browser has loaded it).
        if autostart:
            self.runner.start()
        elif autostart is not None:
            self.prepare()

    # ------------------------------------------------------------------ run commands
    def prepare(self) -> None:
        """Build the simulation and publish its first frame, paused."""
        self.runner.step(0)

    def start(self) -> None:
        """Run continuously."""
        self._act("Starting the run…", "Running", self.runner.start)

    def pause(self) -> None:
        """Pause (state kept)."""
        self._act("Pausing…", "Paused", self.runner.pause)

    def step(self, n: int = 10) -> None:
        """Advance ``n`` steps, then stay paused."""
        self._act(f"Stepping {n} time steps…", f"Stepped {n} time steps",
                  lambda: self.runner.step(n))

    def reset(self) -> None:
        """Restart from rest with the applied settings (paused)."""
        self._act("Resetting…", "Reset to rest; press Start to run", self.runner.reset)

    def apply_settings(self) -> None:
        """Validate the pending settings and rebuild the simulation with them."""
        def send() -> None:
            self.config.check(self.geometry.ndim)
            applied = copy_config(self.config)
            self.runner.set_config(applied)
            self._applied = applied
            self.settings_changed = False
        self._act("Applying the settings…", "Settings applied", send)

    def use_geometry(self, preview: GeometryPreview, autostart: bool = True) -> bool:
        """Simulate the previewed geometry with the pending settings fitted to it; True if done."""
        def send() -> None:
            self.config.param.update(**_values(preview.config))
            config = copy_config(preview.config)
            # The preview's problem holds its config's drive: rebuilt if the openings changed.
            self.runner.load_geometry(preview.geometry, config, preview.current_problem())
            self._applied = config
            self.settings_changed = False
            self.geometry = preview.geometry
            self._set_geometry_stats(preview.geometry, preview.surface)
            if autostart:
                self.runner.start()
        name = preview.geometry.name or "geometry"
        return self._act(f"Loading {name}…", f"Loaded {name}", send)

    def notify(self, level: str, text: str) -> None:
        """Show ``text`` in the status area (level: info, success, warning, danger); a danger
        message stays until the next action or message."""
        self._holding_error = level == "danger"
        self.param.update(level=level, status=text)

    def report(self, exc: BaseException) -> None:
        """Show an exception raised by a UI callback as a message."""
        # A refused input (ValueError) is expected: one line; anything else with its traceback.
        log.info("UI callback failed: %s", exc,
                 exc_info=None if isinstance(exc, ValueError) else exc)
        self.notify("danger", _message(exc))

    def _act(self, doing: str, done: str, fn: Callable[[], None]) -> bool:
        """Send an action and say ``doing``; ``done`` comes with the first snapshot that has
        applied it (shown at once, "Reset to rest" contradicted the card, still "running at
        step 10", until the runner got to the command: issue 31 item 13)."""
        try:
            fn()
        except Exception as exc:
            self.report(exc)
            return False
        self.notify("info", doing)
        self._pending = (self.runner.sent, done)
        return True

    # ------------------------------------------------------------------ snapshots
    def state_changes(self) -> bool:
        """Whether the next :meth:`poll` changes the run's state or the status bar."""
        snap, shown = self.runner.snapshot(), self.snapshot
        return snap.seq != shown.seq and (
            (snap.status, snap.message, snap.error) != (shown.status, shown.message, shown.error)
            or self._pending is not None)

    def poll(self) -> None:
        """Publish the runner's latest snapshot if it changed (periodic callback); it counts
        as a read for the runner's idle watchdog unless the runner has a reader check."""
        self.runner.touch()
        snap = self.runner.snapshot()
        if snap.seq == self.snapshot.seq:
            return
        pending = self._pending
        if pending is not None and snap.applied >= pending[0]:
            self._pending = None
            if not snap.error:  # the runner did what was asked: say so, with the new state
                self._last_error, self._last_state = snap.error, (snap.status, snap.message)
                self.notify("info", pending[1])
                self.snapshot = snap
                return
        if snap.error and snap.error != self._last_error:
            self.notify("warning" if snap.status == "diverged" else "danger", snap.error)
        elif (not snap.error and (snap.status, snap.message) != self._last_state
              and not self._holding_error):
            level = "success" if snap.status == "running" else "info"
            self.notify(level, f"{snap.status.capitalize()} · {snap.message}")
        self._last_error, self._last_state = snap.error, (snap.status, snap.message)
        self.snapshot = snap

    def set_probes(self, probes: ProbeSet) -> bool:
        """Sample ``probes`` (voxel indices) with every snapshot; True if accepted."""
        def send() -> None:
            self.probes = probes.check(tuple(self.geometry.shape))
            self.probes_dropped = ()
        what = f"{len(probes.probes)} probes, {len(probes.lines)} lines"
        return self._act(f"Setting {what}…", f"Sampling {what}", send)

    def add_probe(self, point: tuple[int, ...]) -> bool:
        """Add a probe at ``point`` (voxel indices), named p1, p2, ... in order."""
        names = {p.name for p in self.probes.probes}
        name = next(f"p{k}" for k in range(1, len(names) + 2) if f"p{k}" not in names)
        probes = ProbeSet((*self.probes.probes, Probe(name, tuple(int(v) for v in point))),
                          self.probes.lines)
        return self.set_probes(probes)

    def set_flow3d(self, name: str | None, interval: float = 2.0) -> None:
        """Ask for the coarse 3D flow with the scalar ``name`` every ``interval`` seconds
        (None: stop; :mod:`solver.coarse_flow`)."""
        try:  # no status message: the 3D view shows the result
            self.runner.set_flow3d(name, interval)
        except Exception as exc:
            self.report(exc)

    @param.depends("probes", watch=True)
    def _probes_changed(self) -> None:
        if self.runner is not None:
            self.runner.set_probes(self.probes)

    @param.depends("geometry", watch=True)
    def _fit_probes(self) -> None:
        """Remove the probes and lines a new, smaller geometry leaves outside and name them in
        ``probes_dropped``: the runner samples a set only if all of it fits, so one point
        outside silently stopped every probe."""
        kept, outside = self.probes.within(tuple(self.geometry.shape))
        self.probes_dropped = outside
        if outside:
            self.probes = kept

    @param.depends("quantity", "axis", "position", watch=True)
    def _view_changed(self) -> None:
        if self.runner is not None:
            self.runner.set_view(self._view())

    @param.depends("axis", "geometry", watch=True)
    def _fit_position(self) -> None:
        shape = self.geometry.shape
        n = shape[self.axis] if len(shape) == 3 else 1
        self.param.position.bounds = (0, max(n - 1, 0))
        self.position = fullest_layer(self.geometry.solid, self.axis) if len(shape) == 3 else 0

    def _view(self) -> SliceView:
        return SliceView(self.quantity, self.axis, self.position)

    def _config_edited(self, *events: Any) -> None:
        self.settings_changed = _values(self.config) != _values(self._applied)

    def _set_geometry_stats(self, geometry: VoxelGeometry, surface: float | None = None) -> None:
        self.surface = specific_surface(geometry.solid) if surface is None else surface

    @property
    def applied_config(self) -> SimulationConfig:
        """The settings the running simulation uses."""
        return self._applied

    # ------------------------------------------------------------------ exports
    def export_vti(self) -> bytes:
        """Fields of the current state as a .vti file."""
        voxel = self.geometry.voxel_size
        fields, solid = self.runner.submit(lambda sim: (sim.fields(), sim.solid)).result(
            EXPORT_TIMEOUT_S)
        return exports.fields_vti(fields, solid, voxel)

    def export_png(self) -> bytes:
        """The current slice as a PNG."""
        snap = self.snapshot
        if snap.plane is None:
            raise RuntimeError("No slice yet: wait for the first frame, then export again.")
        title = f"{snap.geometry_name}, step {snap.step}"
        return exports.slice_png(snap.plane, snap.plane_axes, snap.view.quantity, title)

    def export_csv(self) -> str:
        """The time series of the counters as CSV."""
        return exports.history_csv(self.snapshot.history,
                                   ("step", "mflups", "residual", "permeability"))

    def close(self) -> None:
        """Stop the runner and free the simulation's memory."""
        self.runner.stop()


def _values(config: SimulationConfig) -> dict:
    return {k: v for k, v in config.param.values().items() if k != "name"}


def _message(exc: BaseException) -> str:
    text = str(exc).strip() or exc.__class__.__name__
    return text if isinstance(exc, ValueError | RuntimeError) else f"{type(exc).__name__}: {text}"

