"""Reading a run's state in chunks of tiles: moments, fields and health numbers (lattice units).

A backend hands out its latest populations ``backend.readout_tiles(state)`` tiles at a time
(``device_populations(state, tiles)``). The tiled storage holds the tiled layout already and
reads all tiles in one chunk, exactly as a whole read; the fluid-compacted storage converts
each chunk from its compact copy (:mod:`solver.backends.cuda.compact_readout`), so a readout
never builds a tiled copy of all populations nor float64 moments of every tile node on the
device: the peak of a compact run stays near its resident state (issue 20). Every node's
moments are computed alone (:func:`solver.fields.tile_moments`), so fields and cuts have the
same bits under any chunking; health sums add per-chunk sums (the last bits may differ from
one whole sum, never more).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from . import observables
from .fields import Cut, speed, tile_moments
from .problem import Problem
from .wall_shear import WallNodes, wall_shear_stress, wall_shear_vector

__all__ = ["Readout", "health_partial", "k_check_partial", "end_layers"]


def health_partial(problem: Problem, fluid, rho, u, xp: Any = np):
    """Health partials (2 + 2d,) float64 of tiles' moments ``rho`` (t, N), ``u`` (d, t, N)
    with fluid mask ``fluid`` (t, N): finite (1/0), max speed, sums of u and of the momentum
    density j over the fluid nodes (lattice units); the one arithmetic of a chunk's health,
    in one process and on each MPI rank (:mod:`solver.distributed.reductions`)."""
    d = u.shape[0]
    u_fluid = xp.where(fluid, u, 0.0)  # solid nodes hold no flow (may hold NaN)
    finite = xp.isfinite(xp.where(fluid, rho, 1.0)).all() & xp.isfinite(u_fluid).all()
    j = observables.momentum_density(problem, xp.where(fluid, rho, 0.0), u_fluid)
    return xp.concatenate([
        finite.astype(xp.float64).reshape(1), speed(u_fluid, xp).max().reshape(1),
        u_fluid.reshape(d, -1).sum(axis=1), j.reshape(d, -1).sum(axis=1)])


def k_check_partial(problem: Problem, window: observables.DarcyWindow, fluid, rho, u,
                    xp: Any = np):
    """A permeability check's partials (4 + len(window.ends),) float64 of tiles' moments
    (solid nodes' density 1 and flow 0) cut with ``window`` (:meth:`DarcyWindow.part`):
    finite (1/0), max speed, sums of |u| and of u along the axis over the window's fluid
    nodes, then :func:`solver.observables.darcy_sums` (:class:`solver.rock.check.KCheck`, in
    one process and on each MPI rank). Lattice units."""
    finite = xp.isfinite(rho).all() & xp.isfinite(u).all()
    sums = observables.darcy_sums(problem, window, fluid, rho, u, xp)
    inside = fluid if window.inside is None else window.inside
    magnitude = speed(u, xp)
    flow = xp.stack([xp.where(inside, magnitude, 0.0).sum(),
                     xp.where(inside, u[window.axis], 0.0).sum()])
    return xp.concatenate([finite.astype(xp.float64).reshape(1), magnitude.max().reshape(1),
                           flow, sums])


def end_layers(problem: Problem, axis: int) -> tuple[np.ndarray, ...]:
    """Sorted flat fluid-node indices (tile * a**d + node) of the first and last layers of
    the box along ``axis`` in ``problem``'s tiling (host), or () when ``axis`` is periodic
    (a pressure drop is measured between them). On an MPI rank's tiling (global node
    coordinates) they are its owned and halo tiles' nodes of the global end layers."""
    t = problem.tiling
    if problem.periodic[axis]:
        return ()
    # Only the tiles crossing an end layer: no (T, a**d, d) coordinate table of all tiles.
    corner = t.tiles[:, axis].astype(np.int64) * t.a - t.offset[axis]
    local = t.local_coordinates()[:, axis]
    n = t.nodes_per_tile
    found = []
    for end in (0, t.shape[axis] - 1):
        tiles = np.flatnonzero((corner <= end) & (end < corner + t.a))
        on = (corner[tiles, None] + local[None, :] == end) & ~t.solid[tiles]
        found.append((tiles[:, None] * n + np.arange(n)[None, :])[on])
    return tuple(found)


