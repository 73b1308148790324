"""Where a dashboard geometry comes from, and what it will cost before anything is allocated.

Three sources: a generator with its parameters (one ``param.Parameterized`` per generator, so
the panel builds its widgets from them), a sample shipped with the package, or uploaded bytes
(parsed by :func:`geometries.load` from memory; the file name only picks the format). A
:class:`GeometryPreview` tiles the mask on the host and reports porosity, tile utilisation
before and after the offset search and the memory the run will need.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import param

import geometries
from geometries import GeometryError, VoxelGeometry, generators
from solver.config import SimulationConfig
from solver.memory import precheck_memory
from solver.problem import Problem

from .estimates import specific_surface
from .geometry_doubts import geometry_doubts
from .openings import DRIVES, OpeningGroup, default_drive, drive_setup, driven_values

__all__ = [
    "GENERATORS", "GeneratorSpec", "SpherePack", "UploadOptions", "GeometryPreview",
    "make_preview", "config_for", "load_upload", "load_sample", "sample_names", "mid_slice",
    "DEFAULT_FORCE", "STL_OPENINGS", "default_drive",
]

#: Default body force (lattice units) along the flow axis: 5 kPa/m for water in 10 um voxels.
DEFAULT_FORCE = 5e-5


class GeneratorSpec(param.Parameterized):
    """A geometry generator and its parameters (sizes in voxels)."""

    def build(self) -> VoxelGeometry:
        """Generate the geometry."""
        raise NotImplementedError


class SpherePack(GeneratorSpec):
    """Random overlapping spheres at a target porosity, periodic in every direction."""

    size = param.Integer(48, bounds=(8, 512), doc="Edge of the cubic box, voxels.")
    porosity = param.Number(0.6, bounds=(0.2, 0.98), step=0.01, doc="Target pore fraction.")
    diameter = param.Number(12.0, bounds=(2.0, 256.0), doc="Sphere diameter, voxels.")
    seed = param.Integer(0, bounds=(0, None), doc="Random seed.")

    def build(self) -> VoxelGeometry:
        return generators.random_sphere_pack((self.size,) * 3, self.porosity, self.diameter,
                                             seed=self.seed)


class SphereArray(GeneratorSpec):
    """Simple, body- or face-centred cubic array of equal spheres (periodic unit cells)."""

    kind = param.Selector(objects=["sc", "bcc", "fcc"], default="sc", doc="Lattice of spheres.")
    cell = param.Integer(32, bounds=(4, 256), doc="Unit cell edge, voxels.")
    solid_fraction = param.Number(0.3, bounds=(0.01, 0.7), step=0.01,
                                  doc="Solid volume fraction (below the touching limit).")
    cells = param.Integer(1, bounds=(1, 8), doc="Unit cells per direction.")

    def build(self) -> VoxelGeometry:
        return generators.sphere_array(self.kind, self.cell, self.solid_fraction,
                                       cells=(self.cells,) * 3)


class SquareDuct(GeneratorSpec):
    """Straight duct of square cross-section along x with solid walls."""

    length = param.Integer(48, bounds=(4, 1024), doc="Length along x, voxels.")
    width = param.Integer(24, bounds=(2, 512), doc="Fluid width, voxels.")

    def build(self) -> VoxelGeometry:
        return generators.square_duct(self.length, self.width)


class CircularPipe(GeneratorSpec):
    """Straight pipe of circular cross-section along x."""

    length = param.Integer(48, bounds=(4, 1024), doc="Length along x, voxels.")
    diameter = param.Number(24.0, bounds=(2.0, 512.0), doc="Inner diameter, voxels.")

    def build(self) -> VoxelGeometry:
        return generators.circular_pipe(self.length, self.diameter)


class CylinderInChannel(GeneratorSpec):
    """Cylinder (axis along z) between plates at the y ends, flow along x."""

    length = param.Integer(96, bounds=(8, 2048), doc="Channel length along x, voxels.")
    height = param.Integer(48, bounds=(6, 1024), doc="Distance between the plates (y), voxels.")
    depth = param.Integer(8, bounds=(1, 512), doc="Extent along the cylinder axis (z), voxels.")
    diameter = param.Number(12.0, bounds=(1.0, 512.0), doc="Cylinder diameter, voxels.")

    def build(self) -> VoxelGeometry:
        return generators.cylinder_in_channel((self.length, self.height, self.depth),
                                              self.diameter)


class SphereInPipe(GeneratorSpec):
    """A sphere on the axis of a circular pipe along x."""

    length = param.Integer(64, bounds=(8, 1024), doc="Pipe length, voxels.")
    pipe_diameter = param.Number(32.0, bounds=(4.0, 512.0), doc="Pipe diameter, voxels.")
    sphere_diameter = param.Number(12.0, bounds=(1.0, 512.0), doc="Sphere diameter, voxels.")

    def build(self) -> VoxelGeometry:
        return generators.sphere_in_pipe(self.length, self.pipe_diameter, self.sphere_diameter)


class Channel(GeneratorSpec):
    """Plane channel: solid plates at both y ends, flow along x."""

    length = param.Integer(16, bounds=(2, 2048), doc="Length along x, voxels.")
    height = param.Integer(24, bounds=(3, 1024), doc="Plate distance incl. walls (y), voxels.")
    depth = param.Integer(8, bounds=(1, 1024), doc="Extent along z, voxels.")

    def build(self) -> VoxelGeometry:
        return generators.channel((self.length, self.height, self.depth), wall_axis=1)


#: Display name -> generator class.
GENERATORS: dict[str, type[GeneratorSpec]] = {
    "Random sphere pack": SpherePack,
    "Sphere array (SC/BCC/FCC)": SphereArray,
    "Square duct": SquareDuct,
    "Circular pipe": CircularPipe,
    "Cylinder in channel": CylinderInChannel,
    "Sphere in pipe": SphereInPipe,
    "Plane channel": Channel,
}


#: The STL unit choices shown to the user -> the loader's ``unit=``.
STL_UNITS = {"guess from size": "auto", "m": "m", "mm": "mm", "µm": "µm"}
#: How a vessel STL's openings are found -> the loader's ``openings=`` (lumen = fluid only).
STL_OPENINGS = {"open ends, else flat caps": "auto", "open ends (cut planes)": "loops",
                "flat end caps": "caps", "none (closed vessel)": "none"}


class UploadOptions(param.Parameterized):
    """How to read an uploaded file; only the options of its format are passed on."""

    stl_unit = param.Selector(objects=list(STL_UNITS), default="guess from size",
                              label="STL units",
                              doc="STL: unit of the file's coordinates (STL files carry none).")
    stl_resolution = param.Integer(96, bounds=(8, 1024), label="STL resolution (voxels)",
                                   doc="STL: voxels along the longest side of the surface "
                                       "(unused when a voxel size is given).")
    stl_inside = param.Selector(objects=["solid", "fluid"], default="solid",
                                label="STL surface encloses",
                                doc="STL: whether the closed surface encloses solid or fluid.")
    stl_openings = param.Selector(objects=list(STL_OPENINGS), default="open ends, else flat caps",
                                  label="STL openings (lumen = fluid)",
                                  doc="STL enclosing fluid: where flow enters and leaves a vessel; "
                                      "they become the inlets and outlets.")
    raw_shape = param.String("", label="RAW shape (nx, ny, nz)",
                             doc="RAW: nx, ny[, nz] in voxels (x fastest), e.g. 64,64,64.")
    raw_dtype = param.Selector(objects=["uint8", "uint16", "int16", "int32", "float32", "bool"],
                               default="uint8", label="RAW voxel type", doc="RAW: voxel type.")
    mat_variable = param.String("", label="MATLAB variable (.mat)",
                                doc="MAT: variable holding the volume (empty: the largest array).")
    pore_value = param.String("", label="Pore label (images)",
                              doc="Images: label of pore voxels (default: 0 = pore).")
    voxel_size_um = param.Number(0.0, bounds=(0, None), label="Voxel size (µm)",
                                 doc="Voxel size in micrometres (0 = from the file / unknown; "
                                     "STL: 0 = from the resolution).")

    def options(self, filename: str) -> dict:
        """Loader options for ``filename``'s format."""
        ext = filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
        out: dict = {}
        if self.voxel_size_um > 0:
            out["voxel_size"] = self.voxel_size_um * 1e-6
        if ext == "stl":
            out.update(inside=self.stl_inside, unit=STL_UNITS[self.stl_unit])
            if self.stl_inside == "fluid":
                out["openings"] = STL_OPENINGS[self.stl_openings]
            # A voxel size fixes the grid; the loader refuses both (B8).
            if "voxel_size" not in out:
                out["resolution"] = self.stl_resolution
            return out
        if ext == "raw":
            out.update(shape=_parse_shape(self.raw_shape), dtype=self.raw_dtype)
        if ext == "mat" and self.mat_variable.strip():
            out["variable"] = self.mat_variable.strip()
        if self.pore_value.strip():
            try:
                out["pore_value"] = float(self.pore_value)
            except ValueError:
                raise GeometryError(f"Pore value {self.pore_value!r} is not a number; "
                                    "enter the label of pore voxels, e.g. 0.") from None
        return out


