"""Definitions of the fields a user looks at (issue 30): pressure, vorticity, Q, SI factors."""

from __future__ import annotations

import numpy as np
import pytest

from solver.flow_fields import (
    FIELDS,
    grid_field,
    pressure,
    q_criterion,
    velocity_gradient,
    vorticity,
    vorticity_magnitude,
)
from solver.units import UnitSystem


def _grid(n=9):
    return np.meshgrid(*[np.arange(n, dtype=float) - n // 2] * 3, indexing="ij")


def test_vorticity_of_a_solid_body_rotation_is_twice_its_rate():
    rate = np.array([0.01, -0.02, 0.03])
    r = np.stack(_grid())
    u = np.cross(rate[:, None, None, None], r, axis=0)
    grad = velocity_gradient(u, np.ones(r.shape[1:], dtype=bool))
    w = vorticity(grad)
    assert np.allclose(w, 2 * rate[:, None, None, None])
    assert np.allclose(vorticity_magnitude(grad), 2 * np.linalg.norm(rate))
    # Pure rotation: Q = |rate|^2 > 0 everywhere.
    assert np.allclose(q_criterion(grad), np.dot(rate, rate))


def test_q_of_a_pure_strain_is_negative():
    x, y, _ = _grid()
    u = np.stack([0.01 * x, -0.01 * y, np.zeros_like(x)])
    grad = velocity_gradient(u, np.ones(x.shape, dtype=bool))
    assert np.allclose(q_criterion(grad), -0.5 * 2 * 0.01**2)
    assert np.allclose(vorticity_magnitude(grad), 0.0)


def test_the_gradient_is_one_sided_next_to_a_wall_and_zero_between_two():
    # A linear shear u_x = a y in a channel: y = 0 and y = 6 are walls.
    fluid = np.ones((5, 7, 3), dtype=bool)
    fluid[:, [0, 6]] = False
    y = np.arange(7, dtype=float)[None, :, None] * np.ones((5, 7, 3))
    u = np.stack([0.002 * y, 0 * y, 0 * y])
    grad = velocity_gradient(u, fluid)
    assert np.allclose(grad[0, 1][fluid], 0.002)  # exact at every fluid node, walls included
    assert np.all(grad[:, :, ~fluid] == 0)
    gap = np.zeros((3, 3, 3), dtype=bool)
    gap[1, 1, 1] = True  # one fluid node alone: no neighbour, no gradient
    assert np.all(velocity_gradient(np.ones((3, 3, 3, 3)), gap) == 0)


def test_two_dimensional_vorticity_and_q():
    x, y = np.meshgrid(np.arange(7.0), np.arange(7.0), indexing="ij")
    u = np.stack([-0.01 * y, 0.01 * x])
    grad = velocity_gradient(u, np.ones(x.shape, dtype=bool))
    assert np.allclose(vorticity(grad), 0.02) and np.allclose(q_criterion(grad), 1e-4)


def test_pressure_from_density_and_its_si_value():
    assert pressure(1.03, 1.0) == pytest.approx(0.01)
    units = UnitSystem(dx=1e-4, dt=1e-5, density=1000.0)
    # One definition: the same Pa as UnitSystem.pressure_to_si of the density change.
    si = pressure(1.03, 1.0) * FIELDS["pressure"].si_factor(units)
    assert si == pytest.approx(units.pressure_to_si(0.03))
    assert FIELDS["umag"].si_factor(units) == pytest.approx(10.0)
    assert FIELDS["vorticity"].si_factor(units) == pytest.approx(1e5)
    assert FIELDS["pressure"].si_label() == "pressure p − p0 (Pa)"


def test_grid_field_has_nan_in_solids_and_refuses_unknown_names():
    solid = np.zeros((4, 4, 4), dtype=bool)
    solid[0] = True
    rho = np.full(solid.shape, 1.003)
    u = np.zeros((3, *solid.shape))
    p = grid_field("pressure", rho, u, solid)
    assert np.isnan(p[0]).all() and np.allclose(p[1:], 0.001)
    assert np.allclose(grid_field("qcrit", rho, u, solid)[1:], 0.0)
    with pytest.raises(ValueError, match="Unknown field"):
        grid_field("helicity", rho, u, solid)
