"""A rank's fused k check (:class:`solver.distributed.reductions.FusedNumbers`: the one-launch
check of :mod:`solver.backends.cuda.compact_check` over the owned tiles, the layer flux summed
in the kernel) against the chunked readout of the same rank (:func:`owned_numbers`): the same
numbers to rounding, float16 storage decoded as the readout decodes it. On the CPU the kernel
text runs under g++ (:mod:`.grid_stride_emulator`) on loopback NumPy ranks (tiled) and on
emulated CuPy ranks of compact storage (a CompactRun of NumPy arrays per rank, stepped by tile
ranges as in test_inplace_ranks.py: two copies and in place, 32- and 64-bit offsets), and a
whole mirrored run reads the same k and steps with it; ``-m gpu``: on CuPy loopback ranks."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from solver.backends.cuda.compact_run import CompactRun
from solver.backends.numpy_backend import NumpyBackend
from solver.distributed import LoopbackHub, RankSolver, decompose, step_together
from solver.distributed.reductions import FusedNumbers, combine, owned_numbers

from .grid_stride_emulator import compiler
from .porous_cases import as_stored, make_problem, noisy_start
from .solo_comm import SoloComm
from .test_compact_readout import EmulatedCompactBackend
from .test_inplace_ranks import _Backend, _Phases
from .test_rock_check_kernel import _launch

pytestmark = pytest.mark.skipif(compiler() is None, reason="g++ is not installed")

#: Relative difference allowed between the fused and the chunked sums (another order of the
#: same float64 additions; measured: below 1e-14 on these systems).
RTOL = 1e-12


def _ranks(storage: str, precision: str, fluid_model: str, axis: int, n: int = 2):
    problem = make_problem("D3Q19", precision, "TRT", fluid_model=fluid_model, storage=storage)
    hub, dec = LoopbackHub(), decompose(problem.tiling, n, axis)
    ranks = [RankSolver(problem, dec, r, NumpyBackend(threads=1),
                        lambda plan, s, r=r: hub.exchange(r, plan, s)) for r in range(n)]
    f0 = noisy_start(problem)
    for rank in ranks:
        rank.backend.set_populations(rank.state, f0[rank.layout.global_tiles])
    step_together(ranks, 4)
    return ranks


@pytest.mark.parametrize("storage, precision, fluid_model, axis", [
    ("float16", "float32", "incompressible", 0),
    ("auto", "float64", "quasi-compressible", 2),
])
def test_fused_rank_check_reads_the_chunked_numbers(storage, precision, fluid_model, axis):
    ranks = _ranks(storage, precision, fluid_model, axis)
    fused, chunked = [], []
    for rank in ranks:
        got = FusedNumbers(rank, axis, launch=_launch, max_blocks=2)()
        want = owned_numbers(rank, axis)
        _same_numbers(got, want)
        fused.append(got)
        chunked.append(want)
    a, b = combine(fused[0], None), combine(chunked[0], None)
    assert a.flux_spread == pytest.approx(b.flux_spread, rel=1e-9)


def test_fused_rank_check_sees_a_non_finite_node():
    ranks = _ranks("float16", "float32", "incompressible", 0)
    rank = ranks[1]
    tile = int(np.flatnonzero((~rank.problem.tiling.solid[: rank.n_owned]).any(axis=1))[-1])
    node = int(np.flatnonzero(~rank.problem.tiling.solid[tile])[0])
    rank.state.f[rank.state.current][tile, 3, node] = np.inf
    assert not FusedNumbers(rank, 0, launch=_launch, max_blocks=2)().finite
    assert FusedNumbers(ranks[0], 0, launch=_launch, max_blocks=2)().finite


class _CompactBackend(_Backend):
    """The emulated CuPy ranks of test_inplace_ranks (a CompactRun of NumPy arrays per rank,
    stepped by tile ranges through the g++ emulator) with what a readout asks of a backend;
    ``wide``: the kernels' 64-bit offsets."""

    xp = np

    def __init__(self, wide: bool = False) -> None:
        super().__init__(packed=4)
        self.wide = wide

    def run(self, problem):
        return CompactRun(problem, 1, xp=np, launcher=self.fake.launcher(), tiles_per_block=2,
                          cuda=self.fake.cuda, packed=self.packed, wide=self.wide)

    def device_populations(self, state, tiles=None):
        return state.device_populations(tiles)

    def readout_tiles(self, state) -> int:
        return state.readout_tiles

    def to_host(self, array):
        return np.asarray(array)


