"""Case files: one YAML or JSON document describing a headless run.

A case has four sections (only ``geometry`` is required)::

    name: sphere-pack                  # optional label, default: the file name
    geometry:                          # exactly one of sample / file / generator
      sample: NAME                     # a shipped sample (geometries.samples)
      file: PATH                       # relative to the case file; loader options in `options`
      generator: random_sphere_pack    # a function of geometries.generators ...
      parameters: {shape: [64, 64, 64], porosity: 0.6}   # ... and its keyword arguments
      options: {}                      # keyword options of geometries.load (file / sample)
      voxel_size: 1.0e-6               # optional override, metres
      origin: [0, 0, 0]                # optional override, metres
    config: {tau: 0.8, body_force: [1.0e-6, 0, 0]}     # SimulationConfig parameters; without
                                       # tau, a case driven through its openings in SI gets the
                                       # tau of solver.lattice_parameters (Mach target)
    run: {max_steps: 5000, output_interval: 500}       # RunControls parameters
    permeability: {protocol: both, axes: all}          # optional: solver.rock protocol run
    openings: [{id: 1, kind: velocity, flow_rate: 1.0e-7}, {id: 2, kind: pressure}]  # SI,
                                       # by id or by `at: [x, y, z]` (solver.opening_specs)

Files are parsed with ``yaml.safe_load`` or ``json`` only. Every section is validated by ``param``;
an unknown key or a bad value raises :class:`CaseError` naming the key and how to fix it.
PyYAML reads ``1e-5`` (no dot) as a string, so numeric parameters accept numeric strings.
"""

from __future__ import annotations

import inspect
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import param
import yaml

from .config import SimulationConfig
from .monitor import DIVERGENCE_SPEED, FLOW_TOLERANCE, K_TOLERANCE

__all__ = ["CaseError", "Case", "GeometrySpec", "RunControls", "check_output_folder", "load_case",
           "parse_case", "load_geometry", "region_source", "REGION_OPTIONS"]

GEOMETRY_SOURCES = ("sample", "file", "generator")
GEOMETRY_KEYS = (*GEOMETRY_SOURCES, "parameters", "options", "voxel_size", "origin")
TOP_KEYS = ("name", "description", "geometry", "config", "run", "permeability", "openings",
            "probes", "lines", "frames")


class CaseError(ValueError):
    """A case file is unreadable or invalid; the message names the key and the fix."""


