"""The user-facing simulation object: geometry + configuration + backend state.

``Simulation(geometry, config)`` tiles the geometry (cheap, host only) and derives the run's
constants; device memory is allocated by :meth:`Simulation.allocate`, which :meth:`step` calls on
first use. Fields come back on the voxel grid in (x, y[, z]) order with NaN in solid nodes.
All quantities are in lattice units.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from . import observables
from .backends import Backend, device_capacity, get_backend
from .config import ConfigError, SimulationConfig
from .fields import Cut, locate_cut, speed
from .flow_fields import (
    FIELDS,
    GRADIENT_FIELDS,
    cut_gradient_field,
    grid_field,
    image_data,
    pressure,
    wall_cut,
)
from .io import (
    CheckpointError,
    config_from_values,
    mask_hash,
    read_checkpoint,
    restore,
    save_simulation,
    tiling_mask_hash,
)
from .metrics import Metrics
from .probes import PROBE_FIELDS, node_flat, node_values, probe_nodes, readings
from .problem import GeometryLike, Problem, TiledGeometry, as_geometry
from .readout import Readout

__all__ = ["Simulation", "SimulationConfig", "ConfigError", "QUANTITIES"]

log = logging.getLogger(__name__)

#: Quantities :meth:`Simulation.slice` can return (:data:`solver.flow_fields.FIELDS`).
QUANTITIES = tuple(FIELDS)
#: Quantities a cut cannot take from its own nodes' moments alone.
DERIVED = (*GRADIENT_FIELDS, "wss")


def solid_mask(geometry: GeometryLike | np.ndarray) -> np.ndarray:
    """Boolean solid mask (True = solid) of a VoxelGeometry or a plain boolean array."""
    solid = np.asarray(as_geometry(geometry).solid)
    if solid.dtype != bool:
        raise ConfigError(
            f"A plain array geometry must be boolean (True = solid), got dtype {solid.dtype}; "
            "convert it with `array != pore_value` or load it through geometries.load()."
        )
    if solid.ndim not in (2, 3):
        raise ConfigError(f"Geometry must be 2D or 3D, got shape {solid.shape}.")
    if solid.all():
        raise ConfigError("The geometry has no fluid node: nothing to simulate.")
    return solid


class Simulation:
    """A tiled lattice-Boltzmann run on one geometry (lattice units throughout)."""

    def __init__(
        self, geometry: GeometryLike | np.ndarray, config: SimulationConfig | None = None,
        backend: Backend | str | None = None, problem: Problem | None = None,
    ) -> None:
        """``problem``: the :class:`Problem` of this geometry and ``config`` if already built
        (e.g. by a preview), so the geometry is not tiled a second time."""
        self.geometry = as_geometry(geometry)
        self.config = config if config is not None else SimulationConfig()
        # A geometry whose mask is its problem's tiling (ranks that tiled an image by slabs,
        # solver.distributed.region_tiling): no whole mask is made.
        tiled = isinstance(self.geometry, TiledGeometry) and problem is not None and \
            problem.tiling is self.geometry.tiling
        self._solid: np.ndarray | None = None if tiled else solid_mask(self.geometry)
        self._mask_sha256: str | None = None  # mask_sha256, made on first use
        if problem is not None and not tiled and \
                tuple(problem.tiling.shape) != self._solid.shape:
            raise ValueError(f"The given problem was built for shape {problem.tiling.shape}, "
                             f"not this geometry's {self._solid.shape}.")
        self.problem = problem if problem is not None else Problem.from_config(
            self._solid, self.config, labels=self.geometry.labels)
        self.problem.with_openings(self.geometry)
        if backend is None or isinstance(backend, str):
            backend = get_backend(backend or self.config.backend)
        self.backend = backend
        if self.problem.device_capacity is None:  # before any plan is made of the problem
            self.problem.device_capacity = device_capacity(backend)
        self.state: Any = None
        self._slice_cache: dict = {}  # (axis, index) -> fields.Cut (backend index arrays)
        self._readout: Readout | None = None  # chunked reads of the state, made on first use
        self._state_bytes: int | None = None  # memory_bytes, made on first use
        self._walls = None  # wall nodes of solver.wall_shear, made on first use
        self._opening_nodes = None  # (tiles, device indices) of the openings' nodes, first use
        self._windkessel: Any = None  # the attached WindkesselTable (solver.windkessel)
        self._saved_windkessel: Any = None  # (ids, state) of a checkpoint read before attaching
        self._closed_windkessel: Any = (None, None)  # (state, trace) when the run was closed
        self.metrics = Metrics(
            fluid_nodes=self.problem.n_fluid, n_tiles=self.problem.tiling.n_tiles,
            eta_t=self.problem.tiling.eta_t,
            bytes_per_node_step=self.problem.bytes_per_fluid_node_step(),
        )

    @property
    def tiling(self):
        """The tiling of the geometry (see :class:`solver.tiling.Tiling`)."""
        return self.problem.tiling

    @property
    def solid(self) -> np.ndarray:
        """The geometry's solid mask (bool, True = solid); after :meth:`release_mask`, made
        again from the tiling at each read (the same booleans)."""
        return self._solid if self._solid is not None else self.tiling.mask()

    @property
    def shape(self) -> tuple[int, ...]:
        """Grid shape in nodes, (nx, ny[, nz])."""
        return tuple(self.tiling.shape)

    @property
    def mask_sha256(self) -> str:
        """SHA-256 of the solid mask (:func:`solver.io.mask_hash`; a checkpoint's geometry
        check), made once."""
        if self._mask_sha256 is None:
            self._mask_sha256 = mask_hash(self._solid) if self._solid is not None else \
                tiling_mask_hash(self.tiling)  # slab by slab: no whole mask made
        return self._mask_sha256

    def release_mask(self) -> GeometryLike:
        """Drop the whole voxel mask (1 byte a voxel): rank 0 of a run over MPI ranks keeps
        only the tiling, which holds the same mask (:meth:`solver.tiling.Tiling.mask` makes it
        again where an output reads it). Returns the geometry now kept (its mask made from the
        tiling too); the caller drops its own references to the old one."""
        _ = self.mask_sha256  # every checkpoint needs it: hashed once, from the mask in hand
        self.geometry = TiledGeometry.of(self.geometry, self.tiling)
        self._solid = None
        return self.geometry

    @property
    def time_step(self) -> int:
        """Number of completed time steps."""
        return self.metrics.steps

    def memory_bytes(self) -> int:
        """Bytes of the resident state on the device (population copies and tables, as the
        backend allocates them for this problem, fluid-compacted storage included)."""
        if self._state_bytes is None:  # the problem is fixed for the simulation's life
            self._state_bytes = int(self.backend.state_bytes(self.problem))
        return self._state_bytes

    def prepare(self) -> None:
        """Build on the host what :meth:`allocate` reads (the backend's tables, no device
        memory; :meth:`~solver.backends.base.Backend.prepare`), e.g. ahead in another thread."""
        if self.state is None:
            self.backend.prepare(self.problem)

    def allocate(self) -> None:
        """Allocate and initialise the backend state (equilibrium at rest)."""
        if self.state is None:
            self.state = self.backend.allocate(self.problem)
            info = self.backend.device_info()
            self.metrics.peak_bandwidth = info.get("peak_bandwidth")
            self.metrics.copy_bandwidth = info.get("copy_bandwidth")

    def step(self, n: int = 1) -> None:
        """Advance ``n`` time steps."""
        if n < 0:
            raise ValueError(f"Number of steps must be non-negative, got {n}.")
        self.allocate()
        if n:
            self.metrics.record(n, self.backend.step(self.state, n))

    def populations(self) -> np.ndarray:
        """Latest post-collision populations on the host, float64 (n_tiles, q, a**d)."""
        self.allocate()
        return self.backend.populations(self.state)

    def _reader(self) -> Readout:
        """The chunked reader of the allocated state (:mod:`solver.readout`)."""
        self.allocate()
        if self._readout is None or self._readout.state is not self.state:
            self._readout = Readout(self.problem, self.backend, self.state, self.flow_axis)
        return self._readout

    def fields(self) -> dict[str, np.ndarray]:
        """Density ``rho`` (grid shape) and velocity ``u`` (d + grid shape); NaN in solids."""
        rho, u = self._reader().host_moments()  # chunk by chunk: bounded device memory
        solid = self.tiling.solid
        rho = np.where(solid, np.nan, rho)
        u = np.where(solid, np.nan, u).transpose(1, 2, 0)
        return {
            "rho": self.tiling.scatter(rho),
            "u": np.moveaxis(self.tiling.scatter(u), -1, 0),
        }

    def field(self, name: str) -> np.ndarray:
        """Field ``name`` of :data:`solver.flow_fields.FIELDS` on the whole grid (host, x, y[, z]
        order, NaN in solids, lattice units; ``FIELDS[name].si_factor(units)`` gives SI)."""
        if name not in FIELDS:
            raise ValueError(f"Unknown field {name!r}; choose one of {list(FIELDS)}.")
        if name == "wss":
            return self.wall_shear_stress()
        fields = self.fields()
        return grid_field(name, fields["rho"], fields["u"], self.solid,
                          self.config.initial_density, periodic=tuple(self.problem.periodic))

    def sample(self, probes: Any) -> Any:
        """:class:`solver.probes.Readings` of a :class:`solver.probes.ProbeSet` now (lattice
        units): only the probed nodes' tiles are reduced, only their values leave the device."""
        from .probes import sample

        return sample(self, probes, self._reader())

    def coarse_flow(self, name: str = "umag", max_edge: int | None = None) -> Any:
        """:class:`solver.coarse_flow.CoarseFlow`: the velocity and the scalar ``name`` every
        few voxels (longest edge at most ``max_edge`` nodes), gathered on the device."""
        from .coarse_flow import MAX_EDGE, coarse_flow

        return coarse_flow(self, self._reader(), name, max_edge or MAX_EDGE)

    def to_pyvista(self, names: tuple[str, ...] = ("umag", "pressure")) -> Any:
        """The named fields as a :class:`pyvista.ImageData` (cell data, lattice units; cells
        of the geometry's voxel size in metres, 1 if unknown) for one's own plots."""
        return image_data({name: self.field(name) for name in names}, self.voxel_size)

    def slice(self, axis: int, index: int, quantity: str = "umag") -> np.ndarray:
        """2D cut normal to ``axis`` at ``index`` (3D) or the whole field (2D); NaN in solids.

        Only the slice leaves the device, and only its nodes' populations are read.
        """
        self._check_cut(axis, index, quantity)
        if quantity in ("ux", "uy", "uz") and "xyz".index(quantity[1]) >= len(self.shape):
            raise ValueError(f"{quantity} does not exist in a 2D simulation.")
        if quantity in DERIVED:
            return self._derived_plane(axis, index, quantity)
        return self._look(axis, index, [quantity], False)[0][0]

    def view(self, axis: int, index: int, quantity: str = "umag", health: bool = True,
             probes: Any = None) -> dict:
        """What a live view shows, from one moment computation on the device.

        ``plane`` (n_a, n_b): ``quantity`` on the cut normal to ``axis`` at ``index`` (3D) or
        on the whole field (2D); ``velocity`` (2, n_a, n_b): the in-plane velocity components
        along ``axes`` (axis names in x, y, z order); NaN in solids, and a component the lattice
        lacks (uz in 2D) is zero. With ``health`` the moments of the whole state are computed
        once and the :meth:`health` numbers (``finite``, ``max_speed``, ``mean_velocity``) come
        with the cut; without, only the cut's nodes' populations are read. Only the
        three planes and a few scalars cross to the host. Lattice units.

        With ``probes`` (a :class:`solver.probes.ProbeSet` inside the grid) their
        :class:`~solver.probes.Readings` come as ``probes``, from the same gather and the same
        transfer as the cut (one device look per publish, not two).
        """
        self._check_cut(axis, index, quantity)
        in_plane = [a for a in range(3) if a != axis] if len(self.shape) == 3 else [0, 1]
        derived = quantity in DERIVED
        names = ["rho" if derived else quantity, *("u" + "xyz"[a] for a in in_plane)]
        planes, numbers, values = self._look(axis, index, names, health, probes or None)
        if derived:
            planes[0] = self._derived_plane(axis, index, quantity)
        out = {"plane": planes[0], "velocity": planes[1:],
               "axes": tuple("xyz"[a] for a in in_plane), **(numbers or {})}
        if values is not None:
            out["probes"] = readings(probes, self.time_step, values)
        return out

    def health(self) -> dict:
        """Cheap run state: ``finite`` (no NaN/Inf in fluid nodes), ``max_speed``, the
        superficial ``mean_velocity`` (d,) = sum of u over fluid nodes / all domain nodes, the
        superficial ``mean_momentum`` (d,) of :func:`solver.observables.momentum_density` and
        ``layer_density``: mean density of the first and last fluid layers along a
        non-periodic flow axis (None when it is periodic).

        A handful of scalars cross from the device, so runs can check every chunk.
        """
        return self._reader().health()[0]

    def _check_cut(self, axis: int, index: int, quantity: str) -> None:
        if quantity not in QUANTITIES:
            raise ValueError(f"Unknown quantity {quantity!r}; choose one of {QUANTITIES}.")
        if len(self.shape) == 3 and (not 0 <= axis < 3 or not 0 <= index < self.shape[axis]):
            raise ValueError(f"Slice axis {axis} index {index} is outside shape "
                             f"{self.shape}.")

    def _cut_key(self, axis: int, index: int) -> tuple:
        """The key of the cut normal to ``axis`` at ``index`` in the caches."""
        return ("cut", axis, index) if len(self.shape) == 3 else ("cut", 0, 0)

    def _cut(self, axis: int, index: int):
        """The :class:`solver.fields.Cut` normal to ``axis`` at ``index`` (cached)."""
        key = self._cut_key(axis, index)[1:]
        if key not in self._slice_cache:
            if len(self._slice_cache) > 64:
                self._slice_cache.clear()
            self._slice_cache[key] = locate_cut(self.tiling, *key, self.backend.xp)
        return self._slice_cache[key]

    def _look(self, axis: int, index: int, names: list[str], health: bool, probes: Any = None):
        """Host planes (len(names), n_a, n_b) of the named quantities on a cut, the health
        numbers from the same moments (None without ``health``), and the PROBE_FIELDS (5, m)
        of ``probes``' nodes gathered with the cut (None without probes)."""
        cut, key = self._cut(axis, index), self._cut_key(axis, index)
        looked = cut
        if probes is not None:  # the cut's nodes then the probes': one gather, one transfer
            looked, key = self._probed_cut(cut, key, probes)
        if health:
            numbers, (rho, u, where) = self._reader().health(looked, key)
        else:
            (rho, u), where, numbers = self._cut_moments(looked, key), None, None
        planes, values = self._planes(rho, u, where, cut.solid, names,
                                      looked.solid.reshape(-1)[cut.solid.size:])
        return planes, numbers, (values if probes is not None else None)

    def _probed_cut(self, cut, key: tuple, probes: Any):
        """A :class:`solver.fields.Cut` of the nodes of ``cut`` then of ``probes``' points and
        line nodes (tiles and local index unused), and its cache key; made once per pair."""
        key = (*key, probes)
        if key not in self._slice_cache:
            probes.check(self.shape)
            flat, solid = node_flat(self.tiling, probe_nodes(probes, len(self.shape))[0])
            nodes = np.concatenate([np.asarray(self.backend.to_host(cut.nodes)).reshape(-1),
                                    flat])
            self._slice_cache[key] = Cut(self.backend.xp.asarray(nodes), None, None,
                                         np.concatenate([cut.solid.reshape(-1), solid]))
        return self._slice_cache[key], key

    def _cut_moments(self, cut, key) -> tuple[Any, Any]:
        """Density (n,) and velocity (d, n) at the cut's nodes in order (backend arrays):
        only those nodes' populations are read (:meth:`Readout.node_moments`)."""
        return self._reader().node_moments(cut.nodes, cut.solid.reshape(-1), key)

    def _planes(self, rho, u, index, solid: np.ndarray, names: list[str],
                probe_solid: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The named quantities at the flat node ``index`` (backend array; None: ``rho`` and
        ``u`` hold the cut's nodes in order, then any probes'), and the PROBE_FIELDS (5, m)
        of the ``probe_solid.size`` nodes after the cut's (NaN where solid), in one transfer."""
        xp = self.backend.xp
        if index is not None:
            rho, u = rho.reshape(-1)[index], u.reshape(u.shape[0], -1)[:, index]
        n = solid.size
        rho_cut = rho.reshape(-1)[:n].reshape(solid.shape)
        u_cut = u.reshape(u.shape[0], -1)[:, :n].reshape(u.shape[0], *solid.shape)

        def one(name: str):
            if name == "rho":
                return rho_cut
            if name == "pressure":
                return pressure(rho_cut, self.config.initial_density)
            if name == "umag":
                return speed(u_cut, xp)
            component = "xyz".index(name[1])
            return u_cut[component] if component < len(u_cut) else xp.zeros_like(u_cut[0])

        parts = [one(name).reshape(-1) for name in names]
        m = 0 if probe_solid is None else probe_solid.size
        if m:
            parts.append(node_values(rho.reshape(-1)[n:], u.reshape(u.shape[0], -1)[:, n:],
                                     self.config.initial_density, xp).reshape(-1))
        host = np.asarray(self.backend.to_host(xp.concatenate(parts)), dtype=np.float64)
        planes = host[:len(names) * n].reshape(len(names), *solid.shape)
        planes[:, solid] = np.nan
        values = host[len(names) * n:].reshape(len(PROBE_FIELDS), m)
        if m:
            values[:, probe_solid] = np.nan
        return planes, values

    def _derived_plane(self, axis: int, index: int, quantity: str) -> np.ndarray:
        """A :data:`DERIVED` quantity on a cut (host, NaN in solids; lattice units): the
        gradient fields from the cut and its two neighbour layers, computed on the device."""
        if quantity == "wss":
            walls = self._wall_nodes()
            sub, where = wall_cut(walls, axis, index, len(self.shape))
            out = np.full(self._cut(axis, index).solid.shape, np.nan)
            if len(sub.voxels):
                out[where] = self._reader().wall_shear(sub)
            return out
        return cut_gradient_field(self, axis, index, quantity)

    def cut_velocity(self, axis: int, index: int) -> tuple[Any, np.ndarray]:
        """Velocity (d, n_a, n_b) on a cut as a backend array, and its host fluid mask; only
        the cut's nodes are read. Lattice units."""
        cut = self._cut(axis, index)
        _, u = self._cut_moments(cut, self._cut_key(axis, index))
        return u.reshape(u.shape[0], *cut.solid.shape), ~cut.solid

    def _wall_nodes(self):
        from .wall_shear import wall_nodes

        if self._walls is None:
            self._walls = wall_nodes(self.problem)
        return self._walls

    @property
    def flow_axis(self) -> int:
        """Axis along which k is measured: the geometry's flow axis, else the drive's."""
        return observables.flow_axis(self.problem, self._flow_axis(None))

    @property
    def voxel_size(self) -> float | None:
        """The geometry's voxel size in metres (None for a plain mask)."""
        return self.geometry.voxel_size

    def opening_flows(self) -> tuple:
        """Flow rate and mean density of every opening the config lists, lattice units
        (:class:`solver.vessel.OpeningFlow`; flows of the last step, 0 before the first; after
        :meth:`load` those of the saved step, which the checkpoint keeps)."""
        from .vessel import mean_densities, opening_flows, opening_nodes

        if not self.problem.opening_conditions:
            return ()
        self.allocate()
        if self._opening_nodes is None:
            self._opening_nodes = opening_nodes(self.problem, self.backend.xp)
        # Only driven openings have nodes to average: a run of closed ones reads no populations;
        # only the tiles holding their nodes are read (over MPI ranks, only those travel).
        tiles, nodes = self._opening_nodes
        rho = mean_densities(nodes, self.backend.device_populations(
            self.state, self.backend.xp.asarray(tiles))) if nodes else {}
        return opening_flows(self.problem, self._iolet_flux(),
                             {k: float(self.backend.to_host(v)) for k, v in rho.items()})

    def opening_flow_rates(self) -> dict[int, float]:
        """Flow rate (lattice units) of every listed opening in the last step, by id, from the
        openings' per-link flux alone: no populations are read (a Windkessel's coupling)."""
        from .vessel import flow_rates

        self.allocate()
        return flow_rates(self.problem, self._iolet_flux())

    def _iolet_flux(self) -> Any:
        """The openings' per-link mass flux of the last step (host), None before the first."""
        return self.backend.iolet_flux(self.state) if self.time_step else None

    def set_opening_densities(self, densities: dict[int, float]) -> None:
        """Hold each pressure opening id of ``densities`` at its density (lattice) from the next
        step (Windkessel outlets, :mod:`solver.windkessel`): one upload for all of them."""
        tables = self.problem.iolets
        for opening_id, density in densities.items():
            if tables is None:
                raise ValueError(f"Opening {opening_id} is not a driven opening of this run.")
            links = tables.density_links(opening_id)
            if not links.size:
                raise ValueError(f"Opening {opening_id} is not a pressure opening.")
            tables.value[links] = float(density)  # the host tables stay the run's record
        self.allocate()
        self.backend.set_iolet_values(self.state, np.array(tables.value, dtype=np.float64))

    def attach_windkessel(self, table: Any, values: np.ndarray) -> None:
        """Update the Windkessel outlets of ``table`` (:class:`solver.windkessel.WindkesselTable`)
        in the openings' pass from the state ``values`` (4, n, lattice) on; a checkpoint read
        before (:meth:`restore_windkessel`) gives its saved state instead."""
        if self._saved_windkessel is not None:
            ids, values = self._saved_windkessel
            _same_outlets(ids, table.ids)
        self.allocate()
        self.backend.set_windkessel(self.state, table, values)
        self._windkessel, self._saved_windkessel = table, None

    def restore_windkessel(self, ids: tuple[int, ...], values: np.ndarray) -> None:
        """Continue the Windkessel outlets ``ids`` from a checkpoint's state (4, n): now if
        attached, else when :meth:`attach_windkessel` is called."""
        if self._windkessel is None:
            self._saved_windkessel = (tuple(ids), np.array(values, dtype=np.float64))
            return
        _same_outlets(ids, self._windkessel.ids)
        self.backend.set_windkessel(self.state, self._windkessel, values)

    def windkessel_ids(self) -> tuple[int, ...]:
        """The opening ids of the attached Windkessel outlets (empty without any)."""
        return () if self._windkessel is None else self._windkessel.ids

    def windkessel_state(self) -> np.ndarray | None:
        """The Windkessel outlets' state (4, n: capacitor, pressure, flow out, density; lattice,
        :mod:`solver.windkessel`) now, None without any (one small host read)."""
        if self._windkessel is None:
            return None
        return self._closed_windkessel[0] if self.state is None else \
            self.backend.windkessel_state(self.state)

    def windkessel_trace(self) -> np.ndarray | None:
        """The outlets' (flow out, pressure) per update slot (TRACE, 2, n), None without any."""
        if self._windkessel is None:
            return None
        return self._closed_windkessel[1] if self.state is None else \
            self.backend.windkessel_trace(self.state)

    def wall_shear_stress(self) -> np.ndarray:
        """Wall shear stress magnitude on the fluid nodes next to a wall (grid shape, lattice
        units, NaN elsewhere; :mod:`solver.wall_shear`)."""
        voxels, values = self.wall_shear_values()
        out = np.full(self.shape, np.nan)
        out[tuple(voxels.T)] = values
        return out

    def wall_shear_values(self) -> tuple[np.ndarray, np.ndarray]:
        """The wall nodes' voxel indices (n, d) and their wall shear stress magnitudes (n,),
        lattice units: :meth:`wall_shear_stress` without the whole grid (over MPI ranks each
        rank computes its own nodes', only the values reach rank 0)."""
        walls = self._wall_nodes()
        return walls.voxels, self._reader().wall_shear(walls)

    def wall_shear_vectors(self) -> tuple[Any, Any]:
        """(wall nodes (:class:`solver.wall_shear.WallNodes`), shear stress vectors (n, d) at
        them, lattice units, left on the backend when the state fits one readout chunk)."""
        from .wall_shear import wall_nodes

        reader = self._reader()
        if self._walls is None:
            self._walls = wall_nodes(self.problem)
        return self._walls, reader.wall_shear_vectors(self._walls)

    def forces(self, axis: int | None = None) -> dict[int, observables.ObjectForce]:
        """Momentum-exchange force per solid label (see :func:`solver.observables.forces`)."""
        return observables.forces(self.problem, self.populations(), self._flow_axis(axis))

    def permeability(self, axis: int | None = None,
                     voxel_size: float | None = None) -> observables.Permeability:
        """Darcy permeability (see :func:`solver.observables.permeability`), lattice + SI."""
        voxel_size = voxel_size if voxel_size is not None else self.geometry.voxel_size
        return observables.permeability(self.problem, self.fields(), self._flow_axis(axis),
                                        voxel_size)

    def _flow_axis(self, axis: int | None) -> int | None:
        return axis if axis is not None else self.geometry.flow_axis

    def close(self) -> None:
        """Free the backend state (device memory)."""
        self._slice_cache.clear()
        self._readout = None
        if self.state is not None:
            if self._windkessel is not None:  # its last state and trace stay readable
                self._closed_windkessel = (self.windkessel_state(), self.windkessel_trace())
            self.backend.release(self.state)
            self.state = None

    def save(self, path: str | Path) -> Path:
        """Write a checkpoint (populations in the storage dtype, config, mask hash) atomically."""
        return save_simulation(self, path)

    @classmethod
    def load(cls, path: str | Path, geometry: GeometryLike | np.ndarray,
             backend: Backend | str | None = None
             ) -> Simulation:
        """Continue from a checkpoint on ``geometry``; refuses another geometry's checkpoint."""
        checkpoint = read_checkpoint(path)
        try:
            config = config_from_values(checkpoint.config)
        except (TypeError, ValueError) as exc:
            raise CheckpointError(f"The configuration in {path} is not valid here: {exc}"
                                  ) from exc
        sim = cls(geometry, config, backend)
        restore(sim, checkpoint)
        return sim


def _same_outlets(saved: tuple[int, ...], attached: tuple[int, ...]) -> None:
    """Refuse a checkpoint's Windkessel state for other outlets than the run's."""
    if tuple(saved) != tuple(attached):
        raise CheckpointError(f"The checkpoint holds Windkessel outlets {list(saved)}, this run "
                              f"couples {list(attached)}; resume with the openings it was "
                              "written with, or start a new run.")
