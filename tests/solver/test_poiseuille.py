"""Body-force-driven Poiseuille flow between plates and in a square duct (analytic solutions)."""

import numpy as np
import pytest

from solver.analytic import duct_velocity, l2_error, poiseuille_plates
from solver.config import SimulationConfig
from solver.simulation import Simulation

FORCE = 1e-6


def run_to_steady(sim: Simulation, check_every: int = 500, tol: float = 1e-12,
                  max_steps: int = 200_000) -> None:
    """Step until the mean velocity changes by less than ``tol`` (relative) per check."""
    previous = None
    while sim.time_step < max_steps:
        sim.step(check_every)
        mean = np.nanmean(sim.fields()["u"][0])
        if previous is not None and abs(mean - previous) <= tol * abs(mean):
            return
        previous = mean
    raise AssertionError(f"no steady state after {max_steps} steps")


def plates(collision: str, h: int, tau: float, backend: str, **extra) -> float:
    config = SimulationConfig(lattice="D3Q19", collision=collision, tau=tau,
                              precision="float64", body_force=(FORCE, 0, 0), y_min="wall",
                              y_max="wall", backend=backend, **extra)
    sim = Simulation(np.zeros((1, h, 1), bool), config)
    run_to_steady(sim)
    ux = sim.fields()["u"][0][0, :, 0]
    return l2_error(ux, poiseuille_plates(h, FORCE, config.viscosity))


def duct(width: int, tau: float, backend: str, collision: str = "BGK") -> float:
    config = SimulationConfig(lattice="D3Q19", collision=collision, tau=tau,
                              precision="float64", body_force=(FORCE, 0, 0), y_min="wall",
                              y_max="wall", z_min="wall", z_max="wall", backend=backend)
    sim = Simulation(np.zeros((2, width, width), bool), config)
    run_to_steady(sim, tol=1e-9)
    ux = sim.fields()["u"][0][0]
    return l2_error(ux, duct_velocity(width, width, FORCE, config.viscosity))


def test_plates_bgk_within_one_percent(backend_name):
    assert plates("BGK", 16, 0.8, backend_name) <= 0.01


@pytest.mark.parametrize("fluid_model", ["incompressible", "quasi-compressible"])
@pytest.mark.parametrize("tau", [0.6, 1.2])
def test_plates_trt_magic_parameter_is_exact(backend_name, fluid_model, tau):
    # Lambda = 3/16 places the bounce-back walls exactly half-way: the parabola is exact.
    assert plates("TRT", 16, tau, backend_name, fluid_model=fluid_model) <= 1e-10


def test_plates_bgk_error_depends_on_tau(backend_name):
    # BGK's wall position drifts with tau; TRT's does not (previous test).
    assert plates("BGK", 16, 1.5, backend_name) > 5 * plates("BGK", 16, 0.8, backend_name)


def test_square_duct_series_solution_bgk(backend_name):
    assert duct(16, 0.8, backend_name) <= 0.01


def test_duct_converges_second_order(backend_name):
    widths = (6, 12, 24)
    errors = [duct(w, 0.8, backend_name) for w in widths]
    orders = np.log(np.array(errors[:-1]) / errors[1:]) / np.log(2)
    assert np.all(orders > 1.8), (errors, orders)
