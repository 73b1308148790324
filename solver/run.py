"""Headless runs of a case: the loop behind ``python -m solver run CASE``.

:class:`HeadlessRun` refuses a case that cannot be stable or does not fit in memory, then steps
the simulation in chunks. Every ``check_interval`` steps it looks at the run's health through
the run monitor (:mod:`solver.monitor`, shared with the dashboard and validation) and stops
on NaN/Inf or a speed above ``u_limit``; every ``output_interval`` steps it writes a CSV row
(MFLUPS, residual, mean velocity, Darcy permeability and its convergence, eta_t) and a ``.vti``
(over MPI ranks a ``.pvti`` of per-rank pieces, :mod:`solver.vtk_pieces`)
of rho and u; every ``checkpoint_interval`` steps, at the end and on Ctrl-C it writes
``checkpoint.npz``, only ever from a state that passed the divergence check, so the last good
checkpoint survives a divergence. The residual (:func:`solver.observables.residual`) is the
relative change of the superficial mean velocity per time step; the run stops when its change
over one output interval (residual x output_interval) falls below ``convergence``. Permeability
by :func:`solver.observables.darcy_permeability` (lattice units; m^2 and mD with a voxel size),
with the steady-state test on k of :class:`~solver.monitor.KConvergence`.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from .case import Case, CaseError, load_geometry, region_source
from .flow_fields import FIELDS
from .io import (
    CheckpointError,
    CsvLog,
    read_checkpoint,
    restore,
    save_simulation,
    write_json,
    write_vti,
)
from .memory import assess_memory, precheck_memory
from .monitor import Reading, RunMonitor
from .opening_specs import case_coupling, case_units
from .probes import ProbeSet, line_columns, line_rows, probe_columns, probe_row
from .problem import GeometryLike, Problem, TiledGeometry, as_geometry
from .pulsatile import PulsatileDriver, cycle_monitor
from .simulation import Simulation
from .slice_frames import plane_axes, save_slice_png
from .stability import DivergenceError, check_stability
from .vessel import opening_columns, opening_row
from .vessel_setup import backend_name, case_setup

__all__ = ["EXIT_OK", "EXIT_INVALID", "EXIT_DIVERGED", "EXIT_INTERRUPTED", "CSV_COLUMNS",
           "RunOutcome", "HeadlessRun", "memory_required"]

log = logging.getLogger(__name__)

EXIT_OK, EXIT_INVALID, EXIT_DIVERGED, EXIT_INTERRUPTED = 0, 2, 3, 130
CSV_COLUMNS = ["step", "wall_s", "mflups", "residual", "u_mean_x", "u_mean_y", "u_mean_z",
               "u_flow", "u_max", "permeability", "permeability_m2", "permeability_mD",
               "k_change", "k_converged", "steps_to_converge", "eta_t"]
#: Extra CSV columns of a run driven through openings: its steady-state test (solver.monitor).
FLOW_COLUMNS = ["flow_change", "steady"]
#: Summary keys copied from the last CSV row.
SUMMARY_KEYS = ("residual", "u_mean_x", "u_mean_y", "u_mean_z", "u_flow", "u_max",
                "permeability", "permeability_m2", "permeability_mD", "k_change", "k_converged",
                "steps_to_converge", "k_answer", "k_label")
#: Wall time between looks at the Ctrl-C flag; keeps an interrupt responsive on slow devices.
PIECE_SECONDS = 0.25


@dataclass
class RunOutcome:
    """How a run ended: status, process exit code, message and the summary written to JSON."""

    status: str
    exit_code: int
    message: str
    summary: dict[str, Any] = field(default_factory=dict)


def memory_required(sim: Simulation) -> int:
    """Bytes the run needs at its peak on its backend (:meth:`Backend.memory_required`)."""
    return sim.backend.memory_required(sim.problem)


class _Interrupt:
    """First Ctrl-C sets a flag (checkpoint, then exit); a second one aborts at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> _Interrupt:
        try:
            self._previous = signal.signal(signal.SIGINT, self._handle)
        except ValueError:  # not the main thread: leave SIGINT alone
            self._previous = None
        return self

    def _handle(self, signum, frame) -> None:
        # Only set the flag: logging from a signal handler can deadlock on the logging lock.
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


