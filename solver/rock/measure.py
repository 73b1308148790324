"""Run permeability protocols to a converged k, along one axis or all three (the k tensor).

Convergence: k is measured every ``check_interval`` steps by Darcy's law on the run's device
(:class:`solver.rock.check.KCheck`: the same quantity as :func:`solver.observables.permeability`
of the fields, without copying them to the host) and judged by the run monitor's steady-state test
(:class:`solver.monitor.KConvergence`, the one definition of "converged" of the dashboard, the
CLI and these runs): converged when k is positive and changed by less than ``tolerance``
(relative) over the last :data:`~solver.monitor.K_WINDOW` (1000) steps. k alternates between
even and odd steps, so every check reads k at its step and one step later
(:class:`solver.rock.uncertainty.StepPair`): the test judges the means of the pairs, in which
the period-2 part cancels, and the run reports the last pair's mean (the run ends one step
after its last check); what is left of the alternation in that mean is a term of its interval.
Axes and protocols run one after the other on one backend (one device, or a
:class:`~solver.distributed.DistributedBackend` that splits each sample over MPI ranks); under
MPI each rank runs its share of the runs when there is one per rank (:func:`study_runs`,
:mod:`solver.rock.cli`). On a GPU the host set-up of the next run (:func:`prepare_axis`: pore
check, coarsening, tiling, and the host tables its allocations and k checks read:
:meth:`~solver.backends.base.Backend.prepare`, :func:`~solver.rock.check.check_ahead`) and
the formation factor's conduction tables are made in a worker thread while the device steps
the current run (the fine run's tables beside its own coarse start, too), so the phases of a
study add up to more than its wall time.
Each run's wall time is split into :data:`PHASES` (``AxisResult.phases``, summed by
:meth:`PermeabilityStudy.phases` into ``summary.json``'s ``phases_s``).
Units: k in lattice units (voxels²), m² and mD (with a voxel size), steps are time steps.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from geometries import VoxelGeometry

from ..backends import get_backend
from ..config import SimulationConfig
from ..monitor import K_WINDOW, KConvergence, check_health
from ..observables import Permeability
from ..problem import Problem, tile_offset
from ..simulation import Simulation
from .check import CheckAhead, KCheck, Phases, check_ahead
from .conduction import Conduction, ConductionSystem, conduction_system, solve_conduction
from .initial import (
    FACTOR,
    PLAIN,
    StartScale,
    coarse_setup,
    pressure_ramp,
    start_from,
    start_on_device,
)
from .protocol import ProtocolSetup, checked_sample, sample_labels, setup_protocol
from .rev import rev_curve, rev_lines
from .settings import AXIS_NAMES, PermeabilitySettings
from .uncertainty import KInterval, StepPair, interval

__all__ = ["AxisResult", "PermeabilityStudy", "level_tolerance", "measure_axis", "run_study",
           "study_runs"]

log = logging.getLogger(__name__)

#: The phases a run's wall time is split into (seconds in ``AxisResult.phases``): the pore
#: analysis and protocol geometry, tiling, device allocation, the first chunk of steps of each
#: simulation (kernel compilation and graph capture), the coarse start's steps and checks, its
#: prolongation to the fine grid, the fine run's steps and checks; and the conduction solves
#: of the formation factor and the REV curve's runs (per study, :mod:`solver.rock.conduction`,
#: :mod:`solver.rock.rev`).
PHASES = ("connectivity", "tiling", "allocation", "compile_first_chunk", "coarse_steps",
          "coarse_checks", "prolongation", "fine_steps", "fine_checks", "formation_factor",
          "rev")

#: The coarse start stops when k changes by less than this times the tolerance per 1000 steps
#: (the default of ``PermeabilitySettings.coarse_tolerance_factor``).
COARSE_TOLERANCE_FACTOR = 10.0


@dataclass
class AxisResult:
    """k of one protocol along one axis: lattice units, m² and mD; steps and convergence."""

    protocol: str
    axis: str
    k_lattice: float
    k_m2: float | None
    k_mD: float | None
    steps: int
    converged: bool
    change_per_1000: float  # relative change of k per 1000 steps at the last check
    seconds: float
    tau: float
    gradient: float  # driving force per volume, lattice units
    pores: dict = field(default_factory=dict)
    history: list[tuple[int, float]] = field(default_factory=list)  # (step, k lattice units)
    coarse_steps: int = 0  # steps of the coarse start run
    work_steps: float = 0.0  # fine steps + coarse steps x (coarse / fine fluid nodes)
    start_seconds: float = 0.0  # wall time of the coarse start (its run and prolongation)
    phases: dict = field(default_factory=dict)  # wall seconds per phase (:data:`PHASES`)
    coarse_k_lattice: float | None = None  # k of the coarse start (by 2), fine voxel²
    start_steps: list[int] = field(default_factory=list)  # per start level, 1/2 first
    start_k_lattice: list[float] = field(default_factory=list)  # per level, fine voxel², 1/2 first
    # velocity factor s of each prolongation (settings.start_rescale; 1: plain), into the
    # fine run first, then into 1/2, ... (as start_steps); and its density deviation's factor
    start_scales: list[float] = field(default_factory=list)
    start_density_scales: list[float] = field(default_factory=list)
    flow_tortuosity: float | None = None  # <|u|> / <u_axis> over the window's fluid nodes
    pair: StepPair | None = None  # k at the last check's step and the next; k_lattice: mean
    previous_pair: StepPair | None = None  # the same at the check before (the decay)


@dataclass
class PreparedAxis:
    """The host set-up of one protocol run (:func:`prepare_axis`): the fine simulation, the
    coarse start's levels (finest first: the sample coarsened by 2, by 4, ...; empty without
    a coarse start), the phases it took and the seconds of that set-up (all of it, wherever
    it ran; ``coarse_seconds`` the coarse start's part). ``pending``: the fine run's host
    tables while a worker makes them (:func:`prepare_axis`; :meth:`ready` waits)."""

    sim: Simulation
    levels: list[tuple[ProtocolSetup, Simulation]]
    phases: Phases
    seconds: float
    coarse_seconds: float
    #: Per simulation (``id``), the host part of its k check (:func:`check_ahead`), each
    #: taken by its run (its host memory then goes with that check).
    checks: dict[int, CheckAhead] = field(default_factory=dict)
    pending: Future | None = None

    def ready(self) -> None:
        """Wait until the fine run's host tables are made (raising what making them raised)."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()

    @property
    def coarse(self) -> ProtocolSetup | None:
        """The set-up of the finest coarse level (coarsened by 2), None without a start."""
        return self.levels[0][0] if self.levels else None


def start_levels(setup: ProtocolSetup, levels: int, backend: Any = None) -> list[ProtocolSetup]:
    """The coarse starts of ``setup``, finest first: the protocol on the sample coarsened by 2,
    then that coarsened by 2 again, ... up to ``levels`` of them (fewer where a level no longer
    coarsens or percolates, :func:`~solver.rock.initial.coarse_setup`, on ``backend``)."""
    out: list[ProtocolSetup] = []
    current = setup
    while len(out) < levels:
        current = coarse_setup(current, backend)
        if current is None:
            break
        out.append(current)
    return out


def prepare_axis(setup: ProtocolSetup, settings: PermeabilitySettings,
                 backend: Any, on_device: bool = False, worker: Any = None) -> PreparedAxis:
    """Tile the run of ``setup`` and, with ``accelerate`` and ``coarse_start``, coarsen and tile
    its coarse start (``settings.start_level_count`` levels), and make the host tables their
    allocations and k checks read (:func:`_host_tables`). With ``on_device`` and a CuPy
    backend the tilings and the levels' pore labels are made on the GPU (for a moment; the
    results on the host: :mod:`solver.backends.cuda.rock_setup`), else host work only (no
    device memory), so a study may do it for the next run while the device steps the
    current one (:func:`run_study`). ``worker`` (an executor): the fine run's host tables are
    made there, beside the coarse start's steps (``PreparedAxis.pending``)."""
    device = backend if on_device else None
    tic = time.perf_counter()
    phases = Phases()
    checks: dict[int, CheckAhead] = {}
    # The fine run's host set-up (tiling) comes first: a run from rest pays it too, so the
    # coarse start's seconds are its own (coarsening, its run, the prolongation).
    with phases.timed("tiling"):
        sim = _simulation(setup, backend, device)
    start = time.perf_counter()
    setups: list[ProtocolSetup] = []
    if settings.accelerate and settings.coarse_start:
        with phases.timed("connectivity"):
            shape = setup.geometry.shape
            voxels = math.prod(shape) // shape[setup.axis] * setup.sample_layers
            setups = start_levels(setup, settings.start_level_count(setup.protocol, voxels),
                                  device)
    levels = []
    for coarse in setups:
        with phases.timed("tiling"):
            coarse_sim = _simulation(coarse, backend, device)
            _host_tables(coarse_sim, coarse, checks)
        levels.append((coarse, coarse_sim))
    end = time.perf_counter()
    prepared = PreparedAxis(sim, levels, phases, end - tic, end - start if levels else 0.0,
                            checks)

    def fine_tables() -> None:
        # The fine run's tables are needed only at its allocation, after the coarse start.
        began = time.perf_counter()
        with phases.timed("tiling"):
            _host_tables(sim, setup, checks)
        prepared.seconds += time.perf_counter() - began

    if worker is None:
        fine_tables()
    else:
        prepared.pending = worker.submit(fine_tables)
    return prepared


def _simulation(setup: ProtocolSetup, backend: Any, device: Any = None) -> Simulation:
    """The simulation of ``setup`` on ``backend``, its geometry tiled on the GPU when
    ``device`` is a CuPy backend (:func:`~solver.backends.cuda.rock_setup.device_tiling`: the
    same tiles; the 64-offset search over a 1000³ sample's mirrored box was about 40 s of host
    time), else on the host. The Simulation gives the problem its device's memory
    (``Problem.device_capacity``): the plan stores a run past the compact kernels' 32-bit
    offsets (the 1000³ image's fine runs) compact with the wide kernels when it has two copies
    and they fit, tiled in place where the tiled state fits, as decided there."""
    geometry, config = setup.geometry, setup.config
    problem = None
    if getattr(device, "name", None) == "cupy" and geometry.ndim == 3:
        from ..backends.cuda.rock_setup import device_tiling

        tiling = device_tiling(geometry.solid, config.tile_edge,
                               tile_offset(config, geometry.ndim))
        if tiling is not None:
            problem = Problem.from_config(geometry.solid, config, geometry.labels, tiling)
    return Simulation(geometry, config, backend, problem=problem)


def _host_tables(sim: Simulation, setup: ProtocolSetup, checks: dict[int, CheckAhead]) -> None:
    """Build the host tables that the allocation of ``sim`` (:meth:`Simulation.prepare`) and
    its k check (:func:`check_ahead`, into ``checks``) read, with the rest of the set-up:
    beside the device's steps in a study (:func:`run_study`). For a 1000³ image's fine run
    they were 3.7 s of host work in its allocation (H200 host: the kernel's tables 2.0 s, the
    check's flags 1.3 s, the plan's fluid counts 0.4 s; benchmarks/rock_time_to_answer)."""
    sim.prepare()
    checks[id(sim)] = check_ahead(sim, setup.axis, setup.window)


def measure_axis(setup: ProtocolSetup, settings: PermeabilitySettings, backend: Any = None,
                 voxel_size: float | None = None,
                 on_check: Callable[[int, float, float], None] | None = None,
                 prepared: PreparedAxis | None = None) -> AxisResult:
    """Run one protocol set-up until k converges or ``settings.max_steps``; return its k.

    With ``settings.accelerate`` and ``coarse_start`` the run starts from the flow of the same
    protocol on the sample coarsened by 2, prolongated on the device
    (:func:`~solver.rock.initial.start_on_device`); with ``coarse_levels`` > 1 that coarse run
    itself starts from the one coarsened by 4, and so on (the coarsest from rest). Steps of
    the run coarsened by 2 are reported as ``coarse_steps``, every level's in ``start_steps``,
    the total as ``work_steps`` in fine-step equivalents. Only the runs of two neighbouring
    levels are allocated at a time. ``prepared``: its :func:`prepare_axis`, when made ahead.
    """
    if backend is None or isinstance(backend, str):
        backend = get_backend(backend or setup.config.backend)
    if prepared is None:
        prepared = prepare_axis(setup, settings, backend)
    tic = time.perf_counter()
    phases, sim = prepared.phases, prepared.sim
    levels = list(prepared.levels)
    start_seconds, coarse_k = prepared.coarse_seconds, None
    steps: list[int] = []  # per level, coarsest first
    chain_k: list[float] = []  # per level run so far, fine voxel², coarsest first
    scales: list[StartScale] = []  # the factors per prolongation, the finest first
    try:
        start = time.perf_counter()
        if levels:
            # The start only has to be close: the coarse runs stop at (by default) 10x the
            # tolerance; the coarsest run of a chain at the tolerance itself.
            below = None  # the coarser level's simulation, run already
            for level, (coarse, coarse_sim) in reversed(list(enumerate(levels))):
                if below is None:
                    _ramp(coarse_sim, coarse, settings, phases)
                else:
                    scales.insert(0, _prolong(coarse_sim, below, phases,
                                              _start_scale(settings, chain_k, setup)))
                result = _run(coarse_sim, coarse, settings,
                              level_tolerance(settings, level, len(levels)), voxel_size,
                              None, phases, "coarse",
                              prepared.checks.pop(id(coarse_sim), None))
                scale = (FACTOR ** (level + 1)) ** 2  # coarse voxel² in fine voxel²
                steps.insert(0, result.steps)
                chain_k.append(scale * result.k_lattice)
                log.info("%s: start level 1/%d after %d steps (k = %.4g voxel² fine)",
                         setup.name, FACTOR ** (level + 1), result.steps,
                         scale * result.k_lattice)
                if level == 0:
                    coarse_k = scale * result.k_lattice
                below = coarse_sim
            prepared.ready()  # the fine run's tables, made beside the coarse start
            scales.insert(0, _prolong(sim, below, phases,
                                      _start_scale(settings, chain_k, setup)))
            levels = []
            start_seconds += time.perf_counter() - start
        else:
            prepared.ready()
            _ramp(sim, setup, settings, phases)
        result = _run(sim, setup, settings, settings.tolerance, voxel_size, on_check, phases,
                      "fine", prepared.checks.pop(id(sim), None))
    finally:
        pending = prepared.pending  # stopped before its fine run: its tables go unused
        if pending is not None and not pending.cancel():
            futures.wait([pending])  # it writes into ``checks``: let it finish first
        prepared.checks.clear()  # a stopped run's checks made ahead go with it
        for _, coarse_sim in levels:
            coarse_sim.close()
        sim.close()
    result.coarse_steps, result.start_seconds = (steps[0] if steps else 0), start_seconds
    result.start_steps = steps
    result.start_k_lattice = chain_k[::-1]
    result.start_scales = [x.velocity for x in scales]
    result.start_density_scales = [x.density for x in scales]
    result.coarse_k_lattice = coarse_k
    result.work_steps = result.steps + sum(
        n * (coarse.geometry.n_fluid / setup.geometry.n_fluid)
        for n, (coarse, _) in zip(steps, prepared.levels, strict=False))
    # The coarse start included, and the host set-up wherever it ran (ahead, beside the
    # previous run's steps, in a study on a device).
    result.seconds = time.perf_counter() - tic + prepared.seconds
    result.phases = dict(phases)
    return result


def level_tolerance(settings: PermeabilitySettings, level: int, levels: int) -> float:
    """Relative change of k per 1000 steps at which start level ``level`` (0: coarsened by 2)
    of ``levels`` stops: ``coarse_tolerance_factor`` x the tolerance, except the coarsest of a
    chain (``levels`` > 1), which converges to the tolerance itself. Why: every level stops at
    a change per 1000 of its own steps and the slowest transient takes about the same number
    of steps at every level, so a finer level started from a run stopped at the same change
    passes its test at once and hands on what that run left; only a tighter coarsest run
    (1/64 or 1/512 of a fine step) leaves less of the long pressure modes. The fine grid's own
    correction of the coarse geometry stays: on the CPU (24³-48³ packs) the chain did not
    change the fine steps, on a 400³ image (H200) it cut them from 4200 to 3200
    (benchmarks/rock_time_to_answer/README.md)."""
    factor = 1.0 if levels > 1 and level == levels - 1 else settings.coarse_tolerance_factor
    return min(1.0, factor * settings.tolerance)


def _start_scale(settings: PermeabilitySettings, chain_k: list[float],
                 setup: ProtocolSetup) -> StartScale:
    """The factors of the next prolongation from the chain's k so far (fine voxel², coarsest
    first; :meth:`StartScale.from_chain` with ``settings.start_rescale``), logged; the plain
    one for pressure-driven runs (their density field carries the imposed drop; the rescale
    was measured on mirrored runs only)."""
    if setup.protocol != "mirrored":
        return PLAIN
    scale = StartScale.from_chain(settings.start_rescale, chain_k, settings.start_estimate,
                                  settings.start_density_gain)
    if scale != PLAIN:
        log.info("%s: start rescaled by %.4g (velocity), %.4g (density deviation)",
                 setup.name, scale.velocity, scale.density)
    return scale


def _prolong(sim: Simulation, coarse_sim: Simulation, phases: Phases,
             scale: StartScale = PLAIN) -> StartScale:
    """Start ``sim`` from the flow of ``coarse_sim`` (its level coarsened by 2; ``scale``: the
    start's rescale), on the device, and free the coarse run's device memory; ``scale``."""
    with phases.timed("allocation"):
        sim.allocate()
    with phases.timed("prolongation"):
        start_on_device(sim, coarse_sim, scale=scale)
        coarse_sim.close()
    return scale


def _ramp(sim: Simulation, setup: ProtocolSetup, settings: PermeabilitySettings,
          phases: Phases) -> None:
    """Start a pressure-driven ``sim`` from :func:`~solver.rock.initial.pressure_ramp` (with
    ``settings.accelerate`` and ``pressure_start: ramp``; else it starts at rest)."""
    ramp = settings.accelerate and settings.pressure_start == "ramp"
    fields = pressure_ramp(setup) if ramp else None
    if fields is not None:
        with phases.timed("allocation"):
            sim.allocate()
        with phases.timed("prolongation"):
            start_from(sim, fields)


def _run(sim: Simulation, setup: ProtocolSetup, settings: PermeabilitySettings,
         tolerance: float, voxel_size: float | None,
         on_check: Callable[[int, float, float], None] | None,
         phases: Phases | None = None, stage: str = "fine",
         ahead: CheckAhead | None = None) -> AxisResult:
    """Step ``sim`` (of ``setup``) until the monitor's :class:`KConvergence` says k converged
    to ``tolerance`` per :data:`K_WINDOW` steps (and k > 0), or a step/time limit. Checks at
    multiples of ``check_interval`` steps, each reading k there and one step later
    (:func:`_read_pair`): the history, the test and the run's k are the pair means; wall time
    goes to ``phases`` (``{stage}_steps``, ``{stage}_checks``, ...; :data:`PHASES`).
    ``ahead``: the host part of its k check, made before (:func:`check_ahead`)."""
    phases = Phases() if phases is None else phases
    every = settings.check_interval
    history: list[tuple[int, float]] = []
    test = KConvergence(tolerance, K_WINDOW)
    change, converged = math.inf, False
    tic = time.perf_counter()
    with phases.timed("allocation"):
        check = KCheck(sim, setup.axis, setup.window, voxel_size, ahead)
    ahead = None  # the check holds what it needs of it
    first, pair, previous = True, None, None
    while sim.time_step < settings.max_steps:
        # The first chunk compiles the kernels (and captures a graph) on a GPU. Checks stay
        # at multiples of ``every`` (the pair's step in between), as over MPI ranks.
        with phases.timed("compile_first_chunk" if first else f"{stage}_steps"):
            sim.step(min(every - sim.time_step % every, settings.max_steps - sim.time_step))
        first = False
        previous, (pair, k, tortuosity) = pair, _read_pair(sim, check, setup, phases, stage)
        measured, calm, _ = test.update(pair.step, k.lattice)
        change = math.inf if measured is None else measured
        history.append((pair.step, k.lattice))
        if on_check is not None:
            on_check(pair.step, k.lattice, change)
        if calm and k.lattice > 0:
            converged = True
            break
        if settings.max_seconds and time.perf_counter() - tic > settings.max_seconds:
            log.warning("%s: stopped after %.0f s (permeability.max_seconds).", setup.name,
                        settings.max_seconds)
            break
    if pair is None:
        raise ValueError(f"{setup.name}: no check before max_steps ({settings.max_steps}); "
                         "raise permeability.max_steps above 0.")
    result = AxisResult(setup.protocol, AXIS_NAMES[setup.axis], k.lattice, k.m2,
                        k.millidarcy, sim.time_step, converged, change,
                        time.perf_counter() - tic, setup.config.tau, setup.gradient,
                        setup.report.as_dict(), history)
    result.flow_tortuosity, result.pair, result.previous_pair = tortuosity, pair, previous
    return result


def _read_pair(sim: Simulation, check: KCheck, setup: ProtocolSetup, phases: Phases,
               stage: str) -> tuple[StepPair, Permeability, float]:
    """A check: health and k now and, after one more step, again: the :class:`StepPair`, the
    check's k (their mean, lattice units and m²) and the mean of the two flow tortuosities.
    Why: k alternates between even and odd steps (solver.rock.uncertainty)."""
    step = sim.time_step
    with phases.timed(f"{stage}_checks"):
        health, k = check.read()
        check_health(health, setup.config.tau, sim.problem.force)
    tortuosity = health["flow_tortuosity"]
    with phases.timed(f"{stage}_steps"):
        sim.step(1)
    with phases.timed(f"{stage}_checks"):
        health, k_next = check.read()
        check_health(health, setup.config.tau, sim.problem.force)
    pair = StepPair(step, k.lattice, k_next.lattice)
    m2 = None if k.m2 is None or k_next.m2 is None else 0.5 * (k.m2 + k_next.m2)
    mean = Permeability(pair.k, 0.5 * (k.gradient + k_next.gradient),
                        0.5 * (k.superficial_velocity + k_next.superficial_velocity), m2)
    return pair, mean, 0.5 * (tortuosity + health["flow_tortuosity"])


@dataclass
class PermeabilityStudy:
    """Results of every protocol along every chosen axis; the tensor and the protocol spread."""

    results: list[AxisResult]
    voxel_size: float | None
    conduction: dict[str, Conduction] = field(default_factory=dict)  # per axis name
    seconds: dict[str, float] = field(default_factory=dict)  # study-wide phases (F, REV)
    rev: dict = field(default_factory=dict)  # {'axis': name, 'points': [RevPoint...]}

    def k(self, protocol: str, unit: str = "mD") -> dict[str, float | None]:
        """k per axis name for ``protocol`` in ``unit`` ('mD', 'm2' or 'lattice')."""
        key = {"mD": "k_mD", "m2": "k_m2", "lattice": "k_lattice"}[unit]
        return {r.axis: getattr(r, key) for r in self.results if r.protocol == protocol}

    def anisotropy(self, protocol: str) -> float | None:
        """max k / min k over the measured axes (None with fewer than two or k <= 0)."""
        ks = list(self.k(protocol, "lattice").values())
        if len(ks) < 2 or min(ks) <= 0:
            return None
        return max(ks) / min(ks)

    def protocol_difference(self) -> dict[str, float]:
        """Per axis, (k_pressure - k_mirrored) / k_mirrored where both were run."""
        mirrored, pressure = self.k("mirrored", "lattice"), self.k("pressure", "lattice")
        return {a: (pressure[a] - mirrored[a]) / mirrored[a]
                for a in mirrored if a in pressure and mirrored[a]}

    def intervals(self) -> list[KInterval]:
        """Per run (in :attr:`results` order), k with its stated interval
        (:mod:`solver.rock.uncertainty`): convergence remainder, period-2 residual,
        discretisation from the coarse start, and the protocol spread where both protocols ran
        along the axis."""
        out = []
        for r in self.results:
            other = [o.k_lattice for o in self.results
                     if o.axis == r.axis and o.protocol != r.protocol]
            out.append(interval(r.k_lattice, r.history, r.coarse_k_lattice,
                                other[0] if other else None, r.pair, r.previous_pair))
        return out

    def phases(self) -> dict[str, float]:
        """Wall seconds per phase (:data:`PHASES`) summed over the runs."""
        total = Phases(self.seconds)
        for r in self.results:
            total.add(r.phases)
        return {name: total[name] for name in PHASES if name in total}

    def total_seconds(self) -> float:
        """Wall seconds of the runs and the study-wide phases."""
        return sum(r.seconds for r in self.results) + sum(self.seconds.values())

    @property
    def converged(self) -> bool:
        """Whether every run reached the tolerance (False with no run: nothing converged)."""
        return bool(self.results) and all(r.converged for r in self.results)

    def as_dict(self) -> dict:
        """JSON-ready: per-run results (history left out), tensor, anisotropy, differences."""
        protocols = sorted({r.protocol for r in self.results})
        return {
            "units": {"k_lattice": "voxel^2", "k_m2": "m^2", "k_mD": "millidarcy",
                      "voxel_size": "m", "gradient": "lattice force per volume",
                      "formation_factor": "1 (sigma_fluid / sigma_eff)",
                      "conductivity": "1 (sigma_eff / sigma_fluid)", "tortuosity": "1",
                      "seconds": "s", "rev fraction": "1 (of the sample's volume)"},
            "voxel_size_m": self.voxel_size,
            "converged": self.converged,
            "runs": [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                      for k, v in asdict(r).items() if k != "history"}
                     for r in self.results],
            "tensor_mD": {p: self.k(p) for p in protocols},
            "tensor_m2": {p: self.k(p, "m2") for p in protocols},
            "anisotropy_max_over_min": {p: self.anisotropy(p) for p in protocols},
            "protocol_difference": self.protocol_difference(),
            "intervals": [{"protocol": r.protocol, "axis": r.axis,
                           **_finite(i.as_dict()),
                           "low_mD": _scaled(i.low, r), "high_mD": _scaled(i.high, r)}
                          for r, i in zip(self.results, self.intervals(), strict=True)],
            "interval_definition": "k (1 ± (remainder + alternation_residual + "
                                   "discretisation + protocol_spread)): convergence "
                                   "remainder, what is left in k (the mean of k at two "
                                   "consecutive steps, read at every check) of the period-2 "
                                   "alternation (from its decay between the last two checks; "
                                   "'alternation', half the pair's difference, is not in the "
                                   "interval), Richardson estimate from the "
                                   "coarse start (order 2 assumed), half the protocol "
                                   "difference; not covered: segmentation, sub-voxel "
                                   "features, REV",
            "formation_factor": {a: c.as_dict() for a, c in self.conduction.items()},
            "tortuosity": {
                "electrical_F_times_porosity": {a: c.tortuosity
                                                for a, c in self.conduction.items()},
                "flow_mean_speed_over_mean_axial": {
                    p: {r.axis: r.flow_tortuosity for r in self.results if r.protocol == p}
                    for p in protocols}},
            "rev": {"axis": self.rev["axis"],
                    "points": [p.as_dict() for p in self.rev["points"]]} if self.rev else None,
            "phases_s": self.phases(),
            "seconds": self.total_seconds(),
        }

    def lines(self) -> list[str]:
        """Human-readable result lines (units stated)."""
        out = []
        for r in self.results:
            si = (f" = {r.k_m2:.4g} m² = {r.k_mD:.4g} mD" if r.k_m2 is not None else "")
            flag = "converged" if r.converged else "NOT converged"
            start = f" + {r.coarse_steps} coarse" if r.coarse_steps else ""
            if len(r.start_steps) > 1:  # a chain: the steps of each level, 1/2 first
                start = " + " + " + ".join(f"{n} at 1/{FACTOR ** (i + 1)}"
                                           for i, n in enumerate(r.start_steps))
            if any(v != 1.0 for v in r.start_scales + r.start_density_scales):
                start += " (start rescaled, fine first: velocity x " + ", ".join(
                    f"{v:.3g}" for v in r.start_scales) + "; density deviation x " + ", ".join(
                    f"{v:.3g}" for v in r.start_density_scales) + ")"
            out.append(f"{r.protocol:<8} {r.axis}: k = {r.k_lattice:.5g} voxel²{si}; {flag} "
                       f"({100 * r.change_per_1000:.3g} % per 1000 steps after {r.steps}"
                       f"{start} steps, {r.seconds:.1f} s)")
        for r, i in zip(self.results, self.intervals(), strict=True):
            unit, scale = ("mD", r.k_mD / r.k_lattice) if r.k_mD and r.k_lattice else \
                ("voxel²", 1.0)
            terms = [f"remainder {100 * i.remainder:.2g} %"]
            if i.alternation_residual is not None:
                terms.append(f"period-2 residual {100 * i.alternation_residual:.2g} % "
                             f"(alternation ±{100 * i.alternation:.2g} %, not included)")
            if i.discretisation is not None:
                terms.append(f"grid {100 * i.discretisation:.2g} % (order 2 assumed)")
            if i.protocol_spread is not None:
                terms.append(f"protocol {100 * i.protocol_spread:.2g} %")
            out.append(f"{r.protocol:<8} {r.axis}: k in [{i.low * scale:.4g}, "
                       f"{i.high * scale:.4g}] {unit} (±{100 * i.relative:.2g} %: "
                       + ", ".join(terms) + ")")
        for p in sorted({r.protocol for r in self.results}):
            ratio = self.anisotropy(p)
            if ratio is not None:
                out.append(f"{p}: anisotropy k_max/k_min = {ratio:.3f}")
        for a, d in self.protocol_difference().items():
            out.append(f"{a}: pressure vs mirrored differ by {100 * d:+.2f} %")
        for a, c in self.conduction.items():
            flow = [f"{r.protocol} {r.flow_tortuosity:.3f}" for r in self.results
                    if r.axis == a and r.flow_tortuosity is not None]
            out.append(f"{a}: formation factor F = {c.formation_factor:.4g}, electrical "
                       f"tortuosity F·φ = {c.tortuosity:.4g} (φ = {c.porosity:.4f})"
                       + (f"; flow tortuosity <|u|>/<u_{a}> " + ", ".join(flow) if flow else ""))
        if self.rev:
            out += rev_lines(self.rev["points"], AXIS_NAMES.index(self.rev["axis"]))
        phases = self.phases()
        if phases:
            out.append(f"wall time {self.total_seconds():.1f} s: " + ", ".join(
                f"{name} {seconds:.1f} s" for name, seconds in phases.items()))
        return out


