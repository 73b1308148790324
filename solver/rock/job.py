"""The k tensor measured in the background: k_x, k_y, k_z one after another, with progress;
then the formation factor per axis (:mod:`.conduction`) and, with ``settings.rev``, the REV
curve along x (:mod:`.rev`); each k with its interval (:mod:`.uncertainty`), the wall time of
each part, and :meth:`TensorJob.study` for the export.

A :class:`TensorJob` runs the mirrored protocol (:mod:`solver.rock.protocol`) along each axis in
a daemon thread, on simulations of its own: the dashboard's simulation keeps its state. The UI
reads :meth:`TensorJob.progress` (host-side numbers only, a copy) and may
:meth:`~TensorJob.cancel`; an axis without a connected pore path or a diverged run is reported
on its row and the other axes still run. k in voxel² (lattice), m² and mD.

Sharing the GPU with the session's runner: both would step on one device from two threads, the
runner capturing and replaying CUDA graphs (:mod:`solver.backends.cuda.backend`, relaxed stream
capture on its own non-blocking stream). A capture must not meet a device-wide call of another
thread (a cudaFree of the memory pool synchronises the device), and two runs would only split
the device's bandwidth. So a job on the GPU, given the ``runner``, pauses it while it measures
(the pause is applied before the job's first launch: a no-op submitted after it has returned)
and starts it again when it ends, cancelled or failed included, unless the user changed its
state meanwhile. Should the user start the run during the job, the device's
``CAPTURE_LOCK`` (:mod:`solver.backends.cuda.device`) still keeps captures, module loads and
pool frees of the two threads apart.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from concurrent.futures import wait
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

#: Longest wait for the runner to apply the pause before the job starts anyway, seconds.
PAUSE_TIMEOUT = 60.0


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
    """Measure k along every axis of ``geometry`` one after another in a daemon thread."""

    def __init__(self, geometry: VoxelGeometry, config: SimulationConfig,
                 settings: PermeabilitySettings | None = None, runner: Any = None,
                 pause_runner: bool | None = None) -> None:
        """``runner``: the session's :class:`~solver.runner.SimulationRunner`, paused while
        the job measures when ``pause_runner`` (default: when the job runs on the GPU)."""
        self.geometry, self.config = geometry, config
        self.settings = settings or PermeabilitySettings(protocol="mirrored")
        self.runner, self._pause_runner = runner, pause_runner
        self._paused_run = False
        self._axes = [AxisProgress(AXIS_NAMES[a]) for a in range(geometry.ndim)]
        self._results: list[AxisResult] = []
        self._conduction: dict[str, Conduction] = {}
        self._rev: list = []
        self._stage = "k"
        self._seconds = Phases()  # wall seconds per part: 'k x', ..., 'formation factor', 'REV'
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start measuring (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="k-tensor", daemon=True)
            self._thread.start()

    def cancel(self) -> None:
        """Ask the thread to stop at its next k check (the current axis is marked cancelled)."""
        self._cancel.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when it has ended."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    @property
    def running(self) -> bool:
        """Whether the thread is still measuring."""
        return self._thread is not None and self._thread.is_alive()

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

    def _work(self) -> None:
        try:
            backend = get_backend(self.config.backend)
        except Exception as exc:  # said on every row, never raised out of the thread
            for index in range(self.geometry.ndim):
                self._update(index, state="failed", message=f"{type(exc).__name__}: {exc}")
            return
        pause = self._pause_runner
        self._paused_run = self._hold_runner(backend.name == "cupy" if pause is None else pause)
        try:
            self._measure_axes(backend)
            if not self._cancel.is_set() and self.settings.formation_factor:
                self._formation_factors(backend)
            if not self._cancel.is_set() and self.settings.rev:
                self._rev_curve(backend)
        except _Cancelled:
            pass
        except Exception:  # said in the log; the rows keep what was measured
            log.exception("formation factor / REV failed")
        finally:
            if self._paused_run:
                self._release_runner()

    def _hold_runner(self, pause: bool) -> bool:
        """Pause the session's run if it is running; True once the pause has taken effect."""
        if not pause or self.runner is None or self.runner.snapshot().status != "running":
            return False
        self.runner.pause()
        # Commands run in order on the runner's thread: when this no-op has run, the pause has
        # been applied and the runner launches nothing until it is started again.
        done, _ = wait([self.runner.submit(lambda sim: None)], timeout=PAUSE_TIMEOUT)
        if not done:
            log.warning("The run did not pause within %.0f s; measuring k beside it.",
                        PAUSE_TIMEOUT)
        return True

    def _release_runner(self) -> None:
        """Start the session's run again, unless it was stopped, reset or diverged meanwhile."""
        self._paused_run = False
        try:
            if self.runner.alive and self.runner.snapshot().status == "paused":
                self.runner.start()
        except Exception:  # a closed session: nothing to resume
            log.exception("Could not resume the run after measuring k")

    def _measure_axes(self, backend: Any) -> None:
        for index in range(self.geometry.ndim):
            if self._cancel.is_set():
                self._update(index, state="cancelled")
                continue
            self._update(index, state="running")
            try:
                result = self._measure(index, backend)
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

    def _formation_factors(self, backend: Any) -> None:
        """F along every axis with a pore path (:mod:`solver.rock.conduction`)."""
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

    def _rev_curve(self, backend: Any) -> None:
        """The REV curve along x (:mod:`solver.rock.rev`), reusing the x result and F."""
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