class _CompactRanksBackend(EmulatedCompactBackend):
    """What the mirrored runner asks of a CuPy backend, on the CPU: each rank a CompactRun of
    NumPy arrays behind the emulated tile-range stepper (:class:`_Phases`)."""

    name = "emulated"

    def phase_stepper(self, problem, n_boundary, n_owned):
        run = CompactRun(problem, 1, xp=np, launcher=self.launcher)
        return _Phases(run, ((0, n_boundary), (n_boundary, n_owned)))

    def set_populations(self, state, f, tiles=None) -> None:
        state.set_populations(f, tiles)

    def to_host(self, array):
        return np.asarray(array)


def _compact_ranks(storage: str, precision: str, streaming: str, fluid_model: str, axis: int,
                   wide: bool = False, steps: int = 5):
    problem = replace(make_problem("D3Q19", precision, "TRT", fluid_model=fluid_model,
                                   storage=storage, offset=(1, 2, 0)),
                      streaming=streaming, tile_storage="compact")
    hub, dec = LoopbackHub(), decompose(problem.tiling, 2, axis)
    ranks = [RankSolver(problem, dec, r, _CompactBackend(wide),
                        lambda plan, s, r=r: hub.exchange(r, plan, s)) for r in range(2)]
    f0 = as_stored(problem, noisy_start(problem))
    for rank in ranks:
        assert isinstance(rank.state, CompactRun) and rank.state.variant.wide == wide
        assert rank.state.in_place == (streaming == "in-place")
        rank.state.set_populations(f0[rank.layout.global_tiles])
    step_together(ranks, steps)  # odd: in place, the check reads phase 1 where it lies
    return ranks


def _same_run(got: dict, chunked: dict) -> None:
    """Two mirrored runs' results agree: the same steps and checks, k and the flux spread at
    every check (the fine run's and the coarse level's) to rounding."""
    assert got["steps"] == chunked["steps"] and len(got["history"]) == len(chunked["history"])
    for a, b in zip(got["history"] + got["coarse"][0]["history"],
                    chunked["history"] + chunked["coarse"][0]["history"], strict=True):
        assert a["step"] == b["step"]
        assert a["k"] == pytest.approx(b["k"], rel=RTOL)
        assert a["flux_spread"] == pytest.approx(b["flux_spread"], rel=1e-9)
    assert got["k"] == pytest.approx(chunked["k"], rel=RTOL)


def _same_numbers(got, want, speed_rtol: float = 1e-14) -> None:
    """``got`` equals ``want`` to rounding (the largest speed: to ``speed_rtol``; on the GPU
    the kernel and CuPy's operations may contract other multiply-adds)."""
    assert got.finite and want.finite and got.fluid == want.fluid
    assert got.max_speed == pytest.approx(want.max_speed, rel=speed_rtol)
    assert got.speed_sum == pytest.approx(want.speed_sum, rel=RTOL)
    assert got.momentum == pytest.approx(want.momentum, rel=RTOL)
    assert got.plane_flux.shape == want.plane_flux.shape
    # Every layer: the flux of a layer outside the rank's slab is exactly 0 in both.
    np.testing.assert_allclose(got.plane_flux, want.plane_flux, rtol=RTOL,
                               atol=RTOL * np.abs(want.plane_flux).max())
    assert np.array_equal(got.plane_flux == 0, want.plane_flux == 0)


@pytest.mark.parametrize("storage, precision, streaming, fluid_model, axis, wide", [
    ("float16", "float32", "two-copy", "incompressible", 0, False),
    ("float16", "float32", "in-place", "quasi-compressible", 2, False),
    ("auto", "float32", "in-place", "incompressible", 1, True),
    ("auto", "float64", "two-copy", "quasi-compressible", 0, True),
])
def test_fused_check_of_compact_ranks_reads_the_chunked_numbers(storage, precision, streaming,
                                                                fluid_model, axis, wide):
    """Compact ranks (owned tiles first, then the halo's: the owned fluid nodes are the edge
    tables' first) read the chunked readout's numbers of their owned tiles only."""
    ranks = _compact_ranks(storage, precision, streaming, fluid_model, axis, wide)
    parts = []
    for rank in ranks:
        n_halo = rank.problem.tiling.n_tiles - rank.n_owned
        assert n_halo > 0 and rank.state.starts[rank.n_owned] < rank.state.edge[0].size
        got = FusedNumbers(rank, axis, launch=_launch, max_blocks=2)()
        want = owned_numbers(rank, axis)
        _same_numbers(got, want)
        parts.append((got, want))
    both = [combine(p, _Gather([q for q, _ in parts] if i == 0 else [w for _, w in parts]))
            for i, p in enumerate(parts[0])]
    assert both[0].fluid == int(np.count_nonzero(~ranks[0].problem.tiling.solid[
        : ranks[0].n_owned])) + int(np.count_nonzero(~ranks[1].problem.tiling.solid[
            : ranks[1].n_owned]))
    assert both[0].momentum == pytest.approx(both[1].momentum, rel=RTOL)
    assert both[0].flux_spread == pytest.approx(both[1].flux_spread, rel=1e-9)