def _finite(values: dict) -> dict:
    """``values`` with non-finite floats as None (JSON)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in values.items()}


def _scaled(k_lattice: float, r: AxisResult) -> float | None:
    """A k in voxel² in mD with the run's voxel size (None without one)."""
    if r.k_mD is None or not r.k_lattice or not math.isfinite(k_lattice):
        return None
    return k_lattice * r.k_mD / r.k_lattice


def study_runs(sample: VoxelGeometry, settings: PermeabilitySettings) -> list[tuple[int, str]]:
    """The (axis index, protocol) runs of a study, in the order they are reported."""
    return [(axis, protocol) for axis in settings.axis_indices(sample.ndim)
            for protocol in settings.protocols()]


def run_study(sample: VoxelGeometry, config: SimulationConfig, settings: PermeabilitySettings,
              backend: Any = None,
              on_check: Callable[[str, int, float, float], None] | None = None,
              runs: list[tuple[int, str]] | None = None) -> PermeabilityStudy:
    """Measure k for every chosen axis and protocol (or only ``runs``, a part of
    :func:`study_runs`, e.g. one MPI rank's share), one run after the other, on one backend."""
    config.check(sample.ndim)  # a 2D image with the 3D default lattice: said before any work
    if backend is None or isinstance(backend, str):
        backend = get_backend(backend or config.backend)
    results = []
    checked: dict[int, tuple] = {}  # per axis: the pore check and the connected sample
    labels: list = []  # the pore labelling, made once for every axis
    order = study_runs(sample, settings) if runs is None else runs

    def prepare(axis: int, protocol: str, idle: bool):
        # ``idle``: nothing runs on the device yet (the first run's set-up), so the labels and
        # tilings may be made there; later set-ups overlap a run's steps on the host (a run
        # may hold nearly all device memory: the 1000³ box with two copies, 130 GB).
        tic = time.perf_counter()
        if axis not in checked:
            if not labels:
                labels.append(sample_labels(sample, config, backend if idle else None))
            checked[axis] = checked_sample(sample, config, axis, labels[0])
            if len(checked) == len({a for a, _ in order}):
                labels.clear()  # every axis checked: free the labels (4 GB at 1000³)
        setup = setup_protocol(sample, config, axis, protocol, settings, checked[axis])
        connectivity = time.perf_counter() - tic
        return setup, connectivity, prepare_axis(setup, settings, backend, idle, worker)

    systems = {}
    with _host_worker(backend) as worker:
        # One run ahead: the next run's host set-up (pore check, coarsening, tiling) is made
        # while the device steps this one; then the conduction systems of the formation factor.
        pending = worker.submit(prepare, *order[0], True) if order else None
        _warm_up(backend, config)  # in this thread, while the worker prepares the first run
        for i, _ in enumerate(order):
            setup, connectivity, prepared = pending.result()
            pending = (worker.submit(prepare, *order[i + 1], False) if i + 1 < len(order)
                       else None)
            if pending is None and settings.formation_factor and runs is None:
                systems = {axis: worker.submit(conduction_system, sample.solid, axis,
                                               settings.sides)
                           for axis in settings.axis_indices(sample.ndim)}
            log.info("%s: %s", setup.name, setup.report.summary())
            for hint in setup.report.hints:
                log.warning(hint)
            cb = None if on_check is None else (
                lambda s, k, c, name=setup.name: on_check(name, s, k, c))
            result = measure_axis(setup, settings, backend, sample.voxel_size, cb, prepared)
            result.phases["connectivity"] = (result.phases.get("connectivity", 0.0)
                                             + connectivity)
            result.seconds += connectivity
            results.append(result)
        study = PermeabilityStudy(results, sample.voxel_size)
        if settings.formation_factor and runs is None:
            add_formation_factors(study, sample, settings, backend,
                                  {a: f.result() for a, f in systems.items()} or None)
    if settings.rev and runs is None:
        add_rev(study, sample, config, settings, backend)
    return study


