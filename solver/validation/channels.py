"""Channel and duct flows driven through Zou-He faces, against the analytic profiles.

Pressure-driven: Zou-He density faces at both ends of x prescribe ``rho_in`` and ``rho_out`` on
the first and last node layers, so the pressure gradient is ``c_s^2 (rho_in - rho_out) /
(nx - 1)``; the fully developed profile is the body-force one with that gradient
(:mod:`solver.analytic`). Velocity inlet: a uniform inflow ``U`` at ``x_min`` develops into the
parabola of the same flux, ``u_max = 3/2 U``, checked near the pressure outlet.
"""

from __future__ import annotations

import numpy as np

from ..analytic import duct_velocity, l2_error, poiseuille_plates
from ..config import SimulationConfig
from ..lattice import CS2
from ..simulation import Simulation
from .core import CaseResult, Timer, register, run_steady

__all__ = ["channel_2d", "duct_3d"]

_CHANNEL = {"ci": dict(nx=48, ny=16), "full": dict(nx=256, ny=64)}
_DUCT = {"ci": dict(nx=24, ny=12), "full": dict(nx=128, ny=48)}
_DRHO = 2e-3


def _pressure_config(lattice: str, backend: str, **faces) -> SimulationConfig:
    return SimulationConfig(lattice=lattice, collision="TRT", tau=0.8, precision="float64",
                            backend=backend, x_min="pressure", x_max="pressure",
                            x_min_value=1.0 + _DRHO / 2, x_max_value=1.0 - _DRHO / 2, **faces)


@register("channel_2d", "D2Q9 TRT channel: Zou-He pressure inlet/outlet and velocity inlet, "
          "profile vs Poiseuille (L2 <= 1 %)")
def channel_2d(size: str, backend: str, name: str) -> list[CaseResult]:
    """Pressure-driven and velocity-inlet 2D channels between walls at y = -1/2, ny - 1/2."""
    nx, ny = _CHANNEL[size]["nx"], _CHANNEL[size]["ny"]
    label = f"{nx}x{ny}"
    walls = dict(y_min="wall", y_max="wall")
    timer = Timer()
    config = _pressure_config("D2Q9", backend, **walls)
    sim = Simulation(np.zeros((nx, ny), bool), config)
    residual = run_steady(sim, 500, 1e-9, 200 * ny * ny)
    gradient = CS2 * _DRHO / (nx - 1)
    exact = poiseuille_plates(ny, gradient, config.viscosity)
    measured = l2_error(sim.fields()["u"][0][nx // 2], exact)
    out = [CaseResult(name, "L2 error, pressure-driven profile at mid-length", measured, 0.0,
                      0.01, label, sim.time_step, timer(), relative=False,
                      note=f"residual {residual:.1e}")]
    timer = Timer()
    u_in = 0.02
    config = SimulationConfig(lattice="D2Q9", collision="TRT", tau=0.8, precision="float64",
                              backend=backend, x_min="velocity", x_min_value=u_in,
                              x_max="pressure", **walls)
    sim = Simulation(np.zeros((nx, ny), bool), config)
    # Sound waves between the velocity inlet and the pressure outlet decay slowly; the profile
    # is steady to 1e-4 long before the mean velocity stops wiggling at 1e-6.
    residual = run_steady(sim, 500, 1e-6, 200 * ny * ny)
    y = np.arange(ny) + 0.5
    exact = 6.0 * u_in * y * (ny - y) / ny**2
    measured = l2_error(sim.fields()["u"][0][3 * nx // 4], exact)
    out.append(CaseResult(name, "L2 error, developed profile behind a uniform velocity inlet",
                          measured, 0.0, 0.01, label, sim.time_step, timer(), relative=False,
                          note=f"Re = {u_in * ny / config.viscosity:.1f}, "
                               f"residual {residual:.1e}"))
    return out


@register("duct_3d", "D3Q19 TRT square duct: Zou-He pressure inlet/outlet, profile vs series "
          "solution (L2 <= 1 %)")
def duct_3d(size: str, backend: str, name: str) -> list[CaseResult]:
    """Pressure-driven flow in a square duct of ny x ny nodes."""
    nx, ny = _DUCT[size]["nx"], _DUCT[size]["ny"]
    timer = Timer()
    config = _pressure_config("D3Q19", backend, y_min="wall", y_max="wall", z_min="wall",
                              z_max="wall")
    sim = Simulation(np.zeros((nx, ny, ny), bool), config)
    residual = run_steady(sim, 250, 1e-8, 200 * ny * ny)
    gradient = CS2 * _DRHO / (nx - 1)
    exact = duct_velocity(ny, ny, gradient, config.viscosity)
    measured = l2_error(sim.fields()["u"][0][nx // 2], exact)
    return [CaseResult(name, "L2 error, pressure-driven duct profile at mid-length", measured,
                       0.0, 0.01, f"{nx}x{ny}x{ny}", sim.time_step, timer(), relative=False,
                       note=f"residual {residual:.1e}")]
