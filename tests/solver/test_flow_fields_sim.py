"""The fields of issue 30 on a running simulation: a cut agrees with the whole-grid path."""

from __future__ import annotations

import numpy as np
import pytest

from solver.config import SimulationConfig
from solver.flow_fields import grid_field
from solver.simulation import Simulation


@pytest.fixture(scope="module")
def sim():
    solid = np.zeros((12, 10, 8), dtype=bool)
    solid[:, [0, -1], :] = True  # a channel between two walls (y)
    solid[5:7, 4:6, 3:5] = True  # an obstacle: a three-dimensional flow around it
    config = SimulationConfig(backend="numpy", body_force=(1e-5, 0.0, 0.0), tau=0.8,
                              y_min="wall", y_max="wall")
    s = Simulation(solid, config)
    s.step(60)
    yield s
    s.close()


@pytest.mark.parametrize("name", ["vorticity", "qcrit", "pressure"])
@pytest.mark.parametrize("axis,index", [(0, 5), (2, 0), (1, 1)])
def test_a_cut_of_a_derived_field_equals_the_whole_grid_field(sim, name, axis, index):
    whole = sim.field(name)
    cut = sim.slice(axis, index, name)
    assert np.allclose(cut, np.take(whole, index, axis=axis), equal_nan=True, rtol=1e-9,
                       atol=1e-15)
    assert np.isfinite(cut).any() and np.nanmax(np.abs(cut)) > 0


def test_wall_shear_on_a_cut_and_view_carries_the_field(sim):
    whole = sim.wall_shear_stress()
    cut = sim.slice(2, 3, "wss")
    assert np.allclose(cut, whole[:, :, 3], equal_nan=True)
    assert np.nanmax(cut) > 0
    look = sim.view(2, 3, "vorticity", health=True)
    assert np.allclose(look["plane"], sim.slice(2, 3, "vorticity"), equal_nan=True)
    fields = sim.fields()
    assert np.allclose(sim.field("pressure"), grid_field("pressure", fields["rho"], fields["u"],
                                                         sim.solid), equal_nan=True)
    assert sim.problem.periodic == (True, False, True)  # the cuts at x, z = 0 wrapped


def test_to_pyvista_carries_the_named_fields(sim):
    grid = sim.to_pyvista(("umag", "vorticity"))
    assert grid.n_cells == sim.solid.size
    values = grid.cell_data["vorticity"].reshape(sim.solid.shape, order="F")
    assert np.allclose(values, sim.field("vorticity"), equal_nan=True)


def test_the_coarse_flow_is_the_field_every_stride_voxels(sim):
    from solver.coarse_flow import coarse_stride

    fields = sim.fields()
    full = sim.coarse_flow("vorticity", max_edge=64)
    assert full.stride == 1
    np.testing.assert_allclose(full.scalar, sim.field("vorticity"), rtol=1e-5, atol=1e-9)
    coarse = sim.coarse_flow("pressure", max_edge=5)
    assert coarse.stride == coarse_stride(sim.solid.shape, 5) == 3
    u = np.nan_to_num(fields["u"][:, ::3, ::3, ::3])
    np.testing.assert_allclose(coarse.velocity, u, rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(coarse.scalar, sim.field("pressure")[::3, ::3, ::3], rtol=1e-4,
                               atol=1e-12, equal_nan=True)
    with pytest.raises(ValueError, match="Unknown coarse field"):
        sim.coarse_flow("wss")
