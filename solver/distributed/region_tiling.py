"""The whole tiling of a voxel image built by the ranks, each from its own slab: no rank reads
the whole image (``mpirun ... python -m solver run CASE`` of a region-readable image).

Rank 0 of ``solver run`` drives an ordinary Simulation over the whole tiling, but it need not
hold the voxel image (1 byte a voxel) to get it. From a region source
(:mod:`geometries.regions`, e.g. :class:`~geometries.regions.ImageRegions`, a ``.npy`` or
``.raw`` file memory-mapped) the ranks build exactly what :meth:`solver.tiling.Tiling.build`
builds of the whole image, in two passes:

1. :func:`survey` — the tile layers of the origin grid along the read axis (the flow axis: the
   chord lengths of the stability check run across it) are split evenly; each rank reads its
   share a few tile layers at a time and counts, for every tile-grid offset the search tries
   (``a**d``, or the origin alone), the non-empty tiles per tile layer along every axis (a tile
   layer is counted by the rank whose share holds its first voxel), the fluid nodes and the
   chord counts of the stability check (:func:`solver.stability.chord_counts`, across the read
   axis). The ranks add these integers (:func:`combine`: one ``allreduce``), so every rank
   picks the same offset, with the same eta_t and tie rule as
   :func:`solver.tiling.best_offset`, and the same decomposition axis and slab bounds as
   :func:`~solver.distributed.decomposition.decompose` on the whole tiling (balanced by
   non-empty tiles).
2. :func:`slab_tiles` — each rank tiles the voxels of its own slab of tile layers at that
   offset (tile coordinates global), a chunk of tile layers at a time; :func:`assemble` places
   every rank's tiles in Algorithm 1's order (x fastest) on rank 0, the masks sent in pieces
   of :data:`SEND_ROWS` rows: the same ``tiles``, ``solid``, ``tile_map``, ``offset`` and
   ``searched`` as one process's tiling, bit for bit (tests/solver/test_region_tiling.py).

Rank 0 then holds the tiling (1 byte a node of the non-empty tiles, with the tile list and
map) and, while it assembles, its own share of the tiles' masks and one piece; a rank reads
its image a chunk (:data:`CHUNK_VOXELS`) at a time. A slab across the file's slowest axis
(z slabs of a ``.npy`` saved in (x, y, z) C order) touches every page of the file for each
chunk: quick from the page cache, slow from a disk for a file larger than memory.
Lengths in voxels, counts in nodes.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from geometries.regions import RegionSource

from ..config import ConfigError
from ..stability import chord_counts, chord_mean
from ..tiling import Tiling, _occupancy_all_offsets, _tile_occupancy
from .decomposition import SlabDecomposition, cut_layers, grid_axis, rank_layers

__all__ = ["Survey", "RegionTiling", "survey", "combine", "slab_tiles", "assemble",
           "tile_regions", "own_part", "CHUNK_VOXELS"]

#: Voxels read per chunk, at least one tile layer (its temporaries are a few bytes a voxel of
#: the chunk: rank 0's set-up peak is then the tiling and its own share of it).
CHUNK_VOXELS = 1 << 21
#: Tile rows per message of the tiles' masks sent to rank 0 (its receive buffer).
SEND_ROWS = 1 << 15


def _chunk(shape: tuple[int, ...], a: int, axis: int, chunk: int | None) -> int:
    """Tile layers per chunk along ``axis`` (``chunk`` if given)."""
    if chunk is not None:
        return int(chunk)
    per_layer = a * int(np.prod([n for b, n in enumerate(shape) if b != axis]))
    return max(1, CHUNK_VOXELS // max(1, per_layer))


def _offsets(a: int, d: int, search: bool) -> list[tuple[int, ...]]:
    """The offsets tried: all ``a**d`` in lexicographic order, or the origin."""
    return list(itertools.product(range(a), repeat=d)) if search else [(0,) * d]


def _grid(shape: tuple[int, ...], a: int, offset: tuple[int, ...]) -> tuple[int, ...]:
    """Tile-grid shape of ``shape`` at ``offset`` (Tiling.build's ``tile_map``)."""
    return tuple(-(-(n + o) // a) for n, o in zip(shape, offset, strict=True))


@dataclass(frozen=True)
class Survey:
    """What the ranks count of an image of ``shape`` (tile edge ``a``; ``read_axis`` the axis
    it was read along): per tried offset (``offsets``, in order) and axis the non-empty tiles
    per tile layer (``layers[i][b]``, int64), the fluid nodes, and the stability check's chord
    counts (n_runs, in_runs) per axis (zeros along ``read_axis``, not counted)."""

    shape: tuple[int, ...]
    a: int
    read_axis: int
    offsets: list[tuple[int, ...]]
    layers: list[list[np.ndarray]]
    n_fluid: int
    chords: np.ndarray

    def flat(self) -> np.ndarray:
        """Every count as one int64 vector (what the ranks add)."""
        parts = [c for per in self.layers for c in per]
        return np.concatenate(parts + [np.array([self.n_fluid]), self.chords.ravel()])

    def with_flat(self, flat: np.ndarray) -> Survey:
        """This survey's layout filled with ``flat`` (:meth:`flat` of the sum over ranks)."""
        layers, at = [], 0
        for per in self.layers:
            row = []
            for counts in per:
                row.append(flat[at:at + counts.size].copy())
                at += counts.size
            layers.append(row)
        n_fluid = int(flat[at])
        chords = flat[at + 1:].reshape(self.chords.shape).copy()
        return Survey(self.shape, self.a, self.read_axis, self.offsets, layers, n_fluid, chords)

    def eta_t(self) -> dict[tuple[int, ...], float]:
        """eta_t of every tried offset, as :func:`solver.tiling.best_offset` computes it."""
        d = len(self.shape)
        out = {}
        for off, per in zip(self.offsets, self.layers, strict=True):
            n_tiles = int(per[0].sum())
            out[off] = self.n_fluid / (n_tiles * self.a**d) if n_tiles else 0.0
        return out

    def best(self) -> tuple[int, ...]:
        """The offset Tiling.build picks: highest eta_t, ties the smallest offset."""
        eta = self.eta_t()
        return max(eta, key=lambda k: (eta[k], [-x for x in k]))

    def counts(self, offset: tuple[int, ...], axis: int) -> np.ndarray:
        """Non-empty tiles per tile layer along ``axis`` at ``offset`` (int64)."""
        return self.layers[self.offsets.index(tuple(offset))][axis]

    def pore_size(self, flow_axis: int) -> float:
        """The stability check's pore size H (nodes): :func:`solver.stability.pore_size`."""
        others = [b for b in range(len(self.shape)) if b != flow_axis]
        return min(chord_mean(*self.chords[b]) for b in others)


def _empty_survey(shape: tuple[int, ...], a: int, read_axis: int, search: bool) -> Survey:
    d = len(shape)
    offsets = _offsets(a, d, search)
    layers = [[np.zeros(g, np.int64) for g in _grid(shape, a, off)] for off in offsets]
    return Survey(tuple(shape), a, read_axis, offsets, layers, 0, np.zeros((d, 2), np.int64))


def _share(shape: tuple[int, ...], a: int, axis: int, rank: int, size: int) -> tuple[int, int]:
    """Voxels ``[lo, hi)`` along ``axis`` that ``rank`` of ``size`` surveys (whole tile
    layers of the origin grid, split evenly)."""
    n_layers = -(-shape[axis] // a)
    cuts = np.linspace(0, n_layers, size + 1).round().astype(int)
    return min(int(cuts[rank]) * a, shape[axis]), min(int(cuts[rank + 1]) * a, shape[axis])


def survey(source: RegionSource, a: int, read_axis: int, periodic: tuple[bool, ...],
           rank: int = 0, size: int = 1, search: bool = True, chunk: int | None = None
           ) -> Survey:
    """The counts of ``rank``'s share of ``source`` (of ``size`` ranks); :func:`combine` adds
    the ranks' (``search``: every offset, else the origin; ``chunk``: tile layers read at a
    time, default :data:`CHUNK_VOXELS`' worth)."""
    shape = tuple(int(n) for n in source.shape)
    d, R = len(shape), read_axis
    out = _empty_survey(shape, a, R, search)
    lo, hi = _share(shape, a, R, rank, size)
    fluid, chords = 0, np.zeros((d, 2), np.int64)
    chunk = _chunk(shape, a, R, chunk)
    for s in range(lo, hi, chunk * a):
        e = min(s + chunk * a, hi)
        # The chunk and one tile layer past it: a tile layer that starts in the chunk at a
        # positive offset ends in the next one.
        sub = source.slab(R, s, min(e + a, shape[R]))
        core = sub[(slice(None),) * R + (slice(0, e - s),)]  # a view: the chunk's own voxels
        fluid += int(core.size - np.count_nonzero(core))
        for b in range(d):
            if b != R:  # lines along b lie whole in the chunk: their counts add up
                chords[b] += chord_counts(core, b, periodic[b])
        del core
        for i, (off, occ) in enumerate(_occupancies(sub, a, out.offsets)):
            k = s // a + np.arange(occ.shape[R])  # global tile layer of each local one
            start = k * a - off[R]
            owned = ((start >= s) | (s == 0)) & (start < e)
            occ = np.compress(owned, occ, axis=R)
            for b in range(d):
                per = occ.sum(axis=tuple(x for x in range(d) if x != b), dtype=np.int64)
                if b == R:
                    out.layers[i][b][k[owned]] += per
                else:
                    out.layers[i][b] += per
        del sub
    return Survey(shape, a, R, out.offsets, out.layers, fluid, chords)


def _occupancies(solid: np.ndarray, a: int, offsets: list[tuple[int, ...]]):
    """(offset, tile occupancy) of ``solid`` at each of ``offsets`` (all, or the origin)."""
    if len(offsets) == 1:
        yield offsets[0], _tile_occupancy(solid, a, offsets[0], of_solid=True)
        return
    yield from _occupancy_all_offsets(solid, a, np, of_solid=True)


def combine(surveys: Iterable[Survey]) -> Survey:
    """The whole image's survey from the ranks' (added)."""
    surveys = list(surveys)
    total = np.sum([s.flat() for s in surveys], axis=0)
    return surveys[0].with_flat(total)


@dataclass(frozen=True)
class RegionTiling:
    """What the ranks agreed: the tile-grid ``offset`` (``searched``: eta_t of every offset
    tried, empty for the origin), the decomposition ``axis`` and slab ``bounds`` (tile
    layers, int64), and the ``survey`` they came from."""

    survey: Survey
    offset: tuple[int, ...]
    searched: dict
    axis: int
    bounds: np.ndarray


def agree(whole: Survey, n_ranks: int, axis: int | str, force: Any, search: bool
          ) -> RegionTiling:
    """Offset, axis and slab bounds of the whole ``survey`` over ``n_ranks`` ranks (every
    rank computes the same): those of :func:`~solver.distributed.decomposition.decompose`
    on one process's tiling. ConfigError without fluid or for a rank without fluid tiles."""
    if whole.n_fluid == 0:
        raise ConfigError("The geometry has no fluid node: nothing to simulate.")
    offset = whole.best()
    searched = whole.eta_t() if search else {}
    ax = grid_axis(_grid(whole.shape, whole.a, offset), axis, force)
    counts = whole.counts(offset, ax)
    bounds = cut_layers(counts, n_ranks)
    per_rank = np.add.reduceat(counts, bounds[:-1])
    empty = np.flatnonzero(per_rank == 0)
    if empty.size:
        raise ConfigError(f"Rank(s) {empty.tolist()} would get no fluid tile: the fluid spans "
                          f"too few tile layers along axis {ax} for {n_ranks} ranks; use fewer "
                          "ranks or another decomposition axis.")
    return RegionTiling(whole, offset, searched, ax, bounds)


def slab_tiles(source: RegionSource, agreed: RegionTiling, rank: int,
               chunk: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """``rank``'s tiles, a chunk of tile layers at a time: per chunk the tile coordinates
    (int32, global, (n, d)) and solid masks (bool, (n, a**d)) of its slab's tiles, as
    :meth:`Tiling.build` of the whole image makes them (outside the image solid)."""
    return list(_slab_chunks(source, agreed, rank, chunk))


def _slab_chunks(source: RegionSource, agreed: RegionTiling, rank: int,
                 chunk: int | None = None):
    """:func:`slab_tiles`' chunks, made one at a time."""
    yield from _layer_chunks(source, agreed, int(agreed.bounds[rank]),
                             int(agreed.bounds[rank + 1]), chunk)


def _layer_chunks(source: RegionSource, agreed: RegionTiling, first: int, end: int,
                  chunk: int | None = None):
    """(tile coordinates, masks) of the tile layers ``[first, end)``, a chunk at a time."""
    shape, a, ax, off = agreed.survey.shape, agreed.survey.a, agreed.axis, agreed.offset
    chunk = _chunk(shape, a, ax, chunk)
    for f in range(first, end, chunk):
        g = min(f + chunk, end)
        lo, hi = max(f * a - off[ax], 0), min(g * a - off[ax], shape[ax])
        if hi <= lo:
            continue
        local = list(off)
        local[ax] = off[ax] if f == 0 else 0  # the slab's first voxel starts tile layer f
        part = Tiling.build(source.slab(ax, lo, hi), a, tuple(local))
        at = part.tiles.copy()
        at[:, ax] += f
        yield at, part.solid


def own_part(source: RegionSource, agreed: RegionTiling, problem: Any, rank: int) -> Any:
    """``rank``'s part of the run (:class:`~solver.distributed.slab_parts.RankPart`: its slab
    and halo layers tiled from ``source`` in global coordinates, their global tile numbers and
    owners) without rank 0 cutting it from the whole tiling: what
    :func:`~solver.distributed.slab_parts.rank_part` cuts, when the slabs cut the slowest axis
    (global numbers from the survey's tiles per layer) and no opening links travel.
    ``problem``: the run's constants (its tiling is replaced by the part's)."""
    from .slab_parts import RankPart

    shape, a, ax = agreed.survey.shape, agreed.survey.a, agreed.axis
    d = len(shape)
    if ax != d - 1:
        raise ValueError("A rank numbers its own tiles only for slabs along the slowest axis.")
    chunks = [c for first, end in rank_layers(agreed.bounds, rank, problem.periodic[ax])
              for c in _layer_chunks(source, agreed, first, end)]
    tiles = _rows(chunks, d)
    solid = np.concatenate([m for _, m in chunks]) if chunks else np.zeros((0, a**d), bool)
    del chunks
    counts = agreed.survey.counts(agreed.offset, ax)
    before = np.concatenate([[0], np.cumsum(counts)])  # tiles of the layers below each
    layer = tiles[:, ax].astype(np.int64)
    numbers = before[layer] + np.arange(len(tiles)) - np.searchsorted(layer, layer)
    tile_map = np.full(_grid(shape, a, agreed.offset), -1, dtype=np.int32)
    tile_map[tuple(tiles.T)] = np.arange(len(tiles), dtype=np.int32)
    local = Tiling(tuple(shape), a, tuple(agreed.offset), tile_map, tiles, solid)
    owner = (np.searchsorted(agreed.bounds, layer, side="right") - 1).astype(np.int32)
    decomposition = SlabDecomposition(ax, tuple(int(b) for b in agreed.bounds), owner, counts)
    part = dataclasses.replace(problem, tiling=local, owned=None).use_iolets(None)
    return RankPart(part, decomposition, numbers.astype(np.int64), np.zeros(0, np.int64))


def _in_order(source: RegionSource, agreed: RegionTiling, solid: np.ndarray
              ) -> list[np.ndarray]:
    """Rank 0's own tiles placed straight into the rows of the whole tiling's ``solid``
    (slabs along the slowest axis: the ranks' tiles follow one another in Algorithm 1's
    order, rank 0's first); their coordinates."""
    tiles, at = [], 0
    for coords, mask in _slab_chunks(source, agreed, 0):
        solid[at:at + len(mask)] = mask
        at += len(mask)
        tiles.append(coords)
    return tiles


def _rows(chunks: list[tuple[np.ndarray, np.ndarray]], d: int) -> np.ndarray:
    """The tile coordinates of ``chunks`` (int32, (n, d))."""
    return np.concatenate([t for t, _ in chunks]) if chunks else np.zeros((0, d), np.int32)


def assemble(shape: tuple[int, ...], agreed: RegionTiling, tiles: list[np.ndarray],
             solids: Iterable[np.ndarray]) -> Tiling:
    """The whole tiling from every rank's tile coordinates ``tiles`` (in rank order) and their
    masks, ``solids`` yielding blocks of rows in the same order, each placed before the next
    is asked for (so only one block is held beside the tiling)."""
    a, offset = agreed.survey.a, agreed.offset
    d = len(shape)
    everything = np.concatenate(tiles) if tiles else np.zeros((0, d), np.int32)
    grid = _grid(shape, a, offset)
    key = np.ravel_multi_index(tuple(everything[:, k] for k in reversed(range(d))),
                               grid[::-1])  # Algorithm 1's order: x fastest
    where = None  # slabs along the slowest axis arrive in that order already
    if key.size > 1 and not bool(np.all(key[1:] > key[:-1])):
        order = np.argsort(key, kind="stable")
        where = np.empty(order.size, np.int64)
        where[order] = np.arange(order.size)
        everything = everything[order]
        del order
    del key
    solid = np.empty((len(everything), a**d), dtype=bool)
    at = 0
    for block in solids:
        rows = slice(at, at + len(block)) if where is None else where[at:at + len(block)]
        solid[rows] = block
        at += len(block)
    del where
    tile_map = np.full(grid, -1, dtype=np.int32)
    tile_map[tuple(everything.T)] = np.arange(len(everything), dtype=np.int32)
    return Tiling(tuple(shape), a, tuple(offset), tile_map, everything.astype(np.int32), solid,
                  dict(agreed.searched))


def _blocks(chunks: list[tuple[np.ndarray, np.ndarray]]):
    """The masks of ``chunks`` in pieces of exactly :data:`SEND_ROWS` rows (the last one
    fewer), across chunk boundaries: what rank 0 receives; each chunk dropped (from the list
    too) once its rows are yielded."""
    pending: list[np.ndarray] = []
    held = 0
    while chunks:
        _, solid = chunks.pop(0)
        at = 0
        while at < len(solid):
            take = min(SEND_ROWS - held, len(solid) - at)
            pending.append(solid[at:at + take])
            held, at = held + take, at + take
            if held == SEND_ROWS:
                yield pending[0] if len(pending) == 1 else np.concatenate(pending)
                pending, held = [], 0
    if held:
        yield pending[0] if len(pending) == 1 else np.concatenate(pending)


def tile_regions(source: RegionSource, a: int, periodic: tuple[bool, ...], force: Any,
                 axis: int | str = "longest", search: bool = True, comm: Any = None
                 ) -> tuple[Tiling | None, RegionTiling]:
    """The whole tiling of ``source`` built by the ranks of ``comm`` (None: this process
    alone), on rank 0 (None elsewhere), and what they agreed (every rank). Collective; an
    error on one rank is raised on every rank (:func:`_together`), so none is left waiting."""
    rank, size = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    shape = tuple(int(n) for n in source.shape)
    force = np.asarray(force, dtype=float)[: len(shape)]
    read_axis = int(np.argmax(np.abs(force))) if force.size else 0
    mine = _together(comm, lambda: survey(source, a, read_axis, periodic, rank, size, search))
    total = mine.flat()
    if comm is not None and size > 1:
        from mpi4py import MPI

        comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
    agreed = agree(mine.with_flat(total), size, axis, force, search)  # the same on every rank
    d = len(shape)
    if comm is None or size == 1:
        chunks = _together(comm, lambda: slab_tiles(source, agreed, rank))
        return assemble(shape, agreed, [_rows(chunks, d)], _blocks(chunks)), agreed
    if agreed.axis == d - 1:  # the ranks' tiles in Algorithm 1's order: placed as they come
        return _gather_in_order(source, agreed, comm), agreed
    chunks = _together(comm, lambda: slab_tiles(source, agreed, rank))
    gathered = comm.gather(_rows(chunks, d), root=0)
    if rank != 0:
        for block in _blocks(chunks):
            comm.Send(np.ascontiguousarray(block).view(np.uint8), dest=0, tag=31)
        return None, agreed

    def received():
        yield from _blocks(chunks)  # rank 0's own, then each rank's in pieces
        for r in range(1, size):
            for lo in range(0, len(gathered[r]), SEND_ROWS):
                rows = min(SEND_ROWS, len(gathered[r]) - lo)
                block = np.empty((rows, a**d), dtype=np.uint8)
                comm.Recv(block, source=r, tag=31)
                yield block.view(bool)

    return assemble(shape, agreed, gathered, received()), agreed


def _gather_in_order(source: RegionSource, agreed: RegionTiling, comm: Any) -> Tiling | None:
    """The whole tiling on rank 0 (None elsewhere) when the slabs cut the slowest axis: rank 0
    sizes the tiles' masks from the survey's counts, writes its own tiles into them chunk by
    chunk and receives every other rank's pieces straight into their rows (no copy of a
    rank's share on rank 0)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    shape, a, d = agreed.survey.shape, agreed.survey.a, len(agreed.survey.shape)
    if rank != 0:
        chunks = _together(comm, lambda: slab_tiles(source, agreed, rank))
        comm.gather(_rows(chunks, d), root=0)
        for block in _blocks(chunks):
            comm.Send(np.ascontiguousarray(block).view(np.uint8), dest=0, tag=31)
        return None
    counts = agreed.survey.counts(agreed.offset, agreed.axis)
    solid = np.empty((int(counts.sum()), a**d), dtype=bool)
    own = _together(comm, lambda: _in_order(source, agreed, solid))
    gathered = comm.gather(np.concatenate(own) if own else np.zeros((0, d), np.int32), root=0)
    at = 0
    for r in range(size):
        if r:
            for lo in range(0, len(gathered[r]), SEND_ROWS):
                rows = min(SEND_ROWS, len(gathered[r]) - lo)
                comm.Recv(solid[at + lo:at + lo + rows].view(np.uint8), source=r, tag=31)
        at += len(gathered[r])
    tiles = np.concatenate(gathered)
    del gathered
    tile_map = np.full(_grid(shape, a, agreed.offset), -1, dtype=np.int32)
    tile_map[tuple(tiles.T)] = np.arange(len(tiles), dtype=np.int32)
    return Tiling(tuple(shape), a, tuple(agreed.offset), tile_map, tiles.astype(np.int32),
                  solid, dict(agreed.searched))


def _together(comm: Any, work):
    """``work()`` on every rank; if it failed on any, an error on every rank naming the ranks
    and their errors (ConfigError where each was the user's: a file that cannot be read or
    segmented, memory; else RuntimeError), else its result."""
    result, error = None, None
    try:
        result = work()
    except Exception as exc:  # every rank learns of it before the next collective
        error = (f"{type(exc).__name__}: {exc}", isinstance(exc, ValueError | OSError |
                                                             MemoryError))
        if comm is None:
            raise
    errors = [error] if comm is None else comm.allgather(error)
    failed = [(r, e) for r, e in enumerate(errors) if e]
    if failed:
        kind = ConfigError if all(user for _, (_, user) in failed) else RuntimeError
        raise kind("Tiling the image by slabs failed: " +
                   "; ".join(f"rank {r}: {text}" for r, (text, _) in failed))
    return result