def test_fused_check_of_a_compact_rank_reads_64_bit_tiled_indices():
    """The layer sums of a compact rank whose edge tables hold 64-bit tiled indices (a rank of
    2^31 tile values or more): the same numbers as with 32-bit ones."""
    (rank, _) = _compact_ranks("float16", "float32", "two-copy", "incompressible", 1)
    narrow = FusedNumbers(rank, 1, launch=_launch, max_blocks=2)()
    at, block, tiled = rank.state.edge
    rank.state.edge = (at, block, tiled.astype(np.int64))
    _same_numbers(FusedNumbers(rank, 1, launch=_launch, max_blocks=2)(), narrow)
    _same_numbers(narrow, owned_numbers(rank, 1))


def test_fused_check_of_a_compact_rank_sees_a_non_finite_owned_node_only():
    ranks = _compact_ranks("float16", "float32", "two-copy", "incompressible", 0)
    rank = ranks[1]
    run = rank.state
    owned_last, halo_first = int(run.starts[rank.n_owned]) - 1, int(run.starts[rank.n_owned])
    at, block, _ = run.edge
    run.f[run.current][at[halo_first] + 3 * block[halo_first]] = np.float16(np.inf).view(
        np.uint16) if run.f[run.current].dtype == np.uint16 else np.inf
    assert FusedNumbers(rank, 0, launch=_launch, max_blocks=2)().finite  # a halo node
    run.f[run.current][at[owned_last] + 3 * block[owned_last]] = run.f[run.current][
        at[halo_first] + 3 * block[halo_first]]
    assert not FusedNumbers(rank, 0, launch=_launch, max_blocks=2)().finite
    assert not owned_numbers(rank, 0).finite


class _Gather:
    """``allgather`` of the given parts (what :func:`combine` calls of a communicator)."""

    def __init__(self, parts) -> None:
        self.parts = parts

    def allgather(self, value):
        return self.parts


@pytest.mark.gpu
@pytest.mark.parametrize("storage, precision, fluid_model, axis", [
    ("float16", "float32", "incompressible", 0),
    ("auto", "float32", "quasi-compressible", 1),
])
def test_fused_rank_check_on_the_gpu_reads_the_chunked_numbers(storage, precision, fluid_model,
                                                               axis):
    """CuPy loopback ranks (tiled): the fused check's numbers equal the chunked readout's."""
    from solver.backends import get_backend

    backend = get_backend("cupy")
    problem = make_problem("D3Q19", precision, "TRT", fluid_model=fluid_model, storage=storage)
    hub, dec = LoopbackHub(), decompose(problem.tiling, 2, axis)
    ranks = [RankSolver(problem, dec, r, backend,
                        lambda plan, s, r=r: hub.exchange(r, plan, s)) for r in range(2)]
    f0 = noisy_start(problem)
    for rank in ranks:
        backend.set_populations(rank.state, f0[rank.layout.global_tiles])
        rank.stepper.idle()
    step_together(ranks, 20)
    for rank in ranks:
        assert FusedNumbers.applies(rank)
        got, want = FusedNumbers(rank, axis)(), owned_numbers(rank, axis)
        assert got.finite and want.finite and got.fluid == want.fluid
        assert got.max_speed == pytest.approx(want.max_speed, rel=1e-12)
        assert got.speed_sum == pytest.approx(want.speed_sum, rel=RTOL)
        assert got.momentum == pytest.approx(want.momentum, rel=RTOL)
        np.testing.assert_allclose(got.plane_flux, want.plane_flux, rtol=RTOL,
                                   atol=RTOL * np.abs(want.plane_flux).max())
        rank.release()


