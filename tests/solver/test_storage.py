"""float16 storage (solver.storage): configuration, encoding, stochastic rounding, accuracy.

The encoding is checked exhaustively (every finite binary16 value, every lattice), the random
bits for uniformity and independence, and the NumPy reference on plane Poiseuille flow against
the analytic profile: its error stays within twice the float32 error (rounding to nearest
stalled the same flow 2-10 % short, the reason for stochastic rounding: solver.storage).
"""

from __future__ import annotations

import numpy as np
import pytest

from solver.analytic import l2_error, poiseuille_plates
from solver.config import ConfigError, SimulationConfig
from solver.lattice import LATTICE_NAMES, get_lattice
from solver.problem import Problem
from solver.simulation import Simulation
from solver.storage import DITHER_BITS, dither, storage_for


def test_float16_storage_needs_float32_arithmetic():
    config = SimulationConfig(precision="float64", storage="float16")
    with pytest.raises(ConfigError, match="precision='float32'"):
        config.check()
    with pytest.raises(ConfigError, match="storage='float16'"):
        Problem.from_config(np.zeros((8, 8, 8), bool), config)
    with pytest.raises(ValueError):
        SimulationConfig(storage="bfloat16")
    assert SimulationConfig().storage == "auto"


def test_storage_halves_the_bytes_and_keeps_the_arithmetic_type():
    solid = np.zeros((8, 8, 8), bool)
    half = Problem.from_config(solid, SimulationConfig(precision="float32", storage="float16"))
    full = Problem.from_config(solid, SimulationConfig(precision="float32"))
    assert half.dtype == full.dtype == np.float32 and half.storage_dtype == np.float16
    assert half.bytes_per_fluid_node_step() == 2 * 19 * 2 == full.bytes_per_fluid_node_step() / 2
    assert not full.storage.encoded and full.storage.decode(np.ones(3)) is not None


@pytest.mark.parametrize("lattice", LATTICE_NAMES)
@pytest.mark.parametrize("rho0", [1.0, 0.3, 2.5, 1000.0])
def test_decoded_values_survive_a_round_trip(lattice, rho0):
    """decode(encode(decode(h))) == decode(h) for every finite binary16 h: checkpoints of the
    decoded float32 values restore the exact state."""
    lat = get_lattice(lattice)
    st = storage_for(lat, "float32", "float16", rho0)
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    h = np.broadcast_to(h[np.isfinite(h)], (lat.q, int(np.isfinite(h).sum())))
    f = st.decode(h)
    assert f.dtype == np.float32
    np.testing.assert_array_equal(st.decode(st.encode(f)), f)
    # Power-of-two scale; |f - w rho0| up to (just under) 4 to 8 rho0 fits.
    assert np.log2(st.scale) == round(np.log2(st.scale))
    assert 3.99 * rho0 <= 65504 / st.scale < 8 * rho0
    np.testing.assert_allclose(st.shift, lat.w * rho0, rtol=1e-7)


def test_stochastic_rounding_is_unbiased_and_exact_on_representable_values():
    lat = get_lattice("D3Q19")
    st = storage_for(lat, "float32", "float16")
    rng = np.random.default_rng(3)
    f = (st.shift[:, None] + rng.normal(0, 1e-3, (lat.q, 4000))).astype(np.float32)
    exact = (f - st.shift[:, None]).astype(np.float64)
    mean = np.zeros_like(exact)
    steps = 64
    for step in range(steps):
        h = st.encode(f, dither=dither(np.arange(4000), step, lat.q))
        assert h.dtype == np.float16
        mean += (h.astype(np.float64) / st.scale) / steps
    ulp = 2.0 ** (np.floor(np.log2(np.abs(exact) * st.scale)) - 10) / st.scale  # binary16 step
    # Mean over 64 draws: within a few standard errors of the exact value, unlike nearest.
    assert np.abs(mean - exact).mean() < 0.1 * ulp.mean()
    nearest = st.encode(f).astype(np.float64) / st.scale
    assert np.abs(nearest - exact).mean() > 0.2 * ulp.mean()
    decoded = st.decode(nearest * st.scale).astype(np.float32)  # representable: unchanged
    again = st.encode(decoded, dither=dither(np.arange(4000), 5, lat.q))
    np.testing.assert_array_equal(st.decode(again), decoded)
    assert st.encode(np.full((lat.q, 1), 10.0), dither=np.zeros((lat.q, 1), np.uint32)
                     ).astype(np.float32).max() == np.inf  # overflow stays visible


def test_random_bits_are_uniform_and_independent():
    node = np.arange(100_000)
    r = dither(node, 7, 19).astype(np.float64) / 2**DITHER_BITS
    assert r.max() < 1.0 and abs(r.mean() - 0.5) < 0.005
    corr = np.corrcoef(r)
    np.fill_diagonal(corr, 0.0)
    assert np.abs(corr).max() < 0.02
    nxt = dither(node, 8, 19).astype(np.float64) / 2**DITHER_BITS
    assert abs(np.corrcoef(r.ravel(), nxt.ravel())[0, 1]) < 0.01
    assert abs(np.corrcoef(r[0] * 3 % 1.0, r[1])[0, 1]) < 0.02  # no multiplier ratio


