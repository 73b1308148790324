"""The mirrored permeability of an image too large for one process: every rank builds its slab.

``mpirun -n N python -m solver.distributed.mirrored SAMPLE.npy --axis 0`` (a TIFF stack with
``--pore-value`` or ``--threshold``, or ``--grains 1600 --porosity 0.2`` for a generated
rock-like image) runs the mirrored protocol of
:mod:`solver.rock.protocol` — the sample followed by its mirror image along the flow axis,
periodic there, sealed (or periodic) sides, driven by a body force — with no rank holding
more than its slab (:mod:`solver.distributed.local_setup`) and every check reduced on the
ranks (:mod:`solver.distributed.reductions`). The drive and the speed-up (TRT, Lambda 3/16,
fast tau) are the single-process protocol's, computed from the summary's porosity and surface
(:func:`~solver.rock.protocol.kozeny_carman`): the same numbers as on the whole image.

What differs from ``python -m solver run`` with ``permeability:``: the pores not joining the
two faces are kept (finding them needs the connected components of the whole image; they carry
no flow at a steady state, so k is the same, they only cost memory and time), the tile grid
sits at the origin, and k is checked every ``--check`` steps up to ``--steps`` or the
convergence test (:class:`solver.monitor.KConvergence`), each check reading k at its step and
one step later: the test and k are the means of these pairs, half the last pair's difference
its ``alternation`` and what is left of it in the mean its ``alternation_residual``
(:class:`solver.rock.uncertainty.StepPair`, as on one device). The run starts from the flow of the
sample coarsened by 2 or a chain from 1/2^N (``--coarse-levels N``; 0: from rest), run over the
same ranks (:mod:`solver.distributed.coarse_start`: the one-device start of
:mod:`solver.rock.initial`, slab by slab), as ``PermeabilitySettings.coarse_levels`` does on one
device; the result lists each level's steps, k and times under ``coarse`` (each level's
``start_scale`` and ``start_density_scale``, the fine run's alike) and the fine-step
equivalents of the whole run as ``work_steps``. Every protocol choice the command line has
(steps, check interval, tolerance, coarse levels, the start's rescale, estimate and density
gain) defaults to :class:`~solver.rock.settings.PermeabilitySettings`' (coarse levels by the
sample's size, the start rescaled by the velocity with density gain 1.1), as on one device.
Rank 0 prints one JSON object (``--json`` writes it): k, its history, the plane-flux spread,
the set-up and step times and, per rank, the tiles, fluid nodes, halo values per step, the
estimated device bytes (:func:`device_estimate`) and what the backend reports
(``used_memory``; a benchmark adds the CuPy pool's peak).
Lattice units; k also in voxels² (it is the same number).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from geometries.regions import (
    ArrayRegions,
    CachedRegions,
    GrainRegions,
    MirroredRegions,
    RegionSource,
    TiffRegions,
)

from ..config import BACKENDS, HALO_TRANSPORTS, ConfigError, SimulationConfig
from ..monitor import KConvergence
from ..observables import darcy_permeability
from ..problem import Problem
from ..rock.initial import FACTOR
from ..rock.protocol import fast_tau_for, kozeny_carman, pore_drive, protocol_values, steps_for
from ..rock.settings import LARGE_SAMPLE_LEVELS, LARGE_SAMPLE_VOXELS, PermeabilitySettings
from ..rock.uncertainty import StepPair, alternation_residual
from ..tiling import default_tile_edge
from .coarse_start import (
    chain_scale,
    coarse_levels,
    feasible_levels,
    prolong_ranks,
    release_levels,
    run_levels,
)
from .local_setup import SlabSummary, agreed_storage, local_part, local_rank, summarize
from .reductions import READ_TILES, combine, rank_numbers

__all__ = ["mirrored_config", "device_estimate", "run_mirrored", "start_settings",
           "settings_from", "main"]

log = logging.getLogger(__name__)


def mirrored_config(summary: SlabSummary, config: SimulationConfig,
                    settings: PermeabilitySettings) -> tuple[SimulationConfig, dict]:
    """The mirrored protocol's config along ``summary.axis`` (the summary is of the mirrored
    box: porosity and faces per voxel equal the sample's) and what was derived: Kozeny-Carman
    k, hydraulic diameter, the drive G and the steps the protocol estimates from rest."""
    axis, ndim = summary.axis, len(summary.shape)
    layers = summary.shape[axis] // 2
    k_est, d_h = kozeny_carman(summary.porosity, summary.surface, summary.shape, axis)
    values, notes = protocol_values(config, axis, "mirrored", settings, ndim,
                                    fast_tau_for(k_est, layers))
    nu = (values["tau"] - 0.5) / 3.0
    gradient = pore_drive(k_est, d_h, summary.porosity, nu)
    force = [0.0, 0.0, 0.0]
    force[axis] = gradient
    values["body_force"] = tuple(force)
    values["tile_offset"] = "origin"  # the offset search needs the whole image
    cfg = SimulationConfig(**values)
    cfg.check(ndim)
    return cfg, {"k_estimate": k_est, "hydraulic_diameter": d_h, "gradient": gradient,
                 "tau": values["tau"], "notes": notes,
                 "steps_estimate": steps_for(k_est, summary.porosity, nu, summary.shape[axis])}


def device_estimate(problem: Problem) -> int:
    """Device bytes a rank's part needs at its peak, before anything is allocated (its slab
    and both halo layers, so a little above what the rank keeps): the resident state its
    execution plan allocates (tiled: :meth:`Problem.tiled_state_bytes`, populations, node
    types, tile map, fluid masks and tile list; compact:
    :func:`~solver.backends.cuda.compact_readout.compact_state_bytes`, with 64-bit offsets
    where the plan's are wide) and one check's
    chunk of :data:`~solver.distributed.reductions.READ_TILES` tiles at the readout's upper
    bound per tile (:func:`~solver.backends.cuda.compact_readout.readout_tile_bytes`).
    Unlike :func:`solver.backends.cuda.footprint.device_bytes` no whole-state float64
    moments: a check here never holds them."""
    from ..backends.cuda.compact import CompactTiling
    from ..backends.cuda.compact_readout import compact_state_bytes, readout_tile_bytes
    from ..backends.plan import plan_for

    t = problem.tiling
    plan = plan_for(problem)
    state = (compact_state_bytes(problem, CompactTiling(t, plan.pad, plan.wide)) if plan.compact
             else problem.tiled_state_bytes())
    return int(state + min(READ_TILES, t.n_tiles) * readout_tile_bytes(problem))


def _fits(estimate: int, backend: Any) -> None:
    """Raise MemoryError before allocating when ``estimate`` exceeds the device's free bytes."""
    free = backend.free_memory()
    if free is not None and estimate > free:
        raise MemoryError(f"this rank needs about {estimate / 2**30:.1f} GiB on its device, "
                          f"{free / 2**30:.1f} GiB are free: store float16 "
                          "(--set storage=float16), run on more ranks or on larger GPUs.")


def _used_memory(backend: Any) -> int | None:
    """Device bytes ``backend``'s arrays hold now (None where it does not count them)."""
    used = backend.used_memory()
    return None if used is None else int(used)


def _collect(comm: Any, error: Exception | None) -> None:
    """Raise on every rank if any rank failed (each sees the same messages)."""
    errors = [e for e in comm.allgather(None if error is None else
                                        f"rank {comm.Get_rank()}: {type(error).__name__}: "
                                        f"{error}") if e]
    if errors:
        raise RuntimeError("; ".join(errors))


def run_mirrored(sample: RegionSource, config: SimulationConfig, axis: int, comm: Any,
                 backend: Any, steps: int, check: int, tolerance: float | None = None,
                 settings: PermeabilitySettings | None = None, transport: str = "auto",
                 memory: Callable[[], dict] | None = None,
                 estimate_only: bool = False, max_seconds: float | None = None,
                 fused_check: bool = True) -> dict | None:
    """Run the mirrored protocol of ``sample`` along ``axis`` on the ranks of ``comm``
    (collective); the result on rank 0 (module docstring), None on the others. ``memory``:
    extra per-rank numbers at the end (e.g. a device pool's peak); ``estimate_only``: stop
    before allocating, with the set-up times and each rank's estimate; ``max_seconds``: wall
    seconds from the start after which the stepping stops at its next check (rank 0's clock;
    the coarse levels stop at half the time left when they start), so that a job's limit
    still gets a result; ``fused_check``: a GPU rank (tiled or compact) checks k in one launch
    (:class:`~solver.distributed.reductions.FusedNumbers`; False: the chunked readout, to
    compare). ``tolerance`` None: ``settings.tolerance`` (the coarse levels' is from the
    settings either way); ``settings`` None: :class:`PermeabilitySettings`' defaults, the
    coarse levels by the sample's size (``start_level_count``) as on one device."""
    settings = settings or PermeabilitySettings()
    tolerance = settings.tolerance if tolerance is None else tolerance
    rank, size = comm.Get_rank(), comm.Get_size()
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    deadline = math.inf if max_seconds is None else t0 + max_seconds
    wanted = (settings.start_level_count("mirrored", math.prod(sample.shape))
              if settings.accelerate and settings.coarse_start else 0)
    if wanted:  # the coarse levels read the fine layers this rank has read already
        sample = CachedRegions(sample, axis)
    box = MirroredRegions(sample, axis)
    summary = summarize(box, axis, config.tile_edge or default_tile_edge(len(box.shape)), comm)
    times["summary"] = time.perf_counter() - t0
    cfg, derived = mirrored_config(summary, config, settings)
    n_levels = feasible_levels(tuple(sample.shape), axis, summary.a, wanted)
    bounds, n_levels = _level_bounds(summary, size, n_levels)
    t1 = time.perf_counter()
    problem, decomposition, estimate = _rank_part(box, cfg, summary, backend, comm,
                                                  check_fit=not estimate_only, bounds=bounds)
    times["slab"] = time.perf_counter() - t1
    head = {"shape": list(summary.shape), "sample_shape": list(sample.shape), "axis": axis,
            "ranks": size, "porosity": summary.porosity, "fluid_nodes": summary.n_fluid,
            "tiles": int(summary.tiles.sum()), "coarse_levels_asked": wanted, **derived}
    if estimate_only:
        ranks = comm.gather({"rank": rank, "tiles": int(problem.tiling.n_tiles),
                             "fluid_nodes_with_halo": int(problem.tiling.n_fluid),
                             "tile_storage": problem.tile_storage,
                             "device_bytes_estimate": estimate, "seconds": dict(times),
                             "host_peak_bytes": _host_peak()}, root=0)
        return None if rank else {**head, "estimate_only": True, "per_rank": ranks}
    t2 = time.perf_counter()
    levels = coarse_levels(sample, axis, cfg, n_levels, bounds, summary.a, comm)
    times["coarse_summary"] = time.perf_counter() - t2
    link = None

    def build(level):  # a level's rank part and solver, the NCCL link shared
        nonlocal link
        part, cut, _ = _rank_part(level.box, level.config, level.summary, backend, comm,
                                  check_fit=True, bounds=level.bounds)
        built, link, _ = local_rank(part, cut, backend, comm, transport, link)
        return built

    def run_level(level_solver, level, level_tolerance):
        now = time.perf_counter()
        out = _checked_steps(level_solver, comm, axis, np.prod(level.summary.shape), steps,
                             check, level_tolerance, now + (deadline - now) / 2, fused_check)
        return {"steps": out["steps"], "converged": out["converged"],
                **_pair_record(out["pair"], out["previous_pair"], level.scale),  # fine voxel²
                "step_seconds": out["seconds"], "check_seconds": out["check_seconds"],
                "history": out["history"]}

    t3 = time.perf_counter()
    coarse_solver, coarse = run_levels(levels, settings, build, run_level, comm)
    release_levels(levels)
    if isinstance(sample, CachedRegions):
        sample.clear()
    times["coarse_runs"] = time.perf_counter() - t3
    t2 = time.perf_counter()
    solver, link, used = local_rank(problem, decomposition, backend, comm, transport, link)
    del problem  # the rank keeps its layout's tiling only
    times["allocate"] = time.perf_counter() - t2
    start_scale = start_density_scale = None
    if coarse_solver is not None:
        t4 = time.perf_counter()
        scale = chain_scale(settings, coarse)
        start_scale, start_density_scale = scale.velocity, scale.density
        prolong_ranks(solver, coarse_solver, comm, scale)
        coarse_solver.release()
        times["prolong"] = time.perf_counter() - t4
    run = _checked_steps(solver, comm, axis, np.prod(summary.shape), steps, check, tolerance,
                         deadline, fused_check)
    step_seconds = comm.allgather(run["seconds"])
    mine = {"rank": rank, "tiles_owned": int(solver.n_owned),
            "fluid_nodes": int(solver.problem.n_fluid),
            "halo_values_per_step": int(solver.plan.values_sent()),
            "tile_storage": solver.problem.tile_storage,
            "device_bytes_estimate": estimate,
            "device_bytes_used": _used_memory(backend),
            "host_peak_bytes": _host_peak(), "seconds": dict(times),
            "step_seconds": run["seconds"], "check_seconds": run["check_seconds"],
            **(memory() if memory is not None else {})}
    ranks = comm.gather(mine, root=0)
    solver.release()
    if link is not None:  # after the solver: its graphs would hold NCCL work
        link.close()
    if rank != 0:
        return None
    measured, slowest = run["steps"] - 1, max(step_seconds)
    last = run["history"][-1] if run["history"] else {}
    return {**head, "transport": used, "backend": backend.name, "precision": cfg.precision,
            "storage": cfg.storage, "streaming": cfg.streaming, "fused_check": fused_check,
            "slab_bounds": [int(b) for b in bounds],
            "steps": run["steps"], "timed_steps": measured, "step_seconds": slowest,
            "mflups": summary.n_fluid * measured / slowest / 1e6 if slowest > 0 else None,
            **_pair_record(run["pair"], run["previous_pair"]), "converged": run["converged"],
            "coarse_levels": len(coarse), "coarse": coarse, "start_scale": start_scale,
            "start_density_scale": start_density_scale,
            "work_steps": run["steps"] + sum(c["steps"] * c["fluid_nodes"] / summary.n_fluid
                                             for c in coarse),
            "flux_spread": last.get("flux_spread"), "history": run["history"],
            "load_imbalance_tiles": _imbalance([r["tiles_owned"] for r in ranks]),
            "load_imbalance_fluid": _imbalance([r["fluid_nodes"] for r in ranks]),
            "per_rank": ranks}


def _level_bounds(summary: SlabSummary, size: int, levels: int) -> tuple[np.ndarray, int]:
    """Slab bounds on multiples of ``2^levels`` tile layers (level l's slabs are these over
    2^l) and the levels they allow: fewer where a rank would get no tile on such a cut."""
    for n in range(levels, 0, -1):
        try:
            return summary.bounds(size, FACTOR**n), n
        except ConfigError:
            log.info("slabs on multiples of %d tile layers leave a rank empty; fewer levels.",
                     FACTOR**n)
    return summary.bounds(size), 0


def _rank_part(box: RegionSource, cfg: SimulationConfig, summary: SlabSummary, backend: Any,
               comm: Any, check_fit: bool, bounds: np.ndarray | None = None
               ) -> tuple[Problem, Any, int]:
    """This rank's problem and decomposition (:func:`local_part`, the tile storage agreed on
    the devices' memory: :func:`agreed_storage`, where 'auto' keeps a part needing the compact
    kernels' 64-bit offsets tiled unless only its compact state fits) and its device estimate
    of that storage; with ``check_fit`` refused (on every rank) when it exceeds the device's
    free memory (collective)."""
    error, problem, decomposition = None, None, None
    try:
        problem, decomposition = local_part(box, cfg, summary, comm.Get_size(), comm.Get_rank(),
                                            bounds)
    except Exception as exc:
        error = exc
    _collect(comm, error)
    problem = agreed_storage(problem, backend, comm)
    estimate = 0
    try:
        estimate = device_estimate(problem)
        if check_fit:
            _fits(estimate, backend)
    except Exception as exc:
        error = exc
    _collect(comm, error)
    return problem, decomposition, estimate


def _checked_steps(solver: Any, comm: Any, axis: int, volume: int, steps: int, check: int,
                   tolerance: float, deadline: float = math.inf, fused: bool = True) -> dict:
    """Step to ``steps`` (the first, compiling the kernels, untimed), k every ``check`` steps
    from the ranks' reduced numbers, stopping at the convergence test, a non-finite value or
    the first check after ``deadline`` (``time.perf_counter()`` of rank 0). Every check reads
    k at its step and, one step later, again (a :class:`StepPair`; k alternates between even
    and odd steps): the test and the history judge the pair means, as on one device
    (:mod:`solver.rock.uncertainty`). ``{'steps', 'seconds' (this rank's timed stepping),
    'check_seconds' (its reduced checks), 'history' (the checks, k the pair means), 'pair'
    (the last check's, None after a non-finite value), 'previous_pair', 'converged'}``."""
    solver.step(1)
    comm.Barrier()
    done, seconds, reading, history, converged = 1, 0.0, 0.0, [], False
    monitor = KConvergence(tolerance)
    pair = previous = None
    tic = time.perf_counter()
    read = rank_numbers(solver, axis, fused)  # the fused check on a GPU rank
    reading += time.perf_counter() - tic
    while done < steps and not converged:
        # Checks at multiples of ``check`` (after the compiling step), the steps the
        # one-device protocol checks at, so the two histories compare check by check.
        n = min(check - done % check, steps - done)
        seconds += _timed_steps(solver, comm, n)
        done += n
        reads = []
        for extra in (0, 1):  # the check's step, then one step later
            if extra:
                seconds += _timed_steps(solver, comm, 1)
                done += 1
            tic = time.perf_counter()
            numbers = combine(read(), comm)
            reading += time.perf_counter() - tic
            if not numbers.finite:
                break
            reads.append((numbers, darcy_permeability(
                solver.problem, numbers.momentum / volume, axis).lattice))
        if len(reads) < 2:
            history.append({"step": done, "k": None, "finite": False})
            pair = previous = None
            break
        previous, pair = pair, StepPair(done - 1, reads[0][1], reads[1][1])
        numbers, k = reads[0][0], pair.k
        change, done_yet, remaining = monitor.update(pair.step, k)
        converged = bool(done_yet)
        history.append({"step": pair.step, "k": k, "k_first": pair.k_first,
                        "k_next": pair.k_next, "change": change, "remaining": remaining,
                        "max_speed": numbers.max_speed, "flux_spread": numbers.flux_spread})
        if comm.Get_rank() == 0:
            log.info("step %d: k = %.6g voxel² (pair mean; alternation %.2g), change %s, max "
                     "speed %.3g, flux spread %.2g", pair.step, k, pair.alternation, change,
                     numbers.max_speed, numbers.flux_spread)
        if comm.bcast(time.perf_counter() > deadline, root=0) and not converged:
            history[-1]["stopped"] = "max_seconds"
            break
    return {"steps": done, "seconds": seconds, "check_seconds": reading, "history": history,
            "pair": pair, "previous_pair": previous, "converged": converged}


def _timed_steps(solver: Any, comm: Any, n: int) -> float:
    """Step every rank ``n`` steps (collective); the seconds between two barriers."""
    comm.Barrier()
    tic = time.perf_counter()
    solver.step(n)
    comm.Barrier()
    return time.perf_counter() - tic


def _pair_record(pair: StepPair | None, previous: StepPair | None = None,
                 scale: int = 1) -> dict:
    """The run's k (the mean of the last check's pair, fine voxel² for a level coarsened by
    ``scale``), that pair, its period-2 alternation and the residual of it in the mean (from
    the ``previous`` check's pair), JSON-ready; k None without a pair."""
    if pair is None:
        return {"k": None, "k_pair": None, "alternation": None, "alternation_residual": None}
    return {"k": pair.k * scale**2,
            "k_pair": {"step": pair.step, "k_first": pair.k_first * scale**2,
                       "k_next": pair.k_next * scale**2},
            "alternation": pair.alternation,
            "alternation_residual": alternation_residual(pair, previous)}


def _host_peak() -> int:
    """This process's peak resident host memory, bytes (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _imbalance(load: list[int]) -> float:
    """Largest load over the mean (1: perfect balance)."""
    mean = float(np.mean(load)) if load else 0.0
    return float(max(load) / mean) if mean > 0 else 1.0


# ----------------------------------------------------------------------------- command line
def build_parser() -> argparse.ArgumentParser:
    """Arguments of ``python -m solver.distributed.mirrored``; the protocol's choices default to
    :class:`~solver.rock.settings.PermeabilitySettings`' (decided there once)."""
    defaults = PermeabilitySettings()
    parser = argparse.ArgumentParser(prog="python -m solver.distributed.mirrored",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sample", nargs="?", type=Path,
                        help="boolean .npy solid mask (True = solid) or a (z, y, x) TIFF stack, "
                             "read by slab")
    parser.add_argument("--pore-value", type=float, default=None,
                        help="TIFF: the pore label (else 0/1 or bool images: nonzero = solid)")
    parser.add_argument("--threshold", type=float, default=None,
                        help="TIFF: grey values below it are pore")
    parser.add_argument("--grains", type=int, nargs="+", metavar="N",
                        help="generate a rock-like grain pack of N³ (or NX NY NZ) voxels")
    parser.add_argument("--porosity", type=float, default=0.2)
    parser.add_argument("--diameter", type=float, default=21, help="grain diameter, voxels")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--axis", type=int, default=0, help="flow axis (0, 1, 2)")
    parser.add_argument("--backend", default="numpy", choices=list(BACKENDS))
    parser.add_argument("--transport", default="auto", choices=list(HALO_TRANSPORTS))
    parser.add_argument("--steps", type=int, default=defaults.max_steps,
                        help="most steps before the last check (one more step follows: k is "
                             "the mean of the last two steps' k); default: "
                             "PermeabilitySettings.max_steps, %(default)s")
    parser.add_argument("--check", type=int, default=defaults.check_interval,
                        help="steps between k checks; default: "
                             "PermeabilitySettings.check_interval, %(default)s")
    parser.add_argument("--tolerance", type=float, default=defaults.tolerance,
                        help="converged when k changes by less than this fraction per 1000 "
                             "steps; default: PermeabilitySettings.tolerance, %(default)s")
    parser.add_argument("--coarse-levels", type=int, default=None,
                        help="start from the sample coarsened by 2 (1), a chain from 1/4 or "
                             "1/8 (2, 3), or from rest (0); fewer where the shape does not "
                             "halve; default: PermeabilitySettings.coarse_levels, by the "
                             f"sample's size ({LARGE_SAMPLE_LEVELS} from "
                             f"{round(LARGE_SAMPLE_VOXELS ** (1 / 3))}³ voxels on, else 1)")
    parser.add_argument("--start-rescale", default=defaults.start_rescale,
                        choices=list(PermeabilitySettings.param.start_rescale.objects),
                        help="scale each prolongation of a chain by the next level's k "
                             "estimate over the coarse k; default: "
                             "PermeabilitySettings.start_rescale, %(default)s")
    parser.add_argument("--start-estimate", default=defaults.start_estimate,
                        choices=list(PermeabilitySettings.param.start_estimate.objects),
                        help="the next level's k estimate of --start-rescale; default: "
                             "PermeabilitySettings.start_estimate, %(default)s")
    parser.add_argument("--start-density-gain", type=float, default=defaults.start_density_gain,
                        help="multiply each prolongation's density deviation by this; default: "
                             "PermeabilitySettings.start_density_gain, %(default)s")
    parser.add_argument("--set", dest="settings", action="append", default=[],
                        metavar="KEY=VALUE", help="SimulationConfig field (repeatable)")
    parser.add_argument("--json", type=Path, default=None, help="write the result here")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop stepping at the first check after this many wall seconds "
                             "from the start (the result is still written)")
    parser.add_argument("--estimate-only", action="store_true",
                        help="stop before allocating: set-up times and device bytes per rank")
    parser.add_argument("--chunked-check", action="store_true",
                        help="check k with the chunked readout on GPU ranks too (to compare "
                             "with the fused one-launch check)")
    return parser