class RunControls(param.Parameterized):
    """How long a headless run goes, what it writes and when it stops (lattice units)."""

    max_steps = param.Integer(default=10000, bounds=(1, None), doc="Stop after this many steps.")
    output_interval = param.Integer(default=500, bounds=(1, None),
                                    doc="Steps between CSV rows and .vti files.")
    checkpoint_interval = param.Integer(default=5000, bounds=(0, None),
                                        doc="Steps between checkpoints; 0 = only at the end.")
    check_interval = param.Integer(default=100, bounds=(1, None),
                                   doc="Steps between divergence checks (NaN/Inf, max |u|).")
    warmup_cycles = param.Integer(default=2, bounds=(0, None),
                                  doc="Heart cycles of a waveform inlet before TAWSS, OSI and "
                                      "RRT accumulate.")
    cycle_samples = param.Integer(default=32, bounds=(4, None),
                                  doc="Samples per heart cycle of the flows, pressures and wall "
                                      "shear stress.")
    cycle_tolerance = param.Number(default=0.01, bounds=(0, None),
                                   doc="Periodic convergence: two consecutive cycles' flows and "
                                       "pressures differ by less than this times their range "
                                       "(0 = never stop on it).")
    windkessel_every = param.Integer(default=10, bounds=(1, None),
                                     doc="Steps between updates of Windkessel outlet pressures "
                                         "(one host read of the flow rates each).")
    convergence = param.Number(default=1e-6, bounds=(0, None),
                               doc="Stop when the relative change of the mean velocity over "
                                   "one output interval (the residual per step times "
                                   "output_interval) is below this; 0 = never. A run driven "
                                   "through openings stops on flow_tolerance instead.")
    u_limit = param.Number(default=DIVERGENCE_SPEED, bounds=(0, 1),
                           inclusive_bounds=(False, True),
                           doc="Maximum speed |u| (lattice units) before the run counts as "
                               "diverged.")
    k_tolerance = param.Number(default=K_TOLERANCE, bounds=(0, 1),
                               inclusive_bounds=(False, True),
                               doc="k counts as converged when it changes by less than this "
                                   "(relative) per 1000 steps; 1e-3 = 0.1 %.")
    flow_tolerance = param.Number(default=FLOW_TOLERANCE, bounds=(0, 1),
                                  doc="A flow through openings is steady (and the run stops) "
                                      "when its flow rates, pressures and pressure drop change "
                                      "by less than this (relative) per flow_window steps; "
                                      "0 = never stop on it.")
    flow_window = param.Integer(default=None, allow_None=True, bounds=(1, None),
                                doc="Steps over which the openings' steady state is judged; "
                                    "default: from the flow (5 % of one flow-through or "
                                    "viscous time, at least 1000; solver.monitor."
                                    "steady_window).")
    output = param.String(default="", doc="Output folder (relative to the working directory); "
                                          "default runs/<case name>.")
    vti = param.Boolean(default=True, doc="Write rho and u as .vti at every output interval.")
    viscosity = param.Number(default=None, allow_None=True, bounds=(0, None),
                             inclusive_bounds=(False, True),
                             doc="Physical kinematic viscosity (m^2/s), to report the time step "
                                 "and velocities in SI units when the voxel size is known.")
    density = param.Number(default=1000.0, bounds=(0, None), inclusive_bounds=(False, True),
                           doc="Physical fluid density (kg/m^3) for pressures in Pa.")


@dataclass
class GeometrySpec:
    """Where the geometry comes from: a sample name, a file path or a generator call."""

    source: str
    target: str
    parameters: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    voxel_size: float | None = None
    origin: tuple[float, ...] | None = None


@dataclass
class Case:
    """A parsed case: geometry recipe, simulation configuration and run controls."""

    name: str
    geometry: GeometrySpec
    config: SimulationConfig
    run: RunControls
    path: Path | None = None
    permeability: Any = None  # solver.rock.PermeabilitySettings when the case asks for one
    #: SI entries of the `openings` section (solver.opening_specs), resolved on the geometry.
    openings: list = field(default_factory=list)
    #: Whether the case set `config.tau`; without it an opening-driven case in SI gets the tau
    #: chosen by :func:`solver.lattice_parameters.choose_lattice`.
    tau_given: bool = True
    #: Point probes and lines (solver.probes.ProbeSet, voxel indices), written as CSV in SI.
    probes: Any = None
    #: Slice frames written as PNG every so many steps (solver.slice_frames.FrameSettings).
    frames: Any = None


#: Largest case file read (bytes): a case is a page of text; more is a mistake or an attack.
MAX_CASE_BYTES = 1 << 20
#: Deepest nesting of lists and mappings in a case file (a case needs 4).
MAX_CASE_DEPTH = 32
#: Longest case name (characters); it becomes a folder name and a label.
MAX_NAME_CHARS = 200
#: Folders under which run outputs may never go (kernel interfaces, not storage).
_SYSTEM_FOLDERS = (Path("/proc"), Path("/sys"), Path("/dev"))