def _poiseuille(precision: str, storage: str, steps: int, h: int = 16, average: int = 0):
    tau, u_max = 0.8, 0.05
    nu = (tau - 0.5) / 3
    force = 8 * nu * u_max / h**2
    config = SimulationConfig(lattice="D2Q9", collision="BGK", tau=tau, precision=precision,
                              storage=storage, body_force=(force, 0.0, 0.0), y_min="wall",
                              y_max="wall", backend="numpy")
    sim = Simulation(np.zeros((8, h), bool), config)
    sim.step(steps)
    profile = sim.fields()["u"][0][4]
    for _ in range(average):  # time average of the (noisy) float16 steady state
        sim.step(25)
        profile = profile + sim.fields()["u"][0][4]
    sim.close()
    return l2_error(profile / (average + 1), poiseuille_plates(h, force, nu))


def test_float16_poiseuille_error_within_twice_float32():
    err32 = _poiseuille("float32", "auto", 6000)
    err64 = _poiseuille("float64", "auto", 6000)
    err16 = _poiseuille("float32", "float16", 6000, average=40)
    assert 1e-3 < err64 < 5e-3 and abs(err32 - err64) < 0.2 * err64  # BGK wall error
    assert err16 <= 2 * err32, f"float16 {err16:.3g} vs float32 {err32:.3g}"


def test_resume_of_float16_storage_is_bitwise(tmp_path):
    solid = np.zeros((12, 10, 9), bool)
    solid[:, 0] = solid[:, -1] = True
    config = SimulationConfig(lattice="D3Q19", collision="TRT", precision="float32",
                              storage="float16", tau=0.7, body_force=(2e-5, 1e-6, 0.0),
                              y_min="wall", y_max="wall", backend="numpy")
    straight = Simulation(solid, config)
    straight.step(40)
    first = Simulation(solid, config)
    first.step(20)
    first.save(tmp_path / "half.npz")
    resumed = Simulation.load(tmp_path / "half.npz", solid, backend="numpy")
    assert resumed.state.f.dtype == np.float16
    resumed.step(20)
    assert np.array_equal(resumed.populations(), straight.populations())
    fields = resumed.fields()
    assert np.nanmin(fields["u"][0]) > 0 and abs(np.nanmean(fields["rho"]) - 1) < 1e-3
    for sim in (straight, first, resumed):
        sim.close()


def test_float16_in_place_keeps_a_quarter_of_float32_two_copy():
    """Both options compose: one 2-byte copy of f instead of two 4-byte ones (GPU state); the
    NumPy reference, which always keeps two copies, counts its second one in memory_required."""
    from solver.run import memory_required

    solid = np.zeros((16, 12, 8), bool)
    sims = {(s, t): Simulation(solid, SimulationConfig(precision="float32", storage=s,
                                                       streaming=t, backend="numpy"))
            for s in ("auto", "float16") for t in ("two-copy", "in-place")}
    tiling = sims["auto", "two-copy"].tiling
    rest = tiling.memory_bytes(19, 4, copies=0)  # node types, tile map and list
    f32_two = sims["auto", "two-copy"].memory_bytes() - rest
    assert f32_two == tiling.n_tiles * 64 * 19 * 4 * 2
    assert sims["float16", "in-place"].memory_bytes() - rest == f32_two // 4
    assert sims["float16", "two-copy"].memory_bytes() - rest == f32_two // 2
    assert memory_required(sims["float16", "in-place"]) == memory_required(
        sims["float16", "two-copy"])
    for sim in sims.values():
        sim.close()


@pytest.mark.parametrize("lattice", LATTICE_NAMES)
@pytest.mark.parametrize("fluid_model", ["incompressible", "quasi-compressible"])
def test_rest_state_is_stored_as_binary16_zero(lattice, fluid_model):
    """What solid nodes hold (solver.backends.base) and the kernels' sector fill stores as
    ``(store_t)0`` (storage.rest_value): the shift is the rest equilibrium, exactly."""
    shape = (12, 10) if get_lattice(lattice).d == 2 else (8, 8, 8)
    for rho0 in (1.0, 1.037, 0.3, 1000.0):
        config = SimulationConfig(lattice=lattice, precision="float32", storage="float16",
                                  fluid_model=fluid_model, initial_density=rho0,
                                  collision="MRT" if lattice == "D3Q13" else "BGK")
        problem = Problem.from_config(np.zeros(shape, bool), config)
        stored = problem.storage.encode(problem.rest_populations()[:, None])
        assert stored.dtype == np.float16 and not stored.view(np.uint16).any()
        assert np.array_equal(problem.storage.decode(stored)[:, 0],
                              problem.rest_populations().astype(np.float32))