class _Now:
    """A worker that runs each task at once, in the caller's thread (the NumPy backend: its
    steps already use the host's cores)."""

    def __enter__(self) -> _Now:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def submit(self, task, *args) -> Future:
        future: Future = Future()
        future.set_result(task(*args))
        return future


def _warm_up(backend: Any, config: SimulationConfig) -> None:
    """On CuPy with plain storage, compile the study's own kernels now
    (:func:`solver.backends.cuda.prolong.warm_up`) rather than between its first steps."""
    from ..lattice import get_lattice

    lattice = get_lattice(config.lattice)
    if backend.name != "cupy" or config.storage != "auto" or lattice.d != 3:
        return
    from ..backends.cuda.prolong import warm_up

    warm_up(lattice.c, np.dtype(config.precision))


def _host_worker(backend: Any):
    """The worker of a study's host set-up: one thread beside the device's steps on a GPU
    (the host waits for the device there), the caller itself on the NumPy backend."""
    if backend.xp is np:
        return _Now()
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="rock-setup")


def rev_measure(config: SimulationConfig, settings: PermeabilitySettings, axis: int,
                backend: Any, voxel_size: float | None,
                on_check: Callable[[int, float, float], None] | None = None):
    """The k run of a REV point (:func:`solver.rock.rev.rev_curve`): the mirrored protocol
    along ``axis`` with ``settings``; returns (k voxel², k mD, seconds, converged)."""
    def measure(sub: VoxelGeometry) -> tuple[float, float | None, float, bool]:
        setup = setup_protocol(sub, config, axis, "mirrored", settings)
        r = measure_axis(setup, settings, backend, voxel_size, on_check)
        return r.k_lattice, r.k_mD, r.seconds, r.converged

    return measure