class _CaseLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases: a few lines of nested ``*refs`` expand exponentially."""

    def compose_node(self, parent, index):  # noqa: ANN001, ANN201 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise CaseError(
                f"line {mark.line + 1}: YAML aliases (*name) are not allowed in case files; "
                "write the value out in full."
            )
        return super().compose_node(parent, index)


def load_case(path: str | Path) -> Case:
    """Read and validate a ``.yaml``/``.yml``/``.json`` case file (at most 1 MiB, no aliases)."""
    path = Path(path)
    try:
        text = read_regular_file(path, MAX_CASE_BYTES, "case file").decode()
    except OSError as exc:
        raise CaseError(f"Cannot read case file {path}: {exc.strerror}; check the path.") from exc
    except UnicodeDecodeError as exc:
        raise CaseError(f"Case file {path} is not UTF-8 text ({exc.reason}).") from exc
    is_json = path.suffix.lower() == ".json"
    try:
        data = json.loads(text) if is_json else yaml.load(text, Loader=_CaseLoader)  # noqa: S506
        _check_depth(data, str(path))
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise CaseError(f"{path} is not valid {'JSON' if is_json else 'YAML'}: "
                        f"{_syntax_error(exc)}; fix the syntax there.") from exc
    except RecursionError:  # [[[[...]]]] 20,000 deep: the parsers recurse per level
        raise CaseError(f"{path} nests lists or mappings too deeply to parse; a case is "
                        f"at most {MAX_CASE_DEPTH} levels deep.") from None
    case = parse_case(data, base=path.parent, source=str(path), default_name=path.stem)
    case.path = path
    return case


def read_regular_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, else CaseError.

    A FIFO blocked ``open`` forever and ``/dev/zero`` was read until memory ran out: the file
    is opened without blocking, checked to be a regular file, and read to ``limit`` + 1 bytes.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CaseError(f"The {what} {path} is not a regular file (a pipe, device or "
                            "folder); give the path of a file.")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise CaseError(f"The {what} {path} is larger than {limit >> 10} KiB; a case is a short "
                        "text file: put data in a geometry file and name it.")
    return data


def _check_depth(data: Any, source: str, depth: int = 0) -> None:
    """Refuse data nested deeper than MAX_CASE_DEPTH (the checks below recurse too)."""
    if depth > MAX_CASE_DEPTH:
        raise CaseError(f"{source} nests lists or mappings more than {MAX_CASE_DEPTH} levels "
                        "deep; a case is a few levels deep.")
    children = data.values() if isinstance(data, dict) else data if isinstance(data, list) else ()
    for child in children:
        _check_depth(child, source, depth + 1)


def _syntax_error(exc: Exception) -> str:
    """One line: where the parser stopped and why."""
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem


def parse_case(data: Any, base: Path = Path("."), source: str = "case",
               default_name: str = "case") -> Case:
    """Validate a case given as a mapping; relative geometry paths are resolved against base."""
    if not isinstance(data, dict):
        raise CaseError(f"{source}: a case must be a mapping with the keys {list(TOP_KEYS)}, "
                        f"got {type(data).__name__}.")
    _check_keys(data, TOP_KEYS, source, "top level")
    if "geometry" not in data:
        raise CaseError(f"{source}: the `geometry` section is missing; add one with one of "
                        f"{list(GEOMETRY_SOURCES)}.")
    config = _build(SimulationConfig, _section(data, "config", source), source, "config")
    try:
        config.check()
    except ValueError as exc:
        raise CaseError(f"{source}: config: {exc}") from exc
    name = data.get("name") or default_name
    if not isinstance(name, str | int | float) or len(str(name)) > MAX_NAME_CHARS:
        raise CaseError(f"{source}: `name` must be a short text (at most {MAX_NAME_CHARS} "
                        "characters), e.g. name: sphere-pack.")
    permeability = None
    if "permeability" in data:
        from .rock.settings import PermeabilitySettings

        values = PermeabilitySettings.from_mapping(_section(data, "permeability", source))
        permeability = _build(PermeabilitySettings, values, source, "permeability")
    openings = []
    if data.get("openings") is not None:
        from .opening_specs import parse_opening_specs

        try:
            openings = parse_opening_specs(data["openings"], source, base)
        except ValueError as exc:
            raise CaseError(str(exc)) from exc
    from .probes import probe_set_from_specs

    try:
        probes = probe_set_from_specs(data.get("probes"), data.get("lines"), source)
    except ValueError as exc:
        raise CaseError(str(exc)) from exc
    from .slice_frames import frame_settings

    try:
        frames = frame_settings(data.get("frames"), source)
    except ValueError as exc:
        raise CaseError(str(exc)) from exc
    return Case(
        name=str(name),
        openings=openings,
        tau_given="tau" in _section(data, "config", source),
        probes=probes,
        frames=frames,
        geometry=_geometry_spec(data["geometry"], base, source),
        config=config,
        run=_build(RunControls, _section(data, "run", source), source, "run"),
        permeability=permeability,
    )


def _section(data: dict, key: str, source: str) -> dict:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise CaseError(f"{source}: `{key}` must be a mapping of parameter: value, "
                        f"got {type(value).__name__}.")
    return value


def _check_keys(data: dict, valid: tuple[str, ...] | list[str], source: str, where: str) -> None:
    unknown = sorted(str(k) for k in data if k not in valid)
    if unknown:
        raise CaseError(f"{source}: unknown key(s) {unknown} in {where}; valid keys are "
                        f"{sorted(valid)}.")


def _build(cls: type[param.Parameterized], values: dict, source: str, section: str):
    names = [n for n in cls.param if n != "name"]
    _check_keys(values, names, source, f"`{section}`")
    obj = cls()
    for key, value in values.items():
        spec = cls.param[key]
        try:
            setattr(obj, key, _coerce(spec, value))
        except (ValueError, TypeError) as exc:
            raise CaseError(f"{source}: `{section}.{key}: {value!r}` is invalid: {exc} "
                            f"Fix: {_hint(spec)}") from exc
    return obj


def _coerce(spec: param.Parameter, value: Any) -> Any:
    """Numeric strings to numbers (YAML 1.1 reads 1e-5 as text); lists to tuples."""
    if isinstance(spec, param.NumericTuple) and isinstance(value, list | tuple):
        items = [_number(v) for v in value]
        if spec.length == 3 and len(items) == 2:
            items.append(0.0)  # 2D cases may give (Fx, Fy)
        return tuple(items)
    if isinstance(spec, param.Dict) and isinstance(value, dict):  # JSON keys are text: "1" -> 1
        return {int(k) if str(k).lstrip("-").isdigit() else k: v for k, v in value.items()}
    if isinstance(spec, param.Integer) and isinstance(value, bool):
        raise ValueError(f"{value!r} is a yes/no value, not a whole number.")  # param takes it
    if isinstance(spec, param.Integer) and isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(spec, param.Number) and not isinstance(spec, param.Integer):
        return _number(value)
    return value


def _number(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _hint(spec: param.Parameter) -> str:
    if isinstance(spec, param.Selector):
        choice = f"use one of {list(spec.objects)}"
    elif isinstance(spec, param.NumericTuple):
        choice = f"use a list of {spec.length} numbers"
    elif isinstance(spec, param.Boolean):
        choice = "use true or false"
    elif isinstance(spec, param.Number):
        lo, hi = spec.bounds or (None, None)
        kind = "an integer" if isinstance(spec, param.Integer) else "a number"
        choice = f"use {kind}" + (f" >= {lo}" if lo is not None else "") + (
            f" <= {hi}" if hi is not None else "")
    else:
        choice = "use a valid value"
    return f"{choice} ({spec.doc})"


def _geometry_spec(data: Any, base: Path, source: str) -> GeometrySpec:
    if isinstance(data, str):
        data = {"sample": data}
    if not isinstance(data, dict):
        raise CaseError(f"{source}: `geometry` must be a mapping with one of "
                        f"{list(GEOMETRY_SOURCES)}.")
    _check_keys(data, GEOMETRY_KEYS, source, "`geometry`")
    given = [k for k in GEOMETRY_SOURCES if k in data]
    if len(given) != 1:
        raise CaseError(f"{source}: `geometry` needs exactly one of {list(GEOMETRY_SOURCES)}, "
                        f"got {given or 'none'}.")
    kind = given[0]
    target = str(data[kind])
    if kind == "file":
        target = str((base / target).resolve())
    for key in ("parameters", "options"):
        if not isinstance(data.get(key) or {}, dict):
            raise CaseError(f"{source}: `geometry.{key}` must be a mapping of name: value.")
    if kind == "generator" and data.get("options"):
        raise CaseError(f"{source}: `geometry.options` are loader options; a generator takes "
                        "`geometry.parameters`.")
    if kind != "generator" and data.get("parameters"):
        raise CaseError(f"{source}: `geometry.parameters` belong to a generator; for a "
                        f"{kind} use `geometry.options`.")
    voxel_size = data.get("voxel_size")
    origin = data.get("origin")
    try:
        voxel_size = None if voxel_size is None else float(voxel_size)
        origin = None if origin is None else tuple(float(v) for v in origin)
    except (TypeError, ValueError) as exc:
        raise CaseError(f"{source}: `geometry.voxel_size` must be a number, one edge in metres: "
                        "cubic voxels (resample an anisotropic image first), and "
                        f"`geometry.origin` a list of numbers (metres): {exc}") from exc
    _check_voxel_size(source, voxel_size)
    return GeometrySpec(kind, target, _tuples(data.get("parameters") or {}),
                        data.get("options") or {}, voxel_size, origin)


#: Voxel edges a case may state, metres (the app's upload accepts the same range).
VOXEL_RANGE_M = (1e-9, 1.0)


def _check_voxel_size(source: str, voxel_size: float | None) -> None:
    """Refuse a voxel edge outside :data:`VOXEL_RANGE_M`: most likely micrometres or
    millimetres written where metres are meant."""
    low, high = VOXEL_RANGE_M
    if voxel_size is None or low <= voxel_size <= high:
        return
    hint = (f"a voxel of {voxel_size:g} µm is {voxel_size * 1e-6:g}, of {voxel_size:g} mm "
            f"{voxel_size * 1e-3:g}" if voxel_size > high else "a voxel of 1 µm is 1e-6")
    raise CaseError(f"{source}: `geometry.voxel_size: {voxel_size:g}` is {voxel_size:g} m per "
                    f"voxel, outside 1 nm to 1 m. It is in metres: {hint}.")


def _tuples(values: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


def _generator_names(module) -> list[str]:
    """Public functions of ``module`` that return a VoxelGeometry."""
    names = []
    for name in getattr(module, "__all__", []):
        func = getattr(module, name)
        if callable(func) and "VoxelGeometry" in str(inspect.signature(func).return_annotation):
            names.append(name)
    return sorted(names)


def load_geometry(spec: GeometrySpec):
    """Build the VoxelGeometry a spec names (loads a file, a sample, or calls a generator)."""
    import geometries
    from geometries import generators, samples

    if spec.source == "generator":
        names = _generator_names(generators)
        if spec.target not in names:
            raise CaseError(f"Unknown generator {spec.target!r}; choose one of {names}.")
        func = getattr(generators, spec.target)
        try:
            inspect.signature(func).bind(**spec.parameters)
        except TypeError as exc:
            raise CaseError(f"Generator {spec.target}: {exc}; its parameters are "
                            f"{inspect.signature(func)}.") from exc
        geometry = func(**spec.parameters)
    else:
        if spec.source == "sample":
            valid = list(samples.list_samples())
            if spec.target not in valid:
                raise CaseError(f"Unknown sample {spec.target!r}; choose one of {valid}.")
            geometry = samples.load_sample(spec.target, **spec.options)
        else:
            geometry = geometries.load(spec.target, **spec.options)
    if spec.voxel_size is not None or spec.origin is not None:
        geometry = geometry.in_frame(spec.voxel_size, spec.origin)
    return geometry


#: Loader options an image file read by slabs honours, per suffix (segmentation, a raw
#: file's layout); the geometry's frame and name are taken as the whole-image loader takes them.
REGION_OPTIONS = {
    ".npy": {"pore_value", "threshold", "pore_below"},
    ".raw": {"pore_value", "threshold", "pore_below", "shape", "dtype", "byte_order",
             "header_bytes", "order"},
    ".tif": {"pore_value", "threshold", "pore_below"},
    ".tiff": {"pore_value", "threshold", "pore_below"},
}
#: Options of the geometry's frame and name (not the voxels), and the loader's size limit.
_FRAME_OPTIONS = ("voxel_size", "flow_axis", "name", "max_voxels")


def region_source(spec: GeometrySpec) -> tuple[Any, dict[str, Any] | str]:
    """The geometry of ``spec`` as a region source read slab by slab
    (:class:`geometries.regions.ImageRegions`: a ``.npy`` or ``.raw`` file;
    :class:`~geometries.regions.TiffRegions`: a TIFF stack of 2D pages) and the frame of
    the geometry the whole-image loader would make of it (voxel_size, origin, flow_axis,
    name); or None and why it must be read whole (a generator, a sample, another format or
    a loader option only the whole image allows)."""
    if spec.source != "file":
        return None, f"a {spec.source} geometry is made whole in memory"
    path = Path(spec.target)
    suffix = path.suffix.lower()
    if suffix not in REGION_OPTIONS:
        return None, f"{suffix or 'this'} files are read whole (slab reads: .npy, .raw, .tif)"
    options = dict(spec.options)
    frame = {k: options.pop(k) for k in _FRAME_OPTIONS if k in options}
    other = sorted(set(options) - REGION_OPTIONS[suffix])
    if other:
        return None, f"the loader option(s) {other} read the whole image"
    from geometries.errors import GeometryError
    from geometries.loaders.source import DEFAULT_MAX_VOXELS, check_voxel_count
    from geometries.regions import ImageRegions, TiffRegions

    if suffix in (".tif", ".tiff"):
        try:
            source = TiffRegions(path, **options)
        except GeometryError as exc:  # e.g. one 2D page: the loader reads it
            return None, f"the TIFF is not a stack of 2D pages read by slabs ({exc})"
    else:
        source = ImageRegions(path, **options)
    check_voxel_count(source.shape, frame.get("max_voxels", DEFAULT_MAX_VOXELS))
    origin = spec.origin if spec.origin is not None else (0.0,) * len(source.shape)
    voxel_size = next((v for v in (spec.voxel_size, frame.get("voxel_size"),
                                   getattr(source, "voxel_size", None)) if v is not None), None)
    return source, {"voxel_size": voxel_size, "origin": tuple(float(o) for o in origin),
                    "flow_axis": int(frame.get("flow_axis", 0)),
                    "name": frame.get("name") or path.name}


def check_output_folder(path: str | Path) -> Path:
    """Return the run output folder if it can be created and written, else raise CaseError.

    Nothing is created here (a run refused later, e.g. for memory, leaves no folder behind).
    """
    text = str(path)
    if "\x00" in text:
        raise CaseError(f"The output path {text!r} contains a NUL byte; give a plain folder path.")
    folder = Path(text)
    resolved = folder.resolve()
    for root in _SYSTEM_FOLDERS:
        if resolved == root or root in resolved.parents:
            raise CaseError(f"The output folder {folder} lies under {root}, a system folder; "
                            "write outputs to a normal folder with --output.")
    existing = resolved
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        where = "is a file" if existing == resolved else f"lies under the file {existing}"
        raise CaseError(f"The output path {folder} {where}, not a folder; choose another "
                        "--output or move the file.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CaseError(f"Cannot write to {existing} (permission denied), so the output folder "
                        f"{folder} cannot be made; choose a writable folder with --output.")
    return folder
