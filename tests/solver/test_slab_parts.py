"""Rank parts (solver.distributed.slab_parts): a serving rank's solver over the part rank 0 cut
for it equals its solver over the whole problem (tiles, halo plans, opening links), and ranks
built from parts step bit for bit as one process (NumPy, loopback), with driven openings whose
donors lie on other ranks; in place, the plans of both phases match too (emulated GPU ranks)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from solver.backends.numpy_backend import NumpyBackend
from solver.distributed import LoopbackHub, RankSolver, decompose, step_together
from solver.distributed.slab_parts import rank_part
from solver.simulation import Simulation

from .opening_cases import channel, channel_config

pytest.importorskip("geometries.openings")

STEPS = 16  # past the 12-step soft start


def _plans_equal(a, b) -> bool:
    return a.send.keys() == b.send.keys() and a.recv.keys() == b.recv.keys() and all(
        np.array_equal(a.send[p], b.send[p]) for p in a.send) and all(
        np.array_equal(a.recv[p], b.recv[p]) for p in a.recv)


def _same_solver(part, from_part, whole) -> None:
    assert np.array_equal(part.global_tiles(from_part.layout.global_tiles),
                          whole.layout.global_tiles)
    assert (from_part.layout.n_boundary, from_part.n_owned) == \
        (whole.layout.n_boundary, whole.n_owned)
    assert _plans_equal(from_part.plan, whole.plan)
    if whole.plan.after_neighbour is not None:
        assert _plans_equal(from_part.plan.after_neighbour, whole.plan.after_neighbour)
    assert np.array_equal(from_part.links, whole.links)


@pytest.mark.parametrize("case", ["velocity-outflow", "pressures"])
@pytest.mark.parametrize("n,axis", [(8, 0), (2, 1)])
def test_ranks_from_parts_match_one_process_bitwise(case, n, axis):
    sim = Simulation(channel(), channel_config(case), backend=NumpyBackend(threads=1))
    problem = sim.problem
    dec = decompose(problem.tiling, n, axis)
    hub, ranks = LoopbackHub(), []
    for r in range(n):
        part = rank_part(problem, dec, r)
        assert part.problem.tiling.n_tiles <= problem.tiling.n_tiles
        if n == 8:  # a slab of one tile layer and its two neighbours: 3 of 8 layers
            assert part.problem.tiling.n_tiles <= 3 * max(dec.counts)
        make = lambda p, d, r=r, **kw: RankSolver(  # noqa: E731
            p, d, r, NumpyBackend(threads=1), lambda plan, s: hub.exchange(r, plan, s), **kw)
        ranks.append(make(part.problem, part.decomposition, link_numbers=part.links))
        whole = RankSolver(problem, dec, r, NumpyBackend(threads=1),
                           lambda plan, s, r=r: LoopbackHub().exchange(r, plan, s))
        _same_solver(part, ranks[-1], whole)
        whole.release()
        ranks[-1].global_of = part.tiles
    sim.step(STEPS)
    step_together(ranks, STEPS)
    got = np.full_like(sim.populations(), np.nan)
    flux = np.full(problem.iolets.n_links, np.nan)
    for rank in ranks:
        got[rank.global_of[rank.layout.global_tiles[: rank.n_owned]]] = rank.owned_populations()
        flux[rank.links] = rank.iolet_flux()
    assert np.array_equal(got, sim.populations())
    assert np.array_equal(flux, sim.backend.iolet_flux(sim.state))
    sim.close()


def test_in_place_parts_give_the_whole_problem_plans():
    """Emulated GPU ranks in place (no step taken): both phases' plans, the openings' reads of
    phase 1 included, are those of the whole problem."""
    from .kernel_emulator import compiler
    from .test_inplace_ranks import _Backend

    if compiler() is None:
        pytest.skip("g++ is not installed")
    sim = Simulation(channel(), channel_config("velocity-outflow"), backend="numpy")
    problem = replace(sim.problem, streaming="in-place", tile_storage="tiled").use_iolets(
        sim.problem.iolets)
    sim.close()
    dec = decompose(problem.tiling, 8, 0)
    backend = _Backend()
    for r in range(8):
        part = rank_part(problem, dec, r)
        solvers = [RankSolver(p, d, r, backend,
                              lambda plan, s, r=r: LoopbackHub().exchange(r, plan, s),
                              link_numbers=links)
                   for p, d, links in ((part.problem, part.decomposition, part.links),
                                       (problem, dec, None))]
        assert solvers[1].plan.after_neighbour is not None
        _same_solver(part, *solvers)