def add_rev(study: PermeabilityStudy, sample: VoxelGeometry, config: SimulationConfig,
            settings: PermeabilitySettings, backend: Any) -> None:
    """The REV curve (:mod:`solver.rock.rev`) along the study's first axis, reusing the whole
    sample's mirrored k and F where the study has them; timed as the ``rev`` phase."""
    axis = settings.axis_indices(sample.ndim)[0]
    name = AXIS_NAMES[axis]
    whole = next((r for r in study.results if r.axis == name and r.protocol == "mirrored"),
                 None)
    conduction = study.conduction.get(name)
    phases = Phases()
    with phases.timed("rev"):
        points = rev_curve(
            sample, axis, settings.sides, backend.xp,
            rev_measure(config, settings, axis, backend, sample.voxel_size),
            None if whole is None else (whole.k_lattice, whole.k_mD, whole.seconds,
                                        whole.converged),
            conduction.formation_factor if conduction else None)
    study.rev = {"axis": name, "points": points}
    study.seconds.update(phases)


def add_formation_factors(study: PermeabilityStudy, sample: VoxelGeometry,
                          settings: PermeabilitySettings, backend: Any,
                          systems: dict[int, ConductionSystem] | None = None) -> None:
    """F and F·φ of ``sample`` along the study's axes (:mod:`solver.rock.conduction`, sides as
    the permeability runs), on the backend's device (or its name); timed as the
    ``formation_factor`` phase. ``systems``: the :func:`conduction_system` per axis index when
    built ahead."""
    if backend is None or isinstance(backend, str):
        backend = get_backend(backend or "auto")
    phases = Phases()
    with phases.timed("formation_factor"):
        for axis in settings.axis_indices(sample.ndim):
            system = (systems or {}).get(axis) or conduction_system(sample.solid, axis,
                                                                   settings.sides)
            study.conduction[AXIS_NAMES[axis]] = solve_conduction(system, backend.xp,
                                                                  shape=sample.shape)
    study.seconds.update(phases)
