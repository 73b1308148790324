"""NumPy reference (float64) of the regularized D3Q19 scheme in moment representation.

Each fluid node stores ten post-collision moments instead of 19 populations (issue 34): the
density deviation ``drho = rho - 1``, the momentum ``j`` (3) and ``A = Pi - rho/3 I`` (6: xx,
yy, zz, xy, xz, yz), the second moment minus its rest part, all in lattice units. A step
rebuilds the populations a node pulls from its neighbours' moments by the second-order Hermite
expansion (Latt & Chopard 2006's regularization; Vardhan et al. SC19's moment representation)

    f_i = w_i [rho + 3 c_i . j + 9/2 (c_i c_i - I/3) : A],

streams them (halfway bounce-back: a pull from a solid or outside node returns the node's own
opposite population, rebuilt from its own moments), takes their moments and relaxes them
(incompressible He-Luo equilibrium with Guo forcing, rho0 = 1, ``u = j + F/2``):

    rho* = rho,  j* = j + F,  A* = (1 - omega) A + omega u u + (1 - omega/2)(u F + F u).

``MomentGrid`` holds the fluid nodes of a voxel mask and their pull table; ``step`` advances
the moments (10, n_fluid) by one step. The compact CUDA probe (``moment_kernel.py``) does the
same arithmetic.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from solver.lattice import get_lattice  # noqa: E402

__all__ = ["LAT", "MOMENTS", "PAIRS", "MomentGrid", "populations", "moments", "collide",
           "velocity", "rest_moments"]

LAT = get_lattice("D3Q19")
#: Stored moments, in storage order.
MOMENTS = ("drho", "jx", "jy", "jz", "axx", "ayy", "azz", "axy", "axz", "ayz")
#: Axis pairs (a, b) of the six components of A, in storage order (indices 4..9).
PAIRS = ((0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2))


def _hermite(c: np.ndarray) -> np.ndarray:
    """(6,) weights of A's components in (c c - I/3) : A for one velocity c (off-diagonal
    components count twice)."""
    return np.array([c[a] * c[b] * (1 if a == b else 2) - (1 / 3 if a == b else 0)
                     for a, b in PAIRS], dtype=float)


#: (19, 10): f_i - w_i = sum_k REBUILD[i, k] m_k (deviation of population i from rest).
REBUILD = np.array([LAT.w[i] * np.concatenate(([1.0], 3.0 * LAT.c[i], 4.5 * _hermite(LAT.c[i])))
                    for i in range(LAT.q)])
#: (10, 19): m = PROJECT (f - w), the moments of population deviations (A includes -drho/3 I).
PROJECT = np.array([np.ones(LAT.q), *LAT.c.T.astype(float),
                    *[LAT.c[:, a] * LAT.c[:, b] - (1 / 3 if a == b else 0) for a, b in PAIRS]])


def populations(m: np.ndarray) -> np.ndarray:
    """Populations (19, ...) of moments (10, ...) by the second-order Hermite expansion."""
    return LAT.w.reshape((-1,) + (1,) * (m.ndim - 1)) + np.tensordot(REBUILD, m, axes=1)


def moments(f: np.ndarray) -> np.ndarray:
    """Moments (10, ...) of populations (19, ...): drho, j, A = Pi - rho/3 I."""
    return np.tensordot(PROJECT, f - LAT.w.reshape((-1,) + (1,) * (f.ndim - 1)), axes=1)


def rest_moments(n: int) -> np.ndarray:
    """Moments (10, n) of fluid at rest (all zero: f_i = w_i)."""
    return np.zeros((len(MOMENTS), n))


def velocity(m: np.ndarray, force) -> np.ndarray:
    """Fluid velocity (3, ...) from stored post-collision moments: u = j* - F/2 (rho0 = 1)."""
    f = np.asarray(force, dtype=float).reshape((3,) + (1,) * (m.ndim - 1))
    return m[1:4] - f / 2


def collide(m: np.ndarray, omega: float, force) -> np.ndarray:
    """Post-collision moments of pre-collision moments m (10, ...): incompressible He-Luo
    equilibrium, Guo forcing, u = j + F/2; the non-equilibrium part of A relaxes at omega."""
    f = np.asarray(force, dtype=float).reshape((3,) + (1,) * (m.ndim - 1))
    u = m[1:4] + f / 2
    out = np.empty_like(m)
    out[0] = m[0]
    out[1:4] = m[1:4] + f
    for k, (a, b) in enumerate(PAIRS):
        out[4 + k] = ((1 - omega) * m[4 + k] + omega * u[a] * u[b]
                      + (1 - omega / 2) * (u[a] * f[b] + u[b] * f[a]))
    return out


@dataclass
class MomentGrid:
    """The fluid nodes of a voxel mask (True = solid) and, per direction, each node's pull
    source: index of the fluid node at x - c_i (periodic axes wrap), or -1 (solid or outside:
    bounce-back). Nodes in C order of ``np.argwhere(~solid)``."""

    solid: np.ndarray
    periodic: tuple[bool, bool, bool] = (True, True, True)
    nodes: np.ndarray = field(init=False, repr=False)
    source: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        solid = np.asarray(self.solid, dtype=bool)
        shape = np.array(solid.shape)
        self.nodes = np.argwhere(~solid)
        index = np.full(solid.shape, -1, dtype=np.int64)
        index[tuple(self.nodes.T)] = np.arange(len(self.nodes))
        self.source = np.empty((LAT.q, len(self.nodes)), dtype=np.int64)
        for i, c in enumerate(LAT.c):
            x = self.nodes - c
            for ax in range(3):
                if self.periodic[ax]:
                    x[:, ax] %= shape[ax]
            inside = np.all((x >= 0) & (x < shape), axis=1)
            x = np.clip(x, 0, shape - 1)
            self.source[i] = np.where(inside, index[tuple(x.T)], -1)

    @property
    def n_fluid(self) -> int:
        """Fluid nodes."""
        return len(self.nodes)

    def pull(self, m: np.ndarray) -> np.ndarray:
        """Populations (19, n_fluid) arriving at each node from stored moments (10, n_fluid):
        rebuilt at the source, or the node's own opposite one (halfway bounce-back)."""
        rebuilt = populations(m)  # each node's own post-collision populations
        f = np.empty((LAT.q, self.n_fluid))
        for i in range(LAT.q):
            src = self.source[i]
            f[i] = np.where(src >= 0, rebuilt[i, src], rebuilt[LAT.opposite[i]])
        return f

    def step(self, m: np.ndarray, omega: float, force) -> np.ndarray:
        """Stored moments (10, n_fluid) one step later."""
        return collide(moments(self.pull(m)), omega, force)

    def to_grid(self, values: np.ndarray, fill: float = np.nan) -> np.ndarray:
        """Per-node values (k, n_fluid) on the voxel grid (k, nx, ny, nz); solids ``fill``."""
        out = np.full((values.shape[0], *self.solid.shape), fill)
        out[(slice(None), *self.nodes.T)] = values
        return out
