"""Closed-form flows used by the tests, the notebooks and ``python -m solver validate``.

All functions work in lattice units with the halfway bounce-back convention: a channel of ``h``
fluid nodes has its walls half a node outside the first and last node, so its width is ``h``.
The Kozeny-Carman estimates are unit-agnostic: a permeability comes out in the square of the
length unit the diameter or the inverse specific surface is given in.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "poiseuille_plates", "duct_velocity", "l2_error", "kozeny_carman",
    "kozeny_carman_surface", "boolean_sphere_surface",
]

#: Kozeny constant of Carman (1937): 5 for beds of spheres, i.e. 180 in the diameter form.
KOZENY_CONSTANT = 5.0


def poiseuille_plates(h: int, force: float, nu: float, rho: float = 1.0) -> np.ndarray:
    """Velocity (h,) at node centres between plates at -1/2 and h - 1/2, driven by ``force``."""
    y = np.arange(h) + 0.5
    return force / (2.0 * rho * nu) * y * (h - y)


def duct_velocity(
    ny: int, nz: int, force: float, nu: float, rho: float = 1.0, terms: int = 101
) -> np.ndarray:
    """Axial velocity (ny, nz) in a rectangular duct of ny x nz nodes (series solution).

    Standard Fourier series for fully developed flow in a rectangle of half-widths
    ``a = ny/2`` and ``b = nz/2`` under pressure gradient (body force) ``force``.
    """
    a, b = ny / 2.0, nz / 2.0
    y = (np.arange(ny) + 0.5 - a)[:, None]
    z = (np.arange(nz) + 0.5 - b)[None, :]
    u = np.zeros((ny, nz))
    for k in range(terms):
        n = 2 * k + 1
        beta = n * np.pi / (2.0 * a)
        # cosh ratio written with exponentials to stay finite for large n.
        ratio = (np.exp(beta * (z - b)) + np.exp(-beta * (z + b))) / (1.0 + np.exp(-2 * beta * b))
        u += (-1) ** k / n**3 * (1.0 - ratio) * np.cos(beta * y)
    return 16.0 * a * a * force / (rho * nu * np.pi**3) * u


def l2_error(numeric: np.ndarray, exact: np.ndarray) -> float:
    """Relative L2 error ||numeric - exact|| / ||exact|| over finite entries."""
    ok = np.isfinite(numeric) & np.isfinite(exact)
    return float(np.linalg.norm(numeric[ok] - exact[ok]) / np.linalg.norm(exact[ok]))


def _check_porosity(porosity: float) -> float:
    if not 0.0 < porosity < 1.0:
        raise ValueError(f"Porosity must lie strictly between 0 and 1, got {porosity}.")
    return float(porosity)


def kozeny_carman(porosity: float, diameter: float) -> float:
    """Kozeny-Carman permeability of a bed of spheres, in units of ``diameter``**2.

    ``k = eps**3 d**2 / (180 (1 - eps)**2)`` for porosity ``eps`` and grain diameter ``d`` (any
    length unit: nodes give nodes^2, metres give m^2). It is the surface form
    :func:`kozeny_carman_surface` with the specific surface of separate spheres,
    ``S = 6 (1 - eps) / d``, and Kozeny constant 5. Reference: P. C. Carman, "Fluid flow
    through granular beds", Trans. Inst. Chem. Eng. 15, 150-166 (1937); J. Kozeny, Sitzungsber.
    Akad. Wiss. Wien 136, 271-306 (1927). Good to tens of percent for packed beds of
    near-spherical grains at porosities 0.3-0.5; a rough estimate elsewhere.
    """
    eps = _check_porosity(porosity)
    return eps**3 * diameter**2 / (36.0 * KOZENY_CONSTANT * (1.0 - eps) ** 2)


def kozeny_carman_surface(
    porosity: float, specific_surface: float, kozeny_constant: float = KOZENY_CONSTANT
) -> float:
    """Kozeny-Carman permeability ``eps**3 / (c S**2)`` from the specific surface ``S``.

    ``S`` is the solid-fluid interface area per bulk volume (1/length; units of the result are
    length^2), ``c`` the Kozeny constant (5 after Carman 1937, see :func:`kozeny_carman`). This
    form applies to any grain shape and to overlapping grains, whose surface is smaller than
    that of separate spheres of the same porosity.
    """
    eps = _check_porosity(porosity)
    if specific_surface <= 0:
        raise ValueError(f"Specific surface must be positive, got {specific_surface}.")
    return eps**3 / (kozeny_constant * specific_surface**2)


def boolean_sphere_surface(porosity: float, diameter: float) -> float:
    """Specific surface (1/length of ``diameter``) of randomly placed overlapping spheres.

    In the Boolean model (sphere centres a Poisson process of density ``n``) the porosity is
    ``eps = exp(-n V)`` and the exposed surface is ``S = n A eps``, so with ``A / V = 6 / d``:
    ``S = -6 eps ln(eps) / d``. This is the geometry of
    :func:`geometries.generators.random_sphere_pack`. Reference: S. Torquato, *Random
    Heterogeneous Materials* (Springer, 2002), fully penetrable spheres.
    """
    eps = _check_porosity(porosity)
    if diameter <= 0:
        raise ValueError(f"Diameter must be positive, got {diameter}.")
    return -6.0 * eps * np.log(eps) / diameter