def start_settings(levels: int | None = None, rescale: str | None = None,
                   estimate: str | None = None, density_gain: float | None = None,
                   tolerance: float | None = None) -> PermeabilitySettings:
    """The protocol's settings with ``levels`` coarse-start levels (0: from rest; None:
    ``PermeabilitySettings.coarse_levels``, by the sample's size) and the start's ``rescale``,
    ``estimate`` and ``density_gain`` (``PermeabilitySettings.start_rescale``,
    ``start_estimate``, ``start_density_gain``; None: their defaults), converged at
    ``tolerance`` (``PermeabilitySettings.tolerance``; the coarse levels' follows it)."""
    if levels is not None and levels < 0:
        raise SystemExit(f"error: --coarse-levels must be 0 (from rest) or more, got {levels}")
    given = {"start_rescale": rescale, "start_estimate": estimate,
             "start_density_gain": density_gain, "tolerance": tolerance}
    values = {k: v for k, v in given.items() if v is not None}
    if levels is not None:
        values.update(coarse_start=levels > 0, coarse_levels=min(max(levels, 1), 4))
    return PermeabilitySettings(**values)


def settings_from(args: argparse.Namespace) -> PermeabilitySettings:
    """The protocol's settings the command line ``args`` ask for (:func:`start_settings`)."""
    return start_settings(args.coarse_levels, args.start_rescale, args.start_estimate,
                          args.start_density_gain, args.tolerance)


