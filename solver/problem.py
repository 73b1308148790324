"""Host-side description of one run, built once per geometry and configuration, and the
:class:`GeometryLike` protocol: what the solver reads from a geometry.

A :class:`Problem` gathers what every backend needs — the lattice, the tiling, relaxation rates
(``Relaxation`` for BGK/TRT, ``MRTRates`` for MRT), the body force, the periodic axes, the
boundary conditions of the domain faces and moving objects, the arithmetic dtype and the
storage of the populations (:mod:`solver.storage`) — so that
backends only allocate and step. Large derived tables (the NumPy pull table, the boundary
tables of ``solver.boundaries``) are built on first use only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .boundaries import BoundaryTables, build_tables
from .collision import Relaxation, equilibrium
from .collisions import CollisionModel, collision_model
from .config import ConfigError, FaceCondition, SimulationConfig, population_copies
from .lattice import Lattice, get_lattice
from .mrt import MRTRates
from .node_types import NodeType
from .storage import Storage, storage_for
from .streaming import PullTable, build_pull_table
from .tiling import Tiling

__all__ = ["Problem", "GeometryLike", "ArrayGeometry", "TiledGeometry", "as_geometry",
           "tile_offset"]


@dataclass
class Problem:
    """Everything about a run that does not change while it steps (lattice units)."""

    lattice: Lattice
    tiling: Tiling
    rates: Relaxation | MRTRates
    force: np.ndarray
    incompressible: bool
    rho0: float
    periodic: tuple[bool, ...]
    dtype: np.dtype
    #: The collision model (:mod:`solver.collisions`); a name given here is looked up once.
    collision: CollisionModel
    layout: str = "paper"
    tiles_per_block: int = 1
    extras: dict = field(default_factory=dict)
    faces: dict[str, FaceCondition] = field(default_factory=dict)
    objects: dict[int, tuple[float, float, float]] = field(default_factory=dict)
    labels: np.ndarray | None = field(default=None, repr=False)
    viscosity: float | None = None
    #: Tiles this process steps, bool (n_tiles,); None = all. The others are read-only halo
    #: tiles of a distributed run (:mod:`solver.distributed`).
    owned: np.ndarray | None = field(default=None, repr=False)
    #: ``SimulationConfig.storage``: 'auto' (store in ``dtype``) or 'float16'.
    storage_kind: str = "auto"
    #: Population storage on the GPU (``SimulationConfig.streaming``): 'two-copy' or 'in-place'.
    streaming: str = "two-copy"
    #: Tile storage on the GPU (``SimulationConfig.tile_storage``): 'tiled', 'compact' or
    #: 'auto' (decided by :func:`solver.backends.plan.plan_for`).
    tile_storage: str = "tiled"
    #: The geometry's openings (:class:`geometries.openings.Opening`), their frame (metres per
    #: voxel or None, origin) and the validated conditions of ``SimulationConfig.openings``.
    openings: tuple = ()
    voxel_size: float | None = None
    origin: tuple[float, ...] = ()
    opening_conditions: dict = field(default_factory=dict)
    #: ``SimulationConfig.ramp_steps``: the openings' soft start (None: one characteristic time).
    ramp_steps: int | None = None
    #: Bytes of memory of the device the run is for (None: unknown), filled by who knows the
    #: device (:class:`~solver.simulation.Simulation`, a distributed rank's set-up): with
    #: tile_storage 'auto' the plan keeps an in-place run needing the compact kernels' 64-bit
    #: offsets tiled (faster) unless only the compact state fits, and a two-copy one compact
    #: wherever that fits (:func:`solver.backends.plan.plan_for`).
    device_capacity: int | None = None

    def __post_init__(self) -> None:
        # Decided once: a name (tests, reconfigure(collision=...)) becomes the model object.
        self.collision = collision_model(self.collision)

    @classmethod
    def from_config(cls, solid: np.ndarray, config: SimulationConfig,
                    labels: np.ndarray | None = None, tiling: Tiling | None = None) -> Problem:
        """Tile ``solid`` (True = solid, axes (x, y[, z])) and derive the run's constants.

        ``labels`` (int, same shape, 0 = no object) names the solid objects that
        ``config.object_velocities`` moves and that :mod:`solver.observables` reports on.
        ``tiling``: the tiling of ``solid`` with ``config``'s edge and :func:`tile_offset`, made
        already (e.g. on the GPU, :mod:`solver.backends.cuda.rock_setup`).
        """
        config.check(solid.ndim)
        if labels is not None and np.shape(labels) != solid.shape:
            raise ValueError(f"labels shape {np.shape(labels)} differs from the geometry's "
                             f"{solid.shape}.")
        objects = config.check_objects()
        if labels is None and any(any(v) for v in objects.values()):
            raise ConfigError("object_velocities moves labelled objects but the geometry has "
                              "no labels; use a VoxelGeometry with `labels` or drop them.")
        if tiling is None:
            tiling = Tiling.build(solid, config.tile_edge, tile_offset(config, solid.ndim))
        elif tuple(tiling.shape) != tuple(solid.shape):
            raise ValueError(f"The given tiling covers {tiling.shape}, not the mask's "
                             f"{solid.shape}.")
        return cls.from_tiling(tiling, config, labels, objects)

    @classmethod
    def from_tiling(cls, tiling: Tiling, config: SimulationConfig,
                    labels: np.ndarray | None = None, objects: dict | None = None) -> Problem:
        """The run's constants over a tiling made already (:meth:`from_config` tiles a mask;
        a distributed rank tiles only its slab, :mod:`solver.distributed.local_setup`)."""
        config.check(tiling.ndim)
        objects = config.check_objects() if objects is None else objects
        lattice = get_lattice(config.lattice)
        collision = config.collision_model()
        rates = collision.rates(config.lattice, config.tau, config.trt_magic, config.mrt_rates,
                                config.smagorinsky_cs)
        return cls(
            lattice=lattice,
            tiling=tiling,
            rates=rates,
            force=np.asarray(config.body_force[: lattice.d], dtype=np.float64),
            incompressible=config.fluid_model == "incompressible",
            rho0=float(config.initial_density),
            periodic=config.periodic_axes(),
            dtype=np.dtype(config.precision),
            storage_kind=config.storage,
            collision=collision,
            layout=config.gpu_layout,
            tiles_per_block=int(config.tiles_per_block),
            faces=config.face_conditions(),
            objects=objects,
            labels=None if labels is None else np.asarray(labels),
            viscosity=config.viscosity,
            streaming=config.streaming,
            tile_storage=config.tile_storage,
            opening_conditions=config.opening_conditions(),
            ramp_steps=config.ramp_steps,
        )

    def with_openings(self, geometry: Any) -> Problem:
        """Attach ``geometry``'s openings and frame (metres) to this problem; returns self.

        Done once by :class:`~solver.simulation.Simulation`, also for a problem built by a
        preview without them. Unknown opening ids in the config are refused here."""
        openings = tuple(getattr(geometry, "openings", ()) or ())
        if openings and not self.openings:
            self.openings = openings
            self.voxel_size = getattr(geometry, "voxel_size", None)
            self.origin = tuple(getattr(geometry, "origin", ()) or ())
            self.__dict__.pop("iolets", None)
        _ = self.iolets  # refuses unknown ids now, before any allocation
        return self

    @cached_property
    def iolets(self):
        """Per-link tables of the driven openings (:mod:`solver.iolets`), or None."""
        from .iolets import build_iolets

        return build_iolets(self)

    def use_iolets(self, tables: Any) -> Problem:
        """Take ``tables`` (:class:`solver.iolets.IoletTables`, or None: no driven links) as
        this problem's opening links instead of building them: a distributed rank's share of
        the global tables (:mod:`solver.distributed.openings`). Returns self."""
        self.__dict__["iolets"] = tables  # the cached_property's slot
        return self

    @property
    def kinematic_viscosity(self) -> float:
        """Kinematic viscosity, lattice units: (tau - 1/2)/3."""
        if self.viscosity is not None:
            return float(self.viscosity)
        return (1.0 / self.rates.omega_plus - 0.5) / 3.0

    @property
    def n_fluid(self) -> int:
        """Fluid nodes in the domain (in the owned tiles when ``owned`` is set)."""
        if self.owned is None:
            return self.tiling.n_fluid
        return int((~self.tiling.solid[self.owned]).sum())

    @cached_property
    def storage(self) -> Storage:
        """How the populations are stored (dtype, shift and scale; :mod:`solver.storage`)."""
        return storage_for(self.lattice, self.dtype, self.storage_kind, self.rho0)

    @property
    def storage_dtype(self) -> np.dtype:
        """dtype of the stored populations (``dtype``, or float16 with float16 storage)."""
        return self.storage.dtype

    @cached_property
    def sector_mix(self) -> float:
        """Fraction of the 32-byte sectors of stored populations (XYZ order) holding a fluid
        node that also hold a solid node: what the GPU's sector fill can save on."""
        return self.tiling.mixed_group_fraction(
            min(32 // self.storage_dtype.itemsize, self.tiling.nodes_per_tile))

    @cached_property
    def pull_table(self) -> PullTable:
        """Gather/scatter tables of the NumPy reference (built on first use).

        Fluid nodes are in tile order, except that Zou-He nodes come last, grouped by node
        type, so that the NumPy backend treats each face in whole chunks.
        """
        table = build_pull_table(self.tiling, self.lattice, self.periodic, self.owned)
        types = self.boundary.node_type[table.tile, table.node]
        if np.any(types > NodeType.FLUID):
            table = table.take(np.argsort(types, kind="stable"))
        return table

    @cached_property
    def boundary(self) -> BoundaryTables:
        """Node types and boundary tables (built on first use, host side)."""
        return build_tables(self.tiling, self.lattice, self.faces, self.periodic, self.labels,
                            self.objects, 1.0 if self.incompressible else self.rho0)

    def rest_populations(self) -> np.ndarray:
        """Equilibrium at rest with density rho0, w_i rho0 (both fluid models), float64 (q,).

        Also what every backend keeps in solid nodes (:mod:`solver.backends.base`).
        """
        rest = equilibrium(np.array([self.rho0]), np.zeros((self.lattice.d, 1)), self.lattice,
                           self.incompressible)
        return rest[:, 0]

    def initial_populations(self) -> np.ndarray:
        """Equilibrium at rest with density rho0 on every tile node, float64 (n_tiles, q, a**d)."""
        shape = (self.tiling.n_tiles, self.lattice.q, self.tiling.nodes_per_tile)
        return np.broadcast_to(self.rest_populations()[None, :, None], shape).copy()

    @property
    def population_copies(self) -> int:
        """Copies of the populations the GPU state holds: 2 (two-copy) or 1 (in-place)."""
        return population_copies(self.streaming)

    def tiled_state_bytes(self) -> int:
        """Device bytes of this problem's tiled state: its population copies in the storage
        precision and the tiling's tables (:meth:`~solver.tiling.Tiling.memory_bytes`)."""
        return int(self.tiling.memory_bytes(self.lattice.q, self.storage_dtype.itemsize,
                                            self.population_copies))

    def bytes_per_fluid_node_step(self) -> int:
        """Minimum bytes moved per fluid node and step, 2 q n_d (paper eq. 10)."""
        return 2 * self.lattice.q * self.storage_dtype.itemsize


def tile_offset(config: SimulationConfig, ndim: int) -> str | tuple[int, ...]:
    """The tile-grid offset ``config`` asks for: 'best' (searched) or the origin."""
    return "best" if config.tile_offset == "best" else (0,) * ndim


# ---------------------------------------------------------------- the geometry it is built from
@runtime_checkable
class GeometryLike(Protocol):
    """A voxel geometry as the solver reads it (:class:`~geometries.voxel.VoxelGeometry` is one).

    ``solid``: True = solid, (x, y[, z]); ``voxel_size``: metres per voxel or None (unknown);
    ``origin``: metres of the lower corner of voxel 0; ``flow_axis``: the driven axis or None
    (none said); ``labels``: int32 object id per voxel or None; ``name``: short description.
    """

    solid: np.ndarray
    voxel_size: float | None
    origin: tuple[float, ...]
    flow_axis: int | None
    labels: np.ndarray | None
    name: str


@dataclass(frozen=True, eq=False)
class ArrayGeometry:
    """A bare mask as a :class:`GeometryLike`: no voxel size, origin, flow axis, labels or name.

    ``solid`` is kept as given (the solver validates it and says what to do when it is not a
    boolean 2D/3D mask)."""

    solid: Any
    voxel_size: float | None = None
    origin: tuple[float, ...] = ()
    flow_axis: int | None = None
    labels: np.ndarray | None = None
    name: str = ""


@dataclass(frozen=True, eq=False)
class TiledGeometry:
    """A :class:`GeometryLike` whose mask is its tiling's: ``solid`` is made from ``tiling`` at
    each read (:meth:`~solver.tiling.Tiling.mask`, the same booleans), so the whole voxel mask
    is not held between reads (rank 0 of a run over MPI ranks,
    :meth:`solver.simulation.Simulation.release_mask`)."""

    tiling: Tiling = field(repr=False)
    voxel_size: float | None = None
    origin: tuple[float, ...] = ()
    flow_axis: int | None = None
    labels: np.ndarray | None = field(default=None, repr=False)
    name: str = ""
    openings: tuple = ()

    @classmethod
    def of(cls, geometry: Any, tiling: Tiling) -> TiledGeometry:
        """``geometry``'s frame, labels, name and openings over ``tiling`` (its mask's)."""
        return cls(tiling, geometry.voxel_size, tuple(geometry.origin or ()), geometry.flow_axis,
                   geometry.labels, geometry.name, tuple(getattr(geometry, "openings", ()) or ()))

    @property
    def solid(self) -> np.ndarray:
        """The solid mask (bool, True = solid), made from the tiling."""
        return self.tiling.mask()

    @property
    def shape(self) -> tuple[int, ...]:
        """Grid shape in voxels."""
        return tuple(self.tiling.shape)

    @property
    def ndim(self) -> int:
        """Number of dimensions, 2 or 3."""
        return self.tiling.ndim


def as_geometry(geometry: Any) -> GeometryLike:
    """``geometry`` itself when it is a :class:`GeometryLike`; a plain array (or an object with a
    ``solid`` and only some of the other attributes) as an :class:`ArrayGeometry`."""
    if isinstance(geometry, TiledGeometry):  # not the protocol's check: it would make the mask
        return geometry
    if isinstance(geometry, GeometryLike):
        return geometry
    if not hasattr(geometry, "solid"):
        return ArrayGeometry(geometry)
    # A partial stand-in: the attributes it has, the protocol's defaults for the others.
    fields = ArrayGeometry.__dataclass_fields__
    return ArrayGeometry(**{k: getattr(geometry, k, f.default) for k, f in fields.items()})
