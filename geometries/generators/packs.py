"""Random packs of overlapping spheres at a target porosity.

Spheres of one diameter are dropped at uniformly random centres (a Boolean model) one after
another until the fluid fraction of the box first reaches the target or falls below it; the
achieved porosity is therefore at most one sphere's volume fraction below the target, and is
logged and kept in the geometry's name. With ``periodic=True`` spheres wrap around the box faces,
so the pack tiles space. This is the kind of geometry of the tiled-LBM paper's Table 6
(diameter 40 in 192³, porosity 0.1-0.9).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ..errors import GeometryError
from ..voxel import VoxelGeometry
from .balls import ball_region
from .checks import check_fraction, check_positive, check_shape

__all__ = ["random_sphere_pack"]

logger = logging.getLogger(__name__)

_BATCH = 256
# The Boolean model's porosity decays as exp(-N v / V); 60 box volumes of spheres reach 1e-26.
_MAX_BOX_VOLUMES = 60


def random_sphere_pack(
    shape: Sequence[int],
    porosity: float,
    diameter: float = 40,
    seed: int = 0,
    periodic: bool = True,
) -> VoxelGeometry:
    """Return a pack of random overlapping spheres (discs in 2D); sizes in voxels."""
    dims = check_shape(shape)
    target = check_fraction(porosity, "porosity")
    diameter = check_positive(diameter, "diameter")
    if periodic and diameter > min(dims):
        raise GeometryError(
            f"diameter {diameter} is larger than the smallest box edge {min(dims)}, so a "
            "periodic sphere would overlap itself. Use a smaller diameter or a larger shape."
        )
    solid, count = _drop_spheres(dims, target, diameter / 2, seed, periodic)
    geometry = VoxelGeometry(
        solid,
        name=f"random sphere pack d={diameter:g}, porosity {1 - solid.mean():.4f} "
        f"(target {target:g}, {count} spheres, seed {seed})",
    )
    logger.info(
        "sphere pack %s: %d spheres, porosity %.4f (target %.4f)",
        dims, count, geometry.porosity, target,
    )
    return geometry


def _drop_spheres(
    dims: tuple[int, ...], target: float, radius: float, seed: int, periodic: bool
) -> tuple[np.ndarray, int]:
    """Return (solid mask, number of spheres) once fluid ≤ target · box volume."""
    rng = np.random.default_rng(seed)
    solid = np.zeros(dims, dtype=bool)
    size = solid.size
    fluid_goal = target * size
    ball = np.pi * radius**2 if len(dims) == 2 else 4 / 3 * np.pi * radius**3
    max_spheres = int(_MAX_BOX_VOLUMES * size / max(ball, 1.0)) + _BATCH
    n_solid, count = 0, 0
    while count < max_spheres:
        for center in rng.uniform(0.0, dims, size=(_BATCH, len(dims))):
            index, mask = ball_region(center, radius, dims, periodic=periodic)
            block = solid[index]
            n_solid += int(np.count_nonzero(mask & ~block))
            solid[index] = block | mask
            count += 1
            if size - n_solid <= fluid_goal:
                return solid, count
    raise GeometryError(
        f"The pack did not reach porosity {target} after {count} spheres (the spheres may be "
        "smaller than a voxel). Use a larger diameter or a higher porosity."
    )
