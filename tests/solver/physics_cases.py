"""Test problems for the boundary and MRT physics, shared by the GPU and kernel-emulation tests.

Each case exercises one part of ``solver/backends/cuda/templates/PHYSICS_FOR_GPU.md`` on a small
domain whose sizes are not multiples of the tile edge, starts from a noisy equilibrium and is
compared against the NumPy reference (``porous_cases.reference``):

- ``zou_he``: random porous box (solids through the inlet and outlet faces, empty tiles) with a
  Zou-He velocity inlet at x_min (with a tangential component), a pressure outlet at x_max,
  resting walls on y, periodic z and a body force (the kernel without Ladd's term).
- ``zou_he_moving``: the same with a moving wall at y_max (edges where velocity, pressure and
  moving-wall faces meet).
- ``cavity``: lid-driven cavity, every face a wall and the lid a moving wall (corner rule).
- ``objects``: two labelled spheres sliding at different velocities through a porous channel.
- ``far_field``: an obstacle in a box with velocity faces at x_min, y_min and y_max (they meet:
  links through one face into the other's nodes carry Ladd's term) and a pressure outlet.
- ``mrt``: the random porous box of ``porous_cases`` with MRT collision and a body force.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from solver.config import SimulationConfig
from solver.lattice import get_lattice
from solver.problem import Problem

from .porous_cases import porous_solid

__all__ = ["CASES", "SHAPES", "physics_problem"]

CASES = ("zou_he", "zou_he_moving", "cavity", "objects", "far_field", "mrt")
#: Domain sizes per lattice (not multiples of the tile edges 4 in 3D and 8 in 2D).
SHAPES = {"D2Q9": (45, 21), "D3Q19": (26, 15, 11), "D3Q13": (22, 13, 10), "D3Q27": (15, 10, 7)}


def _force(d: int) -> tuple[float, float, float]:
    return (2e-5, -1e-5, 5e-6) if d == 3 else (2e-5, -1e-5, 0.0)


def _zou_he(shape, d, lattice, moving=False):
    u_in = (0.004, 0.001, -0.0005)[:d]
    faces = dict(x_min="velocity", x_min_value=u_in, x_max="pressure", x_max_value=0.995,
                 y_min="wall", y_max="wall")
    if moving:
        faces |= dict(y_max="moving_wall", y_max_value=(0.02, 0.0, 0.01)[:d])
    if d == 3:
        faces |= dict(z_min="periodic", z_max="periodic")
    # Solids reach through both faces, but every fluid node connects the inlet to the outlet:
    # a velocity inlet into a pocket without outlet piles up mass (ill-posed, not a test).
    solid = porous_solid(shape)
    solid[:2] = solid[2]
    solid[-2:] = solid[-3]
    return _through_flow(solid, lattice), None, faces


def _through_flow(solid: np.ndarray, lattice: str) -> np.ndarray:
    """``solid`` with every fluid region not linking x = 0 to x = nx - 1 filled (lattice links)."""
    c = get_lattice(lattice).c
    structure = np.zeros((3,) * solid.ndim, dtype=bool)
    structure[tuple((c + 1).T)] = True
    # z periodic in the 3D case: label on a doubled box so regions wrap.
    tiled = np.concatenate([~solid, ~solid], axis=-1) if solid.ndim == 3 else ~solid
    labels, _ = ndimage.label(tiled, structure)
    labels = labels[..., : solid.shape[-1]] if solid.ndim == 3 else labels
    keep = np.intersect1d(labels[0][labels[0] > 0], labels[-1][labels[-1] > 0])
    return ~np.isin(labels, keep)


def _cavity(shape, d, lattice):
    faces = {f"{ax}_{s}": "wall" for ax in "xyz"[:d] for s in ("min", "max")}
    faces |= dict(y_max="moving_wall", y_max_value=(0.05, 0.0, 0.02)[:d])
    solid = np.zeros(shape, dtype=bool)
    solid[tuple(slice(n // 2, n // 2 + 2) for n in shape)] = True  # a resting obstacle
    return solid, None, faces


def _objects(shape, d, lattice):
    grids = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    labels = np.zeros(shape, dtype=np.int32)
    centres = [(0.3 * shape[0], shape[1] / 2, shape[-1] / 2),
               (0.75 * shape[0], shape[1] / 2, shape[-1] / 2)]
    for label, centre in enumerate(centres, start=1):
        r2 = sum((g - c) ** 2 for g, c in zip(grids, centre[:d], strict=False))
        labels[r2 <= 2.6**2] = label
    solid = labels > 0
    faces = dict(x_min="periodic", x_max="periodic", y_min="wall", y_max="wall")
    if d == 3:
        faces |= dict(z_min="wall", z_max="moving_wall", z_max_value=(0.0, 0.01, 0.0))
    objects = {1: (0.02, 0.01, 0.005)[:d], 2: (-0.01, 0.0, 0.01)[:d]}
    return solid, labels, faces | {"object_velocities": objects}


def _far_field(shape, d, lattice):
    u = (0.01, 0.002, 0.0)[:d]
    faces = dict(x_min="velocity", x_min_value=u, x_max="pressure", y_min="velocity",
                 y_min_value=(0.01, 0.0, 0.0)[:d], y_max="velocity",
                 y_max_value=(0.01, 0.0, -0.001)[:d])
    if d == 3:
        faces |= dict(z_min="periodic", z_max="periodic")
    grids = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    solid = (grids[0] - shape[0] / 3) ** 2 + (grids[1] - shape[1] / 2) ** 2 <= 3.2**2
    return solid, None, faces


def _mrt(shape, d, lattice):
    faces = dict(x_min="periodic", x_max="periodic", y_min="wall", y_max="wall")
    if d == 3:
        faces |= dict(z_min="periodic", z_max="periodic")
    return porous_solid(shape), None, faces


_BUILDERS = {"zou_he": _zou_he, "cavity": _cavity, "objects": _objects, "mrt": _mrt,
             "far_field": _far_field,
             "zou_he_moving": lambda shape, d, lattice: _zou_he(shape, d, lattice, True)}


def physics_problem(case: str, lattice: str = "D3Q19", precision: str = "float64",
                    collision: str = "TRT", fluid_model: str = "incompressible",
                    layout: str = "xyz", tiles_per_block: int = 2) -> Problem:
    """The problem of ``case`` (one of :data:`CASES`) on ``lattice``."""
    shape = SHAPES[lattice]
    d = len(shape)
    solid, labels, options = _BUILDERS[case](shape, d, lattice)
    if case == "mrt" or lattice == "D3Q13":
        collision = "MRT"
    if case == "far_field" and collision == "MRT" and lattice == "D3Q19":
        # The default m rate 1.98 diverges (NumPy too) where velocity faces meet; 1.5 holds.
        options["mrt_rates"] = {"m": 1.5}
    config = SimulationConfig(lattice=lattice, precision=precision, collision=collision,
                              fluid_model=fluid_model, gpu_layout=layout,
                              tiles_per_block=tiles_per_block, body_force=_force(d), tau=0.7,
                              **options)
    return Problem.from_config(solid, config, labels=labels)
