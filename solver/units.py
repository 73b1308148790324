"""Conversion between physical (SI) and lattice units, and the dimensionless numbers of a run.

Inside the solver the node spacing, the time step and the reference density are 1. A physical
setup fixes them: the voxel size ``dx`` [m], the fluid's kinematic viscosity ``nu`` [m^2/s] and
density ``rho`` [kg/m^3], together with the chosen relaxation time ``tau``, give the time step
``dt = nu_lattice * dx**2 / nu`` with ``nu_lattice = (tau - 1/2) / 3``. Everything else follows
from ``dx``, ``dt`` and ``rho``:

- velocity ``u = u_lattice * dx / dt``;
- force per unit volume (a pressure gradient, Pa/m = N/m^3) ``G = F_lattice * rho * dx / dt**2``;
- permeability ``k = k_lattice * dx**2``, and 1 darcy = 9.869233e-13 m^2.

All functions are pure; the app and the notebooks use them at the edges only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "DARCY_M2", "SOUND_SPEED", "UnitSystem", "lattice_viscosity", "tau_for_viscosity",
    "mach_number", "reynolds_number", "darcy_permeability", "to_millidarcy",
]

#: One darcy in m^2.
DARCY_M2 = 9.869233e-13
#: Lattice speed of sound c_s = 1/sqrt(3) (lattice units) of the D2Q9/D3Q19/D3Q27 sets.
SOUND_SPEED = 1.0 / math.sqrt(3.0)


def lattice_viscosity(tau: float) -> float:
    """Kinematic viscosity in lattice units, (tau - 1/2)/3."""
    if tau <= 0.5:
        raise ValueError(f"tau = {tau} gives no positive viscosity; use tau > 0.5.")
    return (tau - 0.5) / 3.0


def tau_for_viscosity(nu_lattice: float) -> float:
    """Relaxation time giving the lattice kinematic viscosity ``nu_lattice``."""
    if nu_lattice <= 0:
        raise ValueError(f"Lattice viscosity must be positive, got {nu_lattice}.")
    return 3.0 * nu_lattice + 0.5


def mach_number(speed_lattice: float) -> float:
    """Lattice Mach number |u| / c_s of a speed in lattice units."""
    return abs(speed_lattice) / SOUND_SPEED


def reynolds_number(speed: float, length: float, viscosity: float) -> float:
    """Reynolds number u L / nu (any consistent units)."""
    return abs(speed) * length / viscosity


def darcy_permeability(
    mean_velocity: float, force: float, viscosity: float, density: float = 1.0
) -> float:
    """Permeability k = rho nu <u> / F from Darcy's law driven by a body force.

    ``mean_velocity`` is the superficial (Darcy) velocity, the mean over the whole box with
    zero in the solid, along the force; any consistent units (lattice units give nodes^2).
    """
    if force == 0:
        raise ValueError("Darcy permeability needs a non-zero driving force.")
    return density * viscosity * mean_velocity / force


def to_millidarcy(permeability_m2: float) -> float:
    """Permeability in millidarcy from m^2."""
    return permeability_m2 / DARCY_M2 * 1e3


@dataclass(frozen=True)
class UnitSystem:
    """Physical size of the lattice units: spacing dx [m], time step dt [s], density [kg/m^3]."""

    dx: float
    dt: float
    density: float

    def __post_init__(self) -> None:
        for name in ("dx", "dt", "density"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive finite number, got {value!r}.")

    @classmethod
    def from_viscosity(
        cls, dx: float, viscosity: float, density: float, tau: float
    ) -> UnitSystem:
        """Units of a run with voxel size dx [m], fluid nu [m^2/s], rho [kg/m^3] and tau."""
        if not viscosity > 0:
            raise ValueError(f"The fluid viscosity must be positive, got {viscosity!r} m^2/s.")
        return cls(dx=dx, dt=lattice_viscosity(tau) * dx * dx / viscosity, density=density)

    def velocity_to_si(self, u: float) -> float:
        """Velocity in m/s from lattice units."""
        return u * self.dx / self.dt

    def velocity_to_lattice(self, u: float) -> float:
        """Velocity in lattice units from m/s."""
        return u * self.dt / self.dx

    def force_density_to_lattice(self, g: float) -> float:
        """Body force per unit volume in lattice units from N/m^3 (= a pressure gradient, Pa/m)."""
        return g * self.dt**2 / (self.density * self.dx)

    def force_density_to_si(self, f: float) -> float:
        """Body force per unit volume in N/m^3 (Pa/m) from lattice units."""
        return f * self.density * self.dx / self.dt**2

    def viscosity_to_si(self, nu: float) -> float:
        """Kinematic viscosity in m^2/s from lattice units."""
        return nu * self.dx**2 / self.dt

    def permeability_to_si(self, k: float) -> float:
        """Permeability in m^2 from lattice units (nodes^2)."""
        return k * self.dx**2

    def flow_rate_to_si(self, q: float) -> float:
        """Volumetric flow rate in m^3/s from lattice units (nodes^3 per step)."""
        return q * self.dx**3 / self.dt

    def flow_rate_to_lattice(self, q: float) -> float:
        """Volumetric flow rate in lattice units from m^3/s."""
        return q * self.dt / self.dx**3

    def pressure_to_si(self, density_change: float) -> float:
        """Pressure in Pa of a lattice density change (p = c_s^2 rho, c_s^2 = 1/3)."""
        return density_change / 3.0 * self.density * self.dx**2 / self.dt**2

    def pressure_to_lattice(self, pressure: float) -> float:
        """Lattice density change of a pressure in Pa (inverse of :meth:`pressure_to_si`)."""
        return 3.0 * pressure * self.dt**2 / (self.density * self.dx**2)

    def stress_to_si(self, stress: float) -> float:
        """Stress (e.g. wall shear stress) in Pa from lattice units (rho0 c^2)."""
        return stress * self.density * self.dx**2 / self.dt**2

    def time_to_si(self, steps: float) -> float:
        """Physical time in seconds of ``steps`` time steps."""
        return steps * self.dt
