"""Order-of-magnitude flow estimates made before a run, to warn about unstable settings.

The Kozeny-Carman relation predicts the permeability of a granular medium from its porosity
eps and grain diameter d, ``k = eps**3 d**2 / (180 (1 - eps)**2)``. Written with the specific
surface S (solid-fluid interface area per box volume; ``S = 6 (1 - eps) / d`` for spheres) it
becomes ``k = eps**3 / (5 S**2)`` and applies to any voxel geometry, which is what lets the app
predict the Darcy velocity ``u = k F / (rho nu)``, the peak pore velocity and so the lattice Mach
number of a body-force-driven run before anything is allocated. The estimate is rough (a
factor of a few); the measured values replace it once the run has settled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.units import mach_number, reynolds_number

__all__ = [
    "FlowEstimate", "specific_surface", "kozeny_carman", "estimate_flow", "stability_issues",
    "darcy_regime", "TAU_WARN", "MACH_WARN", "MACH_REFUSE", "PEAK_TO_PORE_VELOCITY",
]

TAU_WARN = 0.55
MACH_WARN = 0.1
MACH_REFUSE = 0.3
#: Peak over mean pore velocity; about 2 in a straight pipe, larger in throats of a pack.
PEAK_TO_PORE_VELOCITY = 3.0


def specific_surface(solid: np.ndarray) -> float:
    """Solid-fluid faces per box volume (1/voxel) of a mask (True = solid), box faces excluded."""
    solid = np.asarray(solid, dtype=bool)
    faces = sum(int(np.count_nonzero(np.diff(solid, axis=a))) for a in range(solid.ndim))
    return faces / solid.size


def kozeny_carman(porosity: float, diameter: float) -> float:
    """Kozeny-Carman permeability eps^3 d^2 / (180 (1-eps)^2), in units of diameter^2."""
    if not 0 < porosity < 1:
        raise ValueError(f"Porosity must lie strictly between 0 and 1, got {porosity}.")
    return porosity**3 * diameter**2 / (180.0 * (1.0 - porosity) ** 2)


@dataclass(frozen=True)
class FlowEstimate:
    """Predicted flow of a body-force-driven run, lattice units (Reynolds and Mach pure numbers).

    ``grain_diameter`` = 6 (1 - eps) / S is the diameter of spheres with the same specific
    surface; the pore Reynolds number uses it with the Darcy velocity.
    """

    permeability: float
    darcy_velocity: float
    peak_velocity: float
    mach: float
    grain_diameter: float
    reynolds: float


def estimate_flow(
    porosity: float, surface: float, force: float, viscosity: float, density: float = 1.0
) -> FlowEstimate | None:
    """Kozeny-Carman estimate from porosity, specific surface (1/voxel) and |F| (lattice units).

    None when the geometry has no internal solid surface (no porous-medium estimate applies).
    """
    if surface <= 0 or not 0 < porosity < 1:
        return None
    permeability = porosity**3 / (5.0 * surface**2)
    darcy = permeability * abs(force) / (density * viscosity)
    peak = PEAK_TO_PORE_VELOCITY * darcy / porosity
    diameter = 6.0 * (1.0 - porosity) / surface
    return FlowEstimate(
        permeability=permeability, darcy_velocity=darcy, peak_velocity=peak,
        mach=mach_number(peak), grain_diameter=diameter,
        reynolds=reynolds_number(darcy, diameter, viscosity),
    )


def stability_issues(tau: float, mach: float | None) -> list[tuple[str, str]]:
    """(level, message) pairs: level 'warning' may run, 'refused' must not."""
    issues = []
    if mach is not None and mach > MACH_REFUSE:
        issues.append(("refused", (
            f"Expected lattice Mach number {mach:.2f} exceeds {MACH_REFUSE}: the run would be "
            "compressible or diverge. Lower the pressure gradient, or raise tau (a larger time "
            "step per lattice velocity) or use a finer voxel size.")))
    elif mach is not None and mach > MACH_WARN:
        issues.append(("warning", (
            f"Expected lattice Mach number {mach:.2f} is above {MACH_WARN}: compressibility "
            "errors grow as Mach^2. Lower the pressure gradient for accurate results.")))
    if tau < TAU_WARN:
        issues.append(("warning", (
            f"tau = {tau:g} is close to 0.5, where the scheme becomes unstable; use tau >= 0.6 "
            "unless you need the low viscosity.")))
    return issues


def darcy_regime(reynolds: float) -> str:
    """Whether Darcy's law applies at a pore Reynolds number."""
    if reynolds < 1.0:
        return "Darcy's law applies (creeping flow, Re < 1)"
    if reynolds < 10.0:
        return "weak inertia (1 < Re < 10): Darcy's law is approximate"
    return "inertial flow (Re > 10): Darcy's law does not apply (Forchheimer regime)"
