"""Time to the whole rock answer: the k tensor of generated sandstone-like images, per phase.

Issue 29's targets (H100, float32): the tensor with both protocols of a 200³ image in <= 20 s,
of a 300³ image in <= 45 s, and the mirrored tensor of a 1000³ image in <= 5 min. Each image is
``geometries.generators.random_sphere_pack`` at porosity 0.2, grain diameter 20 voxels, seed 3
(the 200³ one is the lead's profiled case, ``rock200.yaml``), run exactly as
``python -m solver run CASE`` runs ``permeability: {protocol: both, axes: all}``
(:func:`solver.rock.run_study`, default settings, float32). Times are wall seconds of the
process as it is, cold: the first study pays the kernel compilation (NVRTC, CuPy's disk cache
helps a second run only), reported as the ``compile_first_chunk`` phase with the other phases
of :data:`solver.rock.measure.PHASES`.

Writes ``rock_tensor-<device>-<date>-<sizes>.json`` and ``.md`` (GPU, date, commit, per image: total
seconds, phases, k per protocol and axis in mD, the steps) to ``--out``. ``--baseline`` compares
k and F of every image with an earlier report of this benchmark (or a 200³ ``summary.json``;
target: k within 0.1 %). Phases overlap on a GPU (the next run's host set-up is made while the
device steps), so they add up to more than the wall time. Cold and warm: the first process on a
machine compiles every kernel (NVRTC); a second process loads them from CuPy's disk cache.

Every NVRTC compilation of the process is logged (:class:`CompileLog`: count, seconds, kernel
names), so the report says which kernels were compiled and how often.

The 1000³ mirrored tensor in numbers (H100 80 GB, float32, D3Q19; ``--huge``):

- **Nodes.** Porosity 0.2: 2.0e8 fluid voxels in the sample, 4.0e8 in the mirrored box
  (2000 x 1000 x 1000 voxels, one axis at a time). Tile utilisation eta_t 0.478 (4³ tiles,
  measured on the 320³ and 400³ images of this generator): 1.31e7 tiles, 8.4e8 tile nodes.
- **Storage.** 19 x 4.0e8 = 7.6e9 values per copy: beyond the compact kernels' 32-bit offsets
  (2^31, :data:`solver.backends.plan.COMPACT`, ``value_limit``). Compact with 64-bit offsets
  (``ExecutionPlan.wide``) take 96 B per fluid node in place (76 B of populations, 20 B of
  edge tables) and 172 B with two copies. In place they stepped 21 % slower than tiled (H200,
  f052a62: 39.0 against 32.1 ms per fine step), so in place 'auto' keeps these fine runs tiled
  wherever the tiled state fits (:data:`solver.backends.plan.WIDE_SLOWER`); with two copies they
  are the fastest arrangement that fits (:data:`~solver.backends.plan.WIDE_TWO_COPIES_FASTER`,
  below), and the default here. Bytes per tile node: 19 x 4 per copy + 1 node type: one copy
  77 B = 64.4 GB tiled; two copies 153 B = 128 GB tiled (did not fit an H200's 150 GB beside
  the start levels), 68.8 GB compact. Besides the fine state: the fused
  check's flags (1 B per tile node, 0.84 GB), the tile map and masks (0.4 GB) and, at the
  prolongation only, the 1/2 level's compact state (5.2e7 fluid nodes, 4.6 GB) and its float32
  moments (0.8 GB): **about 71 GB at the peak** (an estimate: the benchmark reports the pool at
  the fine checks). Only one axis and two neighbouring start levels hold device memory at a
  time; the next axis's host set-up (tiling, a few GB of host tables) is made while the current
  one steps.
- **Rate.** H100 fluid updates per second on the rock-like 192³ pack (eta_t 0.50, BGK,
  ``benchmarks/throughput/results/*-0460fb9-fluid.md``): tiled in place 8.69 G/s, compact in
  place 10.87, compact two copies 15.36. Tiled in place at 4.0e8 fluid nodes: **46 ms per
  step, 21.7 steps/s** (compact in place would give 27, compact two copies 38).
- **Steps.** Today (single start at 1/2 resolution, stopped at 10x the tolerance): 200³
  (tau 0.6) 1600-2600 fine steps after 1400-1800 coarse ones, 300³ (tau 0.7) 4200-5200
  after 2600-2800. The pressure-diffusion time ``L² eps nu / (pi² c_s² k)`` of the mirrored
  box (L = 2n, k = 0.066 voxel² for these grains, nu = 1/15 at tau 0.7) is 2.2e4 steps at
  300³ and 2.5e5 at 1000³: scaled by L² from 300³ (the upper bound), the fine run would need
  47,000-58,000 steps per axis, 3 x 50,000 / 21.7 = 6900 s. But the fine runs stop long
  before that time (4200-5200 steps at 300³ against 2.2e4). The prolongated start carries the
  coarse grid's flow, whose k is 33 % above the fine one at 200³ and at 300³ alike (coarse k
  0.086-0.107 against 0.065-0.080 voxel²); the velocity settles to the fine geometry within
  the first 200 steps, then the pressure field of the coarse geometry relaxes to the fine one
  (diffusivity ``c_s² k / (eps nu)``, over the scales where the two geometries differ): the
  fine steps are the 1000-step window plus the time that tail takes to fall under 0.1 % per
  1000 steps; 200³ -> 300³ grew 2.6-5x past the window, of which tau 0.6 -> 0.7 (nu doubled)
  explains about 2x. On the CPU (NumPy, float64, tau 0.7, 8-voxel grains at porosity 0.25;
  ``start_levels.py --size N --grain 8
  --porosity 0.25 --fast-tau 0.7 --backend numpy --precision float64 --variants 1:10 3:10``,
  ``results/start_levels-CPU-*``) the fine steps did not grow with the sample: 24³, 32³, 48³
  took 2000, 2600 and 1800; on an H200 the 400³ image took 4200 with today's start, as 300³
  did. So 1000³, with the same grains, should need about 4200-5200 fine steps per axis with
  today's start and about 3200 with ``--coarse-levels 3`` (measured at 400³, below). The floor
  of the convergence test (k changed by < 0.1 % over 1000 steps, checked every 200) is 1200.
- **The start.** ``--coarse-levels 3`` (``PermeabilitySettings.coarse_levels``): the run at
  1/8 resolution (1/512 of the work per step) starts from rest and converges to the fine
  tolerance, its flow starts the 1/4 run (1/64), that one the 1/2 run (1/8), that one the fine
  run; every level keeps its own convergence test, and k is the fine run's, tested as today.
  Levels that no longer percolate are dropped. On the CPU (24³-48³) it did not change the fine
  steps and kept k within 0.02 %; at 400³ on the GPU it cut them by a quarter (below).
- **Measured at 400³** (H200, ``start_levels.py --size 400``, x axis, 2.6e7 fluid nodes in the
  mirrored box; ``results/start_levels-NVIDIA-H200-2026-11-28-400*.md``): today's start 4200
  fine steps after 2400 at 1/2; the chain 3200 fine steps (3000 with every level at the
  tolerance), work 4514 -> 3419 fine-step equivalents, 18.1 -> 14.3 s. k: -0.08 to -0.13 %
  against today's start. Every run was still falling when it stopped (today's by 0.016 % per
  200 steps, its last checks falling by a factor 0.92 per 200 steps: about 0.18 % still to go;
  the chain's about 0.09 % below its -0.11 %): all tend to about 0.2 % under today's k, the
  chain's k is the nearer, and 0.1 % against today's k is inside today's own convergence
  remainder. The fine run tiled with 64-bit halo sources (the 1000³ kernel): 11.1 G fluid
  updates/s against 14.3 compact (0.78x), the same steps and k; the pool held 4.22 GB at its
  checks, 79 B per tile node (66 GB at 1000³). Host set-up of the first axis (pore check and
  tiling): 6.5 s; the image 2.6 s.
- **Expected at 1000³ on an H100** (host x 15.6, the volume, from 400³; kernel x 0.76, the
  H100/H200 ratio of compact in place, 10.87 / 14.26 G/s): host set-up about 100 s, then per
  axis 3200 fine steps at 21 steps/s (8.5 G/s) = 150 s plus about 20 s of start, allocation and
  prolongation: **one axis about 270 s, the tensor about 610 s** (about 700 s with today's
  start), plus about 40 s to generate the image (outside the study's time). The 5-minute
  target is missed by about 2x. What would close it: compact storage with 64-bit offsets (its
  step kernel, check, prolongation and edge tables; 27 steps/s in place, 38 with two copies at
  67 GB: the tensor in about 470 or 380 s), a start that leaves the fine run less (past the
  1000-step window its steps are the coarse pressure field relaxing to the fine geometry; the
  velocity settles within 200 steps: README), or several GPUs.
- **Measured at 1000³, one axis, four arrangements side by side** (4 H200s of one host,
  acb1c4a, ``--axes x``; ``results/rock_tensor-NVIDIA-H200-2026-11-28-1000-x-*-acb1c4a.md``):
  the same 3001 fine steps and k (2093.9 mD) in 97.3 s tiled in place, **74.0-74.2 s compact
  with two copies (wide kernels)**, also under ``--device-memory 85.5`` (CuPy's pool capped at
  an 80 GB H100's memory: the plan chose the same, the pool peaked at 81.5 GB); tiled with two
  copies ran out of the H200's memory.
- **Measured, the tensor with the defaults** (H200, ``--sizes --huge --device-memory 85.0``:
  CuPy's pool capped at an 80 GB H100's memory): 308.0 s at 193deac (compact two copies), 296.3 s
  at 61879bb (edge tables made on the device: first axis 142.5 -> 112.4 s), **207.4 s** at
  b3b8bbc (the rescaled start, ``start_rescale`` velocity and ``start_density_gain`` 1.1: 2001
  fine steps per axis instead of 3001, k 0.07-0.11 % lower; ``results/*-1000-h100mem-*.md``).
- **Check.** ``start_levels.py --size 400`` times the start variants on a 400³ image in about
  two minutes (k against today's start, fine steps, the 1000³ arrangement's rate:
  fine run tiled with 64-bit halo sources, start levels compact).
- **Measured at 1000³, one axis** (H100, 668bee6, in place, 3 start levels): 238.9 s =
  connectivity 31 s, tiling 58 s, allocation 8 s, first chunks 10 s, start levels 9 s, 3000
  fine steps 122 s; pool 66.5 GB. Host set-up was 40 % of it, so since then (issue 29, third
  round): the pore labels and sizes and the first run's tilings are made on the GPU while it is
  idle (:mod:`solver.backends.cuda.rock_setup`; later runs' set-up stays on the host, beside
  the steps), the sizes counted once per sample, node types, sector mix, fluid masks and the
  check's flags without extra passes; start levels by size (``coarse_levels`` 0: 3 at 1000³);
  and ``--huge-streaming auto`` (or ``two-copy``) stores two copies where the device holds
  them (130 GB at the fine checks: an H200's 150 GB, not the issue's 80 GB H100), tiled two
  copies having run 1.29x the in-place rate on the rock-like 192³ pack (H100); the default
  stays in place (66.5 GB). ``--setup-only`` measures the set-up part by part (with
  ``--host-too`` the host's labels and tiling again, compared; ``--profile-start`` the first
  fine run's allocation and two chunks of 200 steps under cProfile).

GPU commands: 200³ and 300³ (both protocols, formation factor):
``python benchmarks/rock_time_to_answer/rock_tensor.py``; the 1000³ mirrored image (about 71
GB of device memory), one axis to convergence (expected: about 270 s of study, plus about 40 s
of image generation):
``python benchmarks/rock_time_to_answer/rock_tensor.py --sizes --huge --axes x --max-seconds 300``;
the tensor (expected about 610 s of study: over a 10-minute device command with the image, so
each level's and fine run's wall time is capped at 120 s, and runs that need more, about 150 s
expected, are reported not converged):
``python benchmarks/rock_time_to_answer/rock_tensor.py --sizes --huge --max-seconds 120``
(``--coarse-levels 3`` by default; ``--out`` default: ``benchmarks/rock_time_to_answer/results``).
CPU smoke test: ``--quick`` (one 16³ image, NumPy, float64).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import signal
import sys
import threading
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from geometries import VoxelGeometry  # noqa: E402
from geometries.generators import random_sphere_pack  # noqa: E402
from solver.backends import get_backend  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.rock import PermeabilitySettings, run_study  # noqa: E402
from solver.rock.uncertainty import alternation_residual  # noqa: E402

log = logging.getLogger("rock_tensor")

#: (edge, voxel size m, protocol, target seconds) of the issue's three images.
CASES = {200: (5.345e-6, "both", 20.0), 300: (4.8e-6, "both", 45.0),
         1000: (5.345e-6, "mirrored", 300.0)}


def image(n: int, voxel_size: float, porosity: float = 0.2, grain: float = 20.0,
          seed: int = 3) -> VoxelGeometry:
    """The sandstone-like n³ image of the issue's runs (overlapping grains, fixed seed)."""
    pack = random_sphere_pack((n, n, n), porosity, diameter=min(grain, n / 3), seed=seed)
    return VoxelGeometry(pack.solid, voxel_size=voxel_size, name=f"sphere pack {n}^3")


