"""The device-side check of a permeability run (solver.rock.check) against the host fields."""

from __future__ import annotations

import numpy as np
import pytest

from geometries.generators import random_sphere_pack
from solver import observables
from solver.config import SimulationConfig
from solver.rock import PermeabilitySettings, setup_protocol
from solver.rock.check import KCheck
from solver.simulation import Simulation


def _host_k(sim: Simulation, axis: int, window: tuple[int, int]):
    """k as the runs measured it before: the whole field on the host, cut to the window."""
    fields = sim.fields()
    index = np.arange(*window)
    fields = {"rho": np.take(fields["rho"], index, axis=axis),
              "u": np.take(fields["u"], index, axis=axis + 1)}
    return observables.permeability(sim.problem, fields, axis, 1e-5)


@pytest.mark.parametrize("protocol,axis", [("pressure", 0), ("pressure", 2), ("mirrored", 1)])
def test_device_k_equals_the_host_fields_k(protocol, axis, backend_name):
    """The check's k (sums on the device) is the host fields' k; NumPy and, on a GPU machine,
    CuPy (the same quantity from the same populations)."""
    sample = random_sphere_pack((14, 12, 12), porosity=0.35, diameter=6, seed=2)
    sample.voxel_size = 1e-5
    config = SimulationConfig(precision="float64", tau=0.8, tile_offset="origin")
    setup = setup_protocol(sample, config, axis, protocol,
                           PermeabilitySettings(buffer_layers=3, accelerate=False))
    sim = Simulation(setup.geometry, setup.config, backend_name)
    # A partly developed flow: the layers' densities and the flux still vary in the window.
    sim.step(60)
    health, k = KCheck(sim, axis, setup.window, 1e-5).read()
    host = _host_k(sim, axis, setup.window)
    assert health["finite"] and health["max_speed"] == pytest.approx(
        sim.health()["max_speed"], rel=1e-12)
    assert k.lattice == pytest.approx(host.lattice, rel=1e-12, abs=0)
    assert k.gradient == pytest.approx(host.gradient, rel=1e-12)
    assert k.m2 == pytest.approx(host.m2, rel=1e-12)
    fields = sim.fields()
    index = np.arange(*setup.window)
    fields = {"u": np.take(fields["u"], index, axis=axis + 1)}
    assert health["flow_tortuosity"] == pytest.approx(observables.tortuosity(fields, axis),
                                                      rel=1e-12)
    sim.close()


def test_a_nan_in_a_fluid_node_is_reported_not_finite():
    sample = random_sphere_pack((12, 10, 10), porosity=0.35, diameter=5, seed=1)
    config = SimulationConfig(precision="float64", tile_offset="origin")
    setup = setup_protocol(sample, config, 0, "mirrored", PermeabilitySettings(accelerate=False))
    sim = Simulation(setup.geometry, setup.config, "numpy")
    sim.step(2)
    check = KCheck(sim, 0, setup.window, None)
    f = sim.populations()
    tile, node = np.argwhere(~sim.tiling.solid)[0]
    f[tile, 3, node] = np.nan
    sim.backend.set_populations(sim.state, f)
    health, k = check.read()
    assert not health["finite"] and k is None


def test_pressure_runs_start_from_a_density_ramp_across_the_sample():
    from solver.rock.initial import pressure_ramp

    sample = random_sphere_pack((12, 10, 10), porosity=0.35, diameter=5, seed=1)
    config = SimulationConfig(precision="float64", tau=0.8)
    setup = setup_protocol(sample, config, 1, "pressure", PermeabilitySettings(buffer_layers=3))
    fields = pressure_ramp(setup)
    rho = fields["rho"][0, :, 0]
    lo, hi = setup.window  # the buffer layers next to the sample: where the drop is measured
    assert rho[: lo + 1] == pytest.approx([setup.config.y_min_value] * (lo + 1))
    assert rho[hi - 1:] == pytest.approx([setup.config.y_max_value] * (len(rho) - hi + 1))
    assert np.allclose(np.diff(rho[lo:hi]), np.diff(rho[lo:hi])[0]) and rho[lo] > rho[hi - 1]
    assert not fields["u"].any()
    mirrored = setup_protocol(sample, config, 1, "mirrored", PermeabilitySettings())
    assert pressure_ramp(mirrored) is None
