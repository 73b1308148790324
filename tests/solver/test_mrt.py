"""MRT collision: moment bases, reduction to BGK/TRT, conservation, lattice pairs, D3Q13."""

import numpy as np
import pytest

from solver import mrt
from solver.analytic import l2_error, poiseuille_plates
from solver.collision import collide, relaxation
from solver.config import ConfigError, SimulationConfig
from solver.lattice import CS2, get_lattice
from solver.moments import MRT_LATTICES, equilibrium_matrix, moment_basis, pair_index
from solver.simulation import Simulation


def _state(lattice, n=60, seed=0, incompressible=False):
    rng = np.random.default_rng(seed)
    rho = 1 + 0.05 * rng.standard_normal(n)
    u = 0.05 * rng.standard_normal((lattice.d, n))
    j = u if incompressible else rho * u
    inv = 1.0 if incompressible else 1.0 / rho
    b = np.stack([rho, *j, *[j[a] * j[c] * inv for a, c in pair_index(lattice.d)]])
    feq = equilibrium_matrix(lattice.name) @ b
    return feq * (1 + 0.01 * rng.random(feq.shape)), rho, j


@pytest.mark.parametrize("name", MRT_LATTICES)
def test_moment_rows_are_orthogonal_and_start_with_mass_and_momentum(name):
    basis = moment_basis(name)
    lattice = get_lattice(name)
    gram = basis.matrix @ basis.matrix.T
    np.testing.assert_allclose(gram, np.diag(np.diag(gram)), atol=1e-12)
    np.testing.assert_allclose(basis.inverse @ basis.matrix, np.eye(lattice.q), atol=1e-14)
    np.testing.assert_array_equal(basis.matrix[0], 1.0)
    j_rows = [i for i, g in enumerate(basis.groups) if g == "j"]
    np.testing.assert_array_equal(basis.matrix[j_rows], lattice.c.T)


@pytest.mark.parametrize("name", MRT_LATTICES)
@pytest.mark.parametrize("incompressible", [True, False])
def test_equilibrium_map_has_the_right_mass_momentum_and_stress(name, incompressible):
    lattice = get_lattice(name)
    _, rho, j = _state(lattice, incompressible=incompressible)
    inv = 1.0 if incompressible else 1.0 / rho
    b = np.stack([rho, *j, *[j[a] * j[c] * inv for a, c in pair_index(lattice.d)]])
    feq = equilibrium_matrix(name) @ b
    np.testing.assert_allclose(feq.sum(0), rho, rtol=1e-14)
    np.testing.assert_allclose(lattice.c.T @ feq, j, atol=1e-15)
    stress = np.einsum("ia,ib,in->abn", lattice.c, lattice.c, feq)
    expected = CS2 * rho * np.eye(lattice.d)[..., None] + np.einsum("an,bn->abn", j, j) * inv
    np.testing.assert_allclose(stress, expected, atol=1e-14)


@pytest.mark.parametrize("name", ["D2Q9", "D3Q19"])
@pytest.mark.parametrize("incompressible", [True, False])
def test_mrt_with_all_rates_one_over_tau_is_bgk(name, incompressible):
    lattice = get_lattice(name)
    tau = 0.77
    groups = [g for g in moment_basis(name).group_names() if g not in ("rho", "j")]
    rates = mrt.mrt_rates(name, tau, {g: 1 / tau for g in groups})
    g, _, _ = _state(lattice, incompressible=incompressible)
    force = 1e-4 * np.arange(1, lattice.d + 1)
    np.testing.assert_allclose(mrt.collide(g, lattice, rates, force, incompressible),
                               collide(g, lattice, relaxation("BGK", tau), force,
                                       incompressible), rtol=1e-14, atol=1e-16)


@pytest.mark.parametrize("name", ["D2Q9", "D3Q19"])
def test_mrt_with_even_rates_one_over_tau_and_magic_odd_rates_is_trt(name):
    lattice = get_lattice(name)
    tau = 0.9
    overrides = {g: 1 / tau for g in ("e", "eps", "pi") if g in moment_basis(name).group_names()}
    rates = mrt.mrt_rates(name, tau, overrides | mrt.magic_rates(name, tau))
    g, _, _ = _state(lattice, seed=2)
    force = 1e-4 * np.ones(lattice.d)
    np.testing.assert_allclose(mrt.collide(g, lattice, rates, force, False),
                               collide(g, lattice, relaxation("TRT", tau), force, False),
                               rtol=1e-13, atol=1e-16)


