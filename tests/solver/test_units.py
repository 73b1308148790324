"""Unit conversion: lattice <-> SI mappings agree with the physics they stand for."""

from __future__ import annotations

import math

import pytest

from solver.units import (
    DARCY_M2,
    UnitSystem,
    darcy_permeability,
    lattice_viscosity,
    mach_number,
    reynolds_number,
    tau_for_viscosity,
    to_millidarcy,
)

WATER_NU, WATER_RHO = 1.0e-6, 1000.0


def test_time_step_of_water_in_ten_micron_voxels():
    units = UnitSystem.from_viscosity(dx=10e-6, viscosity=WATER_NU, density=WATER_RHO, tau=0.8)
    # nu_lattice = 0.1, dt = 0.1 * dx^2 / nu
    assert units.dt == pytest.approx(1e-5)
    assert units.viscosity_to_si(lattice_viscosity(0.8)) == pytest.approx(WATER_NU)


@pytest.mark.parametrize("tau", [0.55, 0.8, 1.7])
def test_poiseuille_velocity_is_the_same_in_both_unit_systems(tau):
    # Plane Poiseuille centre speed u = G H^2 / (8 rho nu); computing it in lattice units and
    # converting must give the SI value for any tau, which fixes how dx, dt and rho enter.
    dx, width_nodes, gradient = 5e-6, 40, 2.0e3
    units = UnitSystem.from_viscosity(dx, WATER_NU, WATER_RHO, tau)
    force = units.force_density_to_lattice(gradient)
    u_lattice = force * width_nodes**2 / (8 * lattice_viscosity(tau))
    u_si = gradient * (width_nodes * dx) ** 2 / (8 * WATER_RHO * WATER_NU)
    assert units.velocity_to_si(u_lattice) == pytest.approx(u_si, rel=1e-12)
    assert units.velocity_to_lattice(u_si) == pytest.approx(u_lattice, rel=1e-12)
    assert units.force_density_to_si(force) == pytest.approx(gradient, rel=1e-12)


def test_permeability_is_unit_independent():
    units = UnitSystem.from_viscosity(2e-6, WATER_NU, WATER_RHO, 0.9)
    k_lattice = darcy_permeability(mean_velocity=3e-4, force=1e-5, viscosity=lattice_viscosity(0.9))
    force_si = units.force_density_to_si(1e-5)
    u_si = units.velocity_to_si(3e-4)
    k_si = darcy_permeability(u_si, force_si, WATER_NU, WATER_RHO)
    assert units.permeability_to_si(k_lattice) == pytest.approx(k_si, rel=1e-12)


def test_millidarcy():
    assert to_millidarcy(DARCY_M2) == pytest.approx(1000.0)
    assert to_millidarcy(1e-12) == pytest.approx(1013.25, rel=1e-5)


def test_dimensionless_numbers():
    assert mach_number(1 / math.sqrt(3)) == pytest.approx(1.0)
    assert mach_number(-0.1) == pytest.approx(0.1 * math.sqrt(3))
    assert reynolds_number(0.01, 20, 0.1) == pytest.approx(2.0)
    assert tau_for_viscosity(lattice_viscosity(0.73)) == pytest.approx(0.73)
    assert units_time(10) == pytest.approx(10 * 1e-5)


def units_time(steps: int) -> float:
    return UnitSystem.from_viscosity(10e-6, WATER_NU, WATER_RHO, 0.8).time_to_si(steps)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: lattice_viscosity(0.5), "tau > 0.5"),
        (lambda: tau_for_viscosity(0.0), "positive"),
        (lambda: darcy_permeability(1.0, 0.0, 0.1), "non-zero"),
        (lambda: UnitSystem(dx=0.0, dt=1.0, density=1.0), "dx must be"),
        (lambda: UnitSystem.from_viscosity(1e-6, -1.0, 1000.0, 0.8), "viscosity must be"),
    ],
)
def test_bad_inputs_say_what_to_do(call, match):
    with pytest.raises(ValueError, match=match):
        call()
