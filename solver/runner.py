"""A background thread that owns one Simulation and publishes host-side snapshots.

:class:`SimulationRunner` is the only code that touches its :class:`~solver.simulation.Simulation`
once started: callers send commands through a queue (run, pause, step, reset, set_config,
load_geometry, set_view, submit, stop) and read the latest :class:`Snapshot` from a lock-protected
slot. The thread steps in chunks sized to ~20-50 ms so that commands are answered quickly, and
publishes snapshots on a clock (:class:`~solver.pacing.Pacer`: every ``snapshot_interval``
seconds, slower only if publishing would take more than a quarter of the wall time). A publish
reduces the moments on the device and reads back only the slice; at times it also checks the
health of the whole state (a few scalars). Nothing here knows about a user interface.

A health check (:class:`~solver.monitor.RunMonitor`, shared with the CLI and validation) that
finds a NaN or a speed above :data:`~solver.monitor.DIVERGENCE_SPEED` (lattice units) pauses
the run, restores the last good populations (:class:`~solver.last_good.LastGood`, a copy kept on
the device every few seconds after a passed check) and says what probably went wrong. Any
exception in the thread becomes the snapshot's ``error`` and a paused state; the thread survives.
All quantities are in lattice units.
"""

from __future__ import annotations

import itertools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from .backends import get_backend
from .config import SimulationConfig
from .last_good import LastGood
from .memory import assess_memory, precheck_memory
from .monitor import K_TOLERANCE, History, RunMonitor
from .pacing import CHUNK_SECONDS, SNAPSHOT_INTERVAL, Pacer
from .problem import Problem, as_geometry
from .pulsatile import PulsatileDriver, cycle_monitor
from .runner_commands import RunnerCommands
from .simulation import Simulation
from .snapshot import FlowSummary, SliceView, Snapshot
from .windkessel import lattice_coupling

__all__ = ["SimulationRunner", "Snapshot", "SliceView", "live_runners", "CHUNK_SECONDS",
           "SNAPSHOT_INTERVAL"]

log = logging.getLogger(__name__)

THREAD_PREFIX = "lbm-runner"
#: Seconds after a run from rest (a new geometry, a Reset) until its second coarse 3D flow:
#: the first, at rest, has no streamlines, and the next one is otherwise a whole period away.
EARLY_FLOW_S = 1.0
_ids = itertools.count(1)


def live_runners() -> int:
    """Number of runner threads alive in this process."""
    return sum(t.name.startswith(THREAD_PREFIX) for t in threading.enumerate())


# Commands whose effect a later Reset wipes out (see SimulationRunner._without_undone).
_UNDONE_BY_RESET = frozenset({"run", "pause", "step", "reset"})


