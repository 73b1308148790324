"""Regular (SC, BCC, FCC) arrays of equal spheres in periodic unit cells.

The radius is chosen so that the *continuous* solid fraction matches the request:
``c = n · 4/3 π r³ / L³`` with n = 1, 2, 4 spheres per cell of edge L (SC, BCC, FCC). The voxel
count approaches c as the cell gets finer. Spheres touch at c = π/6 (SC), √3π/8 (BCC) and
√2π/6 (FCC); larger fractions are refused. Every sphere gets its own label id (1, 2, ...), and
spheres crossing the box faces wrap around periodically, keeping one id.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product
from typing import Literal

import numpy as np

from ..errors import GeometryError
from ..voxel import VoxelGeometry
from .balls import ball_region
from .checks import check_fraction, check_int, check_size

__all__ = ["MAX_SOLID_FRACTION", "sphere_array", "sphere_radius"]

# Sphere centres in units of the cell edge; one sphere is always at the cell centre.
_BASIS = {
    "sc": [(0.5, 0.5, 0.5)],
    "bcc": [(0.5, 0.5, 0.5), (0.0, 0.0, 0.0)],
    "fcc": [(0.5, 0.5, 0.5), (0.5, 0.0, 0.0), (0.0, 0.5, 0.0), (0.0, 0.0, 0.5)],
}

#: Solid fraction at which neighbouring spheres touch.
MAX_SOLID_FRACTION = {
    "sc": np.pi / 6,
    "bcc": np.sqrt(3) * np.pi / 8,
    "fcc": np.sqrt(2) * np.pi / 6,
}


def sphere_array(
    kind: Literal["sc", "bcc", "fcc"],
    cell: int,
    solid_fraction: float,
    cells: Sequence[int] = (1, 1, 1),
) -> VoxelGeometry:
    """Return ``cells`` periodic unit cells of edge ``cell`` voxels holding an SC/BCC/FCC array."""
    if kind not in _BASIS:
        raise GeometryError(f"kind must be one of {sorted(_BASIS)}, got {kind!r}.")
    edge = check_int(cell, "cell", minimum=4)
    limit = float(MAX_SOLID_FRACTION[kind])
    fraction = check_fraction(solid_fraction, "solid_fraction", high=limit)
    counts = _check_cells(cells)
    dims = check_size(tuple(edge * n for n in counts))
    radius = sphere_radius(kind, edge, fraction)
    solid = np.zeros(dims, dtype=bool)
    labels = np.zeros(dims, dtype=np.int32)
    sphere_id = 0
    for offset in product(*(range(n) for n in counts)):
        for base in _BASIS[kind]:
            sphere_id += 1
            center = [(o + b) * edge for o, b in zip(offset, base, strict=True)]
            index, mask = ball_region(center, radius, dims, periodic=True)
            solid[index] |= mask
            labels[index] = np.where(mask, sphere_id, labels[index])
    return VoxelGeometry(
        solid,
        labels=labels,
        name=f"{kind.upper()} sphere array, cell {edge}, solid fraction {fraction:g} "
        f"(r = {radius:.3f} voxels)",
    )


def sphere_radius(kind: str, cell: int, solid_fraction: float) -> float:
    """Return the sphere radius (voxels) giving ``solid_fraction`` in a cell of edge ``cell``."""
    per_cell = len(_BASIS[kind])
    return float((3 * solid_fraction * cell**3 / (4 * np.pi * per_cell)) ** (1 / 3))


def _check_cells(cells: Sequence[int]) -> tuple[int, int, int]:
    """Return three positive cell counts or raise GeometryError."""
    try:
        values = tuple(cells)
    except TypeError as exc:
        raise GeometryError(f"cells must be three positive integers, got {cells!r}.") from exc
    if len(values) != 3:
        raise GeometryError(f"cells must be three positive integers, got {cells!r}.")
    x, y, z = (check_int(n, "every entry of cells") for n in values)
    return x, y, z
