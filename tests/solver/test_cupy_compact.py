"""Fluid-compacted storage through the CuPy backend (``pytest -m gpu``, issue 20).

``tile_storage='compact'``/``'auto'`` makes :meth:`CupyBackend.allocate` return a
:class:`~solver.backends.cuda.compact_run.CompactRun`; stepped through plain launches and
captured graphs it must equal the NumPy backend, read fields and write checkpoints like the
tiled storage, and report the bytes it allocated. With float16 storage it must store the tiled
float16 run's bits (same code, same step counter, random bits keyed by the tiled node) and
checkpoints must resume bit for bit on either storage. The CPU twins (emulated kernels):
test_compact_backend.py, test_compact_float16.py.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from .porous_cases import (
    as_stored,
    half_tolerance,
    make_problem,
    noisy_start,
    porous_solid,
    reference,
)

pytestmark = pytest.mark.gpu

PROBLEMS = {
    "f32 BGK inc tpb2": ("float32", "BGK", "incompressible", 2),
    "f64 TRT qc tpb1": ("float64", "TRT", "quasi-compressible", 1),
    "f32 MRT inc tpb4": ("float32", "MRT", "incompressible", 4),
}


@pytest.fixture(scope="module")
def backend():
    from solver.backends import get_backend

    return get_backend("cupy")


@pytest.fixture(scope="module")
def probes(backend):
    """The benchmarks' CuPy backend: the probe kernels and re-laid views of one allocation."""
    from solver.benchmarking.probe_backend import ProbeBackend

    return ProbeBackend()


#: (packed tiles per block, CompactCode arguments) of the kernels the backend may be set to run.
KERNELS = {"per-node": (0, {}), "packed8": (8, {}), "inner": (0, {"inner": True}),
           "packed4-inner": (4, {"inner": True})}


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_compact_steps_like_numpy_through_graphs_and_launches(backend, probes, name, kernel,
                                                              monkeypatch):
    from solver.backends import plan
    from solver.backends.cuda.compact_run import CompactRun
    from solver.backends.cuda.compact_source import CompactCode

    packed, code = KERNELS[kernel]
    monkeypatch.setattr(plan, "COMPACT_PACKED", packed)
    monkeypatch.setattr(plan, "COMPACT_CODE", CompactCode(**code))
    precision, collision, fluid, tpb = PROBLEMS[name]
    problem = replace(make_problem("D3Q19", precision, collision, fluid, "xyz", tpb),
                      tile_storage="compact")
    state = backend.allocate(problem)
    assert isinstance(state, CompactRun) and state.variant.packed == packed
    assert state.variant.code == CompactCode(**code)
    f0 = noisy_start(problem)
    backend.set_populations(state, as_stored(problem, f0))
    steps = 0
    for n in (1, 20, 3, 16):  # plain, warm-up + graph + plain, plain, graph replay
        assert backend.step(state, n) > 0
        steps += n
        first = backend.populations(state)
        np.testing.assert_array_equal(backend.populations(state), first)  # reading is pure
    ref = reference(problem, f0, steps)
    solid = np.broadcast_to(problem.tiling.solid[:, None, :], ref.shape)
    tol = 1e-12 if precision == "float64" else 5e-5
    assert np.abs(first - ref)[~solid].max() <= tol * np.abs(ref).max()
    rest = problem.initial_populations().astype(precision).astype(np.float64)
    np.testing.assert_array_equal(first[solid], rest[solid])
    allocated = sum(int(a.nbytes) for a in (*state.f, *state.tables, *state.edge))
    assert state.memory_bytes() == allocated
    assert backend.memory_required(problem) >= allocated
    with pytest.raises(ValueError, match="tiled"):
        probes.reconfigure(state, layout="paper")
    with pytest.raises(ValueError, match="tile_storage='tiled'"):
        probes.probe(state, "propagate", 1)
    backend.release(state)


