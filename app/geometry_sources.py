"""Where a dashboard geometry comes from, and what it will cost before anything is allocated.

Three sources: a generator with its parameters (one ``param.Parameterized`` per generator, so
the panel builds its widgets from them), a sample shipped with the package, or uploaded bytes
(parsed by :func:`geometries.load` from memory; the file name only picks the format) with the
options its loader declares (:class:`UploadOptions`, built from those declarations). A
:class:`GeometryPreview` tiles the mask on the host and reports porosity, tile utilisation
before and after the offset search and the memory the run will need.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import param

import geometries
from geometries import GeometryError, VoxelGeometry, generators
from geometries.loaders import LOADER_OPTIONS, LoaderOption, format_of, loader_options
from solver.config import SimulationConfig
from solver.memory import precheck_memory
from solver.problem import Problem

from .estimates import specific_surface
from .geometry_doubts import geometry_doubts
from .openings import DRIVES, OpeningGroup, default_drive, drive_setup, driven_values

__all__ = [
    "GENERATORS", "GeneratorSpec", "SpherePack", "UploadOptions", "UploadOptionsBase",
    "upload_options_type", "GeometryPreview",
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


#: How a vessel STL's openings are found: shown text -> the loader's ``openings=`` (declared by
#: the STL loader; lumen = fluid only).
STL_OPENINGS = dict(next(o for o in LOADER_OPTIONS["stl"] if o.keyword == "openings").choices)


class UploadOptionsBase(param.Parameterized):
    """How to read an uploaded file: one parameter per option the loaders declare
    (:data:`geometries.loaders.LOADER_OPTIONS`); only the options of its format are passed on."""

    #: Format -> the declarations the parameters were built from.
    declared: dict[str, tuple[LoaderOption, ...]] = {}

    def options(self, filename: str) -> dict:
        """Loader options for ``filename``'s format (a format unknown by its name: the
        options every loader takes)."""
        fmt = format_of(filename)
        if fmt in self.declared:
            declared = self.declared[fmt]
        else:
            shared = set.intersection(*({o.field for o in d} for d in self.declared.values()))
            declared = tuple(o for o in _fields(self.declared) if o.field in shared)
        return loader_options(declared, self.param.values())


def upload_options_type(
        declared: Mapping[str, Sequence[LoaderOption]] | None = None) -> type[UploadOptionsBase]:
    """A :class:`UploadOptionsBase` class with a parameter per declared option (default: the
    loaders' :data:`~geometries.loaders.LOADER_OPTIONS`): a selector for choices, a number or
    a text otherwise; options of one format first, those many formats share last."""
    declared = {fmt: tuple(d) for fmt, d in (declared or LOADER_OPTIONS).items()}
    params = {o.field: _parameter(o) for o in _fields(declared)}
    cls = param.parameterized_class("UploadOptions", params, bases=UploadOptionsBase)
    cls.declared = declared
    return cls


def _fields(declared: Mapping[str, Sequence[LoaderOption]]) -> list[LoaderOption]:
    """One declaration per field, in format order, fields of several formats last."""
    seen: dict[str, LoaderOption] = {}
    users: dict[str, int] = {}
    for options in declared.values():
        for option in options:
            seen.setdefault(option.field, option)
            users[option.field] = users.get(option.field, 0) + 1
    return sorted(seen.values(), key=lambda o: users[o.field] > 1)


def _parameter(option: LoaderOption) -> param.Parameter:
    """The parameter a person enters ``option`` with."""
    common = dict(default=option.default, label=option.label, doc=option.doc)
    if option.choices is not None:
        return param.Selector(objects=list(option.choices), **common)
    if isinstance(option.default, bool):
        return param.Boolean(**common)
    if isinstance(option.default, int):
        return param.Integer(bounds=option.bounds, **common)
    if isinstance(option.default, float):
        return param.Number(bounds=option.bounds, **common)
    return param.String(**common)


#: The upload options of the loaders as declared.
UploadOptions = upload_options_type()


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