def source_of(args: argparse.Namespace) -> RegionSource:
    """The sample: a memory-mapped ``.npy``, a TIFF stack or a generated grain pack."""
    if args.grains:
        shape = args.grains * 3 if len(args.grains) == 1 else args.grains
        return GrainRegions(shape, args.porosity, args.diameter, args.seed)
    if args.sample is None:
        raise SystemExit("error: give a SAMPLE.npy or --grains N")
    if args.sample.suffix.lower() in (".tif", ".tiff"):
        return TiffRegions(args.sample, pore_value=args.pore_value, threshold=args.threshold)
    return ArrayRegions.from_npy(args.sample)


def main(argv: list[str] | None = None, memory: Callable[[], dict] | None = None) -> int:
    """Entry point on every rank; rank 0 prints (and writes) the result. Returns 0 or 2."""
    from ..backends import get_backend, may_use_gpu
    from .__main__ import parse_settings
    from .comm import bind_local_gpu, world

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    comm = world()
    if may_use_gpu(args.backend):
        bind_local_gpu(comm)  # before CUDA starts in this process
    config = SimulationConfig(**{"backend": args.backend, **parse_settings(args.settings)})
    backend = get_backend(args.backend)
    settings = settings_from(args)
    result = run_mirrored(source_of(args), config, args.axis, comm, backend, args.steps,
                          args.check, settings=settings, transport=args.transport,
                          memory=memory, estimate_only=args.estimate_only,
                          max_seconds=args.max_seconds, fused_check=not args.chunked_check)
    if result is not None:
        text = json.dumps(result, indent=1, default=str)
        if args.json is not None:
            args.json.write_text(text)
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