def test_auto_chooses_by_tile_utilisation(backend):
    from solver.backends.cuda.compact_run import CompactRun
    from solver.backends.cuda.tiled_run import TiledRun
    from solver.config import SimulationConfig
    from solver.problem import Problem

    porous = replace(make_problem("D3Q19", "float32", "BGK"), tile_storage="auto")
    # Whole tiles (eta_t = 1): a box whose edges are not multiples of 4 has partial tiles.
    dense = Problem.from_config(np.zeros((16, 16, 16), dtype=bool),
                                SimulationConfig(collision="BGK", tile_storage="auto"))
    assert dense.tiling.eta_t == 1.0
    assert isinstance(backend.allocate(porous), CompactRun)
    assert isinstance(backend.allocate(dense), TiledRun)


@pytest.mark.parametrize("streaming, storage", [("two-copy", "compact"), ("in-place", "auto")])
def test_simulation_fields_and_checkpoint_on_compact_storage(backend, tmp_path, streaming,
                                                              storage):
    """Fields, populations and a checkpoint (resumed on tiled storage) of a compact run agree
    with the tiled run; in place 'auto' picks compact storage on this porous box (timed faster
    below eta_t 0.85 in float32, solver/backends/plan.py), after 7 steps in the streamed layout."""
    from solver.backends.cuda.compact_run import CompactRun
    from solver.config import SimulationConfig
    from solver.io import read_checkpoint, restore
    from solver.simulation import Simulation

    solid = porous_solid((26, 15, 11))

    def config(tile_storage):
        return SimulationConfig(lattice="D3Q19", precision="float32", collision="TRT",
                                backend="cupy", body_force=(2e-5, 0.0, 1e-6), tau=0.7,
                                y_min="wall", y_max="wall", streaming=streaming,
                                tile_storage=tile_storage)

    compact, tiled = Simulation(solid, config(storage)), Simulation(solid, config("tiled"))
    for sim in (compact, tiled):
        sim.step(7)
    assert isinstance(compact.state, CompactRun)
    assert compact.state.in_place == (streaming == "in-place")
    assert compact.memory_bytes() < tiled.memory_bytes()
    fc, ft = compact.fields(), tiled.fields()
    for key in ("rho", "u"):
        np.testing.assert_allclose(fc[key], ft[key], rtol=1e-5, atol=1e-7)
    path = compact.save(tmp_path / "checkpoint.npz")
    for sim in (compact, tiled):
        sim.step(9)
    fluid = ~compact.problem.tiling.solid[:, None, :].repeat(19, axis=1)
    final = compact.populations()[fluid]
    np.testing.assert_allclose(final, tiled.populations()[fluid], rtol=1e-5)
    resumed = Simulation(solid, config("tiled"))  # the storage is execution-only
    restore(resumed, read_checkpoint(path))
    assert resumed.time_step == 7
    resumed.step(9)
    np.testing.assert_allclose(resumed.populations()[fluid], final, rtol=1e-5)
    for sim in (compact, tiled, resumed):
        sim.close()


def test_compact_refused_with_boundary_code(backend):
    from solver.config import SimulationConfig
    from solver.simulation import Simulation
    from solver.values import ConfigError

    config = SimulationConfig(lattice="D3Q19", backend="cupy", tile_storage="compact",
                              x_min="velocity", x_min_value=0.01, x_max="pressure",
                              x_max_value=1.0)
    with pytest.raises(ConfigError, match="tile_storage='tiled'"):
        Simulation(porous_solid((16, 12, 12)), config).step(1)


