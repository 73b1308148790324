"""Collision invariants: mass and momentum conservation, equilibrium as a fixed point."""

import numpy as np
import pytest

from solver.collision import collide, equilibrium, moments, relaxation
from solver.lattice import get_lattice


@pytest.mark.parametrize("name", ["D2Q9", "D3Q19", "D3Q27"])
@pytest.mark.parametrize("collision", ["BGK", "TRT"])
@pytest.mark.parametrize("incompressible", [True, False])
def test_collision_conserves_mass_and_adds_the_force_to_momentum(name, collision,
                                                                 incompressible):
    lattice = get_lattice(name)
    rng = np.random.default_rng(0)
    rho = 1 + 0.05 * rng.standard_normal(50)
    u = 0.05 * rng.standard_normal((lattice.d, 50))
    g = equilibrium(rho, u, lattice, incompressible) * (1 + 0.01 * rng.random((lattice.q, 50)))
    force = 1e-4 * np.arange(1, lattice.d + 1)
    out = collide(g, lattice, relaxation(collision, 0.77), force, incompressible)
    np.testing.assert_allclose(out.sum(0), g.sum(0), rtol=1e-14)
    momentum_in = lattice.c.T @ g
    momentum_out = lattice.c.T @ out
    np.testing.assert_allclose(momentum_out, momentum_in + force[:, None], atol=1e-14)


@pytest.mark.parametrize("collision", ["BGK", "TRT"])
def test_equilibrium_is_a_fixed_point_without_force(collision):
    lattice = get_lattice("D3Q19")
    rng = np.random.default_rng(1)
    rho = 1 + 0.1 * rng.random(20)
    u = 0.05 * rng.standard_normal((3, 20))
    feq = equilibrium(rho, u, lattice, incompressible=False)
    out = collide(feq, lattice, relaxation(collision, 0.9), np.zeros(3), incompressible=False)
    np.testing.assert_allclose(out, feq, rtol=1e-13)
    rho_back, u_back = moments(feq, lattice, np.zeros(3), incompressible=False)
    np.testing.assert_allclose(rho_back, rho, rtol=1e-14)
    np.testing.assert_allclose(u_back, u, atol=1e-15)


def test_trt_rates_follow_the_magic_parameter():
    rates = relaxation("TRT", 0.8, 3 / 16)
    assert (1 / rates.omega_plus - 0.5) * (1 / rates.omega_minus - 0.5) == pytest.approx(3 / 16)
    with pytest.raises(ValueError, match="BGK"):
        relaxation("SRT", 0.8)