@pytest.mark.gpu
@pytest.mark.parametrize("storage, precision, streaming, fluid_model, axis", [
    ("float16", "float32", "two-copy", "incompressible", 0),
    ("float16", "float32", "in-place", "quasi-compressible", 2),
    ("auto", "float32", "in-place", "incompressible", 1),
    ("auto", "float64", "two-copy", "quasi-compressible", 0),
])
def test_fused_check_of_compact_gpu_ranks_reads_the_chunked_numbers(storage, precision,
                                                                    streaming, fluid_model,
                                                                    axis):
    """CuPy loopback ranks on compact storage: ``rank_numbers`` takes the fused check, whose
    numbers (owned tiles only) equal the chunked readout's, after odd and even step counts."""
    from solver.backends import get_backend
    from solver.distributed.reductions import rank_numbers

    backend = get_backend("cupy")
    problem = replace(make_problem("D3Q19", precision, "TRT", fluid_model=fluid_model,
                                   storage=storage, offset=(1, 2, 0)),
                      streaming=streaming, tile_storage="compact")
    hub, dec = LoopbackHub(), decompose(problem.tiling, 2, axis)
    ranks = [RankSolver(problem, dec, r, backend,
                        lambda plan, s, r=r: hub.exchange(r, plan, s)) for r in range(2)]
    f0 = as_stored(problem, noisy_start(problem))
    for rank in ranks:
        assert isinstance(rank.state, CompactRun)
        backend.set_populations(rank.state, f0[rank.layout.global_tiles])
        rank.stepper.idle()
    reads = [rank_numbers(rank, axis) for rank in ranks]
    assert all(isinstance(read, FusedNumbers) for read in reads)
    for steps in (21, 20):
        step_together(ranks, steps)
        for rank, read in zip(ranks, reads, strict=True):
            _same_numbers(read(), owned_numbers(rank, axis), speed_rtol=1e-12)
    for rank in ranks:
        rank.release()


def test_mirrored_run_checks_with_the_fused_kernel_and_reads_the_same_k(monkeypatch):
    """The mirrored runner (coarse start included) with every check through the fused kernel
    (emulated) reads the chunked checks' k at every check, to rounding, and runs the same
    steps."""
    from geometries.regions import GrainRegions
    from solver.config import SimulationConfig
    from solver.distributed import mirrored

    def run():
        config = SimulationConfig(backend="numpy", precision="float32", storage="float16")
        return mirrored.run_mirrored(GrainRegions((16, 16, 16), 0.35, 6, seed=2), config, 0,
                                     SoloComm(), NumpyBackend(threads=1), 41, 20,
                                     settings=mirrored.start_settings(1))

    chunked = run()
    used = []

    def fused(solver, axis, fused=True):
        used.append(solver)
        return FusedNumbers(solver, axis, launch=_launch, max_blocks=2)

    monkeypatch.setattr(mirrored, "rank_numbers", fused)
    got = run()
    assert len(used) == 2  # the coarse level's checks and the fine run's
    _same_run(got, chunked)


@pytest.mark.parametrize("storage, precision, streaming", [
    ("float16", "float32", "two-copy"), ("auto", "float32", "in-place")])
def test_compact_mirrored_run_checks_with_the_fused_kernel_and_reads_the_same_k(
        monkeypatch, storage, precision, streaming):
    """The mirrored runner on compact ranks (emulated CuPy ranks, coarse start included) with
    every check through the fused kernel (emulated) reads the chunked checks' k at every
    check, to rounding, and runs the same steps."""
    from geometries.regions import GrainRegions
    from solver.config import SimulationConfig
    from solver.distributed import mirrored

    def run():
        config = SimulationConfig(backend="numpy", precision=precision, storage=storage,
                                  streaming=streaming, tile_storage="compact")
        return mirrored.run_mirrored(GrainRegions((16, 16, 16), 0.35, 6, seed=2), config, 0,
                                     SoloComm(), _CompactRanksBackend(), 41, 20,
                                     settings=mirrored.start_settings(1))

    chunked = run()
    used = []

    def fused(solver, axis, fused=True):
        assert isinstance(solver.state, CompactRun)
        assert solver.state.in_place == (streaming == "in-place")
        used.append(solver)
        return FusedNumbers(solver, axis, launch=_launch, max_blocks=2)

    monkeypatch.setattr(mirrored, "rank_numbers", fused)
    got = run()
    assert len(used) == 2 and chunked["per_rank"][0]["tile_storage"] == "compact"
    _same_run(got, chunked)
