"""Orthogonal moment bases of the MRT collision and the equilibrium as a linear map.

Each MRT lattice has a moment matrix ``M`` (q, q) whose row ``k`` is a polynomial in the
velocity components evaluated on ``lattice.c``; ``m = M f``. Rows follow the papers:

- D2Q9: Lallemand & Luo, Phys. Rev. E 61 (2000) 6546, eq. 6:
  (rho, e, eps, jx, qx, jy, qy, pxx, pxy).
- D3Q19: d'Humieres et al., Phil. Trans. R. Soc. A 360 (2002) 437, eq. 2.1:
  (rho, e, eps, jx, qx, jy, qy, jz, qz, 3pxx, 3pixx, pww, piww, pxy, pyz, pxz, mx, my, mz).
- D3Q13: Tolke & Krafczyk (2008), Appendix A:
  (rho, jx, jy, jz, e, pxx, pww, pxy, pyz, pxz, hx, hy, hz).

Every row belongs to a named *group* sharing one relaxation rate (``"e"``, ``"q"``, ``"nu"``...);
:mod:`solver.mrt` maps groups to rates.

The equilibrium in population space is linear in the *basis* ``b = (rho, j, jj/rho*)``
(``1 + d + d(d+1)/2`` rows; ``jj`` holds ``j_a j_b`` for a <= b in the order xx, yy[, zz], xy
[, yz, xz]; ``rho* = 1`` in the incompressible model, ``rho`` otherwise): ``f_eq = E b``.
For D2Q9/D3Q19/D3Q27 ``E`` is the usual second-order Hermite polynomial; for D3Q13 it is
``M^-1`` applied to the moment equilibria of Tolke & Krafczyk, eq. 6. Guo's forcing term is
the derivative of the same map, ``E (0, F, d(jj)/dj . F / rho*)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from .lattice import Lattice, get_lattice

__all__ = ["MomentBasis", "moment_basis", "MRT_LATTICES", "equilibrium_matrix", "pair_index"]


@dataclass(frozen=True)
class MomentBasis:
    """Moment matrix (q, q), its inverse, and row names and relaxation groups."""

    lattice: str
    names: tuple[str, ...]
    groups: tuple[str, ...]
    matrix: np.ndarray = field(repr=False)
    inverse: np.ndarray = field(repr=False)

    def group_names(self) -> tuple[str, ...]:
        """Relaxation groups in first-appearance order."""
        return tuple(dict.fromkeys(self.groups))


def _rows_d2q9(cx, cy):
    c2 = cx * cx + cy * cy
    return [
        ("rho", "rho", np.ones_like(cx)),
        ("e", "e", 3 * c2 - 4),
        ("eps", "eps", (9 * c2 * c2 - 21 * c2 + 8) / 2),
        ("jx", "j", cx), ("qx", "q", (3 * c2 - 5) * cx),
        ("jy", "j", cy), ("qy", "q", (3 * c2 - 5) * cy),
        ("pxx", "nu", cx * cx - cy * cy), ("pxy", "nu", cx * cy),
    ]


def _rows_d3q19(cx, cy, cz):
    c2 = cx * cx + cy * cy + cz * cz
    return [
        ("rho", "rho", np.ones_like(cx)),
        ("e", "e", 19 * c2 - 30),
        ("eps", "eps", (21 * c2 * c2 - 53 * c2 + 24) / 2),
        ("jx", "j", cx), ("qx", "q", (5 * c2 - 9) * cx),
        ("jy", "j", cy), ("qy", "q", (5 * c2 - 9) * cy),
        ("jz", "j", cz), ("qz", "q", (5 * c2 - 9) * cz),
        ("3pxx", "nu", 3 * cx * cx - c2), ("3pixx", "pi", (3 * c2 - 5) * (3 * cx * cx - c2)),
        ("pww", "nu", cy * cy - cz * cz), ("piww", "pi", (3 * c2 - 5) * (cy * cy - cz * cz)),
        ("pxy", "nu", cx * cy), ("pyz", "nu", cy * cz), ("pxz", "nu", cx * cz),
        ("mx", "m", (cy * cy - cz * cz) * cx),
        ("my", "m", (cz * cz - cx * cx) * cy),
        ("mz", "m", (cx * cx - cy * cy) * cz),
    ]


def _rows_d3q13(cx, cy, cz):
    c2 = cx * cx + cy * cy + cz * cz
    return [
        ("rho", "rho", np.ones_like(cx)),
        ("jx", "j", cx), ("jy", "j", cy), ("jz", "j", cz),
        ("e", "e", 6.5 * c2 - 12),
        # Diagonal and off-diagonal stresses relax at different rates (eq. 7).
        ("pxx", "nu", 3 * cx * cx - c2), ("pww", "nu", cy * cy - cz * cz),
        ("pxy", "nu_off", cx * cy), ("pyz", "nu_off", cy * cz), ("pxz", "nu_off", cx * cz),
        ("hx", "h", cx * (cy * cy - cz * cz)),
        ("hy", "h", cy * (cx * cx - cz * cz)),
        ("hz", "h", cz * (cx * cx - cy * cy)),
    ]


_ROWS = {"D2Q9": _rows_d2q9, "D3Q19": _rows_d3q19, "D3Q13": _rows_d3q13}

#: Lattices with an MRT moment basis.
MRT_LATTICES: tuple[str, ...] = tuple(_ROWS)


@cache
def moment_basis(name: str) -> MomentBasis:
    """The moment basis of lattice ``name`` (one of :data:`MRT_LATTICES`)."""
    if name not in _ROWS:
        raise ValueError(
            f"No MRT moment basis for {name}; MRT runs on {', '.join(MRT_LATTICES)}. "
            "Use BGK or TRT for this lattice."
        )
    lattice = get_lattice(name)
    c = lattice.c.astype(np.float64)
    rows = _ROWS[name](*c.T)
    matrix = np.array([r[2] for r in rows], dtype=np.float64)
    gram = matrix @ matrix.T
    if not np.allclose(gram, np.diag(np.diag(gram))):
        raise AssertionError(f"{name} moment rows are not orthogonal")
    # Rows are orthogonal: M^-1 = M^T diag(1/|row|^2), exact in floating point.
    inverse = matrix.T / np.diag(gram)
    for arr in (matrix, inverse):
        arr.setflags(write=False)
    return MomentBasis(name, tuple(r[0] for r in rows), tuple(r[1] for r in rows),
                       matrix, inverse)


def pair_index(d: int) -> list[tuple[int, int]]:
    """Component pairs (a, b) of the ``jj`` basis rows: xx, yy[, zz], xy[, yz, xz]."""
    if d == 2:
        return [(0, 0), (1, 1), (0, 1)]
    return [(0, 0), (1, 1), (2, 2), (0, 1), (1, 2), (0, 2)]


def _d3q13_equilibrium_moments() -> np.ndarray:
    """Moment equilibria (13, 10) of Tolke & Krafczyk eq. 6 as a map of b = (rho, j, jj)."""
    meq = np.zeros((13, 10))
    meq[0, 0] = 1.0
    meq[1:4, 1:4] = np.eye(3)
    meq[4, 0], meq[4, 4:7] = -5.5, 6.5                # e = -11/2 rho + 13/2 j^2
    meq[5, 4:7] = (2.0, -1.0, -1.0)                     # pxx = 2jx^2 - jy^2 - jz^2
    meq[6, 5:7] = (1.0, -1.0)                           # pww = jy^2 - jz^2
    meq[7, 7], meq[8, 8], meq[9, 9] = 1.0, 1.0, 1.0     # pxy, pyz, pxz = j_a j_b
    return meq


@cache
def equilibrium_matrix(name: str) -> np.ndarray:
    """Matrix E (q, nb) with ``f_eq = E b``, b = (rho, j, jj/rho*), lattice units."""
    lattice: Lattice = get_lattice(name)
    if name == "D3Q13":
        e = moment_basis(name).inverse @ _d3q13_equilibrium_moments()
    else:
        c, w, d = lattice.c.astype(np.float64), lattice.w, lattice.d
        cols = [np.ones(lattice.q)] + [3.0 * c[:, a] for a in range(d)]
        for a, b in pair_index(d):
            cols.append(4.5 * c[:, a] ** 2 - 1.5 if a == b else 9.0 * c[:, a] * c[:, b])
        e = w[:, None] * np.stack(cols, axis=1)
    e.setflags(write=False)
    return e
