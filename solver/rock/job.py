"""The k tensor measured in the background: k_x, k_y, k_z one after another, with progress;
then the formation factor per axis (:mod:`.conduction`) and, with ``settings.rev``, the REV
curve along x (:mod:`.rev`); each k with its interval (:mod:`.uncertainty`), the wall time of
each part, and :meth:`TensorJob.study` for the export.

A :class:`TensorJob` runs the mirrored protocol (:mod:`solver.rock.protocol`) along each axis on
simulations of its own: the dashboard's simulation keeps its state. The work is a list of parts
(k along each axis, the formation factors, the REV curve); given the session's ``runner``
(:class:`~solver.runner.SimulationRunner`) each part is a command on the runner's thread, so a
session has one device thread whatever it measures (no capture of one thread meeting a pool
free of another, no split of the device's bandwidth); without one (a script, a test) the parts
run in a daemon thread of the job's own. The UI reads :meth:`TensorJob.progress` (host-side
numbers only, a copy) and may :meth:`~TensorJob.cancel` (checked at every k check); an axis
without a connected pore path or a diverged run is reported on its row and the other axes still
run. k in voxel² (lattice), m² and mD.

The session's run is paused while the job measures (it could not step meanwhile anyway: the
thread is busy) and started again when the job ends, cancelled or failed included, unless the
user changed its state meanwhile. The pause is a command sent before the first part, so it is
applied before the job's first step.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from geometries import VoxelGeometry

from ..backends import get_backend
from ..config import SimulationConfig
from ..observables import DARCY_M2
from ..stability import DivergenceError
from .check import Phases
from .conduction import Conduction, formation_factor
from .measure import AxisResult, PermeabilityStudy, measure_axis, rev_measure
from .protocol import setup_protocol
from .rev import rev_curve
from .settings import AXIS_NAMES, PermeabilitySettings
from .uncertainty import KInterval

__all__ = ["AxisProgress", "TensorJob", "TensorProgress"]

log = logging.getLogger(__name__)

class _Cancelled(Exception):
    """Raised inside the measuring thread when the job is cancelled."""


@dataclass(frozen=True)
class AxisProgress:
    """One axis of the tensor: state, steps so far, k (lattice and mD), change per 1000 steps.

    ``state`` is 'waiting', 'running', 'converged', 'not converged', 'failed' or 'cancelled'.
    """

    axis: str
    state: str = "waiting"
    step: int = 0
    k_lattice: float | None = None
    k_mD: float | None = None
    change: float | None = None  # relative change of k per 1000 steps
    message: str = ""


@dataclass(frozen=True)
class TensorProgress:
    """A copy of the job's state for the UI (host numbers only)."""

    axes: tuple[AxisProgress, ...]
    running: bool
    anisotropy: float | None = None  # k_max / k_min over converged axes (>= 2 of them)
    k_mD: dict[str, float | None] = field(default_factory=dict)  # converged axes only
    paused_run: bool = False  # the session's run is paused while the job holds the GPU
    stage: str = "k"  # what is measured now: 'k', 'formation factor', 'REV' or 'done'
    intervals: dict[str, KInterval] = field(default_factory=dict)  # converged axes
    flow_tortuosity: dict[str, float] = field(default_factory=dict)  # converged axes
    conduction: dict[str, Conduction] = field(default_factory=dict)  # F per axis
    rev: tuple = ()  # RevPoint of the REV curve so far (solver.rock.rev)
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per part


