"""What the dashboard's live view costs the solver (issue 6, performance clause), in one process.

1. Headless MFLUPS of a periodic sphere pack (256 x 256 x 128, porosity 0.6, D3Q19 TRT float32,
   the dashboard's default physics), stepped and timed the way :class:`SimulationRunner` times
   its chunks (``perf_counter`` around ``Simulation.step`` of ~35 ms chunks). The publish
   path is also timed piece by piece: a snapshot's look at the cut alone and with the health
   check of the whole state (``FlowSummary.of``), the copy of the last good state
   (``LastGood.keep``, on the device when it has room), and, for comparison, what a publish
   did before: the full read-back of the fields and the host copy of the populations.
2. The same case driven by a :class:`SimulationRunner` built as ``app.controller.Controller``
   builds it, while a consumer thread polls it at 10 Hz and does the host work the dashboard's
   periodic callback does per new snapshot (:class:`DashboardConsumer`). Reports the runner's
   MFLUPS (fluid nodes x steps / wall time, the step count read on the runner thread), the
   cost ``1 - MFLUPS_streaming / MFLUPS_headless`` (target <= 5 %) and the new frames per second.
   It is repeated with the runner publishing every 0.1 s, the rate 10 frames per second needs
   (``--snapshot-interval``); the first run, as the dashboard is, gives the headline cost.
3. Start to first frame with kernels cached: a second runner, ``start()`` until the first
   snapshot holding a slice (target < 2 s), and until the first slice of a stepped flow.
4. Device memory after N runners were created, run and stopped, against the baseline before
   them (CuPy ``memGetInfo`` and memory pool), and how long each ``stop()`` took.
5. The flow views of issue 30 (unless ``--no-views``): step 2 again, the runner as the
   dashboard makes it, with three point probes sampled into every snapshot and the coarse
   3D flow with the Q-criterion (``solver.coarse_flow``, what streamlines and an isosurface
   are built from) read every ``VIEWS_INTERVAL_S`` seconds; cost target <= 10 %. Step 1 also
   times one probe sample and one coarse-flow read alone, and, where PyVista is installed,
   the host build of 60 streamlines and the isosurface from it (``solver/flow_meshes.py``,
   which needs neither HoloViews nor Panel).

Needs only solver, geometries, numpy and param (plus CuPy for ``--backend cupy``): no Panel,
HoloViews or PyVista. Writes ``dashboard-cost-<device>-<date>.json`` and ``.md`` to ``--out``
and prints the table last. ``LBM_COMMIT`` names the commit where the copy has no ``.git``.

Usage, from the repository root::

    python benchmarks/dashboard_cost/dashboard_cost.py --backend cupy --out DIR   # GPU
    python benchmarks/dashboard_cost/dashboard_cost.py --backend numpy --small --out DIR  # CPU
"""

from __future__ import annotations

import argparse
import logging
import platform
import re
import sys
import threading
import time
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from geometries.generators import random_sphere_pack  # noqa: E402
from solver.backends import get_backend  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.last_good import REFRESH_S, LastGood  # noqa: E402
from solver.pacing import HEALTH_SHARE  # noqa: E402
from solver.probes import Probe, ProbeSet  # noqa: E402
from solver.runner import (  # noqa: E402
    CHUNK_SECONDS,
    SNAPSHOT_INTERVAL,
    SimulationRunner,
    live_runners,
)
from solver.simulation import Simulation  # noqa: E402
from solver.snapshot import FlowSummary, SliceView, Snapshot  # noqa: E402

log = logging.getLogger("dashboard_cost")

#: Consumer poll rate, Hz (the issue's 10 frames per second).
FRAME_HZ = 10.0
#: The dashboard re-synchronises its 3D view this often (app.settings: scene_refresh_s).
SCENE_REFRESH_S = 10.0
#: Seconds between coarse 3D flows the runner reads: more often than the dashboard's
#: app.views.scene3d.FLOW3D_INTERVAL_S (5 s), a stricter cost, comparable with earlier runs.
VIEWS_INTERVAL_S = 2.0
#: Streamline seeds in the host build timing (the 3D view's default count).
SEEDS = 60
#: Device memory that may differ from the baseline after runners stopped, bytes.
MEMORY_SLACK = 16 * 2**20