class SimulationRunner(RunnerCommands):
    """Runs a Simulation of ``geometry`` with ``config`` in a daemon thread (lattice units)."""

    def __init__(
        self, geometry: Any, config: SimulationConfig | None = None, *,
        view: SliceView | None = None, snapshot_interval: float = SNAPSHOT_INTERVAL,
        idle_timeout: float | None = None, reader: Callable[[], bool] | None = None,
        k_tolerance: float = K_TOLERANCE,
    ) -> None:
        """``idle_timeout``: stop by itself after that many seconds without :meth:`touch`.

        ``reader``: asked by the runner thread itself on every turn whether someone still
        reads (e.g. a browser connected to the session); then it alone resets the idle clock
        and :meth:`touch` does not. Unlike polls from the owner's event loop, it keeps
        answering while that loop is too busy to poll, and it says no once the reader left
        even if the owner goes on polling.

        ``k_tolerance``: k counts as converged when it changes by less than this (relative)
        per 1000 steps.
        """
        self._geometry = geometry
        self._config = config if config is not None else SimulationConfig()
        self._view = view or SliceView()
        self._idle_timeout = idle_timeout
        self._reader = reader
        self._touched = time.monotonic()
        self._queue: queue.Queue = queue.Queue()
        self._stop_event = threading.Event()
        self._slot = threading.Condition()
        self._snapshot = Snapshot()
        self._thread: threading.Thread | None = None
        self._name = f"{THREAD_PREFIX}-{next(_ids)}"
        # Thread-owned state below: touched only by the runner thread once started.
        self._sim: Simulation | None = None
        self._backends: dict[str, Any] = {}
        self._running, self._status, self._message = False, "starting", ""
        self._steady_seen = False
        self._error: str | None = None
        self._seq, self._run_id, self._applied = 0, 0, 0
        self._build = 0  # simulations installed so far (Snapshot.build)
        self._pacer = Pacer(snapshot_interval)
        self._k_tolerance = float(k_tolerance)
        self._monitor: RunMonitor | None = None
        # Windkessel outlets and the heart-cycle sampler of a pulsatile run (solver.pulsatile).
        self._driver = PulsatileDriver(None, None)
        self._history = History()
        self._good = LastGood()
        self._probes = None  # solver.probes.ProbeSet sampled with each snapshot
        # (scalar name, seconds between reads) of the coarse 3D flow, and when it was read.
        self._flow3d: tuple[str, float] | None = None
        self._flow3d_read = -math.inf
        self._device: dict = {}
        self._values: tuple | None = None  # (config, its param values), _config_values
        self._rate = (time.perf_counter(), 0, 0.0)

    # ----------------------------------------------------------------- caller side
    @property
    def alive(self) -> bool:
        """Whether the thread is running."""
        return self._thread is not None and self._thread.is_alive()

    def touch(self) -> None:
        """Tell an ``idle_timeout`` runner without a ``reader`` check that someone still reads
        its snapshots."""
        if self._reader is None:
            self._touched = time.monotonic()

    def snapshot(self) -> Snapshot:
        """The latest published snapshot (never blocks for long)."""
        with self._slot:
            return self._snapshot

    def wait_for(self, predicate: Callable[[Snapshot], bool], timeout: float = 30.0) -> Snapshot:
        """Block until a snapshot satisfies ``predicate``; TimeoutError after ``timeout`` s."""
        self._launch()
        with self._slot:
            if not self._slot.wait_for(lambda: predicate(self._snapshot), timeout):
                snap = self._snapshot
                raise TimeoutError(f"No snapshot matched within {timeout} s (status "
                                   f"{snap.status!r}, step {snap.step}, {snap.error or ''}).")
            return self._snapshot

    def _launch(self) -> None:
        if self._thread is None and not self._stop_event.is_set():
            self._thread = threading.Thread(target=self._main, name=self._name, daemon=True)
            self._thread.start()

    # ----------------------------------------------------------------- runner thread
    def _main(self) -> None:
        log.info("%s started (live runners: %d)", self._name, live_runners())
        self._guard(self._install, self._geometry, self._config, False)
        while not self._stop_event.is_set():
            self._drain_commands()
            if self._running and not self._stop_event.is_set():
                self._guard(self._advance)
            if self._idle_timeout is not None and self._reader_present():
                self._touched = time.monotonic()
            idle = time.monotonic() - self._touched
            if self._idle_timeout is not None and idle > self._idle_timeout:
                # Nobody has read a snapshot for long: the owner is gone or hung. Free the
                # memory rather than run for nobody.
                log.warning("%s: no reader for %.0f s, stopping", self._name, idle)
                self._stop_event.set()
        self._shutdown()

    def _reader_present(self) -> bool:
        try:
            return self._reader is not None and bool(self._reader())
        except Exception:  # noqa: BLE001 - a failing check means nobody is known to read
            log.debug("%s: reader check failed", self._name, exc_info=True)
            return False

    def _drain_commands(self) -> None:
        block = not self._running
        while True:
            batch = self._take_batch(block)
            if not batch:
                return
            block = False
            for command, payload in batch:
                if command == "stop":
                    return
                self._guard(self._handle, command, payload)

    def _take_batch(self, block: bool) -> list[tuple[str, Any]]:
        """The queued commands up to and including a stop, less those a later Reset undoes."""
        try:
            batch = [self._queue.get(timeout=0.05) if block else self._queue.get_nowait()]
        except queue.Empty:
            return []
        while batch[-1][0] != "stop":  # what follows a stop stays queued for the shutdown
            try:
                batch.append(self._queue.get_nowait())
            except queue.Empty:
                break
        return self._without_undone(batch)

    def _without_undone(self, batch: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
        """Drop the run-state commands just before the batch's last Reset, counted as applied.

        A Reset rebuilds from rest, so Start/Pause/Step/Reset clicks queued before it leave no
        trace: a burst of clicks ends in the last one's state without one rebuild per Reset.
        """
        last = max((k for k, (command, _) in enumerate(batch) if command == "reset"), default=0)
        first = last
        while first > 0 and batch[first - 1][0] in _UNDONE_BY_RESET:
            first -= 1
        self._applied += last - first
        return batch[:first] + batch[last:]

    def _guard(self, fn: Callable, *args: Any) -> None:
        """Run ``fn``; an exception becomes the error message and a paused state."""
        try:
            fn(*args)
        except Exception as exc:  # the thread must survive anything a command does
            if "interpreter shutdown" in str(exc):  # worker pools are gone: Python is exiting
                self._stop_event.set()
                return
            log.exception("%s: %s failed", self._name, getattr(fn, "__name__", fn))
            self._running = False
            self._status = "error"
            self._error = str(exc) or exc.__class__.__name__
            try:
                self._publish(check=False)
            except Exception:  # the fields themselves are unreadable: publish the message only
                log.exception("%s: publishing after an error failed", self._name)
                self._emit({})

    def _handle(self, command: str, payload: Any) -> None:
        try:
            self._apply(command, payload)
        finally:  # counted before the snapshot that shows it (or its error) is published
            self._applied += 1
        if command != "call":
            self._publish(check=command in ("step", "view", "probes", "flow3d"))

    def _apply(self, command: str, payload: Any) -> None:
        if command == "call":
            fn, future = payload
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(self._require()))
                except Exception as exc:
                    future.set_exception(exc)
            return
        if command == "run":
            self._require()
            self._running, self._status, self._error = True, "running", None
            self._rate = (time.perf_counter(), self._sim.time_step, 0.0)
            self._pacer.check_next()  # the first frame of a run brings its counters
        elif command == "pause":
            self._running = False
            if self._status == "running":
                self._status = "paused"
        elif command == "step":
            self._running = False
            self._status, self._error = "paused", None
            self._driver.step(self._require(), payload)
        elif command == "reset":
            self._install(self._geometry, self._config, False)
        elif command == "config":
            self._install(self._geometry, payload, True)
        elif command == "geometry":
            geometry, config, problem = payload
            self._install(geometry, config or self._config, False, problem)
        elif command == "view":
            self._view = payload
        elif command == "probes":
            self._probes = payload
        elif command == "flow3d":
            self._flow3d, self._flow3d_read = payload, -math.inf
        else:
            raise ValueError(f"Unknown runner command {command!r}.")

    def _require(self) -> Simulation:
        if self._sim is None:
            raise RuntimeError("There is no simulation to run: the last geometry or settings "
                               "failed to build. Load a geometry or apply valid settings.")
        return self._sim

    def _backend(self, name: str) -> Any:
        if name not in self._backends:
            self._backends[name] = get_backend(name)
        return self._backends[name]

    def _install(self, geometry: Any, config: SimulationConfig, keep_flow: bool,
                 problem: Problem | None = None) -> None:
        """Replace the simulation; the old one survives any error raised while building or
        when the memory verdict refuses the new one (decided before allocating)."""
        old, old_geometry, old_config = self._sim, self._geometry, self._config
        was_running = self._running and keep_flow
        self._running, self._status, self._message = False, "starting", "Building the simulation"
        self._steady_seen = False
        # The old run's coarse flow goes with it: the new one is read at the first publish
        # (kept until its next period, the 3D view drew the old streamlines on a new geometry).
        self._flow3d_read = -math.inf
        self._emit({"flow3d": None})
        # Host-side construction validates the configuration and tiles the geometry; a failure
        # here leaves the current simulation untouched.
        freed = 0 if old is None else old.backend.memory_required(old.problem)
        if problem is None:  # a case that cannot fit is refused before it is tiled
            precheck_memory(as_geometry(geometry).solid, config,
                            self._backend(config.backend), freed).check()
        sim = Simulation(geometry, config, backend=self._backend(config.backend),
                         problem=problem)
        assess_memory(sim.problem, sim.backend, reclaimable=freed).check()
        carry = None
        if old is not None:
            if keep_flow and old.state is not None and _same_tiling(old.tiling, sim.tiling):
                carry = (old.time_step, old.populations(), old.metrics.seconds)
            self._good.clear()
            old.close()  # free device memory before the new state is allocated
            self._sim = None
        try:
            sim.allocate()
        except Exception:
            if old is not None:  # e.g. out of memory: go back to the previous run, from rest
                self._sim = Simulation(old_geometry, old_config,
                                       backend=self._backend(old_config.backend))
                self._sim.allocate()
                self._build += 1
                self._monitor = self._new_monitor(self._sim)
                self._driver = _driver(self._sim)
                self._driver.start(self._sim)
                self._good.keep(self._sim)
                self._reset_series()
            raise
        self._sim, self._geometry, self._config = sim, geometry, config
        self._build += 1
        self._monitor = self._new_monitor(sim)
        self._driver = _driver(sim)
        self._device = dict(sim.backend.device_info())
        if carry is not None:
            sim.backend.set_populations(sim.state, carry[1])
            sim.backend.set_step(sim.state, carry[0])  # float16 storage's rounding counter
            # The step count goes on, so its timer must too: the mean MFLUPS divides the
            # one by the other (carrying the steps alone made it 4-30x too high).
            sim.metrics.steps, sim.metrics.seconds = carry[0], carry[2]
        else:
            self._reset_series()
            was_running = False
        self._driver.start(sim)  # the outlets' initial pressures
        self._good.keep(sim)
        self._running = was_running
        self._status = "running" if was_running else "paused"
        self._message = (f"{sim.problem.n_fluid:,} fluid nodes in {sim.tiling.n_tiles:,} tiles "
                         f"(eta_t {sim.tiling.eta_t:.2f}) on {sim.backend.name}")
        self._error = None
        self._pacer.restart()
        self._rate = (time.perf_counter(), sim.time_step, 0.0)
        self._publish(check=False)
        if carry is None and self._flow3d is not None:  # streamlines once the flow moves
            self._flow3d_read = time.monotonic() - self._flow3d[1] + EARLY_FLOW_S

    def _new_monitor(self, sim: Simulation) -> RunMonitor:
        """The run monitor of ``sim``: k along the same axis as :meth:`Simulation.permeability`."""
        return RunMonitor(sim.problem, sim.config.tau, k_tolerance=self._k_tolerance,
                          axis=sim.flow_axis, voxel_size=sim.voxel_size)

    def _reset_series(self) -> None:
        self._run_id += 1
        self._history = History()

    def _advance(self) -> None:
        sim, pacer = self._require(), self._pacer
        n = pacer.steps(time.perf_counter())
        start = time.perf_counter()
        self._driver.step(sim, n)
        now = time.perf_counter()
        pacer.stepped(n, now - start)
        if pacer.publish_due(now):
            self._publish(check=True, health=pacer.health_due(now))

    def _publish(self, check: bool, health: bool = True) -> None:
        """Look at the cut (and with ``health`` the whole state's health) on the device,
        check it, record history and publish a snapshot."""
        start = time.perf_counter()
        sim, extra, kept = self._sim, {}, 0.0
        if sim is not None and sim.state is not None:
            # The probed nodes alone (solver.probes), gathered with the cut's.
            probes = self._probes if self._probes and self._probes.fits(sim.solid.shape) \
                else None
            flow = FlowSummary.of(sim, self._view, health, self._monitor, probes)
            if check and not flow.healthy:
                self._diverged(flow)
                flow = FlowSummary.of(sim, self._view, True, self._monitor, probes)
            elif check and flow.checked:
                kept = self._good.refresh(sim)  # a state that just passed its check
            if check and flow.checked and flow.healthy:
                self._history.record(flow.reading, sim.metrics.mflups)
                self._converged(sim, flow)
            extra = flow.snapshot_fields()
            extra["probes"] = flow.probes
            extra.update(self._coarse_flow(sim))
            extra["steps_per_second"] = self._steps_per_second(sim.time_step)
            extra["cycle"] = self._driver.view()
        self._emit(extra)
        # The copy of the last good state has its own schedule: not a cost of publishing. Only
        # a check counts as the health check the pacer schedules.
        self._pacer.published(start, time.perf_counter() - kept, health and check)

    def _converged(self, sim: Simulation, flow: FlowSummary) -> None:
        """The openings' flow has converged (steady, or periodic for a pulsatile run): stop
        once and say so (Run goes on after)."""
        if self._driver.cycles is not None:  # a pulsatile flow is never steady
            steady = self._driver.periodic()
            label = (f"periodic: two cycles agree within {self._driver.cycles.tolerance:.0%}"
                     if steady else "")
        else:
            steady, label = flow.reading.steady, flow.reading.steady_label
        if steady and self._running and not self._steady_seen:
            self._running, self._status = False, "converged"
            self._message = f"Step {sim.time_step}: {label}"
        self._steady_seen = steady

    def _coarse_flow(self, sim: Simulation) -> dict[str, Any]:
        """The coarse 3D flow when asked for and due (every few seconds: it reads all tiles
        like a health check), else nothing (the snapshot keeps the last one)."""
        if self._flow3d is None:
            return {"flow3d": None}
        name, interval = self._flow3d
        now = time.monotonic()
        if sim.solid.ndim != 3 or now - self._flow3d_read < interval:
            return {}
        self._flow3d_read = now
        return {"flow3d": sim.coarse_flow(name)}

    def _diverged(self, flow: FlowSummary) -> None:
        """Pause, restore the last good populations and explain what happened."""
        sim = self._sim
        step = sim.time_step
        good_step = self._good.restore(sim)
        self._running, self._status = False, "diverged"
        self._error = (f"Run paused at step {step}. {flow.reading.message} The last good state "
                       f"(step {good_step}) was restored.")
        log.warning("%s: %s", self._name, self._error)

    def _steps_per_second(self, step: int) -> float:
        t0, s0, rate = self._rate
        now = time.perf_counter()
        if self._running and now - t0 > 0.5:  # a new window every half second
            rate = (step - s0) / (now - t0)
            self._rate = (now, step, rate)
        elif self._running and not rate and now > t0:  # first window: provisional value
            return (step - s0) / (now - t0)
        return rate if self._running else 0.0

    def _emit(self, extra: dict[str, Any]) -> None:
        sim = self._sim
        self._seq += 1
        base = dict(seq=self._seq, run_id=self._run_id, build=self._build,
                    applied=self._applied,
                    status=self._status,
                    message=self._message, error=self._error, history=self._history.arrays(),
                    config=self._config_values())
        if sim is not None:
            base.update(step=sim.time_step, shape=tuple(sim.solid.shape),
                        metrics=sim.metrics.as_dict(), device=self._device,
                        memory_bytes=sim.memory_bytes(),
                        geometry_name=sim.geometry.name or "array")
        snapshot = replace(self._snapshot, **base, **extra)
        with self._slot:
            self._snapshot = snapshot
            self._slot.notify_all()

    def _config_values(self) -> dict:
        """The config's values, read once per config (param's reading of every value took
        about half a millisecond of each publish)."""
        if self._values is None or self._values[0] is not self._config:
            self._values = (self._config, self._config.param.values())
        return dict(self._values[1])

    def _shutdown(self) -> None:
        while not self._queue.empty():  # nobody will answer queued calls any more
            command, payload = self._queue.get_nowait()
            if command == "call":
                payload[1].cancel()
        self._good.clear()  # before close(): the backend returns freed memory to the device
        if self._sim is not None:
            self._sim.close()
            self._sim = None
        self._backends.clear()
        self._running, self._status, self._message = False, "stopped", "Runner stopped"
        self._emit({"plane": None, "plane_velocity": None})
        log.info("%s stopped", self._name)


def _driver(sim: Simulation) -> PulsatileDriver:
    """The Windkessel coupling (the config's lattice ``windkessel`` entries) and heart-cycle
    sampler (a waveform inlet) of ``sim``, with the CLI's default controls
    (:class:`solver.case.RunControls`)."""
    from .case import RunControls

    controls = RunControls()
    coupling = lattice_coupling(sim.config.openings, sim.config.initial_density,
                                controls.windkessel_every)
    cycles = cycle_monitor(sim, controls.warmup_cycles, controls.cycle_samples,
                           controls.cycle_tolerance)
    return PulsatileDriver(coupling, cycles)


def _same_tiling(a: Any, b: Any) -> bool:
    return (a.a == b.a and a.offset == b.offset and a.shape == b.shape
            and np.array_equal(a.tiles, b.tiles))