@pytest.mark.parametrize("name", MRT_LATTICES)
@pytest.mark.parametrize("incompressible", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_mrt_conserves_mass_and_adds_the_force_to_momentum(name, incompressible, dtype):
    lattice = get_lattice(name)
    g, _, _ = _state(lattice, n=5000, seed=3, incompressible=incompressible)
    g = g.astype(dtype)
    force = 1e-4 * np.arange(1, lattice.d + 1)
    out = mrt.collide(g, lattice, mrt.mrt_rates(name, 0.62), force, incompressible)
    assert out.dtype == dtype
    tol = 1e-13 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(out.sum(0), g.sum(0), rtol=tol)
    np.testing.assert_allclose(lattice.c.T @ out, lattice.c.T @ g + force[:, None], atol=tol)


@pytest.mark.parametrize("name", MRT_LATTICES)
def test_equilibrium_is_a_fixed_point(name):
    lattice = get_lattice(name)
    _, rho, j = _state(lattice, seed=4)
    b = np.stack([rho, *j, *[j[a] * j[c] / rho for a, c in pair_index(lattice.d)]])
    feq = equilibrium_matrix(name) @ b
    out = mrt.collide(feq, lattice, mrt.mrt_rates(name, 0.7), np.zeros(lattice.d), False)
    np.testing.assert_allclose(out, feq, rtol=1e-13)


def test_rates_are_documented_defaults_and_overrides_are_checked():
    rates = mrt.default_group_rates("D2Q9", 0.8)
    assert rates["nu"] == pytest.approx(1 / 0.8) and rates["e"] == 1.64 and rates["q"] == 1.2
    assert mrt.default_group_rates("D3Q19", 0.8)["m"] == 1.98
    assert mrt.magic_rates("D3Q19", 0.8) == pytest.approx(
        {"q": relaxation("TRT", 0.8).omega_minus, "m": relaxation("TRT", 0.8).omega_minus})
    q13 = mrt.default_group_rates("D3Q13", 0.8)
    nu = 0.1
    assert q13["nu"] == pytest.approx(2 / (8 * nu + 1))
    assert q13["nu_off"] == pytest.approx(2 / (4 * nu + 1))
    with pytest.raises(ValueError, match="use one of"):
        mrt.mrt_rates("D3Q19", 0.8, {"ghost": 1.0})
    with pytest.raises(ValueError, match=r"\(0, 2\)"):
        mrt.mrt_rates("D3Q19", 0.8, {"e": 2.5})


@pytest.mark.parametrize("lattice, collision, message", [
    ("D3Q13", "TRT", "set collision='MRT'"),
    ("D3Q13", "BGK", "set collision='MRT'"),
    ("D3Q27", "MRT", "choose BGK or TRT"),
])
def test_unsupported_lattice_collision_pairs_are_refused(lattice, collision, message):
    with pytest.raises(ConfigError, match=message):
        SimulationConfig(lattice=lattice, collision=collision).check(3)


def test_mrt_rates_are_validated_by_the_config():
    with pytest.raises(ConfigError, match="use one of"):
        SimulationConfig(lattice="D2Q9", collision="MRT", mrt_rates={"m": 1.0}).check(2)
    with pytest.raises(ConfigError, match="only apply"):
        SimulationConfig(collision="TRT", mrt_rates={"e": 1.0}).check(3)


def test_d3q13_needs_its_mrt_because_its_fourth_moment_is_anisotropic():
    lattice = get_lattice("D3Q13")
    xxyy = np.einsum("i,i,i->", lattice.w, lattice.c[:, 0] ** 2, lattice.c[:, 1] ** 2)
    assert xxyy != pytest.approx(CS2**2)  # isotropy would need c_s^4 = 1/9


def _d3q13_plates(tau: float, rates: dict) -> float:
    h, force = 12, 1e-6
    cfg = SimulationConfig(lattice="D3Q13", collision="MRT", tau=tau, precision="float64",
                           body_force=(force, 0, 0), y_min="wall", y_max="wall",
                           backend="numpy", mrt_rates=rates)
    sim = Simulation(np.zeros((2, h, 2), bool), cfg)
    sim.step(int(40 * h * h / (3 * cfg.viscosity)) // 10)
    ux = sim.fields()["u"][0]
    # Both sublattices carry the same profile.
    np.testing.assert_allclose(ux[0, :, 0], ux[1, :, 0], rtol=1e-10)
    return l2_error(ux[0, :, 0], poiseuille_plates(h, force, cfg.viscosity))


@pytest.mark.parametrize("tau", [0.6, 1.2])
def test_d3q13_poiseuille_with_magic_h_rate_is_exact_at_every_tau(tau):
    assert _d3q13_plates(tau, mrt.magic_rates("D3Q13", tau)) < 1e-4


def test_d3q13_poiseuille_with_the_papers_rates_is_within_one_percent():
    assert _d3q13_plates(0.8, {}) < 0.01


@pytest.mark.parametrize("collision", ["BGK", "TRT"])
def test_d3q27_poiseuille_end_to_end(collision):
    h, force = 12, 1e-6
    cfg = SimulationConfig(lattice="D3Q27", collision=collision, tau=0.8,
                           precision="float64", body_force=(force, 0, 0), z_min="wall",
                           z_max="wall", backend="numpy")
    sim = Simulation(np.zeros((2, 2, h), bool), cfg)
    sim.step(3000)
    ux = sim.fields()["u"][0][0, 0]
    tol = 1e-4 if collision == "TRT" else 1e-2
    assert l2_error(ux, poiseuille_plates(h, force, cfg.viscosity)) < tol
