"""Each rank builds only its own part of a distributed run: a cheap global summary, then its slab.

The path through :class:`~solver.distributed.backend.DistributedBackend` broadcasts the whole
problem, so every rank holds the whole image and its tiling: a 1600³ image mirrored (8.2e9
voxels) times the ranks of a node does not fit. Here no rank ever holds more than its slab:

1. :func:`summarize` — the ranks split the tile layers along the decomposition axis evenly
   and read their share of the image from a region source (:mod:`geometries.regions`) a few
   tile layers at a time; per tile layer they count the non-empty tiles and the fluid nodes,
   and the solid-fluid faces of the whole; one ``allgather`` gives every rank the same
   :class:`SlabSummary` (a few int64 per tile layer). A mirrored source is summarised from
   its sample (half the reads) when the sample is whole tile layers long.
2. :func:`local_part` — the slabs are cut from the summary exactly as
   :func:`~solver.distributed.decomposition.decompose` cuts the tiling of the whole image
   (the same bounds, tests/solver/test_local_setup.py); the rank reads its slab and one tile
   layer on each side (the halo; wrapped on a periodic axis) and tiles them in GLOBAL
   coordinates, the tiles in Algorithm 1's order (x fastest). Any two ranks then number the
   tiles they both hold in the same relative order, which is all the halo plan
   (:func:`~solver.distributed.halo.build_rank`) needs to match buffers without
   communication.
3. :func:`local_rank` — the rank's :class:`~solver.distributed.rank.RankSolver` on its own
   backend, with the tile storage and the halo transport agreed by all ranks.

The tile grid sits at the origin (``tile_offset='origin'``: the offset search needs the whole
image). Lengths in voxels, counts in nodes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from geometries.regions import MirroredRegions, RegionSource

from ..backends import Backend, device_capacity
from ..config import ConfigError, SimulationConfig
from ..problem import Problem
from ..tiling import Tiling
from .decomposition import SlabDecomposition, cut_layers, rank_layers
from .rank import RankSolver
from .transport import choose_transport, exchange_factory, local_report

__all__ = ["SlabSummary", "summarize", "rank_layers", "slab_tiling", "local_part", "local_rank",
           "agreed_storage",
           "CHUNK_TILE_LAYERS"]

#: Tile layers read per chunk while summarising (1600² voxels a layer: 16 tile layers of 4
#: voxels are 164 MB of mask).
CHUNK_TILE_LAYERS = 16


@dataclass(frozen=True)
class SlabSummary:
    """What every rank knows of the whole image: per tile layer along ``axis`` (tile edge
    ``a``) the non-empty tiles ``tiles`` and fluid nodes ``fluid`` (int64), and the
    solid-fluid voxel faces ``faces`` of the box ``shape``."""

    shape: tuple[int, ...]
    axis: int
    a: int
    tiles: np.ndarray
    fluid: np.ndarray
    faces: int

    @property
    def n_fluid(self) -> int:
        """Fluid nodes of the image."""
        return int(self.fluid.sum())

    @property
    def porosity(self) -> float:
        """Fluid fraction of the image."""
        return self.n_fluid / float(np.prod(self.shape))

    @property
    def surface(self) -> float:
        """Solid-fluid faces per voxel (what :func:`solver.rock.protocol.kozeny_carman` reads)."""
        return self.faces / float(np.prod(self.shape))

    def bounds(self, n_ranks: int, multiple: int = 1) -> np.ndarray:
        """Tile-layer bounds of ``n_ranks`` slabs balanced by non-empty tiles (int64), every
        inner bound a multiple of ``multiple`` (a coarse start's levels: the slabs of the box
        coarsened by 2^L are then this box's halved L times, :mod:`.coarse_start`)."""
        if multiple > 1:
            blocks = np.add.reduceat(self.tiles, np.arange(0, len(self.tiles), multiple))
            bounds = np.minimum(cut_layers(blocks, n_ranks) * multiple, len(self.tiles))
        else:
            bounds = cut_layers(self.tiles, n_ranks)
        per_rank = np.add.reduceat(self.tiles, bounds[:-1])
        empty = np.flatnonzero(per_rank == 0)
        if empty.size:
            raise ConfigError(f"Rank(s) {empty.tolist()} would get no fluid tile: the fluid "
                              f"spans too few tile layers along axis {self.axis} for {n_ranks} "
                              "ranks; use fewer ranks or another decomposition axis.")
        return bounds


def _layer_voxels(shape: tuple[int, ...], axis: int, a: int, first: int, end: int):
    """Voxel layers ``[start, stop)`` of tile layers ``[first, end)`` (tile grid at 0)."""
    return first * a, min(end * a, shape[axis])


def _summarize_layers(source: RegionSource, axis: int, a: int, first: int, end: int
                      ) -> tuple[np.ndarray, np.ndarray, int]:
    """Non-empty tiles and fluid nodes per tile layer of ``[first, end)``, and their faces
    (along ``axis`` up to the next layer, which is read for that)."""
    shape = source.shape
    start, stop = _layer_voxels(shape, axis, a, first, end)
    more = stop < shape[axis]
    solid = source.slab(axis, start, stop + int(more))
    core = solid if not more else np.take(solid, np.arange(stop - start), axis=axis)
    faces = int(np.count_nonzero(np.diff(solid, axis=axis)))
    faces += sum(int(np.count_nonzero(np.diff(core, axis=b)))
                 for b in range(solid.ndim) if b != axis)
    fluid = ~core
    others = tuple(b for b in range(fluid.ndim) if b != axis)
    padded = np.pad(fluid, [(0, -n % a) for n in fluid.shape])
    blocks = padded.reshape([k for n in padded.shape for k in (n // a, a)])
    occupied = blocks.any(axis=tuple(range(1, 2 * fluid.ndim, 2)))
    tiles = occupied.sum(axis=others).astype(np.int64)
    per_voxel_layer = fluid.sum(axis=others).astype(np.int64)
    layers = np.add.reduceat(per_voxel_layer, np.arange(0, stop - start, a))
    return tiles, layers, faces


def summarize(source: RegionSource, axis: int, a: int, comm: Any = None,
              chunk: int = CHUNK_TILE_LAYERS) -> SlabSummary:
    """The :class:`SlabSummary` of ``source``, the work split over the ranks of ``comm``
    (None: this process alone); the same on every rank."""
    shape = tuple(source.shape)
    if isinstance(source, MirroredRegions) and source.axis == axis and \
            source.source.shape[axis] % a == 0:
        # The mirror's tile layers are the sample's reversed; its faces twice the sample's (the
        # mirror plane joins two equal layers).
        half = summarize(source.source, axis, a, comm, chunk)
        return SlabSummary(shape, axis, a, np.concatenate([half.tiles, half.tiles[::-1]]),
                           np.concatenate([half.fluid, half.fluid[::-1]]), 2 * half.faces)
    n_layers = -(-shape[axis] // a)
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    cuts = np.linspace(0, n_layers, size + 1).round().astype(int)
    tiles, fluid, faces = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], 0
    for first in range(cuts[rank], cuts[rank + 1], chunk):
        t, f, n = _summarize_layers(source, axis, a, first, min(first + chunk, cuts[rank + 1]))
        tiles.append(t)
        fluid.append(f)
        faces += n
    mine = (np.concatenate(tiles), np.concatenate(fluid), faces)
    parts = [mine] if comm is None else comm.allgather(mine)
    return SlabSummary(shape, axis, a, np.concatenate([p[0] for p in parts]),
                       np.concatenate([p[1] for p in parts]), int(sum(p[2] for p in parts)))


def slab_tiling(source: RegionSource, axis: int, a: int, runs: list[tuple[int, int]]) -> Tiling:
    """The tiling of the tile layers ``runs`` of ``source`` in global coordinates (the
    global shape and tile grid, tile grid at the origin; other layers hold no tile)."""
    shape = tuple(source.shape)
    d = len(shape)
    tiles, solids = [], []
    for first, end in runs:
        start, stop = _layer_voxels(shape, axis, a, first, end)
        part = Tiling.build(source.slab(axis, start, stop), a, (0,) * d)
        shifted = part.tiles.copy()
        shifted[:, axis] += first
        tiles.append(shifted)
        solids.append(part.solid)
    tiles_all = np.concatenate(tiles) if tiles else np.zeros((0, d), np.int32)
    solid = np.concatenate(solids) if solids else np.zeros((0, a**d), bool)
    order = np.lexsort(tuple(tiles_all[:, k] for k in range(d)))  # Algorithm 1: x fastest
    tiles_all, solid = tiles_all[order], solid[order]
    grid = tuple(-(-n // a) for n in shape)
    tile_map = np.full(grid, -1, dtype=np.int32)
    tile_map[tuple(tiles_all.T)] = np.arange(len(tiles_all), dtype=np.int32)
    return Tiling(shape, a, (0,) * d, tile_map, tiles_all.astype(np.int32), solid)


def local_part(source: RegionSource, config: SimulationConfig, summary: SlabSummary,
               n_ranks: int, rank: int, bounds: np.ndarray | None = None
               ) -> tuple[Problem, SlabDecomposition]:
    """``rank``'s problem (its slab and halo layers) and the decomposition of its tiles
    (slab ``bounds`` in tile layers; default ``summary.bounds(n_ranks)``)."""
    bounds = summary.bounds(n_ranks) if bounds is None else np.asarray(bounds, dtype=np.int64)
    axis = summary.axis
    periodic = config.periodic_axes()[axis]
    tiling = slab_tiling(source, axis, summary.a, rank_layers(bounds, rank, periodic))
    owner = (np.searchsorted(bounds, tiling.tiles[:, axis], side="right") - 1).astype(np.int32)
    decomposition = SlabDecomposition(axis, tuple(int(b) for b in bounds), owner, summary.tiles)
    return Problem.from_tiling(tiling, config), decomposition


def agreed_storage(problem: Problem, backend: Backend, comm: Any) -> Problem:
    """``problem`` with an explicit tile storage, rank 0's plan for 'auto' (the ranks' own
    tile utilisations differ; tiled and compact storage agree to rounding only), compact on
    every rank where any rank's part fits its device only so (the plan's compact storage with
    64-bit offsets under 'auto': :func:`~solver.backends.plan.plan_for` on the rank's part
    and its device's memory, ``Problem.device_capacity``; collective over ``comm``)."""
    if problem.tile_storage != "auto" or backend.phase_stepper is None:
        return problem
    from ..backends.plan import plan_for

    if problem.device_capacity is None:
        problem = dataclasses.replace(problem, device_capacity=device_capacity(backend))
    # As RankSolver asks (every tile owned): a rank's limits (float16 keeps the tiled storage).
    as_rank = dataclasses.replace(problem, owned=np.ones(problem.tiling.n_tiles, bool))
    plan = plan_for(as_rank)
    mine = (plan.tile_storage, plan.compact and plan.wide)
    every = [mine] if comm is None else comm.allgather(mine)
    chosen = "compact" if any(by_memory for _, by_memory in every) else every[0][0]
    return dataclasses.replace(problem, tile_storage=chosen)


def local_rank(problem: Problem, decomposition: SlabDecomposition, backend: Backend,
               comm: Any, transport: str = "auto", link: Any = None
               ) -> tuple[RankSolver, Any, str]:
    """This rank's :class:`RankSolver` over its part (:func:`local_part`; collective over
    ``comm``), the NCCL link it built or was given (None with the host transport) and the
    transport used ('nccl' or 'host')."""
    rank = comm.Get_rank()
    error, report = None, None
    try:
        report = local_report(backend) if transport != "host" else None
    except Exception as exc:  # every rank learns of it before any collective set-up
        error = f"rank {rank}: {exc}"
    gathered = comm.allgather((error, report))
    errors = [e for e, _ in gathered if e]
    if errors:
        raise ConfigError("; ".join(errors))
    problem = agreed_storage(problem, backend, comm)
    used, _why = ("host", "requested") if transport == "host" else \
        choose_transport(transport, [r for _, r in gathered])
    if used == "nccl" and link is None:
        link = backend.nccl_link(comm)
    solver, error = None, None
    try:
        solver = RankSolver(problem, decomposition, rank, backend,
                            exchange_factory(used, comm, link))
    except Exception as exc:  # e.g. out of memory on one rank: all of them stop together
        error = f"rank {rank}: {type(exc).__name__}: {exc}"
    errors = [e for e in comm.allgather(error) if e]
    if errors:
        if solver is not None:
            solver.release()
        raise RuntimeError("; ".join(errors))
    return solver, link, used