def measure(n: int, protocol: str, voxel_size: float, precision: str, backend,
            huge: bool = False, pressure_start: str = "rest", axes: list[str] | None = None,
            max_seconds: float = 0.0, coarse_levels: int = 1,
            coarse_factor: float = 10.0, streaming: str = "in-place",
            tile_storage: str = "auto", overrides: dict | None = None,
            shape: dict | None = None) -> dict:
    """One study (all axes) of the n³ image; wall seconds, phases and k per run. ``huge``: no
    formation factor, one population copy (the issue's 1000³ target is the mirrored k
    tensor); ``coarse_levels``, ``coarse_factor``: the coarse start's levels and tolerance
    factor; ``overrides``: other :class:`~solver.rock.PermeabilitySettings` (a deep
    reference's ``tolerance`` and ``max_steps``); ``shape``: :func:`image`'s porosity, grain
    and seed where not the issue's."""
    tic = time.perf_counter()
    sample = image(n, voxel_size, **(shape or {}))
    generated = time.perf_counter() - tic
    # The 1000³ mirrored box (2e9 voxels, 4e8 fluid) holds two copies of its populations by
    # default where they fit in the tile storage asked for (compact 69.6 GB: the issue's 80
    # GB H100 too; tiled not even an H200), else one (in place, the AA pattern: the same
    # steps, bit for bit); :func:`huge_streaming`.
    config = SimulationConfig(precision=precision, collision="TRT",
                              streaming=huge_streaming(n, backend, streaming, tile_storage,
                                                       precision) if huge
                              else "two-copy", tile_storage=tile_storage if huge else "auto")
    settings = PermeabilitySettings(protocol=protocol, axes=axes or ["x", "y", "z"],
                                    formation_factor=not huge, pressure_start=pressure_start,
                                    max_seconds=max_seconds, coarse_levels=coarse_levels,
                                    coarse_tolerance_factor=coarse_factor, **(overrides or {}))
    peak = DevicePeak(backend)
    tic = time.perf_counter()
    try:
        study = run_study(sample, config, settings, backend, on_check=peak.sample)
    finally:
        peak.stop()
    seconds = time.perf_counter() - tic
    summary = study.as_dict()
    return {"size": n, "protocol": protocol, "porosity": sample.porosity,
            "voxel_size_m": voxel_size, "seconds": seconds, "image_seconds": generated,
            "phases_s": summary["phases_s"], "tensor_mD": summary["tensor_mD"],
            "protocol_difference": summary["protocol_difference"],
            "converged": study.converged,
            "runs": [{"protocol": r.protocol, "axis": r.axis, "k_voxel2": r.k_lattice,
                      "k_mD": r.k_mD, "steps": r.steps, "coarse_steps": r.coarse_steps,
                      "start_steps": r.start_steps, "work_steps": r.work_steps,
                      "seconds": r.seconds, "phases_s": r.phases,
                      # k's period-2 part: k is the mean of two steps at every check, and
                      # what the decay leaves of it in that mean (solver.rock.uncertainty)
                      "alternation": None if r.pair is None else r.pair.alternation,
                      "alternation_residual": None if r.pair is None else
                      alternation_residual(r.pair, r.previous_pair),
                      # (step, k in voxel²) at every check: a remainder estimate can be
                      # replayed on it against a deep run (deep_compare.py)
                      "history": [list(h) for h in r.history]}
                     for r in study.results],
            "coarse_levels": coarse_levels, "coarse_tolerance_factor": coarse_factor,
            "streaming": config.streaming, "tile_storage": config.tile_storage,
            "device_memory_GB": _capacity_gb(backend),
            "device_pool_peak_GB": peak.gigabytes(),
            "device_pool_polled_peak_GB": peak.polled_gigabytes(), "study": summary}