def _parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(v) for v in text.replace("x", ",").split(",") if v.strip())
    except ValueError:
        shape = ()
    if len(shape) not in (2, 3) or min(shape) < 1:
        raise GeometryError(f"A .raw file needs its shape: enter 'nx, ny, nz' (got {text!r}).")
    return shape


def load_upload(data: bytes, filename: str, options: dict, max_bytes: int) -> VoxelGeometry:
    """Parse uploaded bytes (never a path); refuse files above ``max_bytes``."""
    if len(data) > max_bytes:
        raise GeometryError(
            f"{filename} is {len(data) / 1e6:.1f} MB, above the upload limit of "
            f"{max_bytes / 1e6:.0f} MB. Ask the server operator to raise "
            "POROUS_LBM_MAX_UPLOAD_MB.")
    geometry = geometries.load(bytes(data), filename=filename, **options)
    if options.get("openings") == "auto" and not geometry.openings:
        # A closed surface without flat caps: read as before the search (no wall layer padded
        # around the lumen, which would shut the box faces the body force drives through).
        geometry = geometries.load(bytes(data), filename=filename,
                                   **{**options, "openings": "none"})
    return geometry


def sample_names() -> list[str]:
    """Shipped sample geometries."""
    return geometries.samples.list_samples()


def load_sample(name: str) -> VoxelGeometry:
    """Load a shipped sample with its recommended options."""
    return geometries.samples.load_sample(name)


