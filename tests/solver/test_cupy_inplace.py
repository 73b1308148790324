"""In-place streaming on the GPU (``pytest -m gpu``): one copy, the two-copy results bit for bit.

The CuPy backend with ``streaming='in-place'`` (AA pattern, :mod:`solver.backends.cuda.streaming`)
is stepped next to the two-copy one from the same noisy start, through CUDA-graph replays from
both phases and plain launches, and read after odd and even step counts (reading decodes the
one copy in place and the run continues from there). Populations of fluid nodes must be equal
bit for bit, in float64, float32 and float16 storage, on porous boxes and on every boundary
kind; fields, a checkpoint resume, the probes and a re-layout must give the same numbers as two
copies do.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from .physics_cases import physics_problem
from .porous_cases import (
    as_stored,
    make_problem,
    narrow_problem,
    noisy_start,
    porous_solid,
    reference,
)

pytestmark = pytest.mark.gpu

PROBLEMS = {
    "D3Q19 f64 TRT qc paper tpb2": lambda: make_problem(
        "D3Q19", "float64", "TRT", "quasi-compressible", "paper", 2),
    "D3Q19 f32 BGK inc xyz tpb4": lambda: make_problem(
        "D3Q19", "float32", "BGK", "incompressible", "xyz", 4),
    "D3Q19 f32 MRT inc xyz tpb1": lambda: make_problem(
        "D3Q19", "float32", "MRT", "incompressible", "xyz", 1),
    "D2Q9 f64 BGK qc tpb2": lambda: make_problem(
        "D2Q9", "float64", "BGK", "quasi-compressible", "xyz", 2),
    "D3Q27 f32 TRT inc paper": lambda: make_problem(
        "D3Q27", "float32", "TRT", "incompressible", "paper", 1),
    "zou_he D3Q19 f64 TRT": lambda: physics_problem(
        "zou_he", "D3Q19", "float64", "TRT", "quasi-compressible", "paper", 2),
    "zou_he D3Q19 f32 BGK": lambda: physics_problem(
        "zou_he", "D3Q19", "float32", "BGK", "incompressible", "xyz", 2),
    "zou_he_moving D3Q19 f64 MRT": lambda: physics_problem(
        "zou_he_moving", "D3Q19", "float64", "MRT", "incompressible", "xyz", 1),
    "cavity D3Q19 f32 TRT": lambda: physics_problem(
        "cavity", "D3Q19", "float32", "TRT", "incompressible", "paper", 4),
    "cavity D2Q9 f64 TRT": lambda: physics_problem(
        "cavity", "D2Q9", "float64", "TRT", "quasi-compressible", "xyz", 2),
    "objects D3Q19 f64 BGK": lambda: physics_problem(
        "objects", "D3Q19", "float64", "BGK", "quasi-compressible", "paper", 1),
    "far_field D2Q9 f32 MRT": lambda: physics_problem(
        "far_field", "D2Q9", "float32", "MRT", "quasi-compressible", "xyz", 2),
    "mrt D3Q13 f64": lambda: physics_problem(
        "mrt", "D3Q13", "float64", "MRT", "quasi-compressible", "paper", 2),
    "D3Q19 f16 storage TRT qc paper tpb2": lambda: make_problem(
        "D3Q19", "float32", "TRT", "quasi-compressible", "paper", 2, storage="float16"),
    "D2Q9 f16 storage BGK inc tpb2": lambda: make_problem(
        "D2Q9", "float32", "BGK", "incompressible", "xyz", 2, storage="float16"),
    "zou_he_moving D3Q19 f16 storage MRT": lambda: replace(physics_problem(
        "zou_he_moving", "D3Q19", "float32", "MRT", "incompressible", "xyz", 1),
        storage_kind="float16"),
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


def _fluid(problem) -> np.ndarray:
    return ~problem.tiling.solid[:, None, :].repeat(problem.lattice.q, axis=1)


def _runs(backend, problem, f0, schedule):
    """Populations after each group of step calls, two copies and in place side by side."""
    from solver.backends.cuda.capture import GRAPH_STEPS

    states = {s: backend.allocate(replace(problem, streaming=s))
              for s in ("two-copy", "in-place")}
    assert states["in-place"].f.shape[0] == 1 and states["two-copy"].f.shape[0] == 2
    for state in states.values():
        backend.set_populations(state, f0)
    out = []
    for group in schedule:
        for n in group:
            for state in states.values():
                backend.step(state, n)
        out.append({s: backend.populations(state) for s, state in states.items()})
    phases = {key[2] for key in states["in-place"].graphs}
    for state in states.values():
        backend.release(state)
    if any(n >= GRAPH_STEPS for group in schedule for n in group):
        assert phases == {0, 1}  # replays from both phases were used
    return out


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_in_place_equals_two_copy_bit_for_bit(backend, name):
    from solver.backends.cuda.capture import GRAPH_STEPS

    problem = PROBLEMS[name]()
    f0 = noisy_start(problem)
    fluid = _fluid(problem)
    # Graphs from phase 1 (after one step) and phase 0, plain tails; reads after odd counts.
    schedule = [[1, 2 * GRAPH_STEPS + 3], [GRAPH_STEPS], [5], [50]]
    for k, got in enumerate(_runs(backend, problem, f0, schedule)):
        one, two = got["in-place"][fluid], got["two-copy"][fluid]
        assert np.isfinite(one).all()
        assert np.array_equal(one, two), (f"read {k + 1}: max deviation "
                                          f"{np.abs(one - two).max():.3g}")


def test_in_place_matches_numpy_reference(backend):
    problem = replace(make_problem("D3Q19", "float64", "TRT", "quasi-compressible", "paper", 2),
                      streaming="in-place")
    f0 = noisy_start(problem)
    state = backend.allocate(problem)
    backend.set_populations(state, f0)
    backend.step(state, 201)
    ref = reference(problem, f0, 201)
    got = backend.populations(state)
    fluid = _fluid(problem)
    assert np.abs(got[fluid] - ref[fluid]).max() <= 1e-12 * np.abs(ref).max()


@pytest.mark.parametrize("shape", [(1, 9, 2), (3, 6, 5)])
def test_in_place_on_domains_narrower_than_a_tile(backend, shape):
    """Small enough for compute-sanitizer (memcheck, racecheck); periodic wrap onto itself."""
    problem = narrow_problem(shape)
    f0 = noisy_start(problem)
    got = _runs(backend, problem, f0, [[3], [4]])
    fluid = _fluid(problem)
    for g in got:
        assert np.array_equal(g["in-place"][fluid], g["two-copy"][fluid])


@pytest.mark.parametrize("storage", ["auto", "float16"])
def test_simulation_fields_and_checkpoint_resume(backend, tmp_path, storage):
    from solver.config import SimulationConfig
    from solver.io import read_checkpoint, restore
    from solver.simulation import Simulation

    solid = porous_solid((26, 15, 11))
    faces = dict(y_min="wall", y_max="wall")

    def config(streaming):
        return SimulationConfig(lattice="D3Q19", precision="float32", collision="TRT",
                                backend="cupy", body_force=(2e-5, 0.0, 1e-6), tau=0.7,
                                streaming=streaming, storage=storage, tile_storage="tiled",
                                **faces)  # in place against two copies of the same storage

    one, two = Simulation(solid, config("in-place")), Simulation(solid, config("two-copy"))
    for sim in (one, two):
        sim.step(7)
    assert one.memory_bytes() < two.memory_bytes()
    assert 2 * one.state.f.nbytes == two.state.f.nbytes
    f1, f2 = one.fields(), two.fields()
    for key in ("rho", "u"):
        assert np.array_equal(f1[key], f2[key], equal_nan=True)
    path = one.save(tmp_path / "checkpoint.npz")
    for sim in (one, two):
        sim.step(9)
    fluid = _fluid(one.problem)
    final = one.populations()[fluid]
    assert np.array_equal(final, two.populations()[fluid])
    resumed = Simulation.load(path, solid)  # in place, as written
    other = Simulation(solid, config("two-copy"))  # streaming is execution-only
    restore(other, read_checkpoint(path))
    for sim in (resumed, other):
        assert sim.time_step == 7
        sim.step(9)
        assert np.array_equal(sim.populations()[fluid], final)
        sim.close()
    one.close()
    two.close()


@pytest.mark.parametrize("precision, storage", [("float64", "auto"), ("float32", "auto"),
                                                ("float32", "float16")])
def test_in_place_probes_move_exactly_the_fluid_values(probes, precision, storage):
    problem = replace(make_problem("D3Q19", precision, layout="paper", tiles_per_block=2,
                                   storage=storage), streaming="in-place")
    f0 = as_stored(problem, noisy_start(problem))
    state = probes.allocate(problem)
    probes.set_populations(state, f0)
    assert probes.probe(state, "readwrite", 1) > 0 and state.current == 0
    assert np.array_equal(probes.populations(state), f0)
    probes.probe(state, "propagate", 1)
    assert state.current == 1
    table = problem.pull_table
    expected = f0.ravel().copy()
    expected[table.dst.ravel()] = f0.ravel()[table.src.ravel()]
    assert np.array_equal(probes.populations(state), expected.reshape(f0.shape))
    probes.release(state)


def test_in_place_relayout_keeps_populations(probes):
    problem = replace(make_problem("D3Q19", "float64", layout="paper"), streaming="in-place")
    f0 = noisy_start(problem)
    state = probes.allocate(problem)
    probes.set_populations(state, f0)
    probes.step(state, 5)  # phase 1: the re-layout decodes first
    fluid = _fluid(problem)
    ref5 = reference(problem, f0, 5)
    other = probes.reconfigure(state, layout="xyz", tiles_per_block=4)
    assert np.abs(probes.populations(other)[fluid] - ref5[fluid]).max() <= 1e-12
    probes.step(other, 20)
    ref = reference(problem, f0, 25)
    assert np.abs(probes.populations(other)[fluid] - ref[fluid]).max() <= 1e-12 * np.abs(
        ref).max()
    probes.release(other)


def test_distributed_phase_stepper_steps_in_place(backend):
    """Issue 33: a rank steps one copy in place (its exchange alternates with the phase:
    test_distributed_inplace_gpu.py)."""
    problem = replace(make_problem("D3Q19", "float32"), streaming="in-place")
    stepper = backend.phase_stepper(problem, 0, problem.tiling.n_tiles)
    try:
        assert stepper.in_place and stepper.target() is stepper.current()
    finally:
        stepper.release()


def test_distributed_phase_stepper_takes_float16_storage_on_tiles(backend):
    """Issue 33: float16 storage runs on ranks (tiled here; compact float16 ranks:
    test_distributed_inplace_gpu.py)."""
    problem = make_problem("D3Q19", "float32", storage="float16")
    stepper = backend.phase_stepper(problem, 0, problem.tiling.n_tiles)
    try:
        assert stepper.state.problem.storage_dtype == np.float16
    finally:
        stepper.release()