#: The generator's mirrored rock image (:func:`image`: porosity 0.2, 20-voxel grains) as the
#: plan reads it, tiled from the origin: (porosity, tile utilisation eta_t) of the mirrored box
#: and of that box coarsened by 2, the start's finest level, which the prolongation holds
#: beside the fine run's fresh allocation. Measured on a 160³ sample (CPU; the fine eta_t also
#: on the 1000³ run's tiling, rock_tensor-*-1000-*.json): 0.200 / 0.478 and 0.210 / 0.335.
MIRRORED_BOX, HALF_BOX = (0.200, 0.478), (0.210, 0.335)


def limit_device_memory(nbytes: float) -> None:
    """Cap CuPy's pool at ``nbytes`` (a smaller GPU's memory): allocations beyond it fail, and
    the backend's ``memory_capacity`` (the plan's storage choice) reports the cap."""
    import cupy

    cupy.get_default_memory_pool().set_limit(size=int(nbytes))


def _capacity_gb(backend) -> float | None:
    """The device memory the plan chose for, GB (None: NumPy)."""
    capacity = backend.memory_capacity()
    return None if capacity is None else capacity / 1e9


def huge_streaming(n: int, backend, choice: str = "auto", tile_storage: str = "auto",
                   precision: str = "float32") -> str:
    """The streaming of the huge image's runs: ``choice``, or with 'auto' two copies where
    the run with two copies fits the device in the tile storage asked for
    (:func:`two_copy_bytes`: the plan's storage and state estimate), else in place (one copy,
    the same results bit for bit). At 1000³: compact (what 'auto' storage takes there) fits an
    80 GB H100 and an H200; tiled fits neither (it ran out of an H200's memory, acb1c4a)."""
    from solver.backends import device_capacity

    if choice != "auto":
        return choice
    capacity = device_capacity(backend)
    if capacity is None:
        return "in-place"
    need = two_copy_bytes(n, capacity, tile_storage, precision)
    return "two-copy" if need <= capacity else "in-place"