def mid_slice(solid: np.ndarray, axis: int = 2) -> np.ndarray:
    """Middle cut of a mask normal to ``axis`` (the mask itself in 2D)."""
    return solid if solid.ndim == 2 else np.take(solid, solid.shape[axis] // 2, axis=axis)


def config_for(geometry: VoxelGeometry, config: SimulationConfig) -> SimulationConfig:
    """Copy of ``config`` fitted to a geometry: lattice of its dimension, force along its flow."""
    values = {k: v for k, v in config.param.values().items() if k != "name"}
    if geometry.ndim == 2:
        values["lattice"] = "D2Q9"
    elif values["lattice"] == "D2Q9":
        values["lattice"] = "D3Q19"
    magnitude = float(np.linalg.norm(config.body_force))
    force = [0.0, 0.0, 0.0]
    force[geometry.flow_axis] = magnitude
    values["body_force"] = tuple(force)
    return SimulationConfig(**values)


#: Voxel edges the physical setup accepts, metres (1 nm to 1 m).
VOXEL_RANGE_M = (1e-9, 1.0)


def _check_voxel_size(voxel: float | None) -> None:
    """Refuse voxels outside :data:`VOXEL_RANGE_M` at preview, with the likely cause."""
    low, high = VOXEL_RANGE_M
    if voxel is None or low <= voxel <= high:
        return
    raise GeometryError(
        f"The voxels would be {voxel:.3g} m wide, outside {low:g} to {high:g} m: the file's "
        "unit is probably wrong (an STL in millimetres or micrometres read as metres?). "
        "Change STL units or enter the voxel size (µm), then preview again.")


@dataclass(frozen=True)
class GeometryPreview:
    """A geometry and what running it costs; memory in bytes, eta_t in [0, 1]."""

    geometry: VoxelGeometry
    config: SimulationConfig
    mid_slice: np.ndarray
    porosity: float
    surface: float
    n_fluid: int
    n_tiles: int
    eta_t_origin: float
    eta_t_best: float
    offset: tuple[int, ...]
    memory_bytes: int
    seconds: float
    #: The run's Problem, built once here: the runner reuses its tiling (one offset search per
    #: geometry) and the memory verdict (:func:`solver.memory.assess_memory`) asks about it.
    problem: Problem | None = None
    #: What the loader guessed or repaired, then doubts about the geometry, in user words.
    notes: tuple[str, ...] = ()
    #: True when a doubt says the run is unlikely to be what was meant (no fluid path...).
    doubtful: bool = False
    #: What drives the flow (one of :data:`app.openings.DRIVES`) and the openings table's rows.
    drive: str = next(iter(DRIVES))
    groups: tuple[OpeningGroup, ...] = ()
    #: The config values ``problem`` was built with: edited since, the problem is rebuilt.
    built_with: dict | None = None

    def current_problem(self) -> Problem | None:
        """``problem`` if the config is still the one it was built with, else None."""
        return self.problem if _values(self.config) == self.built_with else None


def _values(config: SimulationConfig) -> dict:
    return {k: v for k, v in config.param.values().items() if k != "name"}


def make_preview(geometry: VoxelGeometry, config: SimulationConfig,
                 drive: str | None = None) -> GeometryPreview:
    """Tile the geometry on the host (no device memory) and report its cost; ``drive`` (one of
    :data:`app.openings.DRIVES`, default: the openings of a vessel, else the body force) sets
    the openings and their defaults."""
    start = time.perf_counter()
    _check_voxel_size(geometry.voxel_size)
    drive = drive or default_drive(geometry)
    geometry, groups, openings = drive_setup(geometry, drive, config.initial_density)
    config = _driven(geometry, config_for(geometry, config), openings)
    solid = np.asarray(geometry.solid, dtype=bool)
    if solid.all():
        raise GeometryError("The geometry has no fluid voxel; choose another file or setting.")
    # Refused before tiling when even perfectly packed tiles cannot fit (the same verdict as
    # the runner's and the CLI's); the panel shows the message.
    precheck_memory(solid, config, config.backend).check()
    problem = Problem.from_config(solid, config, labels=geometry.labels)
    tiling = problem.tiling
    doubts = geometry_doubts(geometry, config.openings)
    return GeometryPreview(
        geometry=geometry, config=config, mid_slice=mid_slice(solid),
        porosity=float(geometry.porosity), surface=specific_surface(solid),
        n_fluid=int(tiling.n_fluid), n_tiles=int(tiling.n_tiles),
        eta_t_origin=tiling.eta_t_origin, eta_t_best=float(tiling.eta_t),
        offset=tuple(tiling.offset),
        memory_bytes=problem.tiled_state_bytes(),
        problem=problem,
        seconds=time.perf_counter() - start,
        notes=(*geometry.notes, *doubts), doubtful=bool(doubts),
        drive=drive, groups=groups, built_with=_values(config),
    )


def _driven(geometry: VoxelGeometry, config: SimulationConfig,
            openings: dict[int, dict]) -> SimulationConfig:
    """``config`` driven by ``openings`` (walls, no force), or by the body force again when it
    came from a run driven by openings (periodic faces, the default force if it had none)."""
    if openings:
        config.param.update(**driven_values(openings, geometry.ndim))
    elif config.openings:
        force = [0.0, 0.0, 0.0]
        force[geometry.flow_axis] = float(np.linalg.norm(config.body_force)) or DEFAULT_FORCE
        faces = [f"{a}_{s}" for a in "xyz"[: geometry.ndim] for s in ("min", "max")]
        config.param.update(openings={}, body_force=tuple(force),
                            **{f: "periodic" for f in faces},
                            **{f"{f}_value": None for f in faces})
    return config
