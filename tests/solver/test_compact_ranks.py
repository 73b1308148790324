"""Compact (fluid-only) storage over distributed ranks, on the CPU: each rank's
:class:`CompactRun` of its rank-local problem steps its boundary and interior tile ranges
(``launch_tiles``, the kernels through the g++ emulator), halo values move between the ranks'
compact copies by ``value_index`` (what :class:`~solver.backends.cuda.phases.CupyPhases` uploads
as its halo indices), and the owned populations equal one compact run's bit for bit (also
where the ranks' kernels take 64-bit offsets). The same
on the GPU through CupyPhases: test_distributed_compact_gpu.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from solver.backends.cuda.compact_run import CompactRun
from solver.backends.plan import plan_for
from solver.distributed import build_rank, decompose

from .compact_emulator import FakeCupy, compiler
from .porous_cases import as_stored, make_problem, noisy_start

pytestmark = pytest.mark.skipif(compiler() is None, reason="g++ is not installed")


def _run(problem, fake, packed=0, tpb=2, wide=False) -> CompactRun:
    return CompactRun(problem, 1, xp=np, launcher=fake.launcher(), tiles_per_block=tpb,
                      cuda=fake.cuda, packed=packed, wide=wide)


@pytest.mark.parametrize("precision, packed, axis, wide", [
    ("float64", 0, 0, False), ("float32", 4, 1, False),
    ("float32", 0, 2, True)])  # the ranks' kernels with 64-bit offsets, one run's 32-bit
def test_compact_ranks_step_tile_ranges_like_one_compact_run(precision, packed, axis,
                                                             wide) -> None:
    problem = replace(make_problem("D3Q19", precision, "TRT", offset=(1, 2, 0)),
                      tile_storage="compact")
    assert plan_for(problem).compact
    fake = FakeCupy()
    f0 = as_stored(problem, noisy_start(problem))
    one = _run(problem, fake, packed)
    one.set_populations(f0)
    steps = 3
    for _ in range(steps):
        one._launch()
    expected = one.populations()

    dec = decompose(problem.tiling, 2, axis)
    ranks = []
    for r in range(2):
        layout, plan = build_rank(problem.tiling, dec, problem.lattice, problem.periodic, r)
        local = replace(problem, tiling=layout.tiling, owned=layout.owned)
        run = _run(local, fake, packed, wide=wide)
        assert run.variant.wide == wide
        run.set_populations(f0[layout.global_tiles])
        ranks.append((layout, plan, run))
    for _ in range(steps):
        for layout, _, run in ranks:  # boundary range, then interior range: no swap between
            run.launch_tiles(0, layout.n_boundary)
            run.launch_tiles(layout.n_boundary, layout.n_owned)
        for r, (_, plan, run) in enumerate(ranks):  # the halo, into the written copies
            for peer, send in plan.send.items():
                target = ranks[peer][2]
                recv = ranks[peer][1].recv[r]
                values = run.f[1 - run.current][run.value_index(send)]
                target.f[1 - target.current][target.value_index(recv)] = values
        for _, _, run in ranks:
            run.current = 1 - run.current
    got = np.full_like(expected, np.nan)
    for layout, _, run in ranks:
        got[layout.global_tiles[: layout.n_owned]] = run.populations()[: layout.n_owned]
    assert np.array_equal(got, expected)


def test_value_index_addresses_the_compact_copy_and_refuses_solid_nodes() -> None:
    problem = replace(make_problem("D3Q19", "float64", "TRT"), tile_storage="compact")
    run = _run(problem, FakeCupy())
    f = as_stored(problem, noisy_start(problem))
    run.set_populations(f)
    tile, node = np.nonzero(~problem.tiling.solid)
    i = np.arange(len(tile)) % problem.lattice.q
    flat = (tile * problem.lattice.q + i) * 64 + node
    assert np.array_equal(run.f[run.current][run.value_index(flat)], f[tile, i, node])
    solid_tile, solid_node = np.argwhere(problem.tiling.solid)[0]
    with pytest.raises(ValueError, match="solid node"):
        run.value_index(np.array([solid_tile * problem.lattice.q * 64 + solid_node]))