class TensorJob:
    """Measure k along every axis of ``geometry`` one after another, part by part."""

    def __init__(self, geometry: VoxelGeometry, config: SimulationConfig,
                 settings: PermeabilitySettings | None = None, runner: Any = None) -> None:
        """``runner``: the session's :class:`~solver.runner.SimulationRunner`: the parts run
        as its commands, its run paused meanwhile (None: a thread of the job's own)."""
        self.geometry, self.config = geometry, config
        self.settings = settings or PermeabilitySettings(protocol="mirrored")
        self.runner = runner
        self._paused_run = False
        self._axes = [AxisProgress(AXIS_NAMES[a]) for a in range(geometry.ndim)]
        self._results: list[AxisResult] = []
        self._conduction: dict[str, Conduction] = {}
        self._rev: list = []
        self._stage = "k"
        self._seconds = Phases()  # wall seconds per part: 'k x', ..., 'formation factor', 'REV'
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._done = threading.Event()
        self._started = False
        self._backend: Any = None
        self._parts: list[Callable[[], None]] = []
        self._thread: threading.Thread | None = None  # only without a runner
        self._ran_on: str | None = None

    def start(self) -> None:
        """Start measuring (once): the first part goes to the runner (or the job's thread)."""
        if self._started:
            return
        self._started = True
        self._parts = [self._prepare,
                       *(lambda i=i: self._measure_axis(i) for i in range(self.geometry.ndim)),
                       self._formation_factors, self._rev_curve]
        if self.runner is None:
            self._thread = threading.Thread(target=self._run_all, name="k-tensor", daemon=True)
            self._thread.start()
            return
        if self.runner.snapshot().status == "running":
            self.runner.pause()  # applied before the first part: commands run in order
            self._paused_run = True
        self._submit()

    def cancel(self) -> None:
        """Stop at the next k check (the current axis and those after are marked cancelled)."""
        self._cancel.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the job to end; True when it has."""
        if self._started:
            self._done.wait(timeout)
        return not self.running

    @property
    def running(self) -> bool:
        """Whether the job has started and not ended."""
        return self._started and not self._done.is_set()

    @property
    def thread_name(self) -> str | None:
        """The name of the thread the last part ran on (None before the first)."""
        return self._ran_on

    def progress(self) -> TensorProgress:
        """The state of every axis, the converged k (mD) and their anisotropy."""
        with self._lock:
            axes, results = tuple(self._axes), list(self._results)
        with self._lock:
            conduction, rev = dict(self._conduction), tuple(self._rev)
            stage, seconds = self._stage, dict(self._seconds)
        done = [r for r in results if r.converged and r.k_lattice > 0]
        study = PermeabilityStudy(done, self.geometry.voxel_size)
        ratio = study.anisotropy("mirrored") if done else None
        intervals = {r.axis: i for r, i in zip(done, study.intervals(), strict=True)}
        return TensorProgress(axes, self.running, ratio, {r.axis: r.k_mD for r in done},
                              self._paused_run and self.running,
                              stage if self.running else "done", intervals,
                              {r.axis: r.flow_tortuosity for r in done}, conduction, rev,
                              seconds)

    def study(self) -> PermeabilityStudy:
        """What has been measured so far as a study (every finished axis, F, REV, times):
        :meth:`PermeabilityStudy.as_dict` is the JSON export, SI units stated."""
        with self._lock:
            results, conduction = list(self._results), dict(self._conduction)
            rev, seconds = list(self._rev), dict(self._seconds)
        study = PermeabilityStudy(results, self.geometry.voxel_size, conduction)
        study.seconds.update({k: v for k, v in seconds.items() if not k.startswith("k ")})
        if rev:
            study.rev = {"axis": AXIS_NAMES[0], "points": rev}
        return study

    def _update(self, index: int, **changes) -> None:
        with self._lock:
            self._axes[index] = dataclasses.replace(self._axes[index], **changes)

    # ------------------------------------------------------------------ parts
    def _submit(self) -> None:
        """Send the next part to the runner; the job ends when it cannot run."""
        future: Future = self.runner.submit(lambda sim: self._run_next())
        if not self.runner.alive:  # a stopped runner answers no command any more
            future.cancel()
        future.add_done_callback(self._after)

    def _after(self, future: Future) -> None:
        """A part sent to the runner has run or will never run (runner stopped or failed)."""
        failed = future.cancelled() or future.exception() is not None
        if failed:
            reason = "the session's runner stopped" if future.cancelled() else \
                f"{type(future.exception()).__name__}: {future.exception()}"
            self._fail_waiting(reason)
        if failed or not self._parts:
            self._finish()
        else:
            self._submit()

    def _run_next(self) -> None:
        """Run the next part (on the runner's thread)."""
        self._ran_on = threading.current_thread().name
        part = self._parts.pop(0)
        try:
            part()
        except _Cancelled:
            pass
        except Exception:  # said in the log; the rows keep what was measured
            log.exception("measuring k: a part failed")
        if self._cancel.is_set():
            self._parts.clear()
            for index, axis in enumerate(self._axes):
                if axis.state in ("waiting", "running"):
                    self._update(index, state="cancelled")

    def _run_all(self) -> None:
        """Every part in turn (the job's own thread, without a runner)."""
        try:
            while self._parts:
                self._run_next()
        finally:
            self._finish()

    def _finish(self) -> None:
        """End the job: start the paused run again (unless the user changed it meanwhile)."""
        if self._paused_run:
            self._paused_run = False
            try:
                if self.runner.alive and self.runner.snapshot().status == "paused":
                    self.runner.start()
            except Exception:  # a closed session: nothing to resume
                log.exception("Could not resume the run after measuring k")
        self._done.set()

    def _fail_waiting(self, message: str) -> None:
        """Mark the rows not measured yet as failed with ``message``."""
        self._parts.clear()
        for index, axis in enumerate(self._axes):
            if axis.state in ("waiting", "running"):
                self._update(index, state="failed", message=message)

    def _prepare(self) -> None:
        """Choose the backend (on the thread that will run the job's simulations)."""
        try:
            self._backend = get_backend(self.config.backend)
        except Exception as exc:  # said on every row, never raised out of the thread
            self._fail_waiting(f"{type(exc).__name__}: {exc}")

    def _measure_axis(self, index: int) -> None:
        """k along axis ``index`` (a failure is said on its row, the other axes go on)."""
        if self._cancel.is_set():
            self._update(index, state="cancelled")
            return
        self._update(index, state="running")
        try:
            result = self._measure(index, self._backend)
        except _Cancelled:
            self._update(index, state="cancelled")
        except (ValueError, DivergenceError) as exc:  # no path along it, or diverged
            self._update(index, state="failed", message=str(exc))
        except Exception as exc:  # a bug must not leave the row 'running' for ever
            log.exception("k along %s failed", AXIS_NAMES[index])
            self._update(index, state="failed", message=f"{type(exc).__name__}: {exc}")
        else:
            with self._lock:
                self._results.append(result)
            change = result.change_per_1000
            self._update(index, state="converged" if result.converged else "not converged",
                         step=result.steps, k_lattice=result.k_lattice, k_mD=result.k_mD,
                         change=change if math.isfinite(change) else None)

    def _formation_factors(self) -> None:
        """F along every axis with a pore path (:mod:`solver.rock.conduction`)."""
        if self._cancel.is_set() or not self.settings.formation_factor:
            return
        backend = self._backend
        with self._lock:
            self._stage = "formation factor"
        for index in range(self.geometry.ndim):
            if self._cancel.is_set():
                raise _Cancelled
            with self._seconds.timed("formation factor"):
                try:
                    c = formation_factor(self.geometry.solid, index, self.settings.sides,
                                         backend.xp)
                except ValueError:  # no path along this axis: its row says so already
                    continue
            with self._lock:
                self._conduction[AXIS_NAMES[index]] = c

    def _rev_curve(self) -> None:
        """The REV curve along x (:mod:`solver.rock.rev`), reusing the x result and F."""
        if self._cancel.is_set() or not self.settings.rev:
            return
        backend = self._backend
        with self._lock:
            self._stage = "REV"
            whole = next((r for r in self._results if r.axis == "x"), None)
            f = self._conduction.get("x")

        def on_point(point) -> None:
            with self._lock:
                self._rev.append(point)

        def on_check(step: int, k: float, change: float) -> None:
            if self._cancel.is_set():
                raise _Cancelled

        measure = rev_measure(self.config, self.settings, 0, backend,
                              self.geometry.voxel_size, on_check)
        with self._seconds.timed("REV"):
            rev_curve(self.geometry, 0, self.settings.sides, backend.xp, measure,
                      None if whole is None else (whole.k_lattice, whole.k_mD, whole.seconds,
                                                  whole.converged),
                      f.formation_factor if f else None, on_point=on_point)

    def _measure(self, index: int, backend: Any) -> AxisResult:
        setup = setup_protocol(self.geometry, self.config, index, "mirrored", self.settings)
        size = self.geometry.voxel_size
        to_mD = None if size is None else 1e3 * size**2 / DARCY_M2  # voxel² -> mD

        def on_check(step: int, k: float, change: float) -> None:
            if self._cancel.is_set():
                raise _Cancelled
            self._update(index, step=step, k_lattice=k,
                         k_mD=None if to_mD is None else k * to_mD,
                         change=change if math.isfinite(change) else None)

        with self._seconds.timed(f"k {AXIS_NAMES[index]}"):
            return measure_axis(setup, self.settings, backend, self.geometry.voxel_size,
                                on_check)
