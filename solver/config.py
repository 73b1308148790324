"""Simulation configuration: the single source of option sets, defaults and validation.

:class:`SimulationConfig` is a ``param.Parameterized``; the dashboard builds its widgets from it
and the CLI reads case files into it. Every value is in lattice units (node spacing 1, time step
1); conversion from physical units happens at the edges (app, case files). Cross-field checks
that need the geometry (lattice dimension against the geometry's) live in :meth:`check`.

Domain faces: each of ``x_min`` ... ``z_max`` is one of :data:`FACE_TYPES`; the face's number is
``<face>_value``:

- ``periodic``, ``wall``: no value (ignored).
- ``velocity`` (Zou-He inlet/outlet): the velocity vector ``(ux, uy[, uz])``, or one number,
  the velocity component along the face's axis (positive = towards +axis, so an inlet at
  ``x_min`` and an outlet at ``x_max`` of the same flow take the same number). Required.
- ``pressure`` (Zou-He density outlet): the density; default ``initial_density``.
- ``moving_wall``: the wall velocity ``(ux, uy[, uz])``, tangential to the face. Required.

Labelled solid objects (``VoxelGeometry.labels``) move with ``object_velocities[label]``
(bounce-back with Ladd's correction); unlisted objects are at rest.
"""

from __future__ import annotations

import logging
import math

import param

from .collisions import (
    AUTO_TAU,
    COLLISION_MODELS,
    COLLISION_OPTIONS,
    COLLISIONS,
    CollisionModel,
    chosen_collision,
    options_doc,
)
from .face_kinds import FACE_TYPES, FaceCondition, face_kind
from .lattice import LATTICE_NAMES, get_lattice
from .node_types import FACE_NAMES
from .opening_kinds import OPENING_TYPES, OpeningCondition, opening_conditions, opening_kind
from .regularized import SMAGORINSKY_MAX
from .storage import STORAGES
from .values import MAX_MACH, ConfigError, velocity_vector

__all__ = [
    "ConfigError", "SimulationConfig", "FaceCondition", "FACE_NAMES", "FACE_TYPES",
    "COLLISIONS", "FLUID_MODELS", "PRECISIONS", "STORAGES", "BACKENDS", "HALO_TRANSPORTS",
    "STREAMING", "TILE_STORAGES", "population_copies", "MAX_MACH", "OPENING_TYPES",
]

log = logging.getLogger(__name__)

FLUID_MODELS = ("incompressible", "quasi-compressible")
PRECISIONS = ("float32", "float64")
BACKENDS = ("auto", "numpy", "cupy")
GPU_LAYOUTS = ("paper", "xyz")
#: How a distributed run moves halos between ranks (solver/distributed/transport.py): NCCL
#: device to device, MPI through host memory, or auto (NCCL where every rank has its own GPU).
HALO_TRANSPORTS = ("auto", "nccl", "host")
#: Population storage: two copies (pull, read one and write the other) or one copy updated in
#: place (the AA pattern of the CuPy kernel; the NumPy reference keeps two copies either way).
STREAMING = ("two-copy", "in-place")
#: Population storage of a tile on the GPU: all its nodes, only its fluid nodes (issue 20), or
#: auto (fluid only below a tile utilisation, solver/backends/plan.py).
TILE_STORAGES = ("auto", "tiled", "compact")

def population_copies(streaming: str) -> int:
    """Copies of the populations the GPU keeps for a ``streaming`` option (2 or 1)."""
    if streaming not in STREAMING:
        raise ConfigError(f"Unknown streaming {streaming!r}; use one of {STREAMING}.")
    return 2 if streaming == "two-copy" else 1


#: Largest tau accepted: far beyond any useful viscosity; 1e308 passed and diverged.
TAU_MAX = 1000.0


