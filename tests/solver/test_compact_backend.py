"""Fluid-compacted storage as a run option (issue 20): the execution plan chooses it, the memory
estimate follows the choice, and :class:`CompactRun` as the CuPy backend steps it (captured
graphs and plain launches, populations in and out) equals the NumPy backend, on the CPU (fake
CUDA runtime, kernels through the g++ emulator). The same on the GPU: test_cupy_compact.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from solver.backends.cuda.compact import CompactTiling
from solver.backends.plan import (
    AUTO_COMPACT_BELOW,
    AUTO_COMPACT_IN_PLACE_BELOW,
    plan_for,
)
from solver.config import SimulationConfig
from solver.fields import gather_bytes
from solver.memory import device_bytes, moments_bytes
from solver.problem import Problem
from solver.values import ConfigError

from .compact_emulator import FakeCupy, compiler
from .porous_cases import as_stored, make_problem, noisy_start, porous_solid, reference


def _problem(tile_storage: str, solid=None, **options) -> Problem:
    solid = porous_solid((16, 12, 12)) if solid is None else solid
    config = SimulationConfig(lattice=options.pop("lattice", "D3Q19"), precision="float32",
                              tile_storage=tile_storage, **options)
    return Problem.from_config(solid, config)


def test_config_default_compacts_a_porous_run() -> None:
    """The default is 'auto' since the GPU tests ran the compact storage (issue 20): a porous
    float32 run stores only its fluid nodes, with the timed inner-tile halo code."""
    assert SimulationConfig().tile_storage == "auto"
    choice = plan_for(_problem(SimulationConfig().tile_storage))
    assert choice.tile_storage == "compact" and choice.code.inner


def test_auto_compacts_porous_runs_below_the_threshold_only() -> None:
    porous = _problem("auto")
    assert porous.tiling.eta_t < AUTO_COMPACT_BELOW["float32"]
    choice = plan_for(porous)
    assert choice.compact and choice.pad == 1 and "below" in choice.reason
    dense = _problem("auto", np.zeros((16, 12, 12), dtype=bool))
    assert dense.tiling.eta_t == 1.0
    assert plan_for(dense).tile_storage == "tiled"
    assert plan_for(_problem("compact", streaming="in-place")).compact
    # precision matters: float64 gains less, so its threshold is lower
    assert AUTO_COMPACT_BELOW["float64"] < AUTO_COMPACT_BELOW["float32"]


def test_auto_compacts_in_place_runs_by_their_own_thresholds() -> None:
    """In place, compact storage was timed faster than tiled below eta_t 0.85 in float32 and
    everywhere in float64 (solver/backends/plan.py), and it holds the fewest bytes."""
    porous = _problem("auto", streaming="in-place")
    assert porous.tiling.eta_t < AUTO_COMPACT_IN_PLACE_BELOW["float32"]
    choice = plan_for(porous)
    assert choice.compact and "below 0.85" in choice.reason
    dense = np.zeros((16, 12, 12), dtype=bool)
    choice = plan_for(_problem("auto", dense, streaming="in-place"))
    assert choice.tile_storage == "tiled" and "in-place" in choice.reason
    float64 = Problem.from_config(dense, SimulationConfig(precision="float64",
                                                          streaming="in-place"))
    assert plan_for(float64).compact


def test_compact_in_place_needs_fewer_bytes_than_tiled_in_place() -> None:
    """At 96^3 (eta_t 0.33) the estimate's peak is about half (481 against 861 B per fluid
    node in float32); on tiny grids the compact readout's 64 MiB chunk floor dominates."""
    from solver.benchmarking.cases import sphere_pack

    solid = sphere_pack((96,) * 3, 0.2, 11.0, 1)
    compact, tiled = (_problem(kind, solid, streaming="in-place", tile_offset="origin")
                      for kind in ("auto", "tiled"))
    assert plan_for(compact).compact
    assert device_bytes(compact) < 0.6 * device_bytes(tiled)


@pytest.mark.parametrize("options, words", [
    ({"x_min": "velocity", "x_min_value": 0.01, "x_max": "pressure", "x_max_value": 1.0},
     "boundary code"),
    ({"lattice": "D2Q9"}, "3D tiles"),
])
def test_what_compact_lacks_auto_keeps_tiled_and_compact_refuses(options, words) -> None:
    solid = porous_solid((16, 16)) if options.get("lattice") == "D2Q9" else None
    auto = plan_for(_problem("auto", solid, **dict(options)))
    assert auto.tile_storage == "tiled" and words in auto.reason
    with pytest.raises(ConfigError, match=f"(?s){words}.*tile_storage='tiled'"):
        plan_for(_problem("compact", solid, **dict(options)))


def test_config_refuses_an_unknown_tile_storage() -> None:
    with pytest.raises(ValueError, match="tile_storage"):
        SimulationConfig(tile_storage="sparse")


def test_device_bytes_follow_the_chosen_storage() -> None:
    """Compact: its two copies and tables, 12 edge bytes per fluid node, one readout chunk
    (fields, checks and checkpoints read bounded chunks: test_compact_readout.py) and one
    cut's moments: at eta_t ~0.5 the state is about half the tiled two-copy state."""
    from solver.backends.cuda.compact_readout import readout_tile_bytes, readout_tiles
    from solver.memory import cut_bytes

    tiled, compact = _problem("tiled"), _problem("compact")
    t, q = tiled.tiling, 19
    nodes = t.n_tiles * 64
    state = CompactTiling(t, 1).memory_bytes(q, 4) + 12 * tiled.n_fluid
    chunk = readout_tiles(compact, state) * readout_tile_bytes(compact)
    assert device_bytes(compact) == state + chunk + 2 * nodes + cut_bytes(compact)
    assert state < 0.7 * t.memory_bytes(q, 4, 2)
    assert device_bytes(tiled) == (t.memory_bytes(q, 4, 2) + 2 * nodes + moments_bytes(tiled)
                                   + gather_bytes(tiled))


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("precision, collision, fluid, tpb, packed", [
    ("float32", "BGK", "incompressible", 2, 0), ("float64", "MRT", "quasi-compressible", 1, 0),
    ("float32", "TRT", "incompressible", 1, 8)])