def counted_box(shape: tuple[int, int, int], box: tuple[float, float], tile_storage: str,
                precision: str, capacity: int | None, streaming: str = "two-copy"):
    """The run of a mirrored rock box of ``shape`` as the plan sees it, from counts
    (:class:`~solver.tiling.CountedTiling`: ``box`` = (porosity, eta_t)), TRT, D3Q19."""
    import numpy as np

    from solver.lattice import get_lattice
    from solver.problem import Problem
    from solver.tiling import CountedTiling

    porosity, eta = box
    n_fluid = int(round(porosity * np.prod(shape, dtype=np.float64)))
    tiling = CountedTiling(shape, n_fluid, int(np.ceil(n_fluid / (64 * eta))))
    config = SimulationConfig(precision=precision, collision="TRT", streaming=streaming)
    return Problem(lattice=get_lattice("D3Q19"), tiling=tiling, rates=None, force=np.zeros(3),
                   incompressible=True, rho0=1.0, periodic=(True, False, False),
                   dtype=np.dtype(precision), collision=config.collision_model(),
                   storage_kind="auto", streaming=streaming, tile_storage=tile_storage,
                   layout="xyz", tiles_per_block=2, device_capacity=capacity)


def state_bytes(problem) -> int:
    """Device bytes of ``problem``'s resident state in the storage its plan takes (tiled:
    ``Problem.tiled_state_bytes``; compact: ``compact_state_estimate``, 64-bit offsets)."""
    from solver.backends.plan import compact_state_estimate, plan_for

    plan = plan_for(problem)
    return compact_state_estimate(problem, plan.pad) if plan.compact \
        else problem.tiled_state_bytes()


