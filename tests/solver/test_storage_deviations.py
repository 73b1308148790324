"""float16 storage collided as deviations from the rest state (solver.storage, 'Deviations').

Why it is allowed (the collision commutes with the shift by the rest state, only for the
incompressible closed forms), which kernels use it, that BGK/TRT kernels collide S times the
deviations with their constants rescaled exactly so and store the very bits of the unscaled
deviations, and that host read-backs and
checkpoints keep every stored value exactly (a deviation far below the float32 spacing of
``w_i rho0`` survives a resume).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace
from unittest import mock

import numpy as np
import pytest

from solver.backends.cuda import kernels
from solver.backends.cuda.kernels import (
    KernelVariant,
    kernel_source,
    real_args,
    real_param_names,
)
from solver.backends.cuda.tables import physics_args
from solver.config import SimulationConfig
from solver.lattice import LATTICE_NAMES, get_lattice
from solver.problem import Problem
from solver.simulation import Simulation
from solver.storage import storage_for

from .kernel_emulator import EmulatedKernel, compiler
from .porous_cases import as_stored, make_problem, noisy_start, reference


def _problem(collision: str, fluid_model: str, lattice: str = "D3Q19", **extra) -> Problem:
    shape = (8, 8, 8) if get_lattice(lattice).d == 3 else (12, 10)
    config = SimulationConfig(lattice=lattice, collision=collision, fluid_model=fluid_model,
                              precision="float32", storage="float16", tau=0.8,
                              body_force=(2e-5, -1e-5, 5e-6)[: get_lattice(lattice).d], **extra)
    return Problem.from_config(np.zeros(shape, bool), config)


@pytest.mark.parametrize("collision", ["BGK", "TRT", "MRT"])
@pytest.mark.parametrize("fluid_model", ["incompressible", "quasi-compressible"])
def test_collision_commutes_with_the_rest_shift_only_when_incompressible(collision,
                                                                         fluid_model):
    """C(s + d) = s + C(d) in float64: the premise of colliding deviations."""
    p = _problem(collision, fluid_model)
    rest = p.rest_populations()[:, None]
    d = 1e-3 * np.random.default_rng(3).standard_normal((p.lattice.q, 200)) * rest
    full = p.collision.collide(rest + d, p.lattice, p.rates, p.force, p.incompressible)
    dev = p.collision.collide(d, p.lattice, p.rates, p.force, p.incompressible)
    gap = np.abs(full - rest - dev).max() / np.abs(d).max()
    if fluid_model == "incompressible":
        assert gap < 1e-12
    else:  # the density divides: deviations alone are not a state of this model
        assert gap > 1e-3


@pytest.mark.parametrize("collision, fluid_model, boundary, mode, form", [
    ("BGK", True, "none", "full", "scaled"),
    ("TRT", True, "none", "full", "scaled"),
    ("TRT", False, "none", "full", "populations"),  # u = j / rho
    ("MRT", True, "none", "full", "deviations"),  # output not linear in its constants
    ("BGK", True, "zou_he", "full", "populations"),  # rho from a ratio of sums
    ("BGK", True, "moving", "full", "populations"),
    ("BGK", True, "none", "propagate", "populations"),  # a round trip, no collision
])
def test_which_float16_kernels_collide_deviations(collision, fluid_model, boundary, mode,
                                                  form) -> None:
    v = KernelVariant("D3Q19", "float32", collision, fluid_model, "xyz", mode,
                      boundary=boundary, storage="float16")
    assert v.half_form == form
    assert KernelVariant("D3Q19", "float32", collision, fluid_model, "xyz", mode,
                         boundary=boundary).half_form == "populations"  # not float16


@pytest.mark.parametrize("collision", ["BGK", "TRT"])
def test_scaled_deviation_kernels_get_their_constants_times_powers_of_the_scale(collision
                                                                                ) -> None:
    """Colliding S d instead of d: the force and fo_i times S, af and eqw_k over S (the
    quadratic terms), the -1.5 of u.u an argument, -1.5 / S; everything else as it is."""
    p = _problem(collision, "incompressible")
    v = KernelVariant.for_problem(p)
    assert v.half_form == "scaled"
    names, physics = real_param_names(v), physics_args(p)
    args = real_args(v, physics)
    scale = np.float32(p.storage.scale)
    assert scale == 2.0**14
    times = {n for n in names if n in ("fx", "fy", "fz") or n[:2] == "fo"}
    over = {n for n in names if n == "af" or n[:3] == "eqw"}
    assert len(times) == 3 + 9 and len(over) == 5
    for n, a, b in zip(names, args, physics, strict=True):
        assert a.dtype == np.float32
        assert a == (b * scale if n in times else b / scale if n in over else b)  # exact
    kinetic = args[names.index("fs_kinetic")]
    assert kinetic == np.float32(-1.5) / scale and "fs_kinetic * (" in kernel_source(v)


def _stored_after(problem: Problem, steps: int, form: str | None = None) -> np.ndarray:
    """Stored bits (uint16) after ``steps`` emulated steps from a noisy start, with the
    kernels generated in ``form`` (default the problem's own)."""
    f0 = noisy_start(problem)
    kernel_source.cache_clear()  # it caches per variant, whatever the form
    try:
        with mock.patch.object(kernels, "half_form", lambda *_: form) if form else nullcontext():
            emu = EmulatedKernel(problem, 1)
            emu.set_populations(problem.initial_populations())
            emu.f[:] = emu.f[emu.current]
            emu.set_populations(as_stored(problem, f0))
            emu.step(steps)
            return emu.f[0 if emu.in_place else emu.current].view(np.uint16).copy()
    finally:
        kernel_source.cache_clear()


@pytest.mark.skipif(compiler() is None, reason="needs g++")
@pytest.mark.parametrize("lattice, collision, streaming", [
    ("D3Q19", "BGK", "two-copy"), ("D3Q19", "TRT", "two-copy"), ("D2Q9", "BGK", "two-copy"),
    ("D3Q19", "TRT", "in-place")])
def test_scaled_deviations_store_the_bits_of_the_deviations_form(lattice, collision,
                                                                 streaming) -> None:
    """Colliding S-scaled deviations (decode: the bare conversion) stores, bit for bit, what
    colliding the deviations (h / S, result times S) does: every value is S times the other
    form's, S a power of two. With a body force (fe, fo, F/2 and af F.u all act), 6 steps,
    two copies and in place."""
    problem = replace(make_problem(lattice, "float32", collision, "incompressible", "xyz", 1,
                                   storage="float16"), streaming=streaming)
    assert any(problem.force) and KernelVariant.for_problem(problem).half_form == "scaled"
    scaled = _stored_after(problem, 6)
    np.testing.assert_array_equal(scaled, _stored_after(problem, 6, "deviations"))
    assert (scaled != _stored_after(problem, 0)).mean() > 0.3  # fluid values moved (solids: 0)


@pytest.mark.parametrize("lattice", LATTICE_NAMES)
@pytest.mark.parametrize("rho0", [1.0, 0.3, 1000.0])
def test_exact_values_store_back_bit_for_bit(lattice, rho0) -> None:
    """Every finite binary16, read back as float64 (Storage.exact) and stored again, is the
    same binary16 (float32 populations cannot hold the deviations below their spacing); a
    float64 value that is no stored one still rounds as its float32 does."""
    lat = get_lattice(lattice)
    st = storage_for(lat, "float32", "float16", rho0)
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    h = np.ascontiguousarray(np.broadcast_to(h[np.isfinite(h)],
                                             (lat.q, int(np.isfinite(h).sum()))))
    exact = st.exact(h)
    assert exact.dtype == np.float64
    np.testing.assert_array_equal(st.encode(exact), h)  # bit for bit but -0 (stored as +0)
    assert (st.encode(st.decode(h).astype(np.float64)) != h).any()  # float32 would lose some
    assert st.checkpoint_dtype == np.float64
    between = exact[:, 1000:1001] + 1e-3 * (exact[:, 1001:1002] - exact[:, 1000:1001])
    np.testing.assert_array_equal(st.encode(between), st.encode(between.astype(np.float32)))


def test_a_deviation_below_the_float32_spacing_survives_a_checkpoint(tmp_path) -> None:
    solid = np.zeros((12, 10), bool)
    config = SimulationConfig(lattice="D2Q9", collision="BGK", precision="float32",
                              storage="float16", tau=0.8, backend="numpy")
    sim = Simulation(solid, config)
    sim.allocate()
    stored = sim.state.f[sim.state.current]
    stored[0, 1, 5] = np.float16(2.0**-16)  # 2^-30 rho0: an eighth of the float32 spacing
    shift = np.float32(sim.problem.storage.shift[1])
    assert shift + np.float32(2.0**-30) == shift
    sim.save(tmp_path / "tiny.npz")
    back = Simulation.load(tmp_path / "tiny.npz", solid, backend="numpy")
    assert np.array_equal(back.state.f[back.state.current].view(np.uint16),
                          stored.view(np.uint16))
    for s in (sim, back):
        s.close()


@pytest.mark.skipif(compiler() is None, reason="needs g++")
@pytest.mark.parametrize("lattice, collision, form", [("D3Q19", "MRT", "deviations"),
                                                      ("D2Q9", "BGK", "scaled")])
def test_emulated_deviation_kernels_follow_the_numpy_deviations(lattice, collision,
                                                                form) -> None:
    """The kernels of deviations against the NumPy reference, which collides the same
    deviations: over 60 steps they stay within 1.5 binary16 steps of the largest deviation
    (measured 1.09 for MRT, 0.31 for BGK; both in the shifted form: 3.8 and 1.2, float32
    rounding relative to ``w_i rho0``)."""
    problem = make_problem(lattice, "float32", collision, "incompressible", "xyz", 1,
                           storage="float16")
    assert KernelVariant.for_problem(problem).half_form == form
    f0 = noisy_start(problem)
    emu = EmulatedKernel(problem, 1)
    emu.set_populations(problem.initial_populations())
    emu.f[1 - emu.current] = emu.f[emu.current]
    emu.set_populations(as_stored(problem, f0))
    emu.step(60)
    ref = reference(problem, f0, 60)
    step = 2.0**-10 * np.abs(ref - problem.storage.shift[:, None]).max()
    assert np.abs(emu.populations() - ref).max() <= 1.5 * step
