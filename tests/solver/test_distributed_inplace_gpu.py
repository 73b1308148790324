"""In-place streaming and compact float16 storage over ranks on the GPU (``pytest -m gpu``).

In one process the ranks are :class:`~solver.backends.cuda.phases.CupyPhases` steppers talking
through the loopback hub; under ``mpirun`` they are separate processes (host transport: ranks
may share a GPU; NCCL with CUDA-graph replays where there are two GPUs or more).

* In place (one copy, AA pattern): the exchange alternates with the phase
  (:func:`~solver.distributed.halo.in_place_plans`); populations equal one in-place GPU run bit
  for bit, tiled (with Zou-He faces) and compact, read after an odd step count (every rank
  decodes phase 1) and stepped on.
* Compact float16: the ranks keep the compact storage; a tile range's random bits are those of
  one launch over the rank's tiles (:func:`~solver.storage.key_shift`), which hash local tile
  numbers, so ranks agree with one GPU to float16 rounding, two copies and in place.
* In place with driven openings (the pass in the phase's layout; the exchange after a phase-0
  step carries the phase-1 reads): populations and per-link flux equal one in-place GPU run
  bit for bit in one process, and the openings' scenario of opening_cases.py (checkpoint,
  resume, a changed outlet density) under ``mpirun -n 2``.

The CPU twins (emulated kernels, the same RankSolver): test_inplace_ranks.py. Run on 4 x H200
(commit c8d5643): all 12 passed in 20 s, the NCCL cases with 4 ranks and graph replays; with the
openings' cases (a35a877, 2 H200s, with test_distributed_compact_gpu.py): 20 passed in 56 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from solver.config import SimulationConfig
from solver.distributed import LoopbackHub, RankSolver, decompose, step_together
from solver.distributed.comm import find_mpirun
from solver.distributed.exchange import PhasedExchange
from solver.problem import Problem

from .porous_cases import as_stored, half_tolerance, make_problem, noisy_start
from .test_distributed_gpu import (
    _ROOT_MPIRUN,
    GPUS,
    NCCL_CALLS,
    REPO,
    SETTINGS,
    assert_ranks_match_one_gpu,
    config,
    needs_mpi,
    needs_two_gpus,
    opening_cases_on_one_gpu_and_two_ranks,
    porous,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def backend():
    from solver.backends import get_backend

    return get_backend("cupy")


def _one(backend, problem, f0, steps):
    """One ordinary GPU run's populations after each entry of ``steps`` (cumulative)."""
    state = backend.allocate(problem)
    backend.set_populations(state, f0)
    out = []
    for n in steps:
        backend.step(state, n)
        out.append(backend.populations(state))
    backend.release(state)
    return out


def _loopback(backend, problem, n, axis, f0):
    dec = decompose(problem.tiling, n, axis)
    hub = LoopbackHub()
    ranks = [RankSolver(problem, dec, r, backend, lambda plan, s, r=r: hub.exchange(r, plan, s))
             for r in range(n)]
    for rank in ranks:
        backend.set_populations(rank.state, f0[rank.layout.global_tiles])
        rank.stepper.idle()
    return ranks


def _gathered(ranks, like):
    got = np.full_like(like, np.nan)
    for rank in ranks:
        got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
    return got


@pytest.mark.parametrize("storage,precision", [("tiled", "float64"), ("tiled", "float32"),
                                               ("compact", "float32"), ("compact", "float64")])
def test_loopback_in_place_ranks_match_one_gpu_bitwise(backend, storage, precision):
    from solver.backends.cuda.compact_run import CompactRun

    if storage == "tiled":  # Zou-He inlet and outlet, walls, empty tiles
        problem = Problem.from_config(porous(), config(precision=precision,
                                                       streaming="in-place"))
    else:
        problem = replace(make_problem("D3Q19", precision, "TRT", offset=(1, 2, 0)),
                          streaming="in-place", tile_storage="compact")
    f0 = as_stored(problem, noisy_start(problem))
    steps = (21, 20)
    expected = _one(backend, problem, f0, steps)
    for n, axis in ((2, 0), (3, 1)):
        ranks = _loopback(backend, problem, n, axis, f0)
        assert all(isinstance(r.exchange, PhasedExchange) for r in ranks)
        assert all(isinstance(r.state, CompactRun) == (storage == "compact") for r in ranks)
        for k, want in zip(steps, expected, strict=True):
            step_together(ranks, k)
            got = _gathered(ranks, want)
            assert np.array_equal(got, want), (storage, n, axis, k,
                                               np.nanmax(np.abs(got - want)))
        for rank in ranks:
            rank.release()