def two_copy_bytes(n: int, capacity: int | None, tile_storage: str = "auto",
                   precision: str = "float32") -> int:
    """Device bytes the n³ image's fine mirrored run with two copies needs at its peak in
    ``tile_storage`` (the plan's choice for 'auto' on ``capacity``): its state and the larger
    of the plan's headroom (:func:`~solver.backends.plan.device_headroom`: checks) and what
    the prolongation holds beside it, the start's finest level (the box coarsened by 2,
    :data:`HALF_BOX`, two copies in the storage the plan gives it) with its density and
    velocity per tile node in the run's value type. At 1000³ on an H200 (150.1e9 B) this is
    compact 80 GB (the run's pool peaked at 81.5 GB, acb1c4a) and tiled 155 GB (it ran out
    of memory asking 127.6 GB beside 25.6 GB held)."""
    from solver.backends.plan import device_headroom

    fine = counted_box((2 * n, n, n), MIRRORED_BOX, tile_storage, precision, capacity)
    level = counted_box((n, n // 2, n // 2), HALF_BOX, tile_storage, precision, capacity)
    t = level.tiling
    moments = (1 + 3) * level.dtype.itemsize * t.n_tiles * t.nodes_per_tile
    return state_bytes(fine) + max(device_headroom(fine), state_bytes(level) + moments)


def measure_setup(n: int, voxel_size: float, precision: str, backend, axes: list[str],
                  coarse_levels: int, host_too: bool = False, profile: bool = False,
                  streaming: str = "in-place") -> dict:
    """The host set-up of the mirrored tensor of the n³ image alone (no steps), part by part,
    as :func:`solver.rock.run_study` makes it: the pore labels once, then per axis the pore
    check, the protocol geometry (mirror, drive), the start levels (coarsening and their pore
    checks) and the tiling with the host tables of the fine run and of each level. On CuPy
    the labels and the first axis's tilings are made on the device, the later axes' on the
    host, as a study makes them beside the steps (:mod:`solver.backends.cuda.rock_setup`);
    ``host_too``: also time the first axis's labels and fine tiling on the host (the parts
    the device took over), and check that they are the same; ``profile``: also allocate the
    first axis's fine run, make its k check and step it once (one check interval, from rest)
    under cProfile (:func:`_profiled_start`)."""
    from solver.rock.protocol import sample_labels

    tic = time.perf_counter()
    sample = image(n, voxel_size)
    out: dict = {"size": n, "image_seconds": time.perf_counter() - tic, "axes": {}}
    config = SimulationConfig(precision=precision, collision="TRT",
                              streaming=huge_streaming(n, backend, streaming,
                                                       precision=precision))
    settings = PermeabilitySettings(protocol="mirrored", axes=axes, formation_factor=False,
                                    coarse_levels=coarse_levels)
    out["streaming"] = config.streaming
    tic = time.perf_counter()
    labels = sample_labels(sample, config, backend)  # before the first run: on the device
    out["labels_seconds"] = time.perf_counter() - tic
    try:
        for name in axes:
            out["axes"][name] = {}
            _setup_axis(out["axes"][name], sample, config, settings, backend, labels, name,
                        first=name == axes[0], host_too=host_too, profile=profile)
    except Stopped as exc:  # a time limit's SIGTERM: report what was measured
        out["stopped"] = str(exc)
    return out


class Stopped(Exception):
    """The process was asked to stop (SIGTERM, e.g. from ``timeout``)."""


def _setup_axis(part: dict, sample, config, settings, backend, labels, name: str,
                first: bool, host_too: bool, profile: bool) -> None:
    """One axis of :func:`measure_setup`, its seconds and sizes written into ``part`` as they
    are measured (a stopped run keeps those)."""
    from solver.rock import measure as rock_measure
    from solver.rock.protocol import checked_sample, setup_protocol

    axis = "xyz".index(name)
    tic = time.perf_counter()
    checked = checked_sample(sample, config, axis, labels)
    part["pore_check"] = time.perf_counter() - tic
    tic = time.perf_counter()
    setup = setup_protocol(sample, config, axis, "mirrored", settings, checked)
    part["protocol_geometry"] = time.perf_counter() - tic
    tic = time.perf_counter()
    # As run_study: the first run's set-up on the device (idle), the others' on the host
    # (they overlap the steps of the run before).
    prepared = rock_measure.prepare_axis(setup, settings, backend, first)
    part["prepare_axis"] = time.perf_counter() - tic
    part.update({f"prepare_{k}": v for k, v in prepared.phases.items()})
    tiling = prepared.sim.tiling
    part.update(tiles=int(tiling.n_tiles), eta_t=float(tiling.eta_t),
                offset=list(tiling.offset), fluid_nodes=int(tiling.n_fluid),
                levels=[list(s.geometry.shape) for s, _ in prepared.levels])
    if profile and first:  # before the host parts: the device's numbers matter more
        try:
            _profiled_start(part, prepared.sim, setup)
        except Exception as exc:  # e.g. out of device memory with two copies: say so
            log.exception("profiled start failed")
            part["profile_error"] = repr(exc)
            prepared.sim.close()
    if host_too and first:
        part.update(_host_parts(sample, config, setup, labels, tiling))
    log.info("set-up along %s: %s", name,
             {k: v for k, v in part.items() if not k.endswith("_profile")})


def _profiled_start(out: dict, sim, setup) -> None:
    """Seconds of the fine run's allocation, its k check's set-up and its first 200 steps
    (compilation, graph capture; from rest), and the 25 costliest calls of each (cProfile,
    cumulative seconds): where a study's ``allocation`` and ``compile_first_chunk`` go."""
    import cProfile
    import io
    import pstats

    from solver.rock.check import KCheck

    check = None

    def allocate():
        sim.allocate()

    def make_check():
        nonlocal check
        check = KCheck(sim, setup.axis, setup.window, None)

    def first_chunk():
        sim.step(200)
        check.read()

    def second_chunk():
        sim.step(200)
        check.read()

    for name, task in (("allocate", allocate), ("k_check", make_check),
                       ("first_chunk", first_chunk), ("second_chunk", second_chunk)):
        profile = cProfile.Profile()
        tic = time.perf_counter()
        profile.enable()
        task()
        profile.disable()
        out[f"{name}_seconds"] = time.perf_counter() - tic
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(25)
        out[f"{name}_profile"] = text.getvalue()
    pool = _pool_bytes()
    if pool is not None:
        out["pool_GB_after_chunks"] = pool / 1e9
    out["fluid_updates_per_s_second_chunk"] = (200 * sim.problem.n_fluid
                                               / out["second_chunk_seconds"])
    sim.close()


def _pool_bytes() -> int | None:
    """Bytes CuPy's memory pool holds now; None without CuPy."""
    try:
        import cupy
    except ImportError:
        return None
    return int(cupy.get_default_memory_pool().total_bytes())


def _host_parts(sample, config, setup, labels, tiling) -> dict:
    """The first axis's labels and fine tiling made on the host again: seconds, and whether
    they equal the study's (labels: the same components)."""
    import numpy as np

    from solver.problem import tile_offset
    from solver.rock.protocol import sample_labels
    from solver.tiling import Tiling

    tic = time.perf_counter()
    host_labels = sample_labels(sample, config)
    seconds = time.perf_counter() - tic
    same = bool(np.array_equal(host_labels.components, labels.components)
                and np.array_equal(host_labels.sizes, labels.sizes))
    del host_labels
    tic = time.perf_counter()
    host = Tiling.build(setup.geometry.solid, setup.config.tile_edge,
                        tile_offset(setup.config, 3))
    tiling_seconds = time.perf_counter() - tic
    same_tiles = bool(host.offset == tiling.offset and np.array_equal(host.tiles, tiling.tiles)
                      and np.array_equal(host.solid, tiling.solid))
    return {"host_labels_seconds": seconds, "host_labels_identical": same,
            "host_fine_tiling_seconds": tiling_seconds, "host_tiles_identical": same_tiles}


#: Seconds between two samples of the memory pool (:class:`DevicePeak`).
POLL_SECONDS = 0.05


class DevicePeak:
    """The most bytes CuPy's memory pool held at any fine check of a study, and (``polled``)
    at any of its samples every :data:`POLL_SECONDS` over the whole study from a daemon thread
    (the prolongation's moment, coarse and fine runs together, falls between checks; a
    transient shorter than a poll may still be missed); None without CuPy."""

    def __init__(self, backend) -> None:
        self.pool = None
        if backend.name == "cupy":
            import cupy

            self.pool = cupy.get_default_memory_pool()
        self.most = self.polled = 0
        self.start = time.perf_counter()
        self.done = threading.Event()
        if self.pool is not None:
            threading.Thread(target=self._poll, name="pool-peak", daemon=True).start()

    def _poll(self) -> None:
        while not self.done.wait(POLL_SECONDS):
            self.polled = max(self.polled, int(self.pool.total_bytes()))

    def stop(self) -> None:
        """End the polling (the study is over)."""
        self.done.set()

    def polled_gigabytes(self) -> float | None:
        """The polled peak in GB (1e9 bytes)."""
        return None if self.pool is None else max(self.polled, self.most) / 1e9

    def sample(self, name: str = "", step: int = 0, k: float = 0.0,
               change: float = float("inf")) -> None:
        """Called at each fine check (``run_study``'s ``on_check``: run name, step, k in
        voxel², change per 1000 steps); logs the check, so a long run shows its progress."""
        if self.pool is not None:
            self.most = max(self.most, int(self.pool.total_bytes()))
        log.info("  %6.1f s %s: step %d, k %.6g voxel², change %.3g per 1000 steps, pool %.1f GB",
                 time.perf_counter() - self.start, name, step, k, change, self.most / 1e9)

    def gigabytes(self) -> float | None:
        """The peak in GB (1e9 bytes)."""
        return None if self.pool is None else self.most / 1e9


def baseline_of(baseline: Path, size: int) -> dict | None:
    """The earlier ``tensor_mD`` and formation factors of the ``size``³ image: from a
    ``summary.json`` (its tensor, taken as the 200³ image's) or from an earlier report of this
    benchmark (its row of that size); None when it has none."""
    data = json.loads(baseline.read_text())
    if "rows" not in data:
        return {"tensor_mD": data["tensor_mD"],
                "formation_factor": data.get("formation_factor") or {}} if size == 200 else None
    row = next((r for r in data["rows"] if r["size"] == size), None)
    if row is None:
        return None
    return {"tensor_mD": row["tensor_mD"],
            "formation_factor": row["study"].get("formation_factor") or {}}


def compare(row: dict, old: dict) -> dict:
    """Relative k difference per protocol and axis against an earlier run (:func:`baseline_of`),
    and of F per axis (under the key ``F``)."""
    out = {p: {a: row["tensor_mD"][p][a] / k - 1.0 for a, k in axes.items()
               if k and row["tensor_mD"].get(p, {}).get(a)}
           for p, axes in old["tensor_mD"].items()}
    now = row["study"].get("formation_factor") or {}
    out["F"] = {a: now[a]["formation_factor"] / c["formation_factor"] - 1.0
                for a, c in old["formation_factor"].items() if a in now}
    return out


class CompileLog:
    """NVRTC compilations of this process (CuPy's, the solver's and CuPy's own elementwise
    kernels alike): count, seconds and the kernel names per compile, to see which variants
    are compiled and how often (issue 29 item 1c). A no-op without CuPy."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, float]] = []
        try:
            from cupy.cuda import compiler
        except ImportError:
            return
        original = getattr(compiler, "_compile_using_nvrtc_no_warning", None)
        if original is None:
            return

        def timed(source, *args, **kwargs):
            tic = time.perf_counter()
            try:
                return original(source, *args, **kwargs)
            finally:
                names = re.findall(r"__global__\s+void\s+(\w+)", source)
                self.entries.append((",".join(names[:3]) or "?", time.perf_counter() - tic))

        compiler._compile_using_nvrtc_no_warning = timed

    def summary(self) -> dict:
        """Count, total seconds and seconds per kernel name (largest first)."""
        per: dict[str, list[float]] = {}
        for name, seconds in self.entries:
            per.setdefault(name, []).append(seconds)
        ranked = sorted(per.items(), key=lambda kv: -sum(kv[1]))
        return {"count": len(self.entries), "seconds": sum(s for _, s in self.entries),
                "by_kernel": [{"kernels": k, "compiles": len(v), "seconds": sum(v)}
                              for k, v in ranked]}


def run(args: argparse.Namespace) -> dict:
    """Measure every chosen image; the report."""
    compiles = CompileLog()
    backend = get_backend(args.backend)
    if args.device_memory:
        limit_device_memory(args.device_memory * 1e9)
    sizes = [16] if args.quick else [*args.sizes, *([args.huge_size] if args.huge else [])]
    rows = []
    if args.setup_only:
        n = args.huge_size
        rows.append(measure_setup(n, CASES.get(n, (5.345e-6,))[0], args.precision, backend,
                                  args.axes, args.coarse_levels, args.host_too,
                                  args.profile_start, args.huge_streaming))
        sizes = []
    for n in sizes:
        huge = args.huge and n == args.huge_size
        voxel, protocol, target = CASES.get(n, (5.345e-6, "mirrored" if huge else "both", None))
        before = len(compiles.entries)
        try:
            row = measure(n, protocol, voxel, args.precision, backend, huge, args.pressure_start,
                          args.axes if huge else None, args.max_seconds if huge else 0.0,
                          args.coarse_levels if huge else 1,
                          args.coarse_factor if huge else 10.0, args.huge_streaming,
                          args.huge_storage, overrides(args), image_shape(args))
        except Exception as exc:  # e.g. out of device memory: report it with the rest
            if not huge:
                raise
            log.exception("%d^3 failed", n)
            rows.append({"size": n, "protocol": protocol, "error": repr(exc),
                         "target_seconds": target})
            continue
        row["target_seconds"] = target
        row["compiles"] = {"count": len(compiles.entries) - before,
                           "seconds": sum(s for _, s in compiles.entries[before:])}
        old = baseline_of(Path(args.baseline), n) if args.baseline else None
        if old is not None:
            row["k_difference_vs_baseline"] = compare(row, old)
            worst = max((abs(d) for p, axes in row["k_difference_vs_baseline"].items()
                         if p != "F" for d in axes.values()), default=0.0)
            row["k_within_0.1_percent"] = worst <= 1e-3
        log.info("%d^3 %s: %.1f s %s", n, protocol, row["seconds"], row["phases_s"])
        rows.append(row)
    info = backend.device_info()
    return {"device": info.get("name"), "backend": backend.name, "setup_only": args.setup_only,
            "date": date.today().isoformat(), "commit": git_commit(),
            "precision": args.precision, "pressure_start": args.pressure_start,
            "settings_overrides": overrides(args), "image": image_shape(args), "rows": rows,
            "compiles": compiles.summary()}


def image_shape(args: argparse.Namespace) -> dict:
    """The generated image's porosity, grain diameter (voxels) and seed where the command line
    changes them from the issue's (0.2, 20, 3): other images of the same kind, e.g. to check
    the k interval on images it was not chosen on."""
    chosen = {"porosity": args.porosity, "grain": args.grain, "seed": args.seed}
    return {name: value for name, value in chosen.items() if value is not None}


def overrides(args: argparse.Namespace) -> dict:
    """The PermeabilitySettings the command line changes from their defaults (a deep
    reference: ``--tolerance 1e-5``)."""
    chosen = {"tolerance": args.tolerance, "max_steps": args.max_steps}
    return {name: value for name, value in chosen.items() if value is not None}


def _alternation(value: float | None) -> str:
    """A run's period-2 alternation (relative) for the table; '-' where not recorded."""
    return "-" if value is None else f"{value:.2e}"


def markdown(report: dict) -> str:
    """The report as a Markdown table per image."""
    out = [f"# Rock tensor time to answer ({report['device']}, {report['date']}, "
           f"commit {report['commit']}, {report['precision']}, pressure start "
           f"{report.get('pressure_start', 'rest')})", ""]
    if report.get("image"):
        shape = ", ".join(f"{k} {v}" for k, v in report["image"].items())
        out += [f"Generated images with {shape} (the issue's: porosity 0.2, grain 20, seed 3).",
                ""]
    if report.get("settings_overrides"):
        changed = ", ".join(f"{k} {v}" for k, v in report["settings_overrides"].items())
        out += [f"**Settings changed from the defaults: {changed}** (a deep reference when the "
                "tolerance is: its seconds are not a time to answer).", ""]
    for row in report["rows"]:
        if report.get("setup_only"):
            out += _setup_lines(row)
            continue
        target = row["target_seconds"]
        if "error" in row:
            out += [f"## {row['size']}³, protocol {row['protocol']}: failed: {row['error']}", ""]
            continue
        out += [f"## {row['size']}³, protocol {row['protocol']}, porosity "
                f"{row['porosity']:.3f}: **{row['seconds']:.1f} s**"
                + (f" (target {target:.0f} s)" if target else ""), "",
                "| phase | seconds |", "|---|---|"]
        out += [f"| {name} | {s:.2f} |" for name, s in row["phases_s"].items()]
        out += ["", f"(phases sum {sum(row['phases_s'].values()):.1f} s: on a GPU the host "
                "set-up of the next run overlaps the device's steps)"]
        out += ["", "| protocol | axis | k (mD) | period-2 alternation | its residual in k | "
                "steps | coarse steps (1/2, 1/4, ...) | work (fine steps) | seconds |",
                "|---|---|---|---|---|---|---|---|---|"]
        out += [f"| {r['protocol']} | {r['axis']} | {r['k_mD']:.5g} | "
                f"{_alternation(r.get('alternation'))} | "
                f"{_alternation(r.get('alternation_residual'))} | {r['steps']} | "
                f"{', '.join(str(n) for n in r.get('start_steps') or [r['coarse_steps']])} | "
                f"{r.get('work_steps', 0):.0f} | {r['seconds']:.1f} |" for r in row["runs"]]
        if row.get("device_pool_peak_GB") is not None:
            used = max((len(r.get("start_steps") or []) for r in row["runs"]), default=0)
            memory = row.get("device_memory_GB")
            out += ["", f"Streaming {row.get('streaming', 'in-place')}, tile storage "
                    f"{row.get('tile_storage', 'auto')} (planned for {memory or float('nan'):.1f} "
                    "GB of device memory); coarse start levels "
                    f"{row.get('coarse_levels', 1)} (0: by size), {used} run (tolerance x "
                    f"{row.get('coarse_tolerance_factor', 10.0):g}); CuPy pool at most "
                    f"{row['device_pool_peak_GB']:.2f} GB at a fine check, "
                    f"{row.get('device_pool_polled_peak_GB') or float('nan'):.2f} GB at most "
                    f"in samples every {POLL_SECONDS:g} s over the study"]
        out += ["", f"NVRTC compiles during this image: {row['compiles']['count']} "
                f"({row['compiles']['seconds']:.1f} s)"]
        study = row["study"]
        if study.get("formation_factor"):
            out += ["", "F per axis: " + ", ".join(
                f"{a} {c['formation_factor']:.4g}" for a, c in study["formation_factor"].items())]
        if "k_difference_vs_baseline" in row:
            out += ["", "k (and F) against the baseline: " + ", ".join(
                f"{p} {a} {100 * d:+.3f} %" for p, axes in row["k_difference_vs_baseline"].items()
                for a, d in axes.items())
                + f"; k within 0.1 %: {row['k_within_0.1_percent']}"]
        out.append("")
    return "\n".join(out + _compile_lines(report))


def _setup_lines(row: dict) -> list[str]:
    """The set-up-only report of one image: the labels, then a table of the parts per axis."""
    out = [f"## {row['size']}³ mirrored tensor, host set-up only (no steps)", "",
           f"Image generated in {row['image_seconds']:.1f} s (outside the study); pore labels "
           f"(once per sample): {row['labels_seconds']:.2f} s", ""]
    if not row["axes"]:
        return out + [f"Stopped before any axis: {row.get('stopped')}", ""]
    names = [k for k, v in next(iter(row["axes"].values())).items()
             if k.endswith("_seconds") or k in ("pore_check", "protocol_geometry")
             or k.startswith("prepare")]
    out += ["| axis | " + " | ".join(names) + " | tiles | eta_t |",
            "|---|" + "---|" * (len(names) + 2)]
    for axis, part in row["axes"].items():
        out.append(f"| {axis} | " + " | ".join(f"{part[k]:.2f}" if k in part else "-"
                                                 for k in names)
                   + f" | {part.get('tiles', '-')} | {part.get('eta_t', float('nan')):.3f} |")
    if row.get("stopped"):
        out += ["", f"**Stopped** ({row['stopped']}): the parts above were measured."]
    errors = [f"{a}: {p['profile_error']}" for a, p in row["axes"].items()
              if "profile_error" in p]
    if errors:
        out += ["", "Profiled start failed: " + "; ".join(errors)]
    first = next(iter(row["axes"].values()))
    if "host_labels_seconds" in first:
        out += ["", f"On the host (first axis): labels {first['host_labels_seconds']:.2f} s "
                f"(identical: {first['host_labels_identical']}), fine tiling "
                f"{first['host_fine_tiling_seconds']:.2f} s (identical tiles: "
                f"{first['host_tiles_identical']})"]
    if "second_chunk_seconds" in first:
        out += ["", f"First axis's fine run ({row.get('streaming')}, from rest, profiled): "
                f"allocation {first['allocate_seconds']:.2f} s, k check "
                f"{first['k_check_seconds']:.2f} s, first 200 steps "
                f"{first['first_chunk_seconds']:.2f} s, next 200 steps "
                f"{first['second_chunk_seconds']:.2f} s "
                f"({first['fluid_updates_per_s_second_chunk'] / 1e9:.2f} G fluid updates/s); "
                f"pool {first.get('pool_GB_after_chunks', float('nan')):.1f} GB", ""]
        for name in ("allocate", "k_check", "first_chunk", "second_chunk"):
            out += [f"<details><summary>cProfile: {name}</summary>", "", "```",
                    first[f"{name}_profile"].strip(), "```", "", "</details>", ""]
    return out + ["", "(seconds; prepare_axis = prepare_tiling + prepare_connectivity: the "
                  "fine run's tiling and tables, the start levels' coarsening and tiling)", ""]


def _compile_lines(report: dict) -> list[str]:
    """The compile table: which kernels were compiled, how often, seconds."""
    c = report.get("compiles") or {}
    if not c.get("count"):
        return []
    out = [f"## NVRTC compiles: {c['count']} ({c['seconds']:.1f} s)", "",
           "| kernels | compiles | seconds |", "|---|---|---|"]
    out += [f"| {k['kernels']} | {k['compiles']} | {k['seconds']:.2f} |"
            for k in c["by_kernel"][:30]]
    return out + [""]


def write(report: dict, out: Path) -> tuple[Path, Path]:
    """Write the JSON and Markdown reports; their paths."""
    device = re.sub(r"[^A-Za-z0-9]+", "-", str(report["device"] or report["backend"])).strip("-")
    sizes = "-".join(str(row["size"]) for row in report["rows"]) + (
        "-ramp" if report.get("pressure_start") == "ramp" else "") + (
        "-setup" if report.get("setup_only") else "") + "".join(
        f"-{name.replace('_', '')}{value:g}"
        for name, value in {**report.get("image", {}),
                            **report.get("settings_overrides", {})}.items())
    return write_json_md(out, f"rock_tensor-{device}-{report['date']}-{sizes}", report,
                         markdown(report), indent=2, default=float)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", default=[200, 300],
                   help="image edges (none: only --huge)")
    p.add_argument("--huge", action="store_true", help="also the 1000³ mirrored tensor")
    p.add_argument("--axes", nargs="+", default=["x", "y", "z"], choices=["x", "y", "z"],
                   help="axes of the --huge image (e.g. x alone, to time one axis)")
    p.add_argument("--huge-size", type=int, default=1000,
                   help="edge of the --huge image (1000: the issue's target; smaller for a "
                        "check of the same set-up)")
    p.add_argument("--coarse-levels", type=int, default=0,
                   help="coarse start levels of the --huge image (0: by size, the default of "
                        "PermeabilitySettings: 3 at 400³ or more, from 1/8 via 1/4 and 1/2 "
                        "resolution; 1: the single 1/2 start)")
    p.add_argument("--coarse-factor", type=float, default=10.0,
                   help="the --huge image's coarse runs (but the coarsest of a chain, which "
                        "converges to the tolerance) stop at this times the tolerance")
    p.add_argument("--huge-streaming", default="auto",
                   choices=["auto", "in-place", "two-copy"],
                   help="population copies of the --huge image's runs (auto, the default: two "
                        "where the run with two copies fits the device in the --huge-storage "
                        "asked for, by the plan's estimate: at 1000³ compact fits an 80 GB "
                        "H100, tiled not even an H200; else one; huge_streaming)")
    p.add_argument("--huge-storage", default="auto", choices=["auto", "tiled", "compact"],
                   help="tile storage of the --huge image's runs (auto: the plan's choice on "
                        "the device's memory, or on --device-memory)")
    p.add_argument("--device-memory", type=float, default=0.0,
                   help="cap CuPy's memory pool at this many GB (e.g. 85.5: an 80 GB H100's "
                        "memory on a larger GPU); the plan chooses for the cap")
    p.add_argument("--max-seconds", type=float, default=0.0,
                   help="wall limit of each --huge run, s (0: none; a stopped run is reported "
                        "not converged)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="k tolerance per 1000 steps (default: PermeabilitySettings', 1e-3); "
                        "1e-5 for a deep reference of the same image (deep_compare.py)")
    p.add_argument("--max-steps", type=int, default=None,
                   help="step limit of each run (default: PermeabilitySettings')")
    p.add_argument("--porosity", type=float, default=None,
                   help="of the generated images (default 0.2)")
    p.add_argument("--grain", type=float, default=None,
                   help="grain diameter of the generated images, voxels (default 20)")
    p.add_argument("--seed", type=int, default=None, help="of the generated images (default 3)")
    p.add_argument("--precision", default="float32", choices=["float32", "float64"])
    p.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    p.add_argument("--pressure-start", default="rest", choices=["rest", "ramp"],
                   help="start of the pressure runs (PermeabilitySettings.pressure_start)")
    p.add_argument("--baseline", default=None,
                   help="an earlier report of this benchmark (JSON: every size it has) or "
                        "summary.json of a 200³ run: k and F compared (target: k within 0.1 %%)")
    p.add_argument("--out", default="benchmarks/rock_time_to_answer/results",
                   help="folder for JSON + md")
    p.add_argument("--quick", action="store_true", help="CPU smoke test: one 16³ image")
    p.add_argument("--setup-only", action="store_true",
                   help="only the host set-up of the --huge-size image's mirrored runs along "
                        "--axes, part by part (no steps; :func:`measure_setup`)")
    p.add_argument("--host-too", action="store_true",
                   help="with --setup-only: also the first axis's labels and fine tiling on "
                        "the host, timed and compared")
    p.add_argument("--profile-start", action="store_true",
                   help="with --setup-only: also allocate the first axis's fine run and step "
                        "it 200 steps under cProfile (allocation, k check, first chunk)")
    args = p.parse_args(argv)
    if args.baseline and not Path(args.baseline).is_file():  # said now, not after the runs
        log.warning("--baseline %s: no such file; k is not compared", args.baseline)
        args.baseline = None
    if args.quick:
        args.backend, args.precision = "numpy", "float64"
    return args


def _stop(signum, frame) -> None:
    raise Stopped(f"signal {signum} after {time.perf_counter() - STARTED:.0f} s")


STARTED = time.perf_counter()


def main(argv: list[str] | None = None) -> int:
    """Run, write, print the Markdown."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse(argv)
    # Under `timeout`: write the report with what was measured (a stopped huge image's row
    # says so; --setup-only keeps its parts).
    signal.signal(signal.SIGTERM, _stop)
    report = run(args)
    json_path, md_path = write(report, Path(args.out))
    print(markdown(report))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