def test_compact_run_as_the_backend_steps_it(precision, collision, fluid, tpb, packed) -> None:
    """Exact padding (the one auto picks), per-node or packed kernel, 2 warm-up launches, 16
    steps from a captured graph, 1 plain launch: the NumPy backend's populations;
    set_populations takes device arrays; the reported bytes are the allocated ones."""
    from solver.backends.cuda.compact_run import CompactRun

    problem = replace(make_problem("D3Q19", precision, collision, fluid, offset=(1, 2, 0)),
                      tiles_per_block=tpb, tile_storage="auto")
    choice = plan_for(problem)
    assert choice.compact
    fake = FakeCupy()
    launcher = fake.launcher()

    run = CompactRun(problem, choice.pad, xp=np, launcher=launcher, tiles_per_block=tpb,
                     cuda=fake.cuda, packed=packed)
    assert run.variant.packed == packed
    f0 = noisy_start(problem)
    run.set_populations(as_stored(problem, f0))
    seconds = run.step(16 + 3)
    assert seconds > 0 and run.graphs  # the 16 came from a replayed graph
    ref = reference(problem, f0, 19)
    got = run.populations()
    solid = np.broadcast_to(problem.tiling.solid[:, None, :], ref.shape)
    tol = 1e-12 if precision == "float64" else 2e-5
    assert np.abs(got - ref)[~solid].max() <= tol * np.abs(ref).max()
    rest = problem.initial_populations().astype(precision).astype(np.float64)
    np.testing.assert_array_equal(got[solid], rest[solid])
    # reading does not change the run, and writing back what was read changes nothing
    run.set_populations(run.device_populations())
    np.testing.assert_array_equal(run.populations(), got)
    allocated = sum(f.nbytes for f in run.f) + sum(a.nbytes for a in run.tables) \
        + sum(a.nbytes for a in run.edge)
    assert run.memory_bytes() == allocated


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("precision, collision, packed", [
    ("float32", "TRT", 0), ("float64", "BGK", 4)])
def test_compact_in_place_equals_two_copy_bit_for_bit(precision, collision, packed) -> None:
    """AA pattern on one compact copy: after odd and even step counts (graphs and plain
    launches; reading an odd phase decodes it in place with the swap kernel) the populations
    equal the two-copy compact run's bit for bit, and the copy is half the two-copy memory."""
    from solver.backends.cuda.compact_run import CompactRun

    base = make_problem("D3Q19", precision, collision, offset=(3, 0, 1))
    fake = FakeCupy()
    launcher = fake.launcher()

    runs = [CompactRun(replace(base, streaming=s, tile_storage="compact"), 1, xp=np,
                       launcher=launcher, cuda=fake.cuda, packed=packed)
            for s in ("in-place", "two-copy")]
    one, two = runs
    assert len(one.f) == 1 and one.variants[0].streaming == "aa_neighbour"
    assert one.variants[1].streaming == "aa_local"
    f0 = noisy_start(base)
    for run in runs:
        run.set_populations(as_stored(base, f0))
    fluid = np.broadcast_to(~base.tiling.solid[:, None, :], f0.shape)
    for n in (1, 2, 19, 3):  # odd: phase 1 read (swap); 19: warm-up, graph, plain
        for run in runs:
            run.step(n)
        assert one.current == n % 2  # odd counts leave the streamed layout (phase 1)
        np.testing.assert_array_equal(one.populations()[fluid], two.populations()[fluid])
        assert one.current == 0  # reading decoded phase 1 in place
    one.step(1)
    one.set_populations(two.populations())  # writing in phase 1 lands in the natural layout
    two.step(2)
    one.step(2)
    np.testing.assert_array_equal(one.populations()[fluid], two.populations()[fluid])
    ref = reference(base, f0, 27)  # two ran 27 steps, one took its populations at 25
    tol = 1e-12 if precision == "float64" else 5e-5
    assert np.abs(one.populations() - ref)[fluid].max() <= tol * np.abs(ref).max()
    q, value = 19, np.dtype(precision).itemsize
    assert one.f[0].nbytes == two.f[0].nbytes and len(two.f) == 2
    assert device_bytes(one.problem) < device_bytes(two.problem)
    assert one.memory_bytes() == two.memory_bytes() - q * one.compact.n_slots * value


def test_checkpoints_resume_across_tile_storages() -> None:
    """The storage is how a run executes, not what it computes: a checkpoint written by a
    compact run resumes on the tiled storage (and the NumPy backend, which ignores it)."""
    from solver.io import config_differences, config_values

    saved = config_values(SimulationConfig(tile_storage="compact"))
    assert config_differences(saved, SimulationConfig(tile_storage="tiled")) == []
    assert config_differences(saved, SimulationConfig(tau=0.9)) != []


def test_numpy_simulation_ignores_the_tile_storage() -> None:
    from solver.simulation import Simulation

    solid = porous_solid((12, 12, 12))
    runs = [Simulation(solid, SimulationConfig(backend="numpy", tile_storage=s,
                                               body_force=(1e-5, 0, 0)))
            for s in ("compact", "tiled")]
    for sim in runs:
        sim.step(3)
    np.testing.assert_array_equal(runs[0].populations(), runs[1].populations())
    assert runs[0].memory_bytes() == runs[1].memory_bytes()
