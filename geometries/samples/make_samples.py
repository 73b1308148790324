"""Regenerate the bundled sample files: ``python -m geometries.samples.make_samples``.

Deterministic: running it again reproduces the committed files byte for byte.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import tifffile
import trimesh

from ..generators import random_sphere_pack
from ..generators.vessels import bifurcation_surface

__all__ = ["make_sphere_pack", "make_vessel", "main"]

logger = logging.getLogger(__name__)

_FOLDER = Path(__file__).resolve().parent


def make_vessel(
    length: float = 8.0, radius: float = 1.0, narrowing: float = 0.5, sections: int = 48
) -> trimesh.Trimesh:
    """Return a closed tube along x (mm) whose radius dips by ``narrowing`` at mid-length."""
    z = np.linspace(0.0, length, 61)
    r = radius * (1 - narrowing * np.exp(-(((z - length / 2) / (0.12 * length)) ** 2)))
    # Radius 0 at both ends closes the surface of revolution (watertight caps).
    profile = np.column_stack([np.r_[0.0, r, 0.0], np.r_[0.0, z, length]])
    mesh = trimesh.creation.revolve(profile, sections=sections)
    # Cyclic axis permutation (z, x, y) -> (x, y, z) keeps the orientation of the triangles.
    mesh.vertices = mesh.vertices[:, [2, 0, 1]]
    return mesh


def make_sphere_pack() -> np.ndarray:
    """Return the 48³ sample pack as uint8 (x, y, z), 1 = solid."""
    geometry = random_sphere_pack((48, 48, 48), porosity=0.45, diameter=12, seed=1)
    return geometry.solid.astype(np.uint8)


def main(folder: Path = _FOLDER) -> None:
    """Write the sample files into ``folder``."""
    vessel = make_vessel()
    surface = bifurcation_surface()
    (folder / "vessel_bifurcation.stl").write_bytes(surface.export(file_type="stl"))
    (folder / "stenosed_vessel.stl").write_bytes(vessel.export(file_type="stl"))
    # TIFF stacks are (z, y, x): page k is the slice z = k.
    tifffile.imwrite(folder / "sphere_pack_48.tif", make_sphere_pack().transpose(2, 1, 0))
    logger.info("wrote samples to %s", folder)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