class _Tau(param.Number):
    """Relaxation time with a message that explains the stability limit."""

    def _validate_value(self, val, allow_None):
        if isinstance(val, bool):  # param.Number takes True as 1; YAML `tau: true` is a typo
            raise ConfigError(f"tau must be a number above 0.5, got {val!r}; e.g. tau: 0.8.")
        super()._validate_value(val, allow_None)
        if val is not None and not math.isfinite(val):
            raise ConfigError(f"tau = {val} is not a finite number; use 0.51 to 2 (e.g. 0.8).")
        if val is not None and val > TAU_MAX:
            raise ConfigError(
                f"tau = {val} is above {TAU_MAX:g}: the relaxation would underflow and the "
                "run would fail for no visible reason; use 0.51 to 2 (e.g. 0.8)."
            )
        if val is not None and val <= 0.5:
            raise ConfigError(
                f"tau = {val} gives zero or negative viscosity (nu = (tau - 1/2)/3); "
                "use tau > 0.5, in practice 0.51 or more (0.6-1.0 is robust)."
            )


def _face(doc: str) -> param.Selector:
    return param.Selector(objects=list(FACE_TYPES), default="periodic", doc=doc)


def _face_value(face: str) -> param.Parameter:
    return param.Parameter(default=None, doc=f"Value of the {face} boundary (lattice units): "
                           "inlet velocity (vector, or the component along the face axis), "
                           "outlet density, or tangential wall velocity (vector).")


