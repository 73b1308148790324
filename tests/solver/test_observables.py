"""Observables: momentum exchange, Darcy permeability, porosity, tortuosity, fluxes."""

import numpy as np
import pytest

from solver.config import SimulationConfig
from solver.observables import (
    DARCY_M2,
    ConvergenceMonitor,
    face_fluxes,
    porosity,
    tortuosity,
)
from solver.simulation import Simulation


def config(**kw) -> SimulationConfig:
    base = dict(lattice="D2Q9", collision="TRT", precision="float64", tau=0.9, backend="numpy")
    base.update(kw)
    return SimulationConfig(**base)


class Geometry:
    """Minimal VoxelGeometry stand-in: solid mask, labels, flow axis, voxel size."""

    def __init__(self, solid, labels=None, flow_axis=0, voxel_size=None):
        self.solid, self.labels = solid, labels
        self.flow_axis, self.voxel_size = flow_axis, voxel_size


def two_obstacles(shape=(24, 14)):
    solid = np.zeros(shape, bool)
    labels = np.zeros(shape, np.int32)
    solid[5:9, 4:8] = True
    labels[5:9, 4:8] = 1
    solid[15:18, 8:12] = True
    labels[15:18, 8:12] = 2
    return Geometry(solid, labels)


@pytest.mark.parametrize("lattice", ["D2Q9", "D3Q19"])
def test_forces_on_objects_balance_the_body_force_at_steady_state(lattice):
    geometry = two_obstacles()
    force = (2e-6, 5e-7, 0.0)
    if lattice == "D3Q19":
        geometry = Geometry(np.repeat(geometry.solid[..., None], 2, 2),
                            np.repeat(geometry.labels[..., None], 2, 2))
    sim = Simulation(geometry, config(lattice=lattice, body_force=force, tau=1.5))
    sim.step(8000)
    forces = sim.forces()
    sim.step(1)
    later = sim.forces()
    assert set(forces) == {1, 2}
    # A periodic box keeps a tiny staggered (period-2, checkerboard) momentum oscillation, an
    # exact invariant of the scheme: the balance holds for the mean of two successive steps.
    total = sum(f.force + later[k].force for k, f in forces.items()) / 2
    driving = np.array(force[: total.size]) * (~geometry.solid).sum()
    np.testing.assert_allclose(total, driving, rtol=1e-6, atol=1e-12)
    assert forces[1].drag == pytest.approx(forces[1].force[0])
    assert forces[1].drag > 0 and forces[2].drag > 0


def test_no_force_on_an_object_in_fluid_at_rest():
    sim = Simulation(two_obstacles(), config())
    sim.step(10)
    for f in sim.forces().values():
        np.testing.assert_allclose(f.force, 0.0, atol=1e-15)


def test_sliding_object_feels_the_couette_shear_stress():
    h, nx, speed = 10, 4, 0.03
    solid = np.zeros((nx, h + 1), bool)
    solid[:, -1] = True
    cfg = config(y_min="wall", y_max="wall", object_velocities={1: (speed, 0.0)})
    sim = Simulation(Geometry(solid, solid.astype(np.int32)), cfg)
    sim.step(5000)
    shear = cfg.viscosity * speed / h  # rho nu du/dy per unit wall length
    f = sim.forces()[1]
    assert f.drag == pytest.approx(-shear * nx, rel=1e-8)
    # Wetted from one side only, the layer also carries the fluid pressure rho c_s^2.
    assert f.lift == pytest.approx(nx / 3, rel=1e-9)


@pytest.mark.parametrize("fluid_model", ["incompressible", "quasi-compressible"])
def test_channel_permeability_is_h_squared_over_twelve(fluid_model):
    # TRT's exact parabola averaged over node centres (midpoint rule): (h^2 + 1/2) / 12.
    h = 10
    sim = Simulation(Geometry(np.zeros((3, h), bool), voxel_size=1e-5),
                     config(body_force=(1e-6, 0, 0), y_min="wall", y_max="wall",
                            fluid_model=fluid_model))
    sim.step(4000)
    k = sim.permeability()
    assert k.lattice == pytest.approx((h * h + 0.5) / 12, rel=1e-6)
    assert k.m2 == pytest.approx(k.lattice * 1e-10, rel=1e-12)
    assert k.darcy == pytest.approx(k.m2 / DARCY_M2)
    assert k.millidarcy == pytest.approx(1e3 * k.darcy)


def test_pressure_driven_permeability_uses_the_density_drop():
    h, nx = 8, 30
    cfg = config(x_min="pressure", x_min_value=1.001, x_max="pressure", x_max_value=0.999,
                 y_min="wall", y_max="wall")
    sim = Simulation(np.zeros((nx, h), bool), cfg)
    sim.step(6000)
    k = sim.permeability(axis=0)
    assert k.gradient == pytest.approx(0.002 / 3 / (nx - 1), rel=1e-9)
    assert k.lattice == pytest.approx((h * h + 0.5) / 12, rel=2e-3)
    assert k.m2 is None and k.darcy is None


def test_permeability_without_driving_force_is_an_error():
    sim = Simulation(np.zeros((4, 4), bool), config())
    with pytest.raises(ValueError, match="driving"):
        sim.permeability()


def test_porosity_and_tortuosity():
    geometry = two_obstacles()
    assert porosity(geometry.solid) == pytest.approx(1 - (16 + 12) / (24 * 14))
    straight = Simulation(np.zeros((3, 8), bool),
                          config(body_force=(1e-6, 0, 0), y_min="wall", y_max="wall"))
    straight.step(500)
    assert tortuosity(straight.fields(), 0) == pytest.approx(1.0, abs=1e-12)
    winding = Simulation(geometry, config(body_force=(1e-6, 0, 0)))
    winding.step(1500)
    assert tortuosity(winding.fields(), 0) > 1.02


def test_convergence_monitor_reports_relative_change():
    monitor = ConvergenceMonitor()
    u = np.ones((2, 4, 4))
    assert monitor.update({"u": u}) == np.inf
    assert monitor.update({"u": 1.01 * u}) == pytest.approx(0.01 / 1.01)
    assert monitor.update({"u": 1.01 * u}) == 0.0
    speed = ConvergenceMonitor("speed")
    swirl = np.stack([np.ones((4, 4)), -np.ones((4, 4))])
    swirl[0, :2] *= -1
    speed.update({"u": swirl})
    assert speed.update({"u": 2 * swirl}) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="measure"):
        ConvergenceMonitor("energy")


def test_inflow_equals_outflow_and_the_inlet_flux_is_prescribed():
    rng = np.random.default_rng(1)
    solid = rng.random((20, 12)) < 0.15
    cfg = config(x_min="velocity", x_min_value=0.01, x_max="pressure", y_min="wall",
                 y_max="wall")
    sim = Simulation(solid, cfg)
    sim.step(6000)
    flux = face_fluxes(sim.problem, sim.fields())
    assert set(flux) == {"x_min", "x_max"}
    assert flux["x_min"] == pytest.approx(-0.01 * (~solid[0]).sum(), rel=1e-12)
    assert flux["x_max"] == pytest.approx(-flux["x_min"], rel=1e-4)