class HeadlessRun:
    """One case run to convergence, its step limit, divergence or Ctrl-C, writing to ``out``."""

    def __init__(self, case: Case, out: str | Path | None = None,
                 geometry: GeometryLike | np.ndarray | None = None,
                 backend: Any = None) -> None:
        self.case = case
        self.controls = case.run
        self.out = Path(out or case.run.output or Path("runs") / case.name)
        # Over MPI ranks an image file read by slabs is tiled by the ranks, each its own slab:
        # rank 0 never holds the voxel image (solver.distributed.region_tiling).
        source, frame = (None, "") if geometry is not None else _region_source(case, backend)
        agreed = None  # what the ranks agreed of the image they tiled (its survey's counts)
        if source is not None:
            self.geometry, agreed = _tiled_geometry(case, source, frame, backend)
        else:
            if frame:
                log.info("Rank 0 reads the whole voxel image: %s.", frame)
            self.geometry = as_geometry(geometry if geometry is not None
                                        else load_geometry(case.geometry))
        self.voxel_size = self.geometry.voxel_size
        # SI in, lattice parameters out: tau chosen (or the given one judged) before the units.
        # The SI entries become lattice units on this geometry's openings (solver.vessel_setup,
        # the Python API's own function).
        self.lattice_choice = case_setup(case, self.geometry, _backend_name(case, backend))
        if self.lattice_choice is not None:
            for warning in self.lattice_choice.warnings:
                log.warning(warning)
        self.units = case_units(case, self.voxel_size)
        problem = None
        if agreed is None:
            solid = np.asarray(self.geometry.solid)
            # A case that cannot fit even perfectly tiled is refused before tiling costs memory.
            precheck_memory(solid, case.config, backend or case.config.backend).check()
            warnings = check_stability(case.config, solid, steps=self.controls.max_steps,
                                       openings=bool(case.openings))
            del solid  # the Simulation holds it until rank 0 over ranks releases it
        else:  # the ranks' counts: the same pore size, no whole mask
            flow = int(np.argmax(np.abs(case.config.body_force[:len(self.geometry.shape)])))
            warnings = check_stability(case.config, tuple(self.geometry.shape),
                                       steps=self.controls.max_steps,
                                       pore=agreed.survey.pore_size(flow))
            problem = Problem.from_tiling(self.geometry.tiling, case.config)
        for warning in warnings:
            log.warning(warning)
        self.sim = Simulation(self.geometry, case.config, backend, problem=problem)
        self.probes = (case.probes or ProbeSet()).check(tuple(self.sim.shape))
        # Headless slice frames (a case's `frames`): the layer is chosen once, on this geometry.
        self.frames = case.frames
        self._scene = None  # the 3D view's off-screen picture, made at the first 3D frame
        try:
            self.frame_layer = None if self.frames is None else self.frames.layer(self.sim.solid)
        except ValueError as exc:
            raise CaseError(f"{case.path or case.name}: {exc}") from exc
        # Windkessel outlets: updated by the backend every windkessel_every steps.
        self.windkessel = case_coupling(case.openings or [], self.geometry, self.units,
                                        case.config.initial_density,
                                        self.controls.windkessel_every,
                                        str(case.path or case.name))
        self.cycles = cycle_monitor(self.sim, self.controls.warmup_cycles,
                                    self.controls.cycle_samples, self.controls.cycle_tolerance)
        self.driver = PulsatileDriver(self.windkessel, self.cycles)
        self.driver.start(self.sim)
        # Refused before anything is allocated, by the same verdict as the dashboard's.
        self.required = assess_memory(self.sim.problem, self.sim.backend).check().required
        self.monitor = RunMonitor(self.sim.problem, case.config.tau,
                                  u_limit=self.controls.u_limit,
                                  k_tolerance=self.controls.k_tolerance,
                                  axis=self.sim.flow_axis, voxel_size=self.voxel_size,
                                  flow_tolerance=self.controls.flow_tolerance,
                                  flow_window=self.controls.flow_window,
                                  finer=(self.lattice_choice.finer
                                         if self.lattice_choice is not None else ""))
        if not self.sim.backend.keeps_voxel_mask:
            # Rank 0 over MPI ranks: the tiling holds the same mask, so the voxel image (1 byte
            # a voxel) is dropped once nothing above reads it; an output rebuilds it.
            self.geometry = self.sim.release_mask()
        self.reading: Reading | None = None
        self.wall = 0.0
        self.last: dict[str, Any] = {}
        self._interval = (0, 0.0)  # (steps, solver seconds) at the previous output
        self.check_seconds = 0.0
        self._slow_warned = False
        self._pvti_said = False  # the log says once that fields are a .pvti over ranks

    @property
    def checkpoint_path(self) -> Path:
        """Where checkpoints go (one file, replaced atomically)."""
        return self.out / "checkpoint.npz"

    def resume(self, path: str | Path) -> None:
        """Continue from a checkpoint of the same geometry and configuration."""
        checkpoint = read_checkpoint(path)
        restore(self.sim, checkpoint)
        self.monitor.restore(checkpoint.extra.get("monitor"))
        self.wall = float(checkpoint.extra.get("wall_s", 0.0))
        self.last = dict(checkpoint.extra.get("last") or {})
        self._interval = (self.sim.time_step, self.sim.metrics.seconds)
        if self.cycles is not None:
            self._resume_cycles(checkpoint, path)
        log.info("Resumed %s at step %d.", path, self.sim.time_step)

    def _resume_cycles(self, checkpoint: Any, path: str | Path) -> None:
        """The heart cycles' samples and shear sums of the checkpoint (a checkpoint without
        them, e.g. written before they were kept: sampling starts at the next whole cycle)."""
        if not any(k.startswith("cycle_") for k in checkpoint.arrays):
            self.cycles.skip_to(self.sim.time_step)
            return
        try:
            self.cycles.restore_arrays(checkpoint.arrays, self.sim)
        except ValueError as exc:
            raise CheckpointError(f"The checkpoint {path} does not fit this pulsatile run: "
                                  f"{exc}. Resume with the case it was written by, or start "
                                  "again without --resume.") from exc

    def execute(self, progress: bool = True) -> RunOutcome:
        """Step until done; write outputs; return the outcome (never raises for divergence)."""
        self.sim.allocate()
        start = self.sim.time_step
        self.csv = CsvLog(self.out / "history.csv",
                          CSV_COLUMNS + opening_columns(sorted(self.case.config.openings))
                          + (FLOW_COLUMNS if self._vessel else []),
                          keep_until=start if start else None)
        self._probe_logs()
        if self._vessel and self.cycles is None:
            log.info("Steady state of the openings: judged over %s steps (%s).",
                     f"{self.monitor.window.steps:,}", self.monitor.window.basis)
        status = "max_steps"
        bar = tqdm(total=self.controls.max_steps, initial=start, unit="step",
                   desc=self.case.name, disable=not progress, dynamic_ncols=True)
        t0 = time.perf_counter()
        try:
            with _Interrupt() as interrupt:
                status = self._loop(bar, interrupt)
        except DivergenceError as exc:
            kept = (f" The last good checkpoint {self.checkpoint_path} was kept."
                    if self.checkpoint_path.exists() else "")
            return self._finish("diverged", EXIT_DIVERGED,
                                f"Step {self.sim.time_step}: {exc}{kept}", t0, checkpoint=False)
        except KeyboardInterrupt:
            return self._finish("aborted", EXIT_INTERRUPTED, "Aborted by a second Ctrl-C; the "
                                "last checkpoint was kept.", t0, checkpoint=False)
        finally:
            bar.close()
        if status == "interrupted":
            return self._finish(status, EXIT_INTERRUPTED, "Interrupted; resume with --resume "
                                f"{self.checkpoint_path}.", t0)
        message = f"Finished: {status}."
        if status == "converged" and self._vessel and self.reading is not None:
            message = (f"Converged at step {self.sim.time_step}: {self.reading.steady_label} "
                       "(steady state of the openings).")
        return self._finish(status, EXIT_OK, message, t0)

    @property
    def _vessel(self) -> bool:
        """Whether the run is driven through openings (its steady state is theirs)."""
        return self.sim.problem.iolets is not None

    def _loop(self, bar: tqdm, interrupt: _Interrupt) -> str:
        c = self.controls
        while self.sim.time_step < c.max_steps:
            step = self.sim.time_step
            target = min(_next(step, c.check_interval), _next(step, c.output_interval),
                         _next(step, c.checkpoint_interval), c.max_steps,
                         _next(step, self.frames.every if self.frames else 0))
            self._advance(target - step, bar, interrupt)
            step = self.sim.time_step
            reading = self._observe()  # raises DivergenceError before anything is written
            if interrupt.requested:
                log.warning("Interrupted at step %d: writing a checkpoint (Ctrl-C again aborts "
                            "without one).", step)
                return "interrupted"
            if self.frames is not None and step % self.frames.every == 0:
                self._write_frame()
            steady = self._vessel and c.flow_tolerance > 0 and reading.steady
            if self.cycles is not None:  # a pulsatile flow is never steady: periodic instead
                steady = c.cycle_tolerance > 0 and self.driver.periodic()
            if step % c.output_interval == 0 or step == c.max_steps or steady:
                if self._output(reading, bar) or steady:
                    return "converged"
            if c.checkpoint_interval and step % c.checkpoint_interval == 0:
                self._checkpoint()
        if self.last.get("step") != self.sim.time_step:  # e.g. resumed at the step limit
            self._output(self._observe(), bar)
        return "max_steps"

    def _advance(self, n: int, bar: tqdm, interrupt: _Interrupt) -> None:
        piece = 1
        while n > 0 and not interrupt.requested:
            k = min(piece, n)
            tic = time.perf_counter()
            self.driver.step(self.sim, k)  # through the Windkessel outlets and cycle samples
            elapsed = time.perf_counter() - tic
            self.wall += elapsed
            n -= k
            bar.update(k)
            piece = max(1, int(PIECE_SECONDS * k / elapsed)) if elapsed > 0 else 2 * piece

    def _observe(self) -> Reading:
        """The monitor's reading of the current state; DivergenceError if unhealthy."""
        tic = time.perf_counter()
        flows = self.sim.opening_flows() if self._vessel else None
        reading = self.monitor.check(self.sim.time_step, self.sim.health(), flows)
        self.reading = reading
        self.check_seconds += time.perf_counter() - tic
        if not self._slow_warned and self.check_seconds > 0.2 * max(self.wall, 1.0):
            # A host read-back per check can cost more than the steps on a fast GPU.
            self._slow_warned = True
            log.warning("Divergence checks take %.0f s of %.0f s stepping; raise "
                        "run.check_interval.", self.check_seconds, self.wall)
        return reading

    def _output(self, reading: Reading, bar: tqdm) -> bool:
        """Write the CSV row (and .vti); return whether the run has converged."""
        sim, p = self.sim, self.sim.problem
        step = sim.time_step
        mean = reading.mean_velocity
        residual = reading.residual
        steps0, seconds0 = self._interval
        dt = sim.metrics.seconds - seconds0
        mflups = p.n_fluid * (step - steps0) / dt / 1e6 if dt > 0 else 0.0
        self._interval = (step, sim.metrics.seconds)
        k = reading.permeability
        answer, label = reading.verdict
        row = {
            "step": step, "wall_s": round(self.wall, 4), "mflups": mflups,
            "residual": residual if math.isfinite(residual) else None,
            "u_flow": None if k is None else k.superficial_velocity,
            "u_max": reading.max_speed,
            "permeability": None if k is None else k.lattice,
            "permeability_m2": None if k is None else k.m2,
            "permeability_mD": None if k is None else k.millidarcy,
            "k_change": reading.k_change, "k_converged": reading.converged,
            "steps_to_converge": reading.steps_to_converge,
            "eta_t": sim.tiling.eta_t,
        }
        row.update({f"u_mean_{ax}": float(v) for ax, v in zip("xyz", mean, strict=False)})
        if sim.config.openings:
            row.update(opening_row(sim.opening_flows(), self.units, sim.config.initial_density))
        if self._vessel:
            row.update(flow_change=reading.flow_change, steady=reading.steady)
        self.csv.append(row)
        self._write_probes()
        self.last = {**row, "k_answer": answer, "k_label": label}
        bar.set_postfix(mflups=f"{mflups:.2f}", residual=f"{residual:.2e}", refresh=False)
        if self.controls.vti:
            self._write_fields(step)
        if self._vessel:  # a flow through openings stops on its own steady state (_loop)
            return False
        change = residual * self.controls.output_interval  # over one output interval
        return 0 < self.controls.convergence and change < self.controls.convergence

    def _pieces(self) -> bool:
        """Whether the fields are a parallel image of per-rank pieces (over MPI ranks)."""
        return self.sim.backend.writes_parts

    def _write_fields(self, step: int) -> Path:
        """The fields now: ``fields_STEP.vti``, or over MPI ranks (a backend that
        ``writes_parts``) ``fields_STEP.pvti`` and every rank's piece beside it
        (:mod:`solver.vtk_pieces`): the same arrays, no whole-grid fields on rank 0."""
        sim = self.sim
        pieces = self._pieces()
        if pieces and not self._pvti_said:
            self._pvti_said = True
            log.info("Over %d MPI ranks the fields go to fields_STEP.pvti (each rank's piece "
                     "in fields_STEP/), not .vti: ParaView and pyvista.read open it the same "
                     "way.", sim.backend.size)
        extra: dict[str, Any] = {} if pieces else {"solid": sim.solid.astype(np.uint8)}
        for name, (voxels, values) in self._wall_arrays().items():
            # Pieces: the ranks place their slab's wall values (no whole grid on rank 0).
            extra[name] = (voxels, values) if pieces else _on_grid(sim.shape, voxels, values)
        origin = self.geometry.origin or None
        if pieces:
            return sim.backend.write_vti_pieces(sim.state, self.out / f"fields_{step:08d}.pvti",
                                                self.voxel_size, origin, extra)
        return write_vti(self.out / f"fields_{step:08d}.vti", sim.fields(), self.voxel_size,
                         origin, extra=extra)

    def _write_frame(self) -> list[Path]:
        """The case's cut now, in SI when the case gives the units: the slice picture the app's
        slice export draws, frames/<field>_<axis><index>_<step>.png, and the 3D view's picture,
        frames/scene_<field>_<axis><index>_<step>.png, as the case's views ask."""
        f, sim = self.frames, self.sim
        ndim = len(sim.shape)
        axis = f.axis if ndim == 3 else 0
        plane = sim.slice(axis, self.frame_layer, f.field)
        spec = FIELDS[f.field]
        if self.units is not None:
            plane, label = plane * spec.si_factor(self.units), spec.si_label()
        else:
            label = spec.lattice_label()
        folder = self.out / "frames"
        folder.mkdir(parents=True, exist_ok=True)
        where = self._frame_where
        step = sim.time_step
        title = f"{self.case.name}, step {step}, {where[0]} = {where[1:]}" if ndim == 3 else \
            f"{self.case.name}, step {step}"
        written = []
        if "slice" in f.views:
            written.append(save_slice_png(folder / f"{f.field}_{where}_{step:08d}.png", plane,
                                          plane_axes(axis, ndim), label, title, clim=f.clim))
        if "3d" in f.views:
            written.append(self._write_scene(folder / f"scene_{f.field}_{where}_{step:08d}.png",
                                             plane, label, title))
        return written

    @property
    def _frame_where(self) -> str:
        """The cut of the frames in their names: x4, z12 (xy in 2D)."""
        if len(self.sim.shape) != 3:
            return "xy"
        return f"{'xyz'[self.frames.axis]}{self.frame_layer}"

    def _write_scene(self, path: Path, plane: np.ndarray, label: str, title: str) -> Path:
        """The 3D view's picture of the run now (solver.scene_frames, off screen): the cut
        ``plane`` (the frame's units), streamlines and the isosurface from the coarse flow."""
        from matplotlib.image import imsave

        from .flow_meshes import auto_level, coarse_grid, isosurface, seed_points, streamlines
        from .scene_frames import ScenePicture, is_vessel

        f, sim = self.frames, self.sim
        if self._scene is None:  # the solid surface is built once per run
            self._scene = ScenePicture(self.geometry, label=label)
        lines = iso = None
        if f.streamlines or f.isosurface:
            flow = sim.coarse_flow(f.isosurface or "umag")
            grid = coarse_grid(flow)
            if f.streamlines:
                source = "inlet opening" if is_vessel(self.geometry) else "slice plane"
                seeds = seed_points(self.geometry, source, f.streamlines, f.axis,
                                    self.frame_layer, self.probes, sim.config.openings)
                lines = streamlines(grid, seeds)
            if f.isosurface:
                iso = isosurface(grid, auto_level(flow.scalar, flow.name))
        finite = plane[np.isfinite(plane)]
        clim = f.clim or (tuple(np.percentile(finite, [1, 99])) if finite.size else (0.0, 1.0))
        picture = self._scene.render(plane, f.axis, self.frame_layer, clim, lines, iso, title)
        imsave(path, picture, format="png")
        return path

    def _write_movies(self) -> list[Path]:
        """Each view's frames (all of them in the folder, a resumed run's earlier ones too) as
        one movie beside them, frames/[scene_]<field>_<axis><index>.<gif|mp4>."""
        f = self.frames
        if f is None or f.movie is None:
            return []
        from .movie import write_pictures

        folder, where, written = self.out / "frames", self._frame_where, []
        for prefix in [p for view, p in (("slice", ""), ("3d", "scene_")) if view in f.views]:
            paths = sorted(folder.glob(f"{prefix}{f.field}_{where}_*.png"))
            if paths:
                written.append(write_pictures(folder / f"{prefix}{f.field}_{where}.{f.movie}",
                                              _PngPictures(paths), f.fps))
        return written

    def _probe_logs(self) -> None:
        """probes.csv (a row per output) and lines.csv (a row per line node and output), SI."""
        probes, keep = self.probes, self.sim.time_step or None
        self.probe_csv = self.line_csv = None
        if probes.probes:
            self.probe_csv = CsvLog(self.out / "probes.csv", probe_columns(probes, self.units),
                                    keep_until=keep)
        if probes.lines:
            self.line_csv = CsvLog(self.out / "lines.csv", line_columns(self.units),
                                   keep_until=keep)

    def _write_probes(self) -> None:
        if not self.probes:
            return
        readings = self.sim.sample(self.probes)  # the probed nodes alone leave the device
        if self.probe_csv is not None:
            self.probe_csv.append(probe_row(readings, self.units))
        if self.line_csv is not None:
            for row in line_rows(readings, self.units):
                self.line_csv.append(row)

    def _indices(self):
        """The shear indices of the whole cycles after the warm-up, or None yet."""
        c = self.cycles
        if c is None or not c.has_indices:
            return None
        return c.indices(to_host=self.sim.backend.to_host)

    def _wall_arrays(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The fields' arrays given at the wall nodes alone, (voxels (n, d), values (n,)) by
        name: a vessel's wall shear stress and the shear indices TAWSS, OSI and RRT (lattice
        units and SI); NaN elsewhere once on a grid."""
        out = {}
        if self.sim.config.openings:  # a vessel: its wall shear stress (lattice units, Pa)
            voxels, wss = self.sim.wall_shear_values()
            out["wall_shear_stress"] = (voxels, wss)
            if self.units is not None:
                out["wall_shear_stress_Pa"] = (voxels, self.units.stress_to_si(wss))
        result = self._indices()
        if result is None:
            return out
        at = self.cycles.walls.voxels
        fields = {"tawss": result.tawss, "osi": result.osi, "rrt": result.rrt}
        if self.units is not None:
            unit = self.units.stress_to_si(1.0)
            fields.update(tawss_Pa=result.tawss * unit, rrt_1_Pa=result.rrt / unit)
        out.update({name: (at, values) for name, values in fields.items()})
        return out

    def _cycle_summary(self) -> dict[str, Any]:
        """Cycles sampled, periodic convergence and the wall-averaged shear indices."""
        c = self.cycles
        out: dict[str, Any] = {"cycles": c.cycles, "cycle_change": c.cycle_change(),
                               "periodic": c.periodic}
        result = self._indices()
        if result is not None:
            out.update(tawss_mean=float(np.mean(result.tawss)),
                       osi_max=float(np.max(result.osi)), shear_cycles=result.cycles)
            if self.units is not None:
                out["tawss_mean_Pa"] = self.units.stress_to_si(out["tawss_mean"])
        return out

    def _checkpoint(self) -> None:
        extra = {"wall_s": self.wall, "last": self.last, "monitor": self.monitor.state()}
        arrays = {} if self.cycles is None else self.cycles.state_arrays(self.sim.backend.to_host)
        save_simulation(self.sim, self.checkpoint_path, extra, arrays)
        log.debug("Checkpoint at step %d.", self.sim.time_step)

    def _finish(self, status: str, code: int, message: str, t0: float,
                checkpoint: bool = True) -> RunOutcome:
        if checkpoint:
            self._checkpoint()
        try:
            self._write_movies()
        except (OSError, RuntimeError, ValueError) as exc:  # the run's results stand without
            log.warning("The frames' movie could not be written: %s", exc)
        if self._scene is not None:
            self._scene.close()
        summary = self._summary(status, code, message, time.perf_counter() - t0)
        write_json(self.out / "summary.json", summary)
        self.sim.close()
        return RunOutcome(status, code, message, summary)

    def _summary(self, status: str, code: int, message: str, seconds: float) -> dict[str, Any]:
        sim, m = self.sim, self.sim.metrics
        summary = {
            "case": self.case.name, "status": status, "exit_code": code, "message": message,
            "steps": sim.time_step, "run_seconds": round(seconds, 3),
            "solver_seconds": round(m.seconds, 3), "check_seconds": round(self.check_seconds, 3),
            "mflups": m.mflups_mean,
            "eta_t": sim.tiling.eta_t, "fluid_nodes": sim.problem.n_fluid,
            "n_tiles": sim.tiling.n_tiles, "shape": list(sim.shape),
            "porosity": sim.problem.n_fluid / int(np.prod(sim.shape)), "backend": sim.backend.name,
            "device": sim.backend.device_info().get("name"), "memory_bytes": self.required,
            "voxel_size_m": self.voxel_size, "config": {k: v for k, v in
                                                        sim.config.param.values().items()
                                                        if k != "name"},
        }
        for key in SUMMARY_KEYS:
            summary[key] = self.last.get(key)
        for key in opening_columns(sorted(sim.config.openings)):
            summary[key] = self.last.get(key)
        if self._vessel and self.reading is not None:
            summary.update(steady=self.reading.steady, flow_change=self.reading.flow_change,
                           steady_label=self.reading.steady_label,
                           steady_window=self.monitor.window.steps,
                           steady_window_basis=self.monitor.window.basis)
        if self.cycles is not None:
            summary.update(self._cycle_summary())
        if self.lattice_choice is not None:
            summary["lattice_choice"] = self.lattice_choice.text()
        split = getattr(sim.state, "decomposition_summary", None)  # a run over MPI ranks
        if split is not None:
            summary["decomposition"] = split()
        if self.controls.vti:  # over MPI ranks a parallel image: opened like a .vti
            summary["fields_format"] = "pvti" if self._pieces() else "vti"
        nu_phys = self.controls.viscosity
        if nu_phys and self.voxel_size:
            dt = self.case.config.viscosity * self.voxel_size**2 / nu_phys
            summary["time_step_s"] = dt
            if summary["u_flow"] is not None:
                summary["u_flow_m_s"] = summary["u_flow"] * self.voxel_size / dt
        return summary


class _PngPictures:
    """PNG files read as RGB pictures (uint8) one at a time: a long run's frames are never all
    in memory at once; each with an empty title (the pictures carry theirs)."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, k: int) -> tuple[np.ndarray, str]:
        from matplotlib.image import imread

        if not -len(self.paths) <= k < len(self.paths):
            raise IndexError(k)
        rgba = imread(self.paths[k], format="png")
        return np.round(np.asarray(rgba)[..., :3] * 255).astype(np.uint8), ""