@dataclass(frozen=True)
class Case:
    """Geometry and durations (seconds) of one measurement."""

    shape: tuple[int, int, int]
    porosity: float
    diameter: float
    headless_s: float
    stream_s: float
    warmup_s: float
    runners: int


FULL = Case((256, 256, 128), 0.6, 24.0, headless_s=10.0, stream_s=15.0, warmup_s=2.0,
            runners=3)
SMALL = Case((64, 64, 32), 0.6, 12.0, headless_s=4.0, stream_s=6.0, warmup_s=1.0, runners=2)


def case_config(backend: str) -> SimulationConfig:
    """The dashboard's default physics (app.controller.default_case) on ``backend``."""
    return SimulationConfig(lattice="D3Q19", collision="TRT", tau=0.8, precision="float32",
                            body_force=(5e-5, 0.0, 0.0), backend=backend)


def slice_view(shape: tuple[int, ...]) -> SliceView:
    """The Controller's default cut: |u| normal to z through the middle (a 256^2 plane)."""
    return SliceView("umag", 2, shape[2] // 2)


class DeviceMemory:
    """Device memory readings (bytes); all None on the NumPy backend."""

    def __init__(self, backend: str) -> None:
        self.cp = None
        if backend == "cupy":
            import cupy  # benchmark scripts may import CuPy (DESIGN: only they and the backend)

            self.cp = cupy

    def read(self) -> dict:
        """Free device memory and the CuPy pool's used and held bytes."""
        if self.cp is None:
            return {"free": None, "pool_used": None, "pool_total": None}
        # No device-wide synchronize: a runner thread may be capturing its CUDA graph, and a
        # device synchronize from another thread invalidates that capture (seen on the H100).
        pool = self.cp.get_default_memory_pool()
        return {"free": int(self.cp.cuda.runtime.memGetInfo()[0]),
                "pool_used": int(pool.used_bytes()), "pool_total": int(pool.total_bytes())}


def three_probes(geometry) -> ProbeSet:
    """Three fluid nodes at a quarter, half and three quarters of the box along x, middle y
    (the first fluid node along z there)."""
    solid = np.asarray(geometry.solid)
    nx, ny, _ = solid.shape
    probes = []
    for k, x in enumerate((nx // 4, nx // 2, 3 * nx // 4)):
        column = np.flatnonzero(~solid[x, ny // 2])
        z = int(column[len(column) // 2]) if column.size else 0
        probes.append(Probe(f"p{k + 1}", (x, ny // 2, z)))
    return ProbeSet(tuple(probes))


def flow3d_module():
    """solver/flow_meshes.py (needs PyVista only), or None without PyVista."""
    try:
        from solver import flow_meshes
    except ImportError:
        return None
    return flow_meshes


def mesh_seconds(flow, geometry, module) -> dict:
    """Host seconds to build SEEDS streamlines (from the middle z plane) and the Q
    isosurface from a coarse flow with PyVista."""
    start = time.perf_counter()
    grid = module.coarse_grid(flow)
    seeds = module.seed_points(geometry, "slice plane", SEEDS, 2, geometry.shape[2] // 2)
    lines = module.streamlines(grid, seeds)
    middle = time.perf_counter()
    surface = module.isosurface(grid, module.auto_level(flow.scalar, flow.name))
    end = time.perf_counter()
    return {"streamlines_s": middle - start, "isosurface_s": end - middle,
            "streamline_points": int(lines.n_points), "isosurface_cells": int(surface.n_cells)}


def _median_seconds(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def headless(geometry, config: SimulationConfig, case: Case) -> dict:
    """MFLUPS of chunked stepping as the runner does it, and the cost of each publish part."""
    sim = Simulation(geometry, config)
    sim.allocate()
    chunk, steps, wall, timer = 1, 0, 0.0, 0.0
    deadline = time.perf_counter() + case.warmup_s + case.headless_s
    measuring_from = time.perf_counter() + case.warmup_s
    while time.perf_counter() < deadline:
        before = sim.metrics.seconds
        start = time.perf_counter()
        sim.step(chunk)
        elapsed = max(time.perf_counter() - start, 1e-6)
        if start >= measuring_from:  # chunk size has settled and kernels are compiled
            steps, wall = steps + chunk, wall + elapsed
            timer += sim.metrics.seconds - before  # the backend's timer (CUDA events on GPU)
        ideal = chunk * CHUNK_SECONDS / elapsed  # the runner's chunk rule (solver/runner.py)
        chunk = int(min(max(1, round(ideal)), 2 * chunk, 100_000))
    fluid = sim.problem.n_fluid
    view = slice_view(geometry.shape)
    good, xp = LastGood(), sim.backend.xp

    def keep() -> None:
        good.keep(sim)
        sim.backend.to_host(xp.zeros(1))  # waits for the device copy (same stream)

    probes = three_probes(geometry)
    publish = {
        "cut_only_s": _median_seconds(lambda: FlowSummary.of(sim, view, health=False)),
        "cut_and_probes_s": _median_seconds(
            lambda: FlowSummary.of(sim, view, health=False, probes=probes)),
        "health_only_s": _median_seconds(sim.health),
        "cut_and_health_s": _median_seconds(lambda: FlowSummary.of(sim, view, health=True)),
        "last_good_copy_s": _median_seconds(keep),
        "last_good_on_device": good.on_device,
        "before_full_readback_s": _median_seconds(sim.fields),
        "before_host_populations_s": _median_seconds(sim.populations),
        "probes_3_s": _median_seconds(lambda: sim.sample(probes)),
        "coarse_flow_q_s": _median_seconds(lambda: sim.coarse_flow("qcrit")),
    }
    module = flow3d_module()
    publish["meshes"] = (mesh_seconds(sim.coarse_flow("qcrit"), geometry, module)
                         if module is not None else None)
    if module is None:
        log.info("no PyVista: the host part of a 3D flow update is timed with --meshes-only")
    good.clear()
    out = {
        "fluid_nodes": int(fluid), "n_tiles": int(sim.tiling.n_tiles),
        "eta_t": float(sim.tiling.eta_t), "state_bytes": int(sim.memory_bytes()),
        "steps": steps, "seconds": wall, "final_chunk": chunk,
        "mflups": fluid * steps / wall / 1e6 if wall else 0.0,
        "mflups_backend_timer": fluid * steps / timer / 1e6 if timer else 0.0,
        "publish": publish,
    }
    sim.close()
    return out


class DashboardConsumer(threading.Thread):
    """Polls a runner at ``hz`` and does the host work of the dashboard's periodic callback.

    Per poll, as ``Controller.poll``: ``runner.touch()``, ``runner.snapshot()``, stop if its
    ``seq`` is unchanged. Per new snapshot, as the views do with it: the status text; the slice
    image (``SlicePlot``: ``np.asarray(plane, float)``, its transpose, the colour range of a
    framewise plot, and the C-contiguous buffer Bokeh sends); the counter cards and the new
    rows of the time series (``CountersView``: boolean mask, one copy per column); every
    ``SCENE_REFRESH_S`` the 3D plane's scalars (``Scene3D``: ``nan_to_num`` of the plane in
    Fortran order). HoloViews/Bokeh/VTK's own Python work is not included (they are not
    installed where this runs), so the real dashboard costs somewhat more host time.
    """

    def __init__(self, runner: SimulationRunner, hz: float = FRAME_HZ) -> None:
        super().__init__(name="dashboard-consumer", daemon=True)
        self.runner, self.period = runner, 1.0 / hz
        self.stop_event = threading.Event()
        self.polls = self.frames = 0
        self.busy = 0.0
        self.frame_times: list[float] = []
        self.shapes: set[tuple[int, ...]] = set()
        self._seq, self._sample, self._scene_at = -1, -1.0, 0.0

    def run(self) -> None:
        next_poll = time.perf_counter()
        while not self.stop_event.is_set():
            start = time.perf_counter()
            self.poll()
            self.busy += time.perf_counter() - start
            self.polls += 1
            next_poll += self.period
            self.stop_event.wait(max(0.0, next_poll - time.perf_counter()))

    def poll(self) -> None:
        """One periodic callback."""
        self.runner.touch()
        snap = self.runner.snapshot()
        if snap.seq == self._seq:
            return
        self._seq = snap.seq
        self._status_text(snap)
        if snap.plane is not None:
            self._image(snap)
            self.frames += 1
            self.frame_times.append(time.perf_counter())
        self._series(snap)

    @staticmethod
    def _status_text(snap: Snapshot) -> str:
        m = snap.metrics
        return (f"{snap.status} {snap.message} {m.get('mflups', 0.0):.2f} {snap.step:,} "
                f"{snap.steps_per_second:.1f} {m.get('eta_t', 0.0):.3f} {snap.max_speed:.2e}")

    def _image(self, snap: Snapshot) -> None:
        plane = np.asarray(snap.plane, dtype=float)
        self.shapes.add(plane.shape)
        image = plane.T
        finite = image[np.isfinite(image)]
        self.colour_range = (float(finite.min()), float(finite.max())) if finite.size else None
        self.sent = np.ascontiguousarray(image).tobytes()
        now = time.perf_counter()
        if now - self._scene_at >= SCENE_REFRESH_S:
            self._scene_at = now
            values = plane.ravel(order="F")
            self.scene_scalars = (np.nan_to_num(values), np.isnan(values))

    def _series(self, snap: Snapshot) -> None:
        history = snap.history
        if not history or not len(history.get("sample", ())):
            return
        new = history["sample"] > self._sample
        if new.any():
            self._sample = float(history["sample"][-1])
            self.rows = {k: history[k][new].copy()
                         for k in ("step", "mflups", "residual", "permeability")}

    def fps(self, since: float, until: float) -> float:
        """New frames per second in [since, until]."""
        count = sum(since <= t <= until for t in self.frame_times)
        return count / (until - since) if until > since else 0.0


def _mark(runner: SimulationRunner) -> tuple[int, float]:
    """(time step, perf_counter) read on the runner thread between two chunks."""
    return runner.submit(lambda sim: (sim.time_step, time.perf_counter())).result(timeout=120)


def _runner(geometry, config: SimulationConfig, interval: float | None) -> SimulationRunner:
    """A runner as app.controller.Controller makes it (default snapshot interval)."""
    extra = {} if interval is None else {"snapshot_interval": interval}
    return SimulationRunner(geometry, config, view=slice_view(geometry.shape), **extra)


def _stopped(runner: SimulationRunner) -> float:
    """Stop a runner; seconds until its thread ended (fails if it did not within 30 s)."""
    start = time.perf_counter()
    if not runner.stop(timeout=30.0):
        raise RuntimeError("The runner thread did not end within 30 s of stop().")
    return time.perf_counter() - start


def streaming(geometry, config: SimulationConfig, case: Case, interval: float | None,
              fluid: int, views: bool = False) -> dict:
    """Runner MFLUPS while a consumer thread polls at 10 Hz; with ``views`` three probes and
    the coarse 3D flow (Q) every VIEWS_INTERVAL_S seconds, as the dashboard asks for them."""
    runner = _runner(geometry, config, interval)
    if views:
        runner.set_probes(three_probes(geometry))
        runner.set_flow3d("qcrit", VIEWS_INTERVAL_S)
    runner.start()  # the Controller starts at once (autostart)
    consumer = DashboardConsumer(runner)
    consumer.start()
    runner.wait_for(lambda s: s.step > 0 and s.plane is not None, timeout=300)
    time.sleep(case.warmup_s)
    (step0, t0), chunk_rates = _mark(runner), []
    end = t0 + case.stream_s
    while time.perf_counter() < end:
        time.sleep(min(0.5, max(0.0, end - time.perf_counter())))
        chunk_rates.append(runner.snapshot().metrics.get("mflups", 0.0))
    step1, t1 = _mark(runner)
    snap = runner.snapshot()
    consumer.stop_event.set()
    consumer.join(5.0)
    stop_s = _stopped(runner)
    intervals = np.diff([t for t in consumer.frame_times if t0 <= t <= t1])
    return {
        "snapshot_interval_s": interval if interval is not None else "runner default",
        "steps": step1 - step0, "seconds": t1 - t0,
        "mflups": fluid * (step1 - step0) / (t1 - t0) / 1e6,
        "mflups_last_chunks_mean": float(np.mean(chunk_rates)) if chunk_rates else 0.0,
        "frames_per_second": consumer.fps(t0, t1),
        "frame_interval_median_s": float(np.median(intervals)) if intervals.size else None,
        "frame_shapes": sorted(consumer.shapes), "polls": consumer.polls,
        "consumer_busy_s": consumer.busy, "status": snap.status, "error": snap.error,
        "stop_s": stop_s, "views": views,
        "probes_published": snap.probes is not None, "flow3d_published": snap.flow3d is not None,
    }


def first_frame(geometry, config: SimulationConfig, interval: float | None) -> dict:
    """Seconds from ``start()`` of a fresh runner to its first slice and first stepped slice."""
    runner = _runner(geometry, config, interval)
    start = time.perf_counter()
    runner.start()
    runner.wait_for(lambda s: s.plane is not None, timeout=300)
    first = time.perf_counter() - start
    runner.wait_for(lambda s: s.plane is not None and s.step > 0, timeout=300)
    stepped = time.perf_counter() - start
    return {"first_slice_s": first, "first_stepped_slice_s": stepped,
            "stop_s": _stopped(runner)}


def memory_cycle(geometry, config: SimulationConfig, memory: DeviceMemory, count: int) -> dict:
    """Device memory before and after ``count`` runners were created, run and stopped."""
    baseline = memory.read()
    cycles = []
    for _ in range(count):
        runner = _runner(geometry, config, None)
        runner.start()
        runner.wait_for(lambda s: s.plane is not None and s.step > 0, timeout=300)
        running = memory.read()
        stop_s = _stopped(runner)
        cycles.append({"running": running, "after_stop": memory.read(), "stop_s": stop_s,
                       "live_runners": live_runners()})
    out = {"baseline": baseline, "cycles": cycles}
    if baseline["free"] is not None:
        out["max_free_deficit_bytes"] = max(baseline["free"] - c["after_stop"]["free"]
                                            for c in cycles)
        out["max_pool_used_excess_bytes"] = max(c["after_stop"]["pool_used"]
                                                - baseline["pool_used"] for c in cycles)
        out["in_use_while_running_bytes"] = max(baseline["free"] - c["running"]["free"]
                                                for c in cycles)
        out["returned"] = (out["max_free_deficit_bytes"] <= MEMORY_SLACK
                           and out["max_pool_used_excess_bytes"] <= 0)
    out["threads_ended"] = all(c["live_runners"] == 0 for c in cycles)
    return out


def _update_s(publish: dict) -> float:
    """Seconds of one streamline + isosurface update before the browser sync."""
    meshes = publish["meshes"]
    return publish["coarse_flow_q_s"] + meshes["streamlines_s"] + meshes["isosurface_s"]


def _yes(ok: bool | None) -> str:
    return "n/a" if ok is None else ("yes" if ok else "**no**")


def _mb(n: int | None) -> str:
    return "n/a" if n is None else f"{n / 2**20:.1f} MiB"


def markdown(result: dict) -> str:
    """The report: metadata and one table of measured values against the targets."""
    meta, h, s, f, m = (result[k] for k in ("meta", "headless", "streaming", "first_frame",
                                            "memory"))
    p = h["publish"]
    shape = "x".join(map(str, meta["case"]["shape"]))
    shapes = s[0]["frame_shapes"]
    plane = "x".join(map(str, shapes[0])) if shapes else "none"
    rows = [
        ("headless MFLUPS (runner-style chunks, wall clock)", f"{h['mflups']:.4g}", "", ""),
        ("headless MFLUPS (backend timer)", f"{h['mflups_backend_timer']:.4g}", "", ""),
    ]
    for run_ in s:
        every = run_["snapshot_interval_s"]
        label = f"snapshot interval {every} s" if isinstance(every, float) else (
            "runner as the dashboard makes it")
        if run_.get("views"):
            label += (f", 3 probes + coarse 3D flow (Q) every {VIEWS_INTERVAL_S:g} s "
                      f"(published: {_yes(run_['probes_published'] and run_['flow3d_published'])})")
        cost = run_["cost_fraction"]
        target = 0.10 if run_.get("views") else 0.05
        rows += [
            (f"runner MFLUPS, 10 Hz consumer ({label})", f"{run_['mflups']:.4g}", "", ""),
            ("cost 1 - streaming / headless", f"{100 * cost:.1f} %", f"<= {100 * target:g} %",
             _yes(cost <= target)),
            ("new frames per second at the consumer", f"{run_['frames_per_second']:.2f}", "10",
             _yes(run_["frames_per_second"] >= 9.5)),
            ("median time between new frames", f"{run_['frame_interval_median_s'] or 0:.2f} s",
             "", ""),
        ]
    where = "device" if p["last_good_on_device"] else "host"
    rows += [
        ("publish: cut only (the slice's nodes alone)",
         f"{1e3 * p['cut_only_s']:.2f} ms", "", ""),
        *([] if "cut_and_probes_s" not in p else [
            ("publish: cut + 3 probes (one gather, as the runner publishes)",
             f"{1e3 * p['cut_and_probes_s']:.2f} ms", "", ""),
            ("health check alone (moments of the whole state)",
             f"{1e3 * p['health_only_s']:.1f} ms", "", "")]),
        ("publish with health check (moments of the whole state, once)",
         f"{1e3 * p['cut_and_health_s']:.1f} ms", "", ""),
        (f"last good state: copy on the {where} (every >= {REFRESH_S:g} s)",
         f"{1e3 * p['last_good_copy_s']:.1f} ms", "", ""),
        ("before: full field read-back per publish", f"{1e3 * p['before_full_readback_s']:.0f} ms",
         "", ""),
        ("before: host copy of the populations per publish",
         f"{1e3 * p['before_host_populations_s']:.0f} ms", "", ""),
        ("3 probes sampled alone on the device", f"{1e3 * p['probes_3_s']:.2f} ms",
         "", ""),
        ("publish part: coarse 3D flow with Q (every few s)",
         f"{1e3 * p['coarse_flow_q_s']:.1f} ms", "", ""),
        *([] if not p.get("meshes") else [
            (f"host: {SEEDS} streamlines from the coarse flow (PyVista)",
             f"{1e3 * p['meshes']['streamlines_s']:.0f} ms", "", ""),
            ("host: Q isosurface from the coarse flow (PyVista)",
             f"{1e3 * p['meshes']['isosurface_s']:.0f} ms", "", ""),
            ("coarse read + streamlines + isosurface (before the browser sync)",
             f"{_update_s(p):.2f} s", "<= 1 s", _yes(_update_s(p) <= 1.0)),
        ]),
        *([] if p.get("meshes") else [
            ("host: streamlines + isosurface", "not timed here (no PyVista)", "", "")]),
        ("start() to first slice (kernels cached)", f"{f['first_slice_s']:.2f} s", "< 2 s",
         _yes(f["first_slice_s"] < 2.0)),
        ("start() to first slice of a stepped flow", f"{f['first_stepped_slice_s']:.2f} s", "",
         ""),
        ("slowest stop()", f"{result['max_stop_s']:.2f} s", "<= 1 s",
         _yes(result["max_stop_s"] <= 1.0)),
        (f"device memory after {len(m['cycles'])} runners stopped vs baseline",
         _mb(m.get("max_free_deficit_bytes")), f"<= {_mb(MEMORY_SLACK)}",
         _yes(m.get("returned"))),
        ("device memory in use while one runs", _mb(m.get("in_use_while_running_bytes")), "",
         ""),
    ]
    lines = [
        f"# Dashboard cost: {meta['device']}", "",
        f"Date {meta['date']}, commit {meta['commit']}, backend {meta['backend']}. Case: "
        f"periodic sphere pack {shape} (d = {meta['case']['diameter']:g}, porosity "
        f"{meta['porosity']:.3f}, {h['fluid_nodes']:,} fluid nodes, eta_t {h['eta_t']:.3f}), "
        f"D3Q19 TRT float32, slice {plane}.", "",
        "| quantity | value | target | met |", "| --- | ---: | ---: | :---: |",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows],
        "",
        "Method: MFLUPS counts fluid nodes; headless = Simulation.step in the runner's ~35 ms "
        "chunks timed with perf_counter (wall clock, as the runner times them); streaming = "
        "time steps read on the runner thread at both ends of the window over its wall time, "
        "while a thread polls runner.snapshot() at 10 Hz and does the dashboard's per-frame "
        "host work without HoloViews/Bokeh/VTK (see DashboardConsumer). The runner publishes "
        f"every {SNAPSHOT_INTERVAL:g} s by default and checks the health of the whole state on "
        f"at most {100 * HEALTH_SHARE:g} % of the wall time. Runner threads alive "
        f"after the memory cycles: {'none' if m['threads_ended'] else 'SOME'}.",
    ]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> dict:
    """All four measurements; the result dictionary."""
    case = SMALL if args.small else FULL
    config = case_config(args.backend)
    memory = DeviceMemory(args.backend)
    cold = memory.read()
    geometry = random_sphere_pack(case.shape, case.porosity, case.diameter, seed=0)
    log.info("case %s porosity %.3f", case.shape, geometry.porosity)
    device = dict(get_backend(args.backend).device_info())
    log.info("device %s", device.get("name"))
    h = headless(geometry, config, case)
    log.info("headless %.1f MFLUPS", h["mflups"])
    s = []
    for interval in args.snapshot_interval:
        s.append(streaming(geometry, config, case, interval, h["fluid_nodes"]))
        s[-1]["cost_fraction"] = 1.0 - s[-1]["mflups"] / h["mflups"]
        log.info("streaming %.4g MFLUPS, %.2f frames/s", s[-1]["mflups"],
                 s[-1]["frames_per_second"])
    if not args.no_views:
        s.append(streaming(geometry, config, case, None, h["fluid_nodes"], views=True))
        s[-1]["cost_fraction"] = 1.0 - s[-1]["mflups"] / h["mflups"]
        log.info("streaming with views %.4g MFLUPS", s[-1]["mflups"])
    f = first_frame(geometry, config, None)
    log.info("first frame %.2f s", f["first_slice_s"])
    m = memory_cycle(geometry, config, memory, args.runners or case.runners)
    m["cold_start"] = cold
    stops = [*(r["stop_s"] for r in s), f["stop_s"], *(c["stop_s"] for c in m["cycles"])]
    return {
        "meta": {"device": str(device.get("name")), "backend": args.backend,
                 "date": date.today().isoformat(), "commit": git_commit(),
                 "host": platform.node(), "python": platform.python_version(),
                 "numpy": np.__version__, "case": asdict(case),
                 "porosity": float(geometry.porosity),
                 "config": {k: v for k, v in config.param.values().items() if k != "name"},
                 "memory_total": device.get("memory")},
        "headless": h, "streaming": s, "first_frame": f, "memory": m,
        "cost_fraction": s[0]["cost_fraction"],
        "max_stop_s": max(stops),
    }


def meshes_only(args: argparse.Namespace) -> dict:
    """One 3D flow update of the case before the browser sync (issue 30 item 6), where PyVista
    is: the coarse flow with Q of a run stepped ``--mesh-steps`` times on ``--backend``, then
    SEEDS streamlines and the Q isosurface built from it on the host (median of 3 each)."""
    case = SMALL if args.small else FULL
    module = flow3d_module()
    if module is None:
        raise SystemExit("--meshes-only needs PyVista (the 3D view's meshes are built with it).")
    geometry = random_sphere_pack(case.shape, case.porosity, case.diameter, seed=0)
    sim = Simulation(geometry, case_config(args.backend))
    sim.allocate()
    sim.step(args.mesh_steps)
    read = _median_seconds(lambda: sim.coarse_flow("qcrit"))
    flow = sim.coarse_flow("qcrit")
    runs = [mesh_seconds(flow, geometry, module) for _ in range(3)]
    sim.close()
    meshes = {key: float(np.median([r[key] for r in runs])) for key in runs[0]}
    device = dict(get_backend(args.backend).device_info())
    return {"device": str(device.get("name")), "backend": args.backend,
            "host": platform.node(), "date": date.today().isoformat(), "commit": git_commit(),
            "shape": list(case.shape), "steps": args.mesh_steps,
            "coarse_shape": list(flow.scalar.shape), "coarse_flow_q_s": read, "meshes": meshes,
            "update_s": read + meshes["streamlines_s"] + meshes["isosurface_s"]}


def meshes_markdown(result: dict) -> str:
    """The report of :func:`meshes_only`."""
    m = result["meshes"]
    shape = "x".join(map(str, result["shape"]))
    coarse = "x".join(map(str, result["coarse_shape"]))
    rows = [("coarse flow with Q (read on the backend)",
             f"{1e3 * result['coarse_flow_q_s']:.1f} ms"),
            (f"{SEEDS} streamlines (PyVista, host)", f"{1e3 * m['streamlines_s']:.0f} ms"),
            ("Q isosurface (PyVista, host)", f"{1e3 * m['isosurface_s']:.0f} ms"),
            ("one 3D flow update before the browser sync", f"{result['update_s']:.2f} s")]
    return "\n".join([
        f"# 3D flow update: {result['device']} ({result['backend']}), host {result['host']}", "",
        f"Date {result['date']}, commit {result['commit']}. Sphere pack {shape} after "
        f"{result['steps']} steps; coarse grid {coarse}; "
        f"{int(m['streamline_points']):,} streamline points, "
        f"{int(m['isosurface_cells']):,} isosurface cells.", "",
        "| quantity | value |", "| --- | ---: |", *[f"| {a} | {b} |" for a, b in rows], ""])


def _interval(text: str) -> float | None:
    return None if text == "default" else float(text)


def main() -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the JSON and markdown report")
    parser.add_argument("--backend", choices=("cupy", "numpy"), default="cupy")
    parser.add_argument("--small", action="store_true",
                        help="64x64x32 pack and short phases (a CPU smoke run)")
    parser.add_argument("--runners", type=int, default=0,
                        help="runners in the memory check (default 3, or 2 with --small)")
    parser.add_argument("--snapshot-interval", type=_interval, nargs="+",
                        default=[None, 0.1],
                        help="runner snapshot intervals to stream with, s; 'default' is the "
                             "runner's own, as the dashboard uses it (default: default 0.1)")
    parser.add_argument("--no-views", action="store_true",
                        help="skip the run with probes and the coarse 3D flow (issue 30)")
    parser.add_argument("--meshes-only", action="store_true",
                        help="only time one 3D flow update (coarse flow, streamlines and "
                             "isosurface; needs PyVista) of a run stepped --mesh-steps times")
    parser.add_argument("--mesh-steps", type=int, default=200,
                        help="steps before the --meshes-only update (default 200)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.meshes_only:
        found = meshes_only(args)
        slug = re.sub(r"[^a-z0-9]+", "-", f"{found['device']}-{found['host']}".lower()).strip("-")
        stem = f"flow3d-update-{slug}-{found['date']}"
        write_json_md(out, stem, found, meshes_markdown(found), indent=2, default=str)
        print(meshes_markdown(found))
        return 0
    result = run(args)
    slug = re.sub(r"[^a-z0-9]+", "-", result["meta"]["device"].lower()).strip("-")
    stem = f"dashboard-cost-{slug}-{result['meta']['date']}"
    report = markdown(result)
    write_json_md(out, stem, result, report, indent=2, default=str)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
