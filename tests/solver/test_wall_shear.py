"""Wall shear stress (solver.wall_shear) against plane and tube Poiseuille flow."""

from __future__ import annotations

import numpy as np
import pytest

from solver.simulation import Simulation, SimulationConfig
from solver.units import UnitSystem

from .test_iolets import inlet_area, run


def test_channel_wall_shear_stress_is_the_force_times_the_half_width():
    ny, force = 18, 1e-5
    solid = np.zeros((8, ny, 8), dtype=bool)
    solid[:, 0] = solid[:, -1] = True  # halfway walls: width H = ny - 2
    cfg = SimulationConfig(lattice="D3Q19", collision="TRT", trt_magic=3 / 16, tau=0.8,
                           precision="float64", body_force=(force, 0.0, 0.0))
    sim = Simulation(solid, cfg, backend="numpy")
    sim.step(3000)
    wss = sim.wall_shear_stress()
    h = ny - 2
    assert np.isfinite(wss[:, [1, -2]]).all() and np.isnan(wss[:, 2:-2]).all()
    # Stress is linear across the channel; the wall nodes sit half a voxel from the wall.
    np.testing.assert_allclose(wss[:, [1, -2]], force * (h / 2 - 0.5), rtol=1e-3)


def test_tube_wall_shear_stress_follows_hagen_poiseuille():
    sim = run({1: {"kind": "velocity", "value": 0.02, "profile": "poiseuille"},
               2: "pressure"}, 1500)
    wss = sim.wall_shear_stress()
    g, h = sim.geometry, sim.geometry.voxel_size
    c1, c2 = (np.asarray(o.centre) / h - np.asarray(g.origin) / h - 0.5
              for o in sorted(g.openings, key=lambda o: o.id))
    axis = (c2 - c1) / np.linalg.norm(c2 - c1)
    nodes = np.argwhere(np.isfinite(wss))
    middle = np.abs((nodes - 0.5 * (c1 + c2)) @ axis) < np.linalg.norm(c2 - c1) / 6
    radius, mu, q = 4.0, 0.1, 0.02 * inlet_area(sim)
    exact = 4 * mu * q / (np.pi * radius**3) * (radius - 0.5) / radius  # at the nodes
    assert wss[tuple(nodes[middle].T)].mean() == pytest.approx(exact, rel=0.15)


def test_stress_in_pascal():
    units = UnitSystem(dx=1e-4, dt=1e-3, density=1000.0)
    assert units.stress_to_si(1e-3) == pytest.approx(1e-3 * 1000.0 * 1e-8 / 1e-6)


def test_wall_shear_stress_counts_the_smagorinsky_eddy_viscosity():
    """With RR + Smagorinsky the stress came from the molecular viscosity alone (25 % low here);
    force balance fixes the wall stress whatever the viscosity model: F (H/2 - 1/2) at the nodes."""
    ny, force = 10, 2.5e-5
    solid = np.zeros((4, ny, 4), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    cfg = SimulationConfig(lattice="D3Q19", collision="RR", smagorinsky_cs=0.5, tau=0.53,
                           precision="float64", body_force=(force, 0.0, 0.0))
    sim = Simulation(solid, cfg, backend="numpy")
    sim.step(7000)
    wss = sim.wall_shear_stress()
    np.testing.assert_allclose(wss[:, [1, -2]], force * ((ny - 2) / 2 - 0.5), rtol=1e-2)