@pytest.mark.parametrize("precision", ["float32", "float64", "float16"])
def test_compact_in_place_equals_two_copy_bit_for_bit(backend, precision):
    """streaming='in-place' on compact storage (AA pattern): one copy, after odd and even step
    counts (graphs and launches; odd reads decode in place) the two-copy compact populations
    ('float16': float16 storage, float32 arithmetic)."""
    storage = "float16" if precision == "float16" else "auto"
    problem = make_problem("D3Q19", "float32" if storage == "float16" else precision, "TRT",
                           "quasi-compressible", "xyz", 2, storage=storage)
    states = [backend.allocate(replace(problem, streaming=s, tile_storage="compact"))
              for s in ("in-place", "two-copy")]
    f0 = noisy_start(problem)
    for state in states:
        backend.set_populations(state, as_stored(problem, f0))
    fluid = np.broadcast_to(~problem.tiling.solid[:, None, :], f0.shape)
    for n in (1, 20, 3, 16):
        for state in states:
            backend.step(state, n)
        one, two = (backend.populations(s) for s in states)
        np.testing.assert_array_equal(one[fluid], two[fluid])
    assert len(states[0].f) == 1 and 2 * states[0].f[0].nbytes == sum(f.nbytes
                                                                      for f in states[1].f)
    for state in states:
        backend.release(state)


@pytest.mark.parametrize("collision, fluid, tpb", [
    ("BGK", "incompressible", 2), ("MRT", "incompressible", 1), ("TRT", "quasi-compressible", 4),
    ("RR", "quasi-compressible", 2)])
def test_compact_float16_stores_the_tiled_bits(backend, collision, fluid, tpb):
    """Compact and tiled float16 runs of one problem, stepped alike (plain launches, graphs, a
    resumed step counter), hold the same binary16 bits in every fluid node, and both stay
    within a few binary16 steps of the NumPy reference."""
    from solver.backends.cuda.compact_run import CompactRun

    problem = make_problem("D3Q19", "float32", collision, fluid, "xyz", tpb, storage="float16")
    states = [backend.allocate(replace(problem, tile_storage=s)) for s in ("compact", "tiled")]
    compact, tiled = states
    assert isinstance(compact, CompactRun) and compact.f[0].dtype == np.float16
    f0 = noisy_start(problem)
    for state in states:
        backend.set_populations(state, as_stored(problem, f0))
    fluid_nodes = np.broadcast_to(~problem.tiling.solid[:, None, :], f0.shape)
    for counter in (None, 100):  # then a resume: both draw the bits of step 100 on
        if counter is not None:
            for state in states:
                backend.set_step(state, counter)
        for n in (1, 20, 3):  # plain, warm-up + graph + plain, plain
            for state in states:
                backend.step(state, n)
            got, want = (backend.populations(s) for s in states)
            differ = np.count_nonzero(got[fluid_nodes] != want[fluid_nodes])
            assert differ == 0, f"{differ} of {fluid_nodes.sum()} fluid values differ"
    ref = reference(problem, f0, 24, then_from_step=100)  # 24 steps, then 24 from step 100
    assert np.abs(got - ref).max() <= half_tolerance(problem, ref, 8)
    allocated = sum(int(a.nbytes) for a in (*compact.f, *compact.tables, *compact.edge,
                                            compact.seeds))
    assert compact.memory_bytes() == allocated
    assert backend.memory_required(replace(problem, tile_storage="compact")) >= allocated
    for state in states:
        backend.release(state)


def test_float16_checkpoint_of_a_compact_run_resumes_bit_for_bit(backend, tmp_path):
    """A compact float16 run's checkpoint (exact float64 values, the step counter) resumes
    on the compact and on the tiled storage to the very values the run reaches."""
    from solver.config import SimulationConfig
    from solver.io import read_checkpoint, restore
    from solver.simulation import Simulation

    solid = porous_solid((26, 15, 11))

    def config(tile_storage):
        return SimulationConfig(lattice="D3Q19", precision="float32", storage="float16",
                                collision="BGK", backend="cupy", body_force=(2e-5, 0.0, 1e-6),
                                tau=0.7, y_min="wall", y_max="wall", tile_storage=tile_storage)

    run = Simulation(solid, config("compact"))
    run.step(7)
    path = run.save(tmp_path / "checkpoint.npz")
    run.step(9)
    final = run.populations()
    for tile_storage in ("compact", "tiled"):
        resumed = Simulation(solid, config(tile_storage))
        restore(resumed, read_checkpoint(path))
        assert resumed.time_step == 7
        resumed.step(9)
        np.testing.assert_array_equal(resumed.populations(), final)
        resumed.close()
    run.close()

