"""Loader for STL surfaces (binary or ASCII): parse with trimesh, voxelise by ray parity.

The grid covers the mesh's bounding box, centred on it, with cubic voxels: either
``resolution`` voxels along the longest box edge or an explicit ``voxel_size``. A voxel is
inside the surface when its centre is. ``inside="solid"`` treats the meshed body as an obstacle
in fluid (its solid voxels are labelled per connected body, so the solver can report drag per
object); ``inside="fluid"`` treats the mesh as a vessel wall whose lumen is the fluid.

``padding`` adds voxels around the box: fluid for ``inside="solid"`` (on all sides), solid for
``inside="fluid"`` (on all sides except the two faces of ``flow_axis``, so open vessel ends stay
open). Surfaces that are not watertight are voxelised by a majority vote of rays along x, y and
z, with a :class:`~geometries.errors.GeometryWarning`.

STL coordinates carry no unit: ``unit`` is ``"m"``, ``"mm"``, ``"µm"``, metres per file unit, or
``"auto"`` (the default), which guesses from the bounding box (rule in :mod:`geometries.units`).
What was guessed or doubtful (the unit, open edges) is stated in the geometry's ``notes``.

``openings`` (``inside="fluid"`` only, see :mod:`geometries.openings`) finds the vessel's openings
(open boundary loops, or flat caps of a closed surface, or the caps nearest to ``cap_points`` in
metres), closes the lumen at each opening plane and stores them in ``VoxelGeometry.openings``;
the box is then padded on every side (at least one solid layer).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
import scipy.ndimage as ndi

from ..errors import GeometryError, GeometryWarning
from ..openings.lumen import MODES, open_lumen
from ..units import length_unit
from ..voxel import VoxelGeometry

if TYPE_CHECKING:  # trimesh is imported where STL is read: `import geometries` stays light
    import trimesh
from ..voxelize import voxelize_triangles
from .options import VOXEL_SIZE, LoaderOption
from .source import (
    DEFAULT_MAX_VOXELS,
    Payload,
    build_geometry,
    check_voxel_count,
    parse_errors,
    positive_number,
)

__all__ = ["load_stl"]

logger = logging.getLogger(__name__)

_INSIDE = ("solid", "fluid")
_DEFAULT_RESOLUTION = 64


#: What a person chooses when reading an STL (:mod:`geometries.loaders.options`).
STL_OPTIONS = (
    LoaderOption("unit", "stl_unit", "STL units",
                 "STL: unit of the file's coordinates (STL files carry none).",
                 "guess from size",
                 choices={"guess from size": "auto", "m": "m", "mm": "mm", "µm": "µm"}),
    LoaderOption("resolution", "stl_resolution", "STL resolution (voxels)",
                 "STL: voxels along the longest side of the surface (unused when a voxel size "
                 "is given).", 96, bounds=(8, 1024), unless="voxel_size"),
    LoaderOption("inside", "stl_inside", "STL surface encloses",
                 "STL: whether the closed surface encloses solid or fluid.", "solid",
                 choices={"solid": "solid", "fluid": "fluid"}),
    LoaderOption("openings", "stl_openings", "STL openings (lumen = fluid)",
                 "STL enclosing fluid: where flow enters and leaves a vessel; they become the "
                 "inlets and outlets.", "open ends, else flat caps",
                 choices={"open ends, else flat caps": "auto", "open ends (cut planes)": "loops",
                          "flat end caps": "caps", "none (closed vessel)": "none"},
                 requires=("inside", "fluid")),
    VOXEL_SIZE,
)


def load_stl(
    payload: Payload,
    *,
    resolution: int | None = None,
    voxel_size: float | None = None,
    inside: Literal["solid", "fluid"] = "solid",
    padding: int = 0,
    flow_axis: int = 0,
    unit: float | str = "auto",
    name: str = "",
    max_voxels: int = DEFAULT_MAX_VOXELS,
    openings: Literal["none", "auto", "loops", "caps"] = "none",
    cap_points: Sequence[Sequence[float]] | None = None,
) -> VoxelGeometry:
    """Voxelise an STL surface; ``voxel_size`` in metres, ``unit`` 'm', 'mm', 'µm' or 'auto'."""
    if openings not in MODES:
        raise GeometryError(f"openings must be one of {MODES}, got {openings!r}.")
    if openings != "none" and inside != "fluid":
        raise GeometryError(
            "openings= finds where fluid enters a vessel, so it needs inside='fluid'."
        )
    if inside not in _INSIDE:
        raise GeometryError(f"inside must be 'solid' or 'fluid', got {inside!r}.")
    padding = _non_negative_int(padding, "padding")
    if isinstance(flow_axis, bool) or flow_axis not in (0, 1, 2):
        raise GeometryError(f"flow_axis must be 0, 1 or 2 for an STL geometry, got {flow_axis!r}.")
    mesh = _read_mesh(payload.data)
    chosen = length_unit(unit, tuple(float(v) for v in mesh.extents))
    # A unit the user chose needs no comment; a guess is stated so that it can be corrected.
    notes = [chosen.describe()] if chosen.guessed else []
    unit = chosen.metres
    h = _mesh_voxel(mesh.extents, resolution, voxel_size, unit)
    lumen = None
    if openings != "none":
        lumen = open_lumen(mesh, openings, voxel=h, unit=unit, cap_points=cap_points)
        mesh = lumen.mesh
    pad = np.full(3, padding)
    if inside == "fluid":
        pad[flow_axis] = 0
    if lumen is not None:
        # The openings are the only ways out: a solid layer at least wraps the lumen everywhere.
        pad = np.full(3, max(padding, 1))
    shape, corner = _grid(mesh.bounds, h, pad)
    check_voxel_count(shape, max_voxels)
    directions = 1 if mesh.is_watertight else 3
    if directions == 3:
        notes.append(_warn_open(mesh))
    enclosed = voxelize_triangles((mesh.triangles - corner) / h - 0.5, shape, directions=directions)
    if not enclosed.any():
        raise GeometryError(
            "The STL surface encloses no voxel centre at this resolution. Increase resolution= "
            "(or lower voxel_size=) and check that the surface is closed."
        )
    found = ()
    if lumen is not None:
        enclosed, found = lumen.close(enclosed, corner, unit)
    labels = None
    if inside == "solid":
        # Face connectivity matches the solver's notion of touching voxels.
        labels = ndi.label(enclosed)[0].astype(np.int32)
    solid = enclosed if inside == "solid" else ~enclosed
    geometry = build_geometry(
        solid,
        max_voxels=max_voxels,
        voxel_size=float(h * unit),
        origin=tuple(float(c) for c in corner * unit),
        flow_axis=flow_axis,
        labels=labels,
        name=name,
    )
    geometry.notes = tuple(notes)
    return dataclasses.replace(geometry, openings=found) if found else geometry


def _read_mesh(data: bytes) -> trimesh.Trimesh:
    """Parse STL bytes into a processed mesh; refuse empty, NaN or zero-area surfaces."""
    import trimesh

    if not data:
        raise GeometryError("The STL data is empty. Upload a non-empty .stl file.")
    with parse_errors("STL"):
        raw = trimesh.exchange.stl.load_stl(io.BytesIO(data))
    if "vertices" not in raw or len(raw["faces"]) == 0:
        raise GeometryError("The STL file holds no triangles. Export the surface again.")
    vertices = np.asarray(raw["vertices"], dtype=np.float64)
    faces = np.asarray(raw["faces"], dtype=np.int64)
    bad = ~np.isfinite(vertices).all(axis=1)
    if bad.any():
        n_bad = int(bad[faces].any(axis=1).sum())
        raise GeometryError(
            f"{n_bad} of {len(faces)} STL triangles have NaN or infinite coordinates. "
            "Repair the mesh (e.g. in MeshLab or Blender) and export it again."
        )
    tri = vertices[faces]
    area = np.linalg.norm(np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0]), axis=1)
    if not (area > 0).any():
        raise GeometryError(
            f"All {len(faces)} STL triangles have zero area, so the surface encloses nothing. "
            "Export the surface again."
        )
    logger.debug("STL: %d triangles, %d of zero area", len(faces), int((area == 0).sum()))
    with parse_errors("STL"):
        mesh = trimesh.Trimesh(vertices=vertices, faces=faces, process=True)
        if not mesh.is_watertight:
            # Patches holes of one missing triangle or quad, which are common export slips.
            trimesh.repair.fill_holes(mesh)
    return mesh


def _grid(bounds: np.ndarray, h: float, pad: np.ndarray) -> tuple[tuple[int, ...], np.ndarray]:
    """Return (shape, lower corner in STL units) of a grid of voxel ``h`` centred on ``bounds``."""
    lo, hi = bounds
    counts = np.maximum(np.ceil((hi - lo) / h - 1e-6), 1).astype(int)
    corner = lo + ((hi - lo) - counts * h) / 2 - pad * h
    return tuple(int(n) for n in counts + 2 * pad), corner


def _mesh_voxel(
    extent: np.ndarray, resolution: int | None, voxel_size: float | None, unit: float
) -> float:
    """Return the voxel edge in STL units from ``resolution`` or ``voxel_size`` (metres)."""
    if resolution is not None and voxel_size is not None:
        raise GeometryError("Give either resolution= or voxel_size=, not both.")
    longest = float(extent.max())
    if not longest > 0 or not np.isfinite(longest):
        raise GeometryError(
            "The STL surface has no extent (all vertices coincide). Export the surface again."
        )
    if voxel_size is not None:
        return positive_number(voxel_size, "voxel_size") / unit
    steps = (
        _DEFAULT_RESOLUTION if resolution is None else _non_negative_int(resolution, "resolution")
    )
    if steps < 1:
        raise GeometryError("resolution must be at least 1 voxel along the longest axis.")
    return longest / steps


def _warn_open(mesh: trimesh.Trimesh) -> str:
    """Warn that the surface is not watertight and how it is handled; return the message."""
    import trimesh

    edges = trimesh.grouping.group_rows(mesh.edges_sorted, require_count=1)
    message = (
        f"The STL surface is not watertight ({len(edges)} open edges); voxels are classified by "
        "a majority vote of rays along x, y and z. Check the result, or repair the mesh."
    )
    warnings.warn(message, GeometryWarning, stacklevel=4)
    return message


def _non_negative_int(value: object, what: str) -> int:
    """Return ``value`` as a non-negative int or raise GeometryError."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise GeometryError(f"{what} must be a non-negative integer (voxels), got {value!r}.")
    return int(value)
