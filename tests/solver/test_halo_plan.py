"""The halo plan of :func:`solver.distributed.halo.build_rank` against a brute-force count of
the pulls that cross ranks: every rank receives exactly the values ``f_i(y)`` that one of its
fluid nodes ``x = y + c_i`` pulls from a fluid node ``y`` of another rank (shapes that are not
multiples of the tile edge, a shifted tile grid, periodic and walled axes, D3Q19 and D3Q27)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from solver.config import SimulationConfig
from solver.distributed.decomposition import decompose
from solver.distributed.halo import build_rank
from solver.problem import Problem
from solver.tiling import Tiling


def _pulled_from_others(problem: Problem, owner: np.ndarray, rank: int) -> dict[int, set]:
    """Per sending rank, the global flat indices ``(tile q + i) N + node`` of the values the
    fluid nodes of ``rank``'s tiles pull from other ranks' fluid nodes (every node, every
    direction: no shortcut)."""
    t = problem.tiling
    lat, q, n_node = problem.lattice, problem.lattice.q, t.nodes_per_tile
    tiles, nodes = np.nonzero(~t.solid & (owner == rank)[:, None])
    x = t.tiles[tiles].astype(np.int64) * t.a - np.array(t.offset) + t.local_coordinates()[nodes]
    shape = np.array(t.shape)
    out: dict[int, set] = {}
    for i in range(q):
        y = x - lat.c[i]
        inside = np.ones(len(y), dtype=bool)
        for ax, periodic in enumerate(problem.periodic):
            if periodic:
                y[:, ax] %= shape[ax]
            else:
                inside &= (y[:, ax] >= 0) & (y[:, ax] < shape[ax])
        tile, node = t.locate(np.where(inside[:, None], y, 0))
        ok = inside & (tile >= 0)
        ok[ok] = ~t.solid[tile[ok], node[ok]]
        ok[ok] = owner[tile[ok]] != rank
        for peer, flat in zip(owner[tile[ok]], (tile[ok].astype(np.int64) * q + i) * n_node
                              + node[ok], strict=True):
            out.setdefault(int(peer), set()).add(int(flat))
    return out


@pytest.mark.parametrize("lattice", ["D3Q19", "D3Q27"])
@pytest.mark.parametrize("walls", [False, True])
def test_every_cross_rank_pull_is_received_and_nothing_else(lattice, walls):
    solid = np.random.default_rng(3).random((26, 15, 22)) < 0.4
    faces = {"x_min": "wall", "x_max": "wall", "z_min": "wall", "z_max": "wall"} if walls \
        else {}
    problem = Problem.from_config(solid, SimulationConfig(lattice=lattice, y_min="wall",
                                                          y_max="wall", **faces))
    problem = replace(problem, tiling=Tiling.build(solid, 4, (1, 2, 3)))  # a shifted grid
    block = problem.lattice.q * problem.tiling.nodes_per_tile
    for axis in range(3):
        dec = decompose(problem.tiling, 3, axis)
        for rank in range(3):
            layout, plan = build_rank(problem.tiling, dec, problem.lattice, problem.periodic,
                                      rank)
            got = {peer: {int(layout.global_tiles[v // block] * block + v % block)
                          for v in values} for peer, values in plan.recv.items()}
            assert got == _pulled_from_others(problem, dec.owner, rank), (axis, rank)
