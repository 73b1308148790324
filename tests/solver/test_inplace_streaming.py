"""In-place streaming (AA pattern): one copy of f, the same populations bit for bit.

* The premise of the scheme, on the host tables: every fluid slot is read by exactly one
  (node, direction) per step, so a thread may overwrite the slots it read (no races).
* The generated in-place kernels, run by the g++ emulation of :mod:`kernel_emulator` with the
  blocks in reverse order, give populations equal bit for bit to the two-copy kernel after odd
  and even step counts, decoded mid-run and continued, on porous boxes and on every boundary
  kind (Zou-He faces, moving walls and objects, MRT, D2Q9/D3Q13/D3Q19/D3Q27), in float64,
  float32 and float16 storage (whose stochastic rounding must draw the same bits: its step
  counter follows the phase, through reads, resumes and overwrites mid-run); the probes do
  what they claim, and nothing outside the fluid slots is written.
* Config, memory estimates and checkpoints know one copy from two.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from solver.backends.cuda.kernels import (
    KernelVariant,
    collision_param_names,
    kernel_source,
    real_args,
    real_param_names,
)
from solver.backends.cuda.storage import storage_param_names
from solver.backends.cuda.streaming import next_phase
from solver.backends.cuda.tables import physics_args
from solver.config import ConfigError, SimulationConfig, population_copies
from solver.problem import Problem

from .kernel_emulator import EmulatedKernel, compiler
from .physics_cases import physics_problem
from .porous_cases import make_problem, noisy_start

needs_gxx = pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
NVCC = shutil.which("nvcc") or next(
    (p for p in ("/usr/local/bin/nvcc", "/usr/local/cuda/bin/nvcc") if Path(p).exists()), None)


def _narrow() -> Problem:
    config = SimulationConfig(lattice="D3Q19", precision="float64", collision="TRT",
                              fluid_model="quasi-compressible", body_force=(1e-5, 0.0, 2e-6),
                              y_min="wall", y_max="wall", tile_offset="origin")
    return Problem.from_config(np.zeros((1, 9, 2), dtype=bool), config)


PROBLEMS = {
    "porous D3Q19 f64 TRT paper tpb2": (lambda: make_problem(
        "D3Q19", "float64", "TRT", "quasi-compressible", "paper", 2, (1, 3, 2)), 2),
    "porous D3Q19 f32 BGK xyz tpb4": (lambda: make_problem(
        "D3Q19", "float32", "BGK", "incompressible", "xyz", 4), 4),
    "porous D2Q9 f64 TRT": (lambda: make_problem(
        "D2Q9", "float64", "TRT", "incompressible", "xyz", 1, (5, 2)), 1),
    "porous D3Q27 f64 BGK": (lambda: make_problem(
        "D3Q27", "float64", "BGK", "quasi-compressible", "paper"), 1),
    "narrower than a tile": (_narrow, 1),
    "zou_he D3Q19 TRT": (lambda: physics_problem(
        "zou_he", "D3Q19", "float64", "TRT", "quasi-compressible", "paper", 2), 2),
    "zou_he_moving D3Q19 MRT": (lambda: physics_problem(
        "zou_he_moving", "D3Q19", "float64", "MRT", "incompressible", "xyz"), 1),
    "cavity D2Q9 TRT": (lambda: physics_problem(
        "cavity", "D2Q9", "float64", "TRT", "quasi-compressible", "xyz", 2), 2),
    "objects D3Q19 f32 BGK": (lambda: physics_problem(
        "objects", "D3Q19", "float32", "BGK", "quasi-compressible", "paper"), 1),
    "far_field D2Q9 MRT": (lambda: physics_problem(
        "far_field", "D2Q9", "float64", "MRT", "quasi-compressible", "xyz", 2), 2),
    "mrt D3Q13": (lambda: physics_problem(
        "mrt", "D3Q13", "float64", "MRT", "quasi-compressible", "paper", 2), 2),
    "porous D3Q19 f16 storage TRT paper tpb2": (lambda: make_problem(
        "D3Q19", "float32", "TRT", "quasi-compressible", "paper", 2, (1, 3, 2),
        storage="float16"), 2),
    "porous D2Q9 f16 storage BGK": (lambda: make_problem(
        "D2Q9", "float32", "BGK", "incompressible", "xyz", 1, (5, 2), storage="float16"), 1),
    "zou_he_moving D3Q19 f16 storage MRT": (lambda: replace(physics_problem(
        "zou_he_moving", "D3Q19", "float32", "MRT", "incompressible", "xyz"),
        storage_kind="float16"), 1),
    "objects D3Q19 f16 storage BGK": (lambda: replace(physics_problem(
        "objects", "D3Q19", "float32", "BGK", "quasi-compressible", "paper"),
        storage_kind="float16"), 1),
}


def _fluid(problem: Problem) -> np.ndarray:
    """Mask (n_tiles, q, a**d) of the slots of fluid nodes."""
    return ~problem.tiling.solid[:, None, :].repeat(problem.lattice.q, axis=1)


def _pair(problem: Problem, f0: np.ndarray, tpb: int):
    """Two-copy and in-place emulations (blocks reversed in place) started from ``f0``."""
    two = EmulatedKernel(problem, tpb)
    one = EmulatedKernel(replace(problem, streaming="in-place"), tpb, reverse_blocks=True)
    for emu in (two, one):
        emu.set_populations(problem.initial_populations())  # every copy at rest, as allocate()
        emu.f[:] = emu.f[emu.current]
        emu.set_populations(f0)
    return two, one


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_pull_sources_are_a_permutation_of_the_fluid_slots(name) -> None:
    """Each slot is read once per step, so writing back into the slots read cannot race."""
    problem = PROBLEMS[name][0]()
    table = problem.pull_table
    assert np.array_equal(np.sort(table.src, axis=None), np.sort(table.dst, axis=None))
    assert np.unique(table.src).size == table.src.size


@needs_gxx
@pytest.mark.parametrize("name", list(PROBLEMS))
def test_in_place_equals_two_copy_bit_for_bit(name) -> None:
    make, tpb = PROBLEMS[name]
    problem = make()
    f0 = noisy_start(problem)
    two, one = _pair(problem, f0, tpb)
    fluid = _fluid(problem)
    solid_before = one.populations()[~fluid]
    for steps in (3, 4, 1):  # read (decode) after odd and even counts, and continue
        two.step(steps)
        one.step(steps)
        assert one.current == steps % 2  # phase 1 after an odd count from phase 0
        got, ref = one.populations(), two.populations()
        assert one.current == 0  # reading decoded the streamed layout in place
        assert np.array_equal(got[fluid], ref[fluid]), f"differs after {steps} more steps"
        assert np.isfinite(got[fluid]).all()
    assert np.array_equal(one.populations()[~fluid], solid_before)  # never written


@needs_gxx
@pytest.mark.parametrize("name", [n for n in PROBLEMS if "f16" in n])
def test_float16_in_place_follows_the_step_counter(name) -> None:
    """Resuming (set_step) and overwriting populations mid-run, in either phase, keep the
    float16 in-place run equal bit for bit to two copies: the random bits follow the counter."""
    make, tpb = PROBLEMS[name]
    problem = make()
    f0 = noisy_start(problem)
    two, one = _pair(problem, f0, tpb)
    assert one.f.dtype == two.f.dtype == np.float16 and one.f.shape[0] == 1
    fluid = _fluid(problem)
    two.step(3)
    one.step(3)
    for emu in (two, one):
        emu.set_step(1000)  # as a resume does, here in phase 1
    two.step(2)
    one.step(2)
    assert one.current == 1 and one.seeds[1] == two.seeds[two.current] == 1002
    f1 = noisy_start(problem, seed=7)
    for emu in (two, one):
        emu.set_populations(f1)  # in phase 1: the layout and its counter go to phase 0 first
    assert one.current == 0 and one.seeds[0] == two.seeds[two.current] == 1002
    for steps in (5, 2):
        two.step(steps)
        one.step(steps)
        got, ref = one.populations(), two.populations()
        assert np.array_equal(got[fluid], ref[fluid]), f"differs after {steps} more steps"
    assert one.seeds[one.current] == two.seeds[two.current] == 1009
    assert not np.array_equal(ref, noisy_start(problem, seed=7))  # it moved


@needs_gxx
@pytest.mark.parametrize("precision, storage", [("float64", "auto"), ("float32", "auto"),
                                                ("float32", "float16")])
def test_in_place_probes_move_exactly_the_fluid_values(precision, storage) -> None:
    problem = replace(make_problem("D3Q19", precision, layout="paper", tiles_per_block=2,
                                   offset=(2, 1, 3), storage=storage), streaming="in-place")
    fluid = _fluid(problem)
    f0 = noisy_start(problem)
    emu = EmulatedKernel(problem, 2, reverse_blocks=True)
    emu.set_populations(f0)
    emu.step(1, "readwrite")
    assert emu.current == 0 and np.array_equal(emu.populations(), f0)
    emu.step(1, "propagate")
    assert emu.current == 1
    table = problem.pull_table
    expected = f0.ravel().copy()
    expected[table.dst.ravel()] = f0.ravel()[table.src.ravel()]
    got = emu.populations()
    assert np.array_equal(got, expected.reshape(f0.shape)) and np.isfinite(got[fluid]).all()


def test_phase_bookkeeping() -> None:
    assert [next_phase("two-copy", m, 0) for m in ("full", "propagate", "readwrite")] == [1] * 3
    assert next_phase("in-place", "full", 0) == 1 and next_phase("in-place", "full", 1) == 0
    assert next_phase("in-place", "readwrite", 1) == 1
    assert next_phase("in-place", "swap", 1) == 0
    with pytest.raises(ValueError, match=r"phase 1\) only"):
        next_phase("in-place", "swap", 0)
    with pytest.raises(ValueError, match="two copies need none"):
        next_phase("two-copy", "swap", 0)


@pytest.mark.parametrize("storage", ["auto", "float16"])
def test_every_launch_gets_its_kernels_argument_count(storage) -> None:
    """Probes and 'swap' are compiled as BGK: an MRT run must not pass its own constants.

    D2Q9 MRT has 18 + 3 floating arguments, the BGK signature 19 + 3: passing the former to
    the latter made the driver read past the argument list (a segfault seen on the H100).
    With float16 storage every kernel also takes the storage constants, last.
    """
    problem = replace(physics_problem("far_field", "D2Q9", "float32", "MRT"),
                      streaming="in-place", storage_kind=storage)
    physics = physics_args(problem)
    n_storage = len(storage_param_names(storage))
    assert n_storage == (7 if storage == "float16" else 0)
    for mode, phase in (("full", 0), ("full", 1), ("swap", 1), ("propagate", 0),
                        ("readwrite", 0)):
        variant = KernelVariant.for_problem(problem, mode, phase)
        args = real_args(variant, physics)
        assert len(args) == len(real_param_names(variant)) == 7 + len(
            collision_param_names(variant)) + n_storage
        assert (args == physics) == (mode == "full")
        assert args[3:7] == physics[3:7]  # the rest state (sector fill) in every launch
        assert args[len(args) - n_storage:] == physics[len(physics) - n_storage:]
        source = kernel_source(variant)
        signature = source[source.index('extern "C"'):].split("{", 1)[0]
        assert signature.count("const real ") == len(args)
        assert ("unsigned int* __restrict__ fs_seed" in signature) == (storage == "float16")


def test_in_place_kernel_text() -> None:
    problem = replace(make_problem("D3Q19", "float32"), streaming="in-place")
    step0 = KernelVariant.for_problem(problem, "full", 0)
    step1 = KernelVariant.for_problem(problem, "full", 1)
    swap = KernelVariant.for_problem(problem, "swap", 1)
    pull = KernelVariant.for_problem(replace(problem, streaming="two-copy"))
    assert (step0.streaming, step1.streaming, pull.streaming) == (
        "aa_neighbour", "aa_local", "pull")
    assert len({step0.name, step1.name, swap.name, pull.name}) == 4
    for v in (step0, step1, swap):
        src = kernel_source(v)
        assert "store_t*  fout" in src and "__restrict__ fout" not in src  # fin == fout
        assert src.count("__syncthreads()") == 1
    assert "__restrict__ fout" in kernel_source(pull)
    assert "constexpr bool HALO = false;" in kernel_source(step1)  # touches its own node only
    assert "constexpr bool HALO = true;" in kernel_source(step0)
    moving = KernelVariant("D3Q19", "float64", "BGK", True, "xyz", "full", 4, "moving",
                           "aa_local")
    assert "constexpr bool HALO = true;" in kernel_source(moving)  # Ladd needs the walls


def _float_ops(tmp_path: Path, variant: KernelVariant) -> Counter:
    cu = tmp_path / f"{variant.name}.cu"
    cu.write_text(kernel_source(variant))
    ptx = cu.with_suffix(".ptx")
    out = subprocess.run([NVCC, "-ptx", "-arch=sm_90", "-o", str(ptx), str(cu)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    return Counter(re.findall(r"^\s*((?:fma|mul|add|sub|neg|cvt)\.[a-z0-9.]*f(?:16|32|64)\b"
                              r"[a-z0-9.]*)", ptx.read_text(), re.M))


@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")
@pytest.mark.parametrize("precision, storage, collision, layout", [
    ("float32", "auto", "BGK", "xyz"), ("float64", "auto", "BGK", "paper"),
    ("float64", "auto", "MRT", "xyz"), ("float32", "float16", "TRT", "xyz")])
def test_neighbour_step_does_the_two_copy_arithmetic(tmp_path: Path, precision, storage,
                                                     collision, layout) -> None:
    """The same floating-point PTX instructions as the two-copy kernel: its stores (which go
    to neighbours' slots) never change how NVVM contracts products into FMAs."""
    pull = KernelVariant("D3Q19", precision, collision, True, layout, storage=storage,
                         sector_fill=False)
    ref = _float_ops(tmp_path, pull)
    assert sum(ref.values()) > 100
    assert _float_ops(tmp_path, replace(pull, streaming="aa_neighbour")) == ref


def test_streaming_option_is_validated() -> None:
    with pytest.raises(ValueError, match="in-place"):
        SimulationConfig(streaming="AA")
    assert SimulationConfig().streaming == "two-copy"  # existing runs unchanged
    assert population_copies("two-copy") == 2 and population_copies("in-place") == 1
    with pytest.raises(ConfigError, match="use one of"):
        population_copies("esoteric")


def test_memory_estimates_count_one_copy() -> None:
    from solver.io import config_differences, config_values
    from solver.run import memory_required
    from solver.simulation import Simulation

    solid = np.zeros((16, 12, 8), dtype=bool)
    sims = {s: Simulation(solid, SimulationConfig(streaming=s, precision="float64"), "numpy")
            for s in ("two-copy", "in-place")}
    f_bytes = sims["two-copy"].tiling.n_tiles * 64 * 19 * 8
    assert sims["two-copy"].memory_bytes() - sims["in-place"].memory_bytes() == f_bytes
    # The NumPy reference keeps two copies whatever the option: the CLI must count both.
    assert memory_required(sims["in-place"]) == memory_required(sims["two-copy"])
    # Streaming changes how, not what: a checkpoint of one resumes with the other.
    assert config_differences(config_values(sims["two-copy"].config),
                              sims["in-place"].config) == []