class Readout:
    """Chunked reads of ``state`` (allocated by ``backend`` for ``problem``); ``flow_axis``:
    the axis whose first and last fluid layers' densities a health check reports when it is
    not periodic."""

    def __init__(self, problem: Problem, backend: Any, state: Any, flow_axis: int) -> None:
        self.problem, self.backend, self.state, self.xp = problem, backend, state, backend.xp
        self.flow_axis = flow_axis
        self._fluid = None  # fluid mask (T, N) as a backend array, made on first use
        self._layers: tuple | None = None  # (host, device) flat indices of the end layers
        self._nodes: dict = {}  # key -> the backend's NodeIndex of a node set (node_moments)
        self._n_fluid: int | None = None  # fluid nodes, made on a chunked health check
        self._memo: dict = {}  # key -> host or backend arrays made once per node set (memo)

    def memo(self, key: Any, make: Any) -> Any:
        """``make()`` the first time ``key`` is asked for on this state, then the same value
        (index arrays of a node set: their host work is not redone on every read)."""
        if key not in self._memo:
            if len(self._memo) > 64:
                self._memo.clear()
            self._memo[key] = make()
        return self._memo[key]

    def chunks(self, tiles: Any = None) -> Iterator[tuple[slice, Any, Any]]:
        """``(part, rho, u)`` per chunk: the chunk's positions in the state's tiles (``tiles``
        None) or in the index array ``tiles``, its density (t, N) and velocity (d, t, N),
        float64 backend arrays."""
        p, backend = self.problem, self.backend
        n = p.tiling.n_tiles if tiles is None else len(tiles)
        per = backend.readout_tiles(self.state)
        for first in range(0, n, per):
            part = slice(first, min(n, first + per))
            which = part if tiles is None else tiles[part]
            # Made where the populations lie (MPI ranks: each its own tiles'), or read here.
            yield (part, *backend.reductions.tile_moments(
                self.state, which, lambda which=which: tile_moments(
                    backend.device_populations(self.state, which), p.lattice, p.force,
                    p.incompressible, self.xp)))

    def node_moments(self, flat: np.ndarray, solid: np.ndarray, key: Any = None
                     ) -> tuple[Any, Any]:
        """Density (n,) and velocity (d, n), float64 backend arrays, at the flat tile-node
        indices ``flat`` (host or backend, ``tile * a**d + node``; ``solid`` True: no
        populations, they read the rest state): only those nodes' populations are gathered,
        straight from the stored layout, ``readout_tiles * a**d`` nodes at a time, and each
        node's moments are the arithmetic of :meth:`chunks` (the same bits). ``key``:
        remember the node set's index under it (a cut, the coarse grid)."""
        index = self._nodes.get(key) if key is not None else None
        if index is None:
            n = self.problem.tiling.nodes_per_tile
            flat = np.asarray(self.backend.to_host(flat), dtype=np.int64).reshape(-1)
            index = self.backend.node_index(self.state, flat // n, flat % n,
                                            np.asarray(solid, dtype=bool))
            if key is not None:
                if len(self._nodes) > 64:
                    self._nodes.clear()
                self._nodes[key] = index
        # readout_tiles * a**d nodes at a time: temporaries within a readout chunk's budget.
        n, per = len(index), self.backend.readout_tiles(self.state) * \
            self.problem.tiling.nodes_per_tile
        if n <= per:
            return self._moments_of(self.backend.node_populations(self.state, index))
        xp = self.xp
        rho = xp.empty(n, dtype=xp.float64)
        u = xp.empty((self.problem.lattice.d, n), dtype=xp.float64)
        for first in range(0, n, per):
            part = slice(first, min(n, first + per))
            rho[part], u[:, part] = self._moments_of(
                self.backend.node_populations(self.state, index.part(part)))
        return rho, u

    def _moments_of(self, f) -> tuple[Any, Any]:
        """Density (n,) and velocity (d, n) of populations ``f`` (q, n), computed as tiles of
        a**d nodes (the last one padded with copies of the last node): the very reduction of
        :meth:`chunks`, so a device's sums give each node the same bits as there."""
        p, xp = self.problem, self.xp
        q, n = f.shape
        size = p.tiling.nodes_per_tile
        pad = -n % size
        if pad and n:
            f = xp.concatenate([f, xp.repeat(f[:, -1:], pad, axis=1)], axis=1)
        # Contiguous (tiles, q, a**d), as a chunk of tiles is laid out.
        tiles = xp.ascontiguousarray(f.reshape(q, -1, size).transpose(1, 0, 2))
        rho, u = tile_moments(tiles, p.lattice, p.force, p.incompressible, xp)
        return rho.reshape(-1)[:n], u.reshape(u.shape[0], -1)[:, :n]

    def moments(self, tiles: Any = None) -> tuple[Any, Any]:
        """Density (T, N) and velocity (d, T, N), float64 backend arrays, of all tiles or of the
        index array ``tiles``; one chunk is returned as it is (no copy)."""
        return self._assemble(tiles, self.xp.empty, lambda a: a)

    def host_moments(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`moments` of all tiles on the host, filled chunk by chunk."""
        return self._assemble(None, np.empty, self.backend.to_host)

    def _assemble(self, tiles: Any, empty, convert) -> tuple[Any, Any]:
        """The chunks' moments of all tiles (or of ``tiles``), each ``convert``-ed, in arrays
        from ``empty`` (float64); one chunk is returned converted as it is."""
        n = self.problem.tiling.n_tiles if tiles is None else len(tiles)
        chunks = self.chunks(tiles)
        part, rho, u = next(chunks)
        if part.stop == n:
            return convert(rho), convert(u)
        out_rho = empty((n, rho.shape[1]), dtype=np.float64)
        out_u = empty((u.shape[0], n, u.shape[2]), dtype=np.float64)
        out_rho[part], out_u[:, part] = convert(rho), convert(u)
        for part, rho, u in chunks:
            out_rho[part], out_u[:, part] = convert(rho), convert(u)
        return out_rho, out_u

    def health(self, cut: Cut | None = None, key: Any = None) -> tuple[dict, Any]:
        """The health numbers (:meth:`solver.simulation.Simulation.health`) from one pass over
        the chunks, and with a ``cut`` its moments ``(rho, u, index)`` (index into them; None:
        they are the cut's nodes in order): taken from the pass when it was one chunk, else
        gathered at the cut's nodes alone (:meth:`node_moments`, remembered under ``key``)."""
        whole: list = []  # the pass's moments when it read the state in one chunk
        # Summed where the populations lie (MPI ranks: each its own tiles'), or here.
        numbers = self.backend.reductions.health_numbers(
            self.state, self.flow_axis, lambda: self._local_health(whole))
        looked = None
        if cut is not None:
            looked = (*whole[0], cut.nodes) if whole else \
                (*self.node_moments(cut.nodes, cut.solid.reshape(-1), key), None)
        return self._numbers(numbers), looked

    def _local_health(self, whole: list) -> np.ndarray:
        """The health numbers summed on the state's device, the chunks' moments appended to
        ``whole`` when they were one chunk (a chunked state's readout: its fluid nodes)."""
        xp, t = self.xp, self.problem.tiling
        if self.backend.readout_tiles(self.state) < t.n_tiles:  # chunked: read fluid nodes
            total, means = self._fluid_health()
            return self.backend.to_host(xp.concatenate([total, *means]))
        layers = self._flow_layers()
        values = [xp.empty(len(host), dtype=xp.float64) for host, _ in layers]
        total = None
        for part, rho, u in self.chunks():
            total = self._combine(total, self._partial(part, rho, u))
            nodes = slice(part.start * t.nodes_per_tile, part.stop * t.nodes_per_tile)
            flat_rho = rho.reshape(-1)
            for (host, device), out in zip(layers, values, strict=True):
                lo, hi = np.searchsorted(host, (nodes.start, nodes.stop))
                out[lo:hi] = flat_rho[device[lo:hi] - nodes.start]
            if part.stop - part.start == t.n_tiles:
                whole.append((rho, u))
        means = [v.mean().reshape(1) for v in values]
        return self.backend.to_host(xp.concatenate([total, *means]))

    def _fluid_health(self) -> tuple[Any, list]:
        """The combined partials and the layer means of a chunked state, read as stored: the
        fluid nodes ``readout_tiles * a**d`` at a time (``backend.fluid_populations``, no tile
        converted), the end layers' nodes alone (:meth:`node_moments`). Each node's moments
        are :meth:`chunks`' bits; the sums differ from the tile chunks' in the order only."""
        t = self.problem.tiling
        if self._n_fluid is None:
            self._n_fluid = int(np.count_nonzero(~t.solid))
        per = self.backend.readout_tiles(self.state) * t.nodes_per_tile
        total = None
        for first in range(0, self._n_fluid, per):
            f = self.backend.fluid_populations(self.state,
                                               slice(first, min(self._n_fluid, first + per)))
            total = self._combine(total, self._fluid_partial(*self._moments_of(f)))
        means = [self.node_moments(host, np.zeros(len(host), dtype=bool), ("layer", k))[0]
                 .mean().reshape(1) for k, (host, _) in enumerate(self._flow_layers())]
        return total, means

    def _fluid_partial(self, rho, u):
        """:meth:`_partial` of fluid nodes only: density (k,) and velocity (d, k)."""
        xp = self.xp
        finite = xp.isfinite(rho).all() & xp.isfinite(u).all()
        j = observables.momentum_density(self.problem, rho, u)
        return xp.concatenate([finite.astype(xp.float64).reshape(1), speed(u, xp).max().reshape(1),
                               u.sum(axis=1), j.sum(axis=1)])

    def wall_shear_vectors(self, walls: WallNodes) -> Any:
        """Wall shear stress vectors (n, d), lattice units: a backend array when the state is
        read in one chunk (nothing leaves the device), else assembled on the host."""
        backend, n = self.backend, self.problem.tiling.n_tiles
        by_ranks = self._by_ranks(walls)
        if by_ranks is not None:
            return by_ranks
        if backend.readout_tiles(self.state) >= n:
            f = backend.device_populations(self.state)
            return wall_shear_vector(self.problem, f, walls, self.xp)
        f = backend.populations(self.state)  # host, float64: a large run's slow path
        return wall_shear_vector(self.problem, f, walls, np)

    def _by_ranks(self, walls: WallNodes) -> np.ndarray | None:
        """The shear vectors computed where the state lives, as the backend's ``reductions``
        say (MPI ranks: each rank its own wall nodes, only the vectors gathered); None where
        this readout computes them (one device; ranks in place)."""
        return self.backend.reductions.wall_shear_vectors(self.state, walls)

    def wall_shear(self, walls: WallNodes) -> np.ndarray:
        """Wall shear stress magnitude (n,) at ``walls``' nodes on the host, lattice units
        (:func:`solver.wall_shear.wall_shear_stress`). In chunks: the wall nodes of a range of
        own tiles (direction 0 is the node's own tile) with the tiles their pulls read, at
        most a 3^3 neighbourhood each, so the range is 1/27 of a readout chunk."""
        backend, n = self.backend, self.problem.tiling.n_tiles
        by_ranks = self._by_ranks(walls)
        if by_ranks is not None:  # the magnitude as wall_shear_stress takes it
            return np.sqrt((by_ranks * by_ranks).sum(axis=1))
        per = backend.readout_tiles(self.state)
        if per >= n:  # one chunk: all populations at once
            f = backend.device_populations(self.state)
            return backend.to_host(wall_shear_stress(self.problem, f, walls, self.xp))
        own = max(1, per // 27)
        order = np.argsort(walls.tile[0], kind="stable")
        bounds = np.searchsorted(walls.tile[0][order], np.arange(0, n + own, own))
        out = np.empty(len(walls.voxels))
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            pick = order[lo:hi]
            if pick.size:
                tiles = np.unique(walls.tile[:, pick])  # sorted: local index by searchsorted
                part = WallNodes(walls.voxels[pick], walls.normals[pick],
                                 np.searchsorted(tiles, walls.tile[:, pick]),
                                 walls.direction[:, pick], walls.node[:, pick])
                f = backend.device_populations(self.state, self.xp.asarray(tiles))
                out[pick] = backend.to_host(wall_shear_stress(self.problem, f, part, self.xp))
        return out

    def _partial(self, part: slice, rho, u):
        """Per chunk (2 + 2d,): finite (1/0), max speed, sum of u and of j over fluid nodes."""
        if self._fluid is None:
            self._fluid = self.xp.asarray(~self.problem.tiling.solid)
        return health_partial(self.problem, self._fluid[part], rho, u, self.xp)

    def _combine(self, total, part):
        """Running partials of the chunks so far: finite of all, largest speed, sums added in
        chunk order (one chunk: its own numbers exactly); constant memory for any count."""
        if total is None:
            return part
        xp = self.xp
        return xp.concatenate([xp.minimum(total[:1], part[:1]), xp.maximum(total[1:2], part[1:2]),
                               total[2:] + part[2:]])

    def _numbers(self, numbers: np.ndarray) -> dict:
        """The health dict from the combined partials (2 + 2d) and the layer means."""
        d = self.problem.lattice.d
        if numbers[0] != 1.0:
            return {"finite": False, "max_speed": float("inf"),
                    "mean_velocity": np.full(d, np.nan), "mean_momentum": np.full(d, np.nan),
                    "layer_density": None}
        volume = float(np.prod(self.problem.tiling.shape))
        return {"finite": True, "max_speed": float(numbers[1]),
                "mean_velocity": numbers[2:2 + d] / volume,
                "mean_momentum": numbers[2 + d:2 + 2 * d] / volume,
                "layer_density": tuple(float(v) for v in numbers[2 + 2 * d:]) or None}

    def _flow_layers(self) -> tuple:
        """(host, backend) sorted flat fluid-node indices of the first and last layers along
        the flow axis when it is not periodic (what a pressure drop is measured between)."""
        if self._layers is None:
            found = end_layers(self.problem, self.flow_axis)
            self._layers = ()
            if found and all(index.size for index in found):
                self._layers = tuple((i, self.xp.asarray(i)) for i in found)
        return self._layers
