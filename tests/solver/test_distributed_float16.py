"""float16 storage over ranks (NumPy reference, loopback exchange): the halo moves the stored
binary16 values, so the ranks step what one process steps except for the stochastic rounding's
random bits, which hash the rank's local node numbers: the populations agree to float16
rounding and the mass is conserved as in one process."""

from __future__ import annotations

import numpy as np

from solver.backends.numpy_backend import NumpyBackend
from solver.backends.plan import distributed_refusal
from solver.distributed import LoopbackHub, RankSolver, decompose, step_together

from .porous_cases import half_tolerance, make_problem, noisy_start, reference

STEPS = 8


def test_float16_ranks_agree_with_one_process_to_float16_rounding() -> None:
    problem = make_problem("D3Q19", "float32", "TRT", storage="float16")
    assert problem.storage.encoded and distributed_refusal(problem) is None
    f0 = noisy_start(problem)
    expected = reference(problem, f0, STEPS)
    dec = decompose(problem.tiling, 2, 0)
    hub = LoopbackHub()
    ranks = [RankSolver(problem, dec, r, NumpyBackend(threads=1),
                        lambda plan, s, r=r: hub.exchange(r, plan, s)) for r in range(2)]
    for rank in ranks:
        rank.backend.set_populations(rank.state, f0[rank.layout.global_tiles])
        assert rank.stepper.state.f.dtype == np.float16  # the halo moves stored bits
    step_together(ranks, STEPS)
    got = np.full_like(expected, np.nan)
    for rank in ranks:
        got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
    fluid = np.broadcast_to(~problem.tiling.solid[:, None, :], got.shape)
    assert np.abs(got - expected)[fluid].max() <= half_tolerance(problem, expected, STEPS)
    assert not np.array_equal(got, expected)  # the local keys draw other bits
    mass = [f[fluid].sum() for f in (got, expected, f0)]
    assert abs(mass[0] - mass[2]) / mass[2] < 1e-4 and abs(mass[1] - mass[2]) / mass[2] < 1e-4