class SimulationConfig(param.Parameterized):
    """Physics and numerics of one run, in lattice units."""

    lattice = param.Selector(objects=list(LATTICE_NAMES), default="D3Q19",
                             doc="Velocity set; D2Q9 for 2D geometries, D3Q19/D3Q27 for 3D, "
                                 "D3Q13 (3D, MRT only, least memory).")
    collision = param.Selector(objects=list(COLLISION_OPTIONS), default="auto",
                               doc=f"auto (RR for a run driven through openings at tau < "
                                   f"{AUTO_TAU}, else TRT), " + options_doc() + ".")
    fluid_model = param.Selector(objects=list(FLUID_MODELS), default="incompressible",
                                 doc="Equilibrium: incompressible (He-Luo) or quasi-compressible.")
    precision = param.Selector(objects=list(PRECISIONS), default="float32",
                               doc="Floating-point type of the arithmetic (and, with storage "
                                   "'auto', of the stored populations).")
    storage = param.Selector(objects=list(STORAGES), default="auto",
                             doc="Storage of the populations: 'auto' = the precision; "
                                 "'float16' stores f_i - w_i rho0, scaled, in 16 bits (half "
                                 "the memory and traffic; float32 arithmetic only).")
    tau = _Tau(default=0.8, softbounds=(0.5, 2.0),
               doc="Relaxation time (lattice units); viscosity nu = (tau - 1/2)/3. A case "
                   "driven through its openings in SI may leave it out: solver/"
                   "lattice_parameters.py then chooses it for the Mach target.")
    trt_magic = param.Number(default=3 / 16, bounds=(0, None), inclusive_bounds=(False, True),
                             softbounds=(0.01, 1.0),
                             doc="TRT magic parameter Lambda; 3/16 puts bounce-back walls exactly "
                                 "half-way for Poiseuille flow.")
    smagorinsky_cs = param.Number(default=0.0, bounds=(0.0, SMAGORINSKY_MAX),
                                  doc="Smagorinsky constant of RR's eddy viscosity (0 = off; "
                                      "0.1-0.17 for transitional jets), filter width one "
                                      "voxel.")
    body_force = param.NumericTuple(default=(0.0, 0.0, 0.0), length=3,
                                    doc="Constant body force per unit volume (lattice units), "
                                        "(Fx, Fy, Fz); Fz is ignored in 2D.")
    initial_density = param.Number(default=1.0, bounds=(0, None), inclusive_bounds=(False, True),
                                   doc="Initial (and reference) density, lattice units.")
    x_min = _face("Boundary at the x = 0 face.")
    x_max = _face("Boundary at the x = nx-1 face.")
    y_min = _face("Boundary at the y = 0 face.")
    y_max = _face("Boundary at the y = ny-1 face.")
    z_min = _face("Boundary at the z = 0 face (3D only).")
    z_max = _face("Boundary at the z = nz-1 face (3D only).")
    x_min_value = _face_value("x_min")
    x_max_value = _face_value("x_max")
    y_min_value = _face_value("y_min")
    y_max_value = _face_value("y_max")
    z_min_value = _face_value("z_min")
    z_max_value = _face_value("z_max")
    object_velocities = param.Dict(default={},
                                   doc="Wall velocity (lattice units) of labelled solid objects, "
                                       "{label: (ux, uy[, uz])}; unlisted objects are at rest.")
    openings = param.Dict(default={},
                          doc="Condition of each opening of the geometry, {id: {'kind': k, "
                              "'value': v, 'profile': p}} (lattice units; solver/"
                              "opening_kinds.py); unlisted openings are closed.")
    ramp_steps = param.Integer(default=None, allow_None=True, bounds=(0, None),
                               doc="Soft start of the openings: steps over which inflow and "
                                   "pressure differences ramp up smoothly (solver/"
                                   "soft_start.py); None = one characteristic time of the "
                                   "flow, 0 = impulsive start.")
    mrt_rates = param.Dict(default={},
                           doc="MRT relaxation rates overriding the defaults, {group: rate}; "
                               "groups: e, eps, q, pi, m (D2Q9/D3Q19), e, h (D3Q13).")
    tile_edge = param.Integer(default=None, allow_None=True, bounds=(1, 16),
                              doc="Tile edge in nodes; default 4 in 3D and 8 in 2D. The GPU "
                                  "takes 4 in 3D and 8 or 16 in 2D (solver/backends/plan.py).")
    tile_offset = param.Selector(objects=["best", "origin"], default="best",
                                 doc="Tile-grid placement: search for the best eta_t, or start "
                                     "at node 0 as in Algorithm 1.")
    backend = param.Selector(objects=list(BACKENDS), default="auto",
                             doc="Compute backend; auto picks CuPy when a GPU is usable.")
    # Defaults are the fastest full step measured on an H200 (benchmarks/throughput/results/):
    # Hopper's large L2 absorbs the neighbour reads the paper's layouts were designed to save.
    gpu_layout = param.Selector(objects=list(GPU_LAYOUTS), default="xyz",
                                doc="In-tile layout on the GPU: the paper's per-direction "
                                    "XYZ/YXZ/zigzagNE assignment, or XYZ for all directions.")
    tiles_per_block = param.Selector(objects=[1, 2, 4], default=2,
                                     doc="Tiles processed by one GPU thread block.")
    streaming = param.Selector(objects=list(STREAMING), default="two-copy",
                               doc="Population storage on the GPU: two copies, or one copy "
                                   "updated in place (AA pattern: half the memory, same "
                                   "results bit for bit). The NumPy backend keeps two copies.")
    # 'auto': compact wherever it runs and the tile utilisation is low enough to gain (issue 20;
    # thresholds and timings in solver/backends/plan.py).
    tile_storage = param.Selector(objects=list(TILE_STORAGES), default="auto",
                                  doc="Tile storage on the GPU: 'tiled' keeps every node of a "
                                      "tile, 'compact' only its fluid nodes (faster and smaller "
                                      "on porous media; no inlets/outlets, moving walls "
                                      "or MPI), 'auto' compact where it pays (tile "
                                      "utilisation below 0.6-1.0 by precision and streaming, "
                                      "as timed) and can run. NumPy ignores it.")

    @property
    def viscosity(self) -> float:
        """Kinematic viscosity in lattice units, (tau - 1/2)/3."""
        return (self.tau - 0.5) / 3.0

    @property
    def ndim(self) -> int:
        """Spatial dimension of the chosen lattice."""
        return get_lattice(self.lattice).d

    def faces(self) -> dict[str, str]:
        """Boundary type per domain face, for the faces of this lattice's dimension."""
        return {name: getattr(self, name) for name in FACE_NAMES[: 2 * self.ndim]}

    def face_conditions(self) -> dict[str, FaceCondition]:
        """Validated boundary (type, velocity, density) of every face of this dimension."""
        return {name: self._face_condition(name) for name in self.faces()}

    def _face_condition(self, name: str) -> FaceCondition:
        kind = face_kind(getattr(self, name))
        return kind.condition(name, getattr(self, f"{name}_value"), self.ndim,
                              self.initial_density)

    def check_objects(self) -> dict[int, tuple[float, float, float]]:
        """Validated object velocities {label: (ux, uy, uz)}, lattice units."""
        out = {}
        for label, value in self.object_velocities.items():
            if isinstance(label, bool) or not isinstance(label, int) or label < 1:
                raise ConfigError(f"object_velocities keys are object labels (integers >= 1, "
                                  f"0 means no object), got {label!r}.")
            out[label] = velocity_vector(value, self.ndim, f"object_velocities[{label}]")
        return out

    def opening_conditions(self) -> dict[int, OpeningCondition]:
        """Validated conditions {opening id: OpeningCondition} (lattice units); ids the
        geometry lacks are checked by the Problem, which knows the openings."""
        return opening_conditions(self.openings, self.initial_density)

    def collision_model(self) -> CollisionModel:
        """The collision model of this run: ``collision``, or the one 'auto' picks for this
        tau and these openings (:func:`solver.collisions.chosen_collision`)."""
        driven = any(opening_kind(c.kind).flux for c in self.opening_conditions().values())
        return chosen_collision(self.collision, self.tau, driven)

    def _check_collision(self) -> None:
        model = self.collision_model()
        refusal = model.refusal(self.lattice)
        if refusal:
            raise ConfigError(refusal)
        if self.mrt_rates and not model.takes_mrt_rates:
            users = " or ".join(f"collision='{m.name}'" for m in COLLISION_MODELS.values()
                                if m.takes_mrt_rates)
            raise ConfigError(f"mrt_rates only apply to {users}; clear them or switch to it.")
        if self.smagorinsky_cs and not model.takes_smagorinsky:
            users = " or ".join(f"collision='{m.name}'" for m in COLLISION_MODELS.values()
                                if m.takes_smagorinsky)
            raise ConfigError(f"smagorinsky_cs applies to {users}, not {model.name}; set it "
                              "to 0 or switch to it.")
        try:
            model.rates(self.lattice, self.tau, self.trt_magic, self.mrt_rates,
                        self.smagorinsky_cs)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def _check_storage(self) -> None:
        if self.storage == "float16" and self.precision != "float32":
            raise ConfigError(f"storage='float16' computes in float32 but precision is "
                              f"{self.precision!r}: set precision='float32', or storage='auto' "
                              "to store in the arithmetic precision.")

    def periodic_axes(self) -> tuple[bool, ...]:
        """Per axis, whether both faces are periodic."""
        faces = self.faces()
        return tuple(face_kind(faces[f"{ax}_min"]).periodic for ax in "xyz"[: self.ndim])

    def check(self, geometry_ndim: int | None = None) -> None:
        """Raise ConfigError for inconsistent fields or a geometry of another dimension."""
        if geometry_ndim is not None and geometry_ndim != self.ndim:
            options = "D2Q9" if geometry_ndim == 2 else "D3Q19 or D3Q27"
            raise ConfigError(
                f"Lattice {self.lattice} is {self.ndim}D but the geometry is {geometry_ndim}D; "
                f"choose {options}."
            )
        faces = self.faces()
        for ax in "xyz"[: self.ndim]:
            lo, hi = faces[f"{ax}_min"], faces[f"{ax}_max"]
            if face_kind(lo).periodic != face_kind(hi).periodic:
                raise ConfigError(
                    f"Periodic boundaries come in pairs: {ax}_min is {lo!r} but {ax}_max is "
                    f"{hi!r}; make both periodic or neither (an axis with an inlet, outlet or "
                    "wall is not periodic)."
                )
        if not all(math.isfinite(f) for f in self.body_force):
            raise ConfigError(
                f"body_force {tuple(self.body_force)} is not finite; give three finite numbers "
                "(lattice units), e.g. [1.0e-6, 0, 0]."
            )
        for name in ("trt_magic", "initial_density"):
            value, default = getattr(self, name), self.param[name].default
            if not math.isfinite(value):
                raise ConfigError(f"{name} = {value} is not a finite number; give a positive "
                                  f"finite value (default {default:.4g}).")
        if self.ndim == 2 and self.body_force[2] != 0.0:
            raise ConfigError("A 2D lattice has no z axis: set body_force[2] to 0.")
        self._check_collision()
        self._check_storage()
        self.face_conditions()
        self.check_objects()
        self.opening_conditions()
