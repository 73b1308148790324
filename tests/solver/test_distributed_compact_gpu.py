"""Compact storage and driven openings over ranks on the GPU (``pytest -m gpu``).

In one process the ranks are :class:`~solver.backends.cuda.phases.CupyPhases` steppers talking
through the loopback hub; under ``mpirun`` (host transport, so several ranks may share one GPU)
they are separate processes. Populations and the openings' per-link fluxes must equal one
ordinary CuPy run's bit for bit; the mean densities and wall shear stress, which one process
reduces on the GPU and rank 0 on the host from the gathered populations, to 1e-12 of their
largest value (measured on 2 x H200: wall shear stresses differ by up to 4e-18 at 1e-6).
The CPU twins: test_compact_ranks.py (emulated kernels) and test_distributed_openings.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from solver.distributed import LoopbackHub, RankSolver, decompose, step_together
from solver.distributed.comm import find_mpirun

from .porous_cases import as_stored, make_problem, noisy_start
from .test_distributed_gpu import (
    _ROOT_MPIRUN,
    assert_ranks_match_one_gpu,
    needs_mpi,
    opening_cases_on_one_gpu_and_two_ranks,
)

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def backend():
    from solver.backends import get_backend

    return get_backend("cupy")


def _loopback(backend, problem, n, axis, f0=None):
    dec = decompose(problem.tiling, n, axis)
    hub = LoopbackHub()
    ranks = [RankSolver(problem, dec, r, backend,
                        lambda plan, s, r=r: hub.exchange(r, plan, s)) for r in range(n)]
    if f0 is not None:
        for rank in ranks:
            backend.set_populations(rank.state, f0[rank.layout.global_tiles])
            rank.stepper.idle()
    return ranks


@pytest.mark.parametrize("precision,packed", [("float32", 0), ("float64", 0)])
def test_loopback_compact_ranks_match_one_compact_gpu_run_bitwise(backend, precision, packed):
    from solver.backends.cuda.compact_run import CompactRun

    problem = replace(make_problem("D3Q19", precision, "TRT", offset=(1, 2, 0)),
                      tile_storage="compact")
    f0 = as_stored(problem, noisy_start(problem))
    one = backend.allocate(problem)
    assert isinstance(one, CompactRun)
    backend.set_populations(one, f0)
    backend.step(one, 20)
    expected = backend.populations(one)
    backend.release(one)
    for n, axis in ((2, 0), (3, 0), (2, 2)):
        ranks = _loopback(backend, problem, n, axis, f0)
        assert all(isinstance(rank.state, CompactRun) for rank in ranks)
        step_together(ranks, 20)
        got = np.full_like(expected, np.nan)
        for rank in ranks:
            got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
            rank.release()
        assert np.array_equal(got, expected), (n, axis, np.nanmax(np.abs(got - expected)))


def test_loopback_float16_ranks_match_one_gpu_to_float16_rounding(backend):
    """float16 storage on the tiled storage (compact float16 ranks:
    test_distributed_inplace_gpu.py): the random bits hash local node numbers, halos move
    binary16 bits; one GPU's populations to float16 rounding."""
    from solver.backends.cuda.compact_run import CompactRun

    from .porous_cases import half_tolerance

    problem = replace(make_problem("D3Q19", "float32", "TRT", storage="float16",
                                   offset=(1, 2, 0)), tile_storage="tiled")
    f0 = noisy_start(problem)
    one = backend.allocate(problem)
    backend.set_populations(one, f0)
    backend.step(one, 20)
    expected = backend.populations(one)
    backend.release(one)
    ranks = _loopback(backend, problem, 2, 0, f0)
    assert not any(isinstance(rank.state, CompactRun) for rank in ranks)
    step_together(ranks, 20)
    got = np.full_like(expected, np.nan)
    for rank in ranks:
        got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
        rank.release()
    fluid = np.broadcast_to(~problem.tiling.solid[:, None, :], got.shape)
    assert np.abs(got - expected)[fluid].max() <= half_tolerance(problem, expected, 20)


@pytest.mark.parametrize("case", ["velocity-outflow", "pressures"])
def test_loopback_ranks_with_openings_match_one_gpu_bitwise(backend, case):
    from solver.simulation import Simulation

    from .opening_cases import channel, channel_config

    sim = Simulation(channel(), channel_config(case), backend=backend)
    sim.step(16)
    expected, flux = sim.populations(), sim.backend.iolet_flux(sim.state)
    problem = sim.problem
    for n, axis in ((2, 1), (8, 0)):
        ranks = _loopback(backend, problem, n, axis)
        step_together(ranks, 16)
        got = np.full_like(expected, np.nan)
        links = np.full(problem.iolets.n_links, np.nan)
        for rank in ranks:
            got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
            links[rank.links] = rank.iolet_flux()
            rank.release()
        assert np.array_equal(got, expected), (case, n, axis)
        assert np.array_equal(links, flux), (case, n, axis)
    sim.close()


@needs_mpi
def test_mpirun_openings_on_cupy_match_one_gpu(tmp_path):
    """``mpirun -n 2`` (host transport, ranks may share a GPU): the openings' scenario of
    tests/solver/opening_cases.py on CuPy ranks against one CuPy process."""
    assert_ranks_match_one_gpu(*opening_cases_on_one_gpu_and_two_ranks(tmp_path))


@needs_mpi
def test_mpirun_compact_on_cupy_matches_one_gpu(backend, tmp_path):
    """``mpirun -n 2 python -m solver.distributed --set tile_storage=compact`` (host
    transport) equals one compact CuPy run bit for bit."""
    from solver.config import SimulationConfig
    from solver.problem import Problem

    from .porous_cases import SHAPES, porous_solid

    settings = {"precision": "float32", "collision": "TRT", "tau": 0.7,
                "tile_storage": "compact", "body_force": [2e-5, -1e-5, 5e-6],
                "y_min": "wall", "y_max": "wall", "tile_offset": "origin"}
    solid = porous_solid(SHAPES["D3Q19"])
    problem = Problem.from_config(solid, SimulationConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in settings.items()}))
    f0 = as_stored(problem, noisy_start(problem))
    np.save(tmp_path / "solid.npy", solid)
    np.save(tmp_path / "f0.npy", f0)
    cmd = [find_mpirun(), "-n", "2", sys.executable, "-m", "solver.distributed",
           str(tmp_path / "solid.npy"), "--backend", "cupy", "--transport", "host",
           "--steps", "20", "--initial", str(tmp_path / "f0.npy"),
           "--save", str(tmp_path / "out.npz")]
    for key, value in settings.items():
        cmd += ["--set", f"{key}={value}".replace("'", '"').replace(" ", "")]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", **_ROOT_MPIRUN)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "rank tile storage: compact" in done.stderr
    one = backend.allocate(problem)
    backend.set_populations(one, f0)
    backend.step(one, 20)
    assert np.array_equal(np.load(tmp_path / "out.npz")["populations"],
                          backend.populations(one))
    backend.release(one)


@needs_mpi
def test_mpirun_windkessel_on_cupy_matches_one_gpu(tmp_path):
    """An RCR outlet over ``mpirun -n 2`` CuPy ranks (rank 0 updates it from the gathered
    flux at each interval) against one GPU (the update kernels in the openings' pass): bit
    for bit on 2 H200s (c4382ef)."""
    one, mpi = opening_cases_on_one_gpu_and_two_ranks(tmp_path, "--windkessel")
    for key in ("windkessel/populations", "windkessel/state", "windkessel/trace"):
        assert np.array_equal(one[key], mpi[key]), (key, np.abs(one[key] - mpi[key]).max())
