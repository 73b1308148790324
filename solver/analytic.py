"""Closed-form flows used by the tests, the notebooks and ``python -m solver validate``.

All functions work in lattice units with the halfway bounce-back convention: a channel of ``h``
fluid nodes has its walls half a node outside the first and last node, so its width is ``h``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["poiseuille_plates", "duct_velocity", "l2_error"]


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
