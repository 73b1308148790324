"""Small sample geometries shipped with the package (see README.md in this folder).

Names are validated against the fixed list, so a name from a user never becomes a path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import GeometryError
from ..loaders import load
from ..voxel import VoxelGeometry

__all__ = ["SAMPLES", "list_samples", "load_sample", "sample_path"]

_FOLDER = Path(__file__).resolve().parent

#: Sample file name → (one-line description, recommended options for :func:`geometries.load`).
SAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "stenosed_vessel.stl": (
        "Closed vessel segment (mm) along x with a 50 % stenosis; the lumen is the fluid.",
        {"inside": "fluid", "flow_axis": 0, "unit": 1e-3, "resolution": 96},
    ),
    "sphere_pack_48.tif": (
        "48³ random sphere pack (d = 12 voxels, porosity ≈ 0.45), uint8 TIFF stack, 1 = solid.",
        {},
    ),
    "vessel_bifurcation.stl": (
        "Bifurcating vessel (mm), open at one inlet (-x) and two outlets at ±35°; the lumen is "
        "the fluid, closed at its three openings.",
        {"inside": "fluid", "flow_axis": 0, "unit": 1e-3, "resolution": 96, "openings": "loops"},
    ),
}


def list_samples() -> list[str]:
    """Return the names of the bundled sample files."""
    return sorted(SAMPLES)


def sample_path(name: str) -> Path:
    """Return the path of the bundled sample ``name`` (one of :func:`list_samples`)."""
    if name not in SAMPLES:
        raise GeometryError(f"Unknown sample {name!r}; choose one of {list_samples()}.")
    return _FOLDER / name


def load_sample(name: str, **options: Any) -> VoxelGeometry:
    """Load the sample ``name`` with its recommended options (``options`` override them)."""
    path = sample_path(name)
    return load(path, **{**SAMPLES[name][1], **options})
