"""Driven openings over ranks (solver.distributed.openings): the same populations, per-link
fluxes, flow rates, mass balance, wall shear stress, resumed runs and Windkessel outlets as one
process, bit for bit (NumPy backend), in one process through the loopback exchange and under
``mpirun``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from solver.backends.numpy_backend import NumpyBackend
from solver.distributed import LoopbackHub, RankSolver, build_rank, decompose, step_together
from solver.distributed.comm import find_mpirun
from solver.distributed.openings import pass_reads
from solver.simulation import Simulation

from .opening_cases import OPENINGS, channel, channel_config, windkessel_run

pytest.importorskip("geometries.openings")

REPO = Path(__file__).resolve().parents[2]
STEPS = 16  # past the 12-step soft start


def one_process(case: str) -> Simulation:
    sim = Simulation(channel(), channel_config(case), backend=NumpyBackend(threads=1))
    sim.step(STEPS)
    return sim


@pytest.mark.parametrize("case", list(OPENINGS))
@pytest.mark.parametrize("n,axis", [(2, 1), (3, 2), (8, 0)])
def test_loopback_ranks_with_openings_match_one_process_bitwise(case, n, axis):
    sim = one_process(case)
    problem, tables = sim.problem, sim.problem.iolets
    dec = decompose(problem.tiling, n, axis)
    hub = LoopbackHub()
    ranks = [RankSolver(problem, dec, r, NumpyBackend(threads=1),
                        lambda plan, s, r=r: hub.exchange(r, plan, s)) for r in range(n)]
    step_together(ranks, STEPS)
    got = np.full_like(sim.populations(), np.nan)
    flux = np.full(tables.n_links, np.nan)
    for rank in ranks:
        got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
        flux[rank.links] = rank.iolet_flux()
    assert np.array_equal(got, sim.populations())
    assert np.array_equal(flux, sim.backend.iolet_flux(sim.state))
    assert np.array_equal(tables.flows(flux), tables.flows(sim.backend.iolet_flux(sim.state)))
    held = [len(rank.links) for rank in ranks]
    assert sum(held) == tables.n_links and sorted(np.concatenate(
        [rank.links for rank in ranks])) == list(range(tables.n_links))


def test_halo_carries_outflow_donors_that_no_pull_reads():
    """Eight one-layer slabs along x: an outflow link's donor (its inward neighbour's own
    population next to a wall) sits on the rank before, and no pull of the owning rank reads
    it; without the openings' reads in the plan the ranks diverge from one process."""
    problem = one_process("velocity-outflow").problem
    dec = decompose(problem.tiling, 8, 0)
    lat, tiling = problem.lattice, problem.tiling
    reader, flat, _ = pass_reads(problem.iolets, dec, lat.q, tiling.nodes_per_tile)
    block = lat.q * tiling.nodes_per_tile
    rank = 7
    mine = (reader == rank) & (dec.owner[flat // block] != rank)
    layout, plan = build_rank(tiling, dec, lat, problem.periodic, rank, (reader, flat))
    _, pulls_only = build_rank(tiling, dec, lat, problem.periodic, rank)
    local_of = np.full(tiling.n_tiles, -1)
    local_of[layout.global_tiles] = np.arange(len(layout.global_tiles))
    wanted = local_of[flat[mine] // block] * block + flat[mine] % block
    received = np.concatenate(list(plan.recv.values()))
    assert np.isin(wanted, received).all()
    pulled = np.concatenate(list(pulls_only.recv.values()))
    assert not np.isin(wanted, pulled).all()  # the reads add values the pulls do not move


@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
def test_mpirun_openings_checkpoint_and_resume_match_one_process(tmp_path):
    """``mpirun -n 2``, split across both openings: populations, per-link flux, flow rates,
    mean densities, wall shear stress, a changed outlet density, a resumed run inside the
    soft start (the ranks' step counters restored) and an RCR Windkessel outlet's run equal
    one process's bit for bit."""
    pytest.importorskip("mpi4py")
    if find_mpirun() is None:
        pytest.skip("MPI test skipped: no mpirun on PATH")
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    script = [sys.executable, "-m", "tests.solver.opening_cases"]
    for cmd in ([*script, str(tmp_path / "one.npz"), "--single", "--windkessel"],
                [find_mpirun(), "-n", "2", *script, str(tmp_path / "mpi.npz"), "--axis", "1",
                 "--windkessel"]):
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    one, mpi = np.load(tmp_path / "one.npz"), np.load(tmp_path / "mpi.npz")
    assert int(mpi["ranks"]) == 2
    for key in one.files:
        assert np.array_equal(one[key], mpi[key], equal_nan=True), key
    assert np.all(one["pressures/flows"][:1] > 0) and np.all(one["pressures/flows"][1:] < 0)


def test_windkessel_outlets_over_the_distributed_backend_match_one_process_bitwise():
    """Rank 0 updates the outlets from the gathered flux at each interval (an outlet's links
    may lie on several ranks; mpirun: opening_cases' --windkessel)."""
    pytest.importorskip("mpi4py")
    from solver.distributed import DistributedBackend

    expected = windkessel_run(NumpyBackend(threads=1), 23)
    with DistributedBackend("numpy") as backend:
        got = windkessel_run(backend, 23)
    for key, value in expected.items():
        assert np.array_equal(got[key], value), key
    assert np.any(expected["windkessel/trace"] != 0)  # four updates recorded