@pytest.mark.parametrize("streaming", ["two-copy", "in-place"])
def test_loopback_compact_float16_ranks_match_one_gpu_to_float16_rounding(backend, streaming):
    from solver.backends.cuda.compact_run import CompactRun

    problem = replace(make_problem("D3Q19", "float32", "TRT", storage="float16",
                                   offset=(1, 2, 0)), streaming=streaming,
                      tile_storage="compact")
    f0 = noisy_start(problem)
    steps = 20
    (expected,) = _one(backend, problem, f0, (steps,))
    ranks = _loopback(backend, problem, 2, 0, f0)
    assert all(isinstance(rank.state, CompactRun) for rank in ranks)
    step_together(ranks, steps)
    got = _gathered(ranks, expected)
    for rank in ranks:
        rank.release()
    fluid = np.broadcast_to(~problem.tiling.solid[:, None, :], got.shape)
    assert np.abs(got - expected)[fluid].max() <= half_tolerance(problem, expected, steps)
    mass = [f[fluid].sum() for f in (got, expected, as_stored(problem, f0))]
    assert abs(mass[0] - mass[2]) / mass[2] < 1e-4 and abs(mass[1] - mass[2]) / mass[2] < 1e-4


def _mpirun_in_place(tmp_path, n_ranks, settings, transport, steps):
    cmd = [find_mpirun(), "-n", str(n_ranks), sys.executable, "-m", "solver.distributed",
           str(tmp_path / "solid.npy"), "--backend", "cupy", "--transport", transport,
           "--steps", *map(str, steps), "--initial", str(tmp_path / "f0.npy"),
           "--save", str(tmp_path / "out.npz"), "--axis", "0"]
    if transport == "nccl":
        cmd.append("--graphs")
    for key, value in settings.items():
        text = list(value) if isinstance(value, tuple) else value
        cmd += ["--set", f"{key}={text}".replace("'", '"').replace(" ", "")]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", **_ROOT_MPIRUN)
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@needs_mpi
@pytest.mark.parametrize("n_ranks,transport,tile_storage,precision", [
    (2, "host", "tiled", "float64"),
    (2, "host", "compact", "float32"),
    pytest.param(min(GPUS, 4), "nccl", "compact", "float32", marks=needs_two_gpus),
    pytest.param(min(GPUS, 4), "nccl", "tiled", "float32", marks=needs_two_gpus),
])
def test_mpirun_in_place_matches_one_gpu_bitwise(backend, tmp_path, n_ranks, transport,
                                                 tile_storage, precision):
    """``mpirun -n N python -m solver.distributed --set streaming=in-place``: host transport
    (step calls of odd length: phase 1 read on every rank), or NCCL with graph replays."""
    settings = {**SETTINGS, "precision": precision, "streaming": "in-place",
                "tile_storage": tile_storage}
    if tile_storage == "compact":  # the compact family has no Zou-He faces
        settings = {k: v for k, v in settings.items() if not k.startswith(("x_min", "x_max"))}
    solid = porous()
    problem = Problem.from_config(solid, SimulationConfig(**settings, backend="cupy"))
    f0 = as_stored(problem, noisy_start(problem))
    np.save(tmp_path / "solid.npy", solid)
    np.save(tmp_path / "f0.npy", f0)
    steps = NCCL_CALLS if transport == "nccl" else (7, 13)
    done = _mpirun_in_place(tmp_path, n_ranks, settings, transport, steps)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"rank tile storage: {tile_storage}" in done.stderr
    out = np.load(tmp_path / "out.npz")
    assert str(out["transport"]) == transport
    (expected,) = _one(backend, problem, f0, (sum(steps),))
    assert np.array_equal(out["populations"], expected)
    if transport == "nccl":  # the check above covered graph replays of both phases
        assert int(out["replayed_steps"]) == 32, done.stderr[-3000:]


@pytest.mark.parametrize("case", ["velocity-outflow", "pressures"])
def test_loopback_in_place_ranks_with_openings_match_one_gpu_bitwise(backend, case):
    from solver.simulation import Simulation

    from .opening_cases import channel, channel_config

    sim = Simulation(channel(), channel_config(case, streaming="in-place"), backend=backend)
    problem = sim.problem
    steps, expected = (13, 3), []
    for k in steps:  # 13: read in phase 1, then stepped on
        sim.step(k)
        expected.append((sim.populations(), sim.backend.iolet_flux(sim.state)))
    sim.close()
    for n, axis in ((2, 1), (8, 0)):
        ranks = _loopback(backend, problem, n, axis, problem.initial_populations())
        for k, (want, flux) in zip(steps, expected, strict=True):
            step_together(ranks, k)
            got = _gathered(ranks, want)
            links = np.full(problem.iolets.n_links, np.nan)
            for rank in ranks:
                links[rank.links] = rank.iolet_flux()
            assert np.array_equal(got, want), (case, n, axis, k)
            assert np.array_equal(links, flux), (case, n, axis, k)
        for rank in ranks:
            rank.release()


@needs_mpi
def test_mpirun_in_place_openings_on_cupy_match_one_gpu(tmp_path):
    """``mpirun -n 2`` (host transport): the openings' scenario of opening_cases.py in place
    on CuPy ranks against one in-place CuPy process."""
    assert_ranks_match_one_gpu(*opening_cases_on_one_gpu_and_two_ranks(
        tmp_path, "--streaming", "in-place"))