def _region_source(case: Case, backend: Any) -> tuple[Any, dict | str]:
    """The case's image as a region source and its frame (:func:`solver.case.region_source`)
    where ``backend`` tiles it over MPI ranks (``tile_regions``, and rank 0 keeps no voxel
    image); else None and why not (empty where no ranks are involved)."""
    if backend is None or isinstance(backend, str) or backend.keeps_voxel_mask:
        return None, ""  # one process (or a backend by name): the image is read whole
    if case.openings:
        return None, "its openings are found on the whole image"
    if any(any(v) for v in case.config.check_objects().values()):
        return None, "moving objects need the image's labels"
    return region_source(case.geometry)


def _tiled_geometry(case: Case, source: Any, frame: dict, backend: Any
                    ) -> tuple[TiledGeometry, Any]:
    """The geometry over the tiling the ranks built of ``source`` (no voxel image) and what
    they agreed (offset, axis, slab bounds, the survey's counts)."""
    tiling, agreed = backend.tile_regions(source, case.config)
    log.info("The ranks tiled the image by slabs (%s), rank 0 holds no voxel image.",
             Path(source.path).name)
    return TiledGeometry(tiling, frame["voxel_size"], frame["origin"], frame["flow_axis"],
                         None, frame["name"], ()), agreed


def _on_grid(shape: tuple[int, ...], voxels: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` at ``voxels`` on a grid of ``shape``, NaN elsewhere (float64)."""
    grid = np.full(shape, np.nan)
    grid[tuple(np.asarray(voxels).T)] = values
    return grid


def _backend_name(case: Case, backend: Any) -> str:
    """The name of the backend a run will use ('numpy' or 'cupy'), for its cost estimate."""
    return backend_name(case.config, getattr(backend, "name", None) or backend)


def _next(step: int, interval: int) -> int:
    """The next multiple of ``interval`` after ``step`` (a large number when interval is 0)."""
    return (step // interval + 1) * interval if interval else 2**62
