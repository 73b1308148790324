"""Order-of-magnitude porous-media estimates shown next to the measured values.

The Kozeny-Carman relation predicts the permeability of a granular medium from its porosity
eps and grain diameter d, ``k = eps**3 d**2 / (180 (1 - eps)**2)``. Written with the specific
surface S (solid-fluid interface area per box volume; ``S = 6 (1 - eps) / d`` for spheres) it
becomes ``k = eps**3 / (5 S**2)`` and applies to any voxel geometry; ``6 (1 - eps) / S`` is
then the equivalent grain diameter used for the pore Reynolds number. These are rough (a factor
of a few; the formulas live in :mod:`solver.analytic`); the stability verdict before a run
comes from :func:`solver.stability.assess`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solver.analytic import kozeny_carman, kozeny_carman_surface
from solver.units import reynolds_number

__all__ = [
    "FlowEstimate", "specific_surface", "kozeny_carman", "estimate_flow", "darcy_regime",
]


def specific_surface(solid: np.ndarray) -> float:
    """Solid-fluid faces per box volume (1/voxel) of a mask (True = solid), box faces excluded."""
    solid = np.asarray(solid, dtype=bool)
    faces = sum(int(np.count_nonzero(np.diff(solid, axis=a))) for a in range(solid.ndim))
    return faces / solid.size


@dataclass(frozen=True)
class FlowEstimate:
    """Kozeny-Carman prediction of a body-force-driven run, lattice units (Reynolds pure).

    ``grain_diameter`` = 6 (1 - eps) / S is the diameter of spheres with the same specific
    surface; the pore Reynolds number uses it with the Darcy velocity.
    """

    permeability: float
    darcy_velocity: float
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
    permeability = kozeny_carman_surface(porosity, surface)
    darcy = permeability * abs(force) / (density * viscosity)
    diameter = 6.0 * (1.0 - porosity) / surface
    return FlowEstimate(permeability=permeability, darcy_velocity=darcy, grain_diameter=diameter,
                        reynolds=reynolds_number(darcy, diameter, viscosity))


def darcy_regime(reynolds: float) -> str:
    """Whether Darcy's law applies at a pore Reynolds number."""
    if reynolds < 1.0:
        return "Darcy's law applies (creeping flow, Re < 1)"
    if reynolds < 10.0:
        return "weak inertia (1 < Re < 10): Darcy's law is approximate"
    return "inertial flow (Re > 10): Darcy's law does not apply (Forchheimer regime)"
