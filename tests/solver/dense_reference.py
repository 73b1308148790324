"""An independent dense, roll-based LBM step used as a test oracle for the tiled layout."""

import numpy as np

from solver.collision import collide, equilibrium, stored_moments
from solver.lattice import Lattice


def dense_initial(shape, lattice: Lattice, incompressible: bool) -> np.ndarray:
    """Rest equilibrium (q, *shape) at density 1."""
    n = int(np.prod(shape))
    feq = equilibrium(np.ones(n), np.zeros((lattice.d, n)), lattice, incompressible)
    return feq.reshape((lattice.q, *shape))


def dense_step(f, solid, lattice, rates, force, incompressible) -> np.ndarray:
    """One fully periodic pull stream-collide step with halfway bounce-back at solid nodes."""
    streamed = np.empty_like(f)
    for i, ci in enumerate(lattice.c):
        pulled = np.roll(f[i], shift=tuple(ci), axis=tuple(range(lattice.d)))
        source_solid = np.roll(solid, shift=tuple(ci), axis=tuple(range(lattice.d)))
        streamed[i] = np.where(source_solid, f[lattice.opposite[i]], pulled)
    fluid = ~solid
    out = f.copy()
    out[:, fluid] = collide(streamed[:, fluid], lattice, rates, force, incompressible)
    return out


def dense_velocity(f, solid, lattice, force, incompressible) -> np.ndarray:
    """Velocity (d, *shape) from stored populations, NaN in solids."""
    q = lattice.q
    _, u = stored_moments(f.reshape(q, -1), lattice, force, incompressible)
    u = u.reshape((lattice.d, *solid.shape))
    u[:, solid] = np.nan
    return u
