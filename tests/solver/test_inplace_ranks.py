"""In-place streaming (AA pattern, one copy) and compact float16 storage over distributed ranks,
on the CPU: the GPU kernels through the g++ emulator, driven by the real
:class:`~solver.distributed.rank.RankSolver` and its exchange (loopback hub), with a stepper
that does what :class:`~solver.backends.cuda.phases.CupyPhases` does (boundary range, pack,
interior range; halo indices in the storage's own addressing) on host arrays.

* In place, the exchange alternates between the halo plan and its reverse
  (:func:`~solver.distributed.halo.in_place_plans`); the owned populations equal one in-place
  run's bit for bit (tiled and compact storage, float64 and float32), read after odd step counts
  (every rank decodes phase 1 where it lies) and stepped on. The loopback hub packs each rank's
  values after its boundary range and before its interior range, so this also checks that the
  boundary tiles write every value the reverse exchange sends.
* Compact float16: a tile range past tile 0 reads a step-counter pair ahead by
  :func:`~solver.storage.key_shift`, so a boundary and an interior launch draw the bits of one
  launch over the rank's tiles (bit for bit), two copies and in place; the ranks then agree with
  one compact float16 run to float16 rounding (their random bits hash local tile numbers, as the
  tiled float16 ranks' do) and conserve its mass.

* In place with driven openings (tiled storage, the openings' pass through the g++-compiled
  CUDA pass before each step's tile ranges, in the phase's layout): the ranks' populations and
  per-link flux equal one in-place run's bit for bit, split across the outflow links' donors
  and past the soft start, read in phase 1 and stepped on.

The GPU twins: test_distributed_inplace_gpu.py.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from solver.backends.cuda.compact_run import CompactRun
from solver.backends.cuda.tables import slot_table
from solver.backends.plan import plan_for
from solver.distributed import LoopbackHub, RankSolver, decompose, step_together
from solver.distributed.exchange import PhasedExchange
from solver.distributed.halo import in_place_plans
from solver.storage import GOLDEN, key_shift

from .compact_emulator import FakeCupy, compiler
from .iolet_emulator import emulated_pass
from .kernel_emulator import EmulatedKernel
from .porous_cases import as_stored, half_tolerance, make_problem, noisy_start

pytestmark = pytest.mark.skipif(compiler() is None, reason="g++ is not installed")


class _Phases:
    """CupyPhases' protocol on an emulated run (a CompactRun on NumPy, or the tiled kernel's
    :class:`EmulatedKernel`): boundary range, then interior range, then the phase flip."""

    overlaps = True

    def __init__(self, run, ranges) -> None:
        self.state, self._ranges = run, ranges
        p = run.problem
        self._slots = slot_table(p.lattice.name, p.layout, p.tiling.a)
        self.step = 0  # the openings' device step counter

    @property
    def in_place(self) -> bool:
        return self.state.problem.population_copies == 1

    def _flat(self, copy: int):
        f = self.state.f[0 if self.in_place else copy]
        return f.reshape(-1)

    def target(self):
        return self._flat(1 - self.state.current)

    def current(self):
        return self._flat(self.state.current)

    def device_index(self, index):
        if isinstance(self.state, CompactRun):
            return self.state.value_index(index)
        q, npt = self._slots.shape
        block, node = np.divmod(np.asarray(index, np.int64), npt)
        return block * npt + self._slots[block % q, node]

    def host_buffer(self, n):
        return np.empty(n, dtype=self.state.problem.storage_dtype)

    def gather(self, f, index, out):
        np.take(f, index, out=out)

    def scatter(self, f, index, values):
        f[index] = values

    def synchronize(self):
        pass

    def idle(self):
        pass

    def _launch(self, first: int, end: int) -> None:
        if isinstance(self.state, CompactRun):
            self.state.launch_tiles(first, end)
        elif end > first:  # the tiled kernel over a range; the phase flips in finish()
            current = self.state.current
            self.state.step(1, "full", (first, end))
            self.state.current = current

    def boundary(self):
        _pass(self.state, self.current(), self.step)  # the rank's links, in the phase's layout
        self.step += 1
        self._launch(*self._ranges[0])

    def interior(self, progress):
        self._launch(*self._ranges[1])
        progress()

    def finish(self):
        self.state.current = 1 - self.state.current

    def set_step(self, step):
        self.state.set_step(step)
        self.step = step

    def release(self):
        pass


def _pass(run, flat, step: int) -> None:
    """The CUDA openings' pass (g++) on ``run``'s copy ``flat`` before step ``step``, in the
    layout of its phase (two copies: 0); the per-link flux kept on the run."""
    p = run.problem
    if p.iolets is not None:
        parity = run.current if p.population_copies == 1 else 0
        run.flux = emulated_pass(p, flat, parity, slot_table(p.lattice.name, p.layout,
                                                              p.tiling.a), step)


class _Backend:
    """The slice of the CuPy backend a RankSolver uses, on the emulated runs."""

    name = "emulated"

    def __init__(self, packed: int = 0) -> None:
        self.fake, self.packed = FakeCupy(), packed

    def run(self, problem):
        if plan_for(problem).compact:
            return CompactRun(problem, 1, xp=np, launcher=self.fake.launcher(),
                              tiles_per_block=2, cuda=self.fake.cuda, packed=self.packed)
        run = EmulatedKernel(problem, problem.tiles_per_block)
        run.set_populations(problem.initial_populations())  # every copy at rest
        run.f[:] = run.f[run.current]
        return run

    def phase_stepper(self, problem, n_boundary, n_owned):
        return _Phases(self.run(problem), ((0, n_boundary), (n_boundary, n_owned)))

    def populations(self, state):
        return state.populations()

    def iolet_flux(self, state):
        return state.flux

    def set_populations(self, state, f):
        state.set_populations(f)

    def release(self, state):
        pass


def _ranks(problem, backend, n, axis, f0):
    dec = decompose(problem.tiling, n, axis)
    hub = LoopbackHub()
    ranks = [RankSolver(problem, dec, r, backend, lambda plan, s, r=r: hub.exchange(r, plan, s))
             for r in range(n)]
    for rank in ranks:  # owned and halo tiles: the halo of the first step as well
        rank.state.set_populations(f0[rank.layout.global_tiles])
    return ranks


def _gather(ranks, like):
    got = np.full_like(like, np.nan)
    for rank in ranks:
        got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
    return got


def _one(backend, problem, f0, steps):
    run = backend.run(problem)
    run.set_populations(f0)
    out = []
    for n in steps:
        for _ in range(n):
            if isinstance(run, CompactRun):
                run._launch()
            else:
                run.step(1)
        out.append(run.populations())
    return out


@pytest.mark.parametrize("storage, precision, packed, n, axis", [
    ("compact", "float64", 0, 3, 0), ("compact", "float32", 4, 2, 1),
    ("tiled", "float32", 0, 2, 0)])
def test_in_place_ranks_match_one_in_place_run_bitwise(storage, precision, packed, n, axis):
    problem = replace(make_problem("D3Q19", precision, "TRT", offset=(1, 2, 0)),
                      streaming="in-place", tile_storage=storage)
    assert plan_for(problem).in_place and plan_for(problem).tile_storage == storage
    backend = _Backend(packed)
    f0 = as_stored(problem, noisy_start(problem))
    steps = (3, 2)  # read in phase 1 (decoded where it lies on every rank), then step on
    expected = _one(backend, problem, f0, steps)
    ranks = _ranks(problem, backend, n, axis, f0)
    assert all(isinstance(r.exchange, PhasedExchange) and r.stepper.in_place for r in ranks)
    for n, want in zip(steps, expected, strict=True):
        step_together(ranks, n)
        got = _gather(ranks, want)
        assert np.array_equal(got, want), (storage, n, np.nanmax(np.abs(got - want)))


def test_in_place_plans_reverse_the_two_copy_plan():
    from solver.distributed import build_rank

    problem = make_problem("D3Q19", "float64", "TRT", offset=(1, 2, 0))
    dec = decompose(problem.tiling, 3, 0)
    _, plan = build_rank(problem.tiling, dec, problem.lattice, problem.periodic, 1)
    after0, after1 = in_place_plans(plan)
    assert after1 is plan
    assert all(np.array_equal(after0.send[p], plan.recv[p]) for p in plan.recv)
    assert all(np.array_equal(after0.recv[p], plan.send[p]) for p in plan.send)
    assert after0.values_sent() == sum(v.size for v in plan.recv.values())


def test_key_shift_adds_the_first_tile_to_every_key():
    step, npt = 12345, 64
    for first in (1, 7, 1000, 2**20 + 3):
        shifted = (step + key_shift(first, npt)) * GOLDEN & 0xFFFFFFFF
        assert shifted == (step * GOLDEN + first * npt) & 0xFFFFFFFF


@pytest.mark.parametrize("streaming", ["two-copy", "in-place"])
def test_compact_float16_ranges_draw_the_bits_of_one_launch(streaming):
    """A rank-local compact float16 run: boundary + interior ranges equal one launch over the
    owned tiles, bit for bit (the halo fixed), read after 3 steps (in place in phase 1: the
    decoding moves the step counter, and the ranges' pairs follow) and 2 more."""
    problem = replace(make_problem("D3Q19", "float32", "TRT", storage="float16",
                                   offset=(1, 2, 0)), streaming=streaming, tile_storage="compact")
    dec = decompose(problem.tiling, 2, 0)
    from solver.distributed import build_rank

    layout, _ = build_rank(problem.tiling, dec, problem.lattice, problem.periodic, 0)
    local = replace(problem, tiling=layout.tiling, owned=layout.owned)
    backend = _Backend(packed=4)
    f0 = as_stored(problem, noisy_start(problem))[layout.global_tiles]
    split, whole = backend.run(local), backend.run(local)
    for run in (split, whole):
        run.set_populations(f0)
        run.set_step(5)
    nb, no = layout.n_boundary, layout.n_owned
    assert 0 < nb < no
    owned = slice(0, no)
    for steps in (3, 2):  # read after 3 (in place: decoded from phase 1), then step on
        for _ in range(steps):
            split.launch_tiles(0, nb)
            split.launch_tiles(nb, no)
            whole.launch_tiles(0, no)
            for run in (split, whole):
                run.current = 1 - run.current
        assert np.array_equal(split.populations()[owned], whole.populations()[owned])
    assert np.array_equal(split.seeds, whole.seeds)
    assert split.key_seeds and np.array_equal(
        split.key_seeds[nb], split.seeds + np.uint32(key_shift(nb, 64)))
    split.set_step(9)  # a resume sets every range's pair
    assert np.array_equal(split.key_seeds[nb], split.seeds + np.uint32(key_shift(nb, 64)))


@pytest.mark.parametrize("storage, streaming", [("compact", "two-copy"), ("compact", "in-place"),
                                               ("tiled", "in-place")])
def test_float16_ranks_agree_with_one_run_to_float16_rounding(storage, streaming):
    problem = replace(make_problem("D3Q19", "float32", "TRT", storage="float16",
                                   offset=(1, 2, 0)), streaming=streaming, tile_storage=storage)
    assert plan_for(problem).tile_storage == storage and plan_for(problem).half
    backend = _Backend(packed=4)
    f0 = as_stored(problem, noisy_start(problem))
    steps = 6
    (expected,) = _one(backend, problem, f0, (steps,))
    ranks = _ranks(problem, backend, 2, 0, f0)
    assert all(isinstance(r.state, CompactRun) == (storage == "compact") for r in ranks)
    step_together(ranks, steps)
    got = _gather(ranks, expected)
    fluid = np.broadcast_to(~problem.tiling.solid[:, None, :], got.shape)
    assert np.abs(got - expected)[fluid].max() <= half_tolerance(problem, expected, steps)
    mass = [f[fluid].sum() for f in (got, expected, f0)]
    assert abs(mass[0] - mass[2]) / mass[2] < 1e-4 and abs(mass[1] - mass[2]) / mass[2] < 1e-4


@pytest.mark.parametrize("case, n, axis", [("velocity-outflow", 8, 0), ("pressures", 3, 0),
                                            ("velocity-outflow", 2, 1)])
def test_in_place_ranks_with_openings_match_one_in_place_run_bitwise(case, n, axis):
    """The channel of opening_cases, float64 TRT in place (8 one-tile-layer slabs along x put
    outflow links' donors on the rank before): populations and per-link flux of the ranks
    equal one in-place run's after 13 steps (phase 1, past the 12-step soft start), then 3
    more."""
    from solver.distributed import build_rank
    from solver.simulation import Simulation

    from .opening_cases import channel, channel_config

    sim = Simulation(channel(), channel_config(case), backend="numpy")
    problem = replace(sim.problem, streaming="in-place", tile_storage="tiled")
    sim.close()
    assert plan_for(problem).in_place
    backend = _Backend()
    f0 = as_stored(problem, noisy_start(problem))
    one = backend.run(problem)
    one.set_populations(f0)
    ranks = _ranks(problem, backend, n, axis, f0)
    assert sum(r.links.size for r in ranks) == problem.iolets.n_links
    if n == 8:  # the phase-1 reads add values to the pulls' reverse
        dec = decompose(problem.tiling, n, axis)
        pulls = [build_rank(problem.tiling, dec, problem.lattice, problem.periodic, r)[1]
                 for r in range(n)]
        assert any(r.plan.after_neighbour.values_sent() > p.reversed().values_sent()
                   for r, p in zip(ranks, pulls, strict=True))
    done = 0
    for k in (13, 3):
        for _ in range(k):
            _pass(one, one.f[0].reshape(-1), done)
            one.step(1)
            done += 1
        step_together(ranks, k)
        want = one.populations()
        got = _gather(ranks, want)
        assert np.array_equal(got, want), (k, np.nanmax(np.abs(got - want)))
        flux = np.full(problem.iolets.n_links, np.nan)
        for rank in ranks:
            flux[rank.links] = rank.iolet_flux()
        assert np.array_equal(flux, one.flux) and np.abs(flux).max() > 1e-5
