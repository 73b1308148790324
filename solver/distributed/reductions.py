"""Readouts of a distributed run reduced where the populations live: only scalars move.

Gathering a 1.6e9-node state to rank 0 in float64 (:meth:`DistributedBackend.populations`) is
240 GB; a permeability check needs four numbers. Each rank reads its owned tiles a bounded chunk
at a time from its backend (``device_populations``: NumPy arrays, or CuPy arrays on the GPU),
computes the moments as :func:`solver.fields.tile_moments` does and reduces them on the device
to: whether every owned fluid value is finite, the largest fluid speed, the sums of ``|u|`` and
of the momentum density along the flow axis (:func:`solver.observables.momentum_density`), and
the flux through every layer normal to that axis; then the ranks combine their numbers (min,
max, sums; a few kB) with one ``allgather``. Lattice units. On a CuPy rank (tiled or compact)
the same numbers come from one launch of the fused check (:class:`FusedNumbers`).

The run monitor's health check over ranks (:meth:`DistributedBackend.health_numbers`) is
reduced here too: each rank its owned tiles' partials (:func:`owned_health`, the arithmetic of
:func:`solver.readout.health_partial`, float64, summed in its chunk order), rank 0 adds them in
rank order (:func:`combine_health`): deterministic for a decomposition, equal to one process
to rounding (the sums' order differs), 2 + 2d + 4 numbers a rank instead of 4 a node; and so
is a permeability run's check (:class:`solver.rock.check.KCheck`) on a
:class:`DistributedBackend` (:func:`owned_k_check`, :meth:`DistributedBackend.k_check_numbers`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..fields import speed, tile_moments
from ..observables import darcy_window, momentum_density
from ..readout import end_layers, health_partial, k_check_partial
from .rank import RankSolver

__all__ = ["FlowNumbers", "owned_numbers", "FusedNumbers", "rank_numbers", "combine",
           "owned_health", "combine_health", "owned_k_check", "combine_partials", "READ_TILES",
           "RankReductions"]

#: Tiles read per chunk at most (64 nodes each; at the readout's upper bound of 49 kB per tile
#: with D3Q19 and float32, 3.2 GB a chunk: 200 chunks a check of a 1600³ mirrored rank).
READ_TILES = 65536


@dataclass(frozen=True)
class FlowNumbers:
    """A check's numbers over fluid nodes: ``finite``, ``max_speed``, ``speed_sum`` (sum of
    |u|), ``momentum`` (sum of j along ``axis``), ``plane_flux`` (that sum per layer along
    ``axis``, float64 (n,)) and ``fluid`` nodes counted."""

    axis: int
    finite: bool
    max_speed: float
    speed_sum: float
    momentum: float
    plane_flux: np.ndarray
    fluid: int

    @property
    def flux_spread(self) -> float:
        """(largest - smallest) layer flux over their mean: 0 at a steady state (mass is
        conserved through every layer of a periodic box); inf without flow."""
        mean = float(self.plane_flux.mean()) if self.plane_flux.size else 0.0
        if mean == 0.0:
            return float("inf")
        return float(self.plane_flux.max() - self.plane_flux.min()) / abs(mean)


def owned_numbers(solver: RankSolver, axis: int) -> FlowNumbers:
    """:class:`FlowNumbers` of the tiles ``solver`` owns, reduced on its device."""
    p, backend, xp = solver.problem, solver.backend, solver.backend.xp
    tiling = p.tiling
    solver.stepper.idle()
    n_layers, a, d = tiling.shape[axis], tiling.a, tiling.ndim
    per = max(1, min(READ_TILES, int(backend.readout_tiles(solver.state))))
    # XYZ in-tile order: x fastest, so axis k is dimension d - k of a (t, a, .., a) view.
    others = tuple(1 + b for b in range(d) if b != d - 1 - axis)
    flux = xp.zeros(n_layers, dtype=xp.float64)
    # Summed on the device, one copy to the host at the end: a 1600³ rank's check was 800
    # chunks of 16,384 tiles, each waiting for the device and the host (7 s a check).
    sums = xp.zeros(4, dtype=xp.float64)  # non-finite count, max speed, sum |u|, sum j
    fluid_count = 0
    for first in range(0, solver.n_owned, per):
        part = slice(first, min(solver.n_owned, first + per))
        f = backend.device_populations(solver.state, part)
        rho, u = tile_moments(f, p.lattice, p.force, p.incompressible, xp)
        del f
        host_fluid = ~tiling.solid[part]
        fluid = xp.asarray(host_fluid)
        magnitude = xp.where(fluid, speed(u, xp), 0.0)
        j = xp.where(fluid, momentum_density(p, rho, u[axis]), 0.0)
        bad = (~xp.isfinite(xp.where(fluid, rho, 1.0))).sum() + (~xp.isfinite(magnitude)).sum()
        # The flux per tile and in-tile layer, then into the layers by the tiles' corners
        # (made on the device: a host-made table sent 8 bytes per node per check, 6.4 GB a
        # check of a 1600³ mirrored rank); a tile's nodes summed first: 1/16 of the atomic
        # adds of a per-node bincount, which a chunk's few layers serialised.
        layered = j.reshape((j.shape[0],) + (a,) * d).sum(axis=others)  # (t, a)
        corner = xp.asarray(tiling.tiles[part, axis].astype(np.int64) * a
                            - tiling.offset[axis])
        coord = xp.clip(corner[:, None] + xp.arange(a)[None, :], 0, n_layers - 1)
        flux += xp.bincount(coord.reshape(-1), weights=layered.reshape(-1),
                            minlength=n_layers)
        sums += xp.stack([bad.astype(xp.float64), xp.zeros(()), magnitude.sum(), j.sum()])
        sums[1] = xp.maximum(sums[1], magnitude.max())
        fluid_count += int(host_fluid.sum())
    numbers = backend.to_host(sums)
    return FlowNumbers(axis, bool(numbers[0] == 0.0), float(numbers[1]), float(numbers[2]),
                       float(numbers[3]),
                       np.asarray(backend.to_host(flux), dtype=np.float64), fluid_count)


class FusedNumbers:
    """:func:`owned_numbers` in one launch of the fused k check on the rank's device
    (:func:`~solver.backends.cuda.compact_check.darcy_check` over its owned tiles, the
    per-layer flux summed in the kernel): a CuPy rank of a 3D lattice, tiled (whole-box flags
    per tile node, its slot table) or compact (its fluid nodes in the edge tables' order,
    which lists the owned tiles' first: the first ``starts[n_owned]`` nodes), two copies or in
    place, float16/32/64 storage, 32- or 64-bit offsets. Made once per solver (the flags, 1
    byte a node, and each owned tile's first layer stay on the device); calling it reads the
    current state. The sums add the nodes in another order than the chunked readout: equal to
    rounding. ``launch`` and ``max_blocks``: :func:`darcy_check`'s (an emulated launch in the
    CPU tests)."""

    def __init__(self, solver: RankSolver, axis: int, launch: Any = None,
                 max_blocks: int | None = None) -> None:
        p, xp, n = solver.problem, solver.backend.xp, solver.n_owned
        tiling = p.tiling
        solid = tiling.solid[:n].reshape(-1)
        self.solver, self.axis, self.launch, self.max_blocks = solver, axis, launch, max_blocks
        self.n_layers = int(tiling.shape[axis])
        self.fluid = int(solid.size - np.count_nonzero(solid))
        self.compact = _compact(solver.state)
        if self.compact:  # every listed node is fluid (a mirrored check's whole box)
            self.flags, self.slots = xp.full(self.fluid, 9, dtype=np.uint8), None
        else:  # 9 (window and fluid) where fluid, 0 where solid
            self.flags = xp.asarray(np.logical_not(solid).view(np.uint8) * np.uint8(9))
            self.slots = xp.asarray(np.asarray(solver.backend.to_host(_slots(solver)),
                                               dtype=np.int32))
        self.corner = xp.asarray((tiling.tiles[:n, axis].astype(np.int64) * tiling.a
                                  - tiling.offset[axis]).astype(np.int32))

    @classmethod
    def applies(cls, solver: RankSolver) -> bool:
        """Whether the rank's state is a CuPy run (tiled or compact) of a 3D lattice."""
        return solver.backend.name == "cupy" and solver.problem.lattice.d == 3

    def __call__(self) -> FlowNumbers:
        """The :class:`FlowNumbers` of the owned tiles now."""
        from ..backends.cuda.compact_check import darcy_check

        solver = self.solver
        solver.stepper.idle()
        latest = None if self.compact else _latest(solver.state)
        numbers, flux = darcy_check(solver.state, self.flags, self.axis, latest=latest,
                                    slots=self.slots, launch=self.launch,
                                    max_blocks=self.max_blocks, tiles=solver.n_owned,
                                    corner=self.corner, n_layers=self.n_layers)
        # [bad, max speed, sum |u|, sum u_axis, sum j (the Darcy flux), end sums]
        return FlowNumbers(self.axis, bool(numbers[0] == 0.0), float(numbers[1]),
                           float(numbers[2]), float(numbers[4]), flux, self.fluid)


def _compact(state: Any) -> bool:
    """Whether ``state`` is a compact run (its edge conversion tables list its fluid nodes)."""
    return bool(getattr(state, "edge", None))


def _latest(state: Any) -> Any:
    """The copy (T, q, N) holding the latest populations: a device run's, or a NumPy state's
    (XYZ order, two copies)."""
    return state.latest() if hasattr(state, "latest") else state.f[state.current]


def _slots(solver: RankSolver) -> Any:
    """The slot table (q, N) of the rank's tiled state (NumPy: XYZ order, the identity)."""
    slots = getattr(solver.state, "slots", None)
    if slots is not None:
        return slots
    p = solver.problem
    return np.tile(np.arange(p.tiling.nodes_per_tile), (p.lattice.q, 1))


def rank_numbers(solver: RankSolver, axis: int, fused: bool = True
                 ) -> Callable[[], FlowNumbers]:
    """How a check reads ``solver``'s :class:`FlowNumbers`: the fused kernel where it applies
    (a CuPy rank, tiled or compact) and ``fused`` (:class:`FusedNumbers`), else the chunked
    readout (:func:`owned_numbers`)."""
    if fused and FusedNumbers.applies(solver):
        return FusedNumbers(solver, axis)
    return lambda: owned_numbers(solver, axis)


def combine(mine: FlowNumbers, comm: Any) -> FlowNumbers:
    """Every rank's numbers combined (collective over ``comm``; the same on every rank)."""
    parts = [mine] if comm is None else comm.allgather(mine)
    return FlowNumbers(mine.axis, all(p.finite for p in parts),
                       max(p.max_speed for p in parts), sum(p.speed_sum for p in parts),
                       sum(p.momentum for p in parts),
                       np.sum([p.plane_flux for p in parts], axis=0),
                       sum(p.fluid for p in parts))


def owned_layers(solver: RankSolver, axis: int) -> tuple[np.ndarray, ...]:
    """Flat indices (row * a**d + node, ascending) of the owned fluid nodes in the global box's
    first and last layers along ``axis``; () when it is periodic."""
    limit = solver.n_owned * solver.problem.tiling.nodes_per_tile
    return tuple(index[index < limit] for index in end_layers(solver.problem, axis))


def owned_health(solver: RankSolver, layers: tuple[np.ndarray, ...]) -> np.ndarray:
    """This rank's health partials, host float64 (2 + 2d + 2 len(layers),): finite (1/0), max
    speed, sums of u and of j over its owned fluid nodes (:func:`solver.readout.health_partial`
    per readout chunk, added in chunk order on its device), then per end layer
    (:func:`owned_layers`) the sum of its nodes' densities and their count. Lattice units."""
    p, backend, xp = solver.problem, solver.backend, solver.backend.xp
    solver.stepper.idle()
    n_node, d = p.tiling.nodes_per_tile, p.lattice.d
    # No owned tiles: neutral numbers (0 + x and max(0, |u|) leave one chunk's bits as they are).
    total = xp.asarray(np.concatenate([[1.0, 0.0], np.zeros(2 * d + 2 * len(layers))]))
    per = solver.readout_tiles()
    for first in range(0, solver.n_owned, per):
        part = slice(first, min(solver.n_owned, first + per))
        f = backend.device_populations(solver.state, part)  # on the device: no host copy
        rho, u = tile_moments(f, p.lattice, p.force, p.incompressible, xp)
        del f
        numbers = [health_partial(p, xp.asarray(~p.tiling.solid[part]), rho, u, xp)]
        flat, base = rho.reshape(-1), part.start * n_node
        for index in layers:
            lo, hi = np.searchsorted(index, (base, part.stop * n_node))
            picked = flat[xp.asarray(index[lo:hi] - base)]
            numbers.append(xp.stack([picked.sum(), xp.asarray(float(hi - lo))]))
        total = combine_partials([total, xp.concatenate(numbers)], xp)
    return np.asarray(backend.to_host(total), dtype=np.float64)


def combine_partials(parts: list, xp: Any = np):
    """Partials ``[finite, max speed, sums...]`` (arrays of ``xp``) combined in list order
    (chunks, then ranks): finite of all (min), the largest speed (NaN propagates), the sums
    added one by one."""
    total = parts[0]
    for numbers in parts[1:]:
        total = xp.concatenate([xp.minimum(total[:1], numbers[:1]),
                                xp.maximum(total[1:2], numbers[1:2]), total[2:] + numbers[2:]])
    return total


def combine_health(parts: list[np.ndarray], d: int) -> np.ndarray:
    """Every rank's :func:`owned_health` (in rank order) as the health numbers of
    :meth:`solver.readout.Readout.health`: partials (2 + 2d) combined
    (:func:`combine_partials`), then the end layers' mean densities (none when one end layer
    holds no fluid node)."""
    total = combine_partials(parts)
    ends = total[2 + 2 * d:].reshape(-1, 2)
    means = ends[:, 0] / ends[:, 1] if ends.size and np.all(ends[:, 1] > 0) else np.zeros(0)
    return np.concatenate([total[:2 + 2 * d], means])


def owned_k_check(solver: RankSolver, axis: int, window: tuple[int, int]) -> np.ndarray:
    """This rank's permeability-check partials over its owned tiles, host float64 (4 + ends,):
    :func:`solver.readout.k_check_partial` per readout chunk of the Darcy window of layers
    ``window`` along ``axis`` (:func:`solver.observables.darcy_window` of the rank's tiling,
    global coordinates), added in chunk order on its device; combined over ranks by
    :func:`combine_partials`. Lattice units."""
    p, backend, xp = solver.problem, solver.backend, solver.backend.xp
    solver.stepper.idle()
    darcy = darcy_window(p, axis, window, xp)
    total = xp.asarray(np.concatenate([[1.0, 0.0, 0.0, 0.0], np.zeros(1 + len(darcy.ends))]))
    per = solver.readout_tiles()
    for first in range(0, solver.n_owned, per):
        part = slice(first, min(solver.n_owned, first + per))
        f = backend.device_populations(solver.state, part)
        rho, u = tile_moments(f, p.lattice, p.force, p.incompressible, xp)
        del f
        fluid = xp.asarray(~p.tiling.solid[part])
        # Solid nodes: density 1, no flow (they may hold NaN), as the one-process check reads.
        numbers = k_check_partial(p, darcy.part(part), fluid, xp.where(fluid, rho, 1.0),
                                  xp.where(fluid, u, 0.0), xp)
        total = combine_partials([total, numbers], xp)
    return np.asarray(backend.to_host(total), dtype=np.float64)


class RankReductions:
    """The :class:`~solver.backends.base.Reductions` of a :class:`DistributedBackend`
    (``backend``): every readout's sums made on the ranks, each over its own tiles, and only
    the numbers, moments or wall vectors sent to rank 0 (its ``tile_moments``,
    ``health_numbers``, ``k_check_numbers`` and ``wall_shear_vectors``); the caller's
    ``local`` computation is not used."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def tile_moments(self, state: Any, tiles: Any, local: Any) -> tuple[Any, Any]:
        """The moments of ``tiles`` made on the ranks owning them."""
        return self.backend.tile_moments(state, tiles)

    def health_numbers(self, state: Any, axis: int, local: Any) -> np.ndarray:
        """The health numbers reduced on the ranks."""
        return self.backend.health_numbers(state, axis)

    def k_check_numbers(self, state: Any, axis: int, window: tuple[int, int], local: Any
                        ) -> np.ndarray:
        """A permeability check's numbers reduced on the ranks."""
        return self.backend.k_check_numbers(state, axis, window)

    def wall_shear_vectors(self, state: Any, walls: Any) -> np.ndarray | None:
        """The vectors computed by the ranks owning the wall nodes (None in place, where the
        readout gathers the state)."""
        return self.backend.wall_shear_vectors(state, walls)
