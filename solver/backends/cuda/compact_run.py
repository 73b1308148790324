"""A run on fluid-compacted storage, one :class:`~.device_run.DeviceRun` (the tiled one is
:class:`~.tiled_run.TiledRun`).

:class:`CompactRun` holds the two compact copies of a problem's populations and the tables of
:class:`~.compact.CompactTiling`, steps them with the ``KernelVariant(compact=pad)`` kernel and
converts at its edges: populations go in and come out in the tiled XYZ layout the rest of the
solver uses (solid nodes at the rest equilibrium, as every backend keeps them), so fields and
checkpoints need not know. The array module (CuPy, or NumPy with an emulated launcher in the
CPU tests) and the launcher are arguments; by default CuPy and the compiled kernel.

With float16 storage (:mod:`solver.storage`) the copies hold the binary16 bits the tiled run
holds, encoded and decoded the same way, and the kernels take the same two-slot step counter
(``seeds``, slot = ``current``: copy 0 lies below copy 1 in one array, as the tiled copies do),
so a compact float16 run draws the tiled run's random bits and stores its values.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace

import numpy as np

from ...problem import Problem
from ...storage import key_shift
from .capture import GRAPH_STEPS, RunGraphs, replay_timed
from .compact import CompactTiling, popcount, sector_pad
from .compact_edges import device_edges
from .compact_readout import (
    compact_node_index,
    compact_node_populations,
    compact_state_bytes,
    fluid_populations,
    fluid_starts,
    readout_tiles,
    tiled_chunk,
    wide_edges,
    write_chunk,
)
from .compact_source import DEFAULT_CODE, CompactCode, packed_threads, probe_shared_bytes
from .kernels import KernelVariant, kernel_source, real_args
from .tables import physics_args

__all__ = ["CompactHost", "CompactRun", "Launcher", "compact_host", "edge_nodes"]


#: ``launcher(variant, blocks, threads, shared_bytes, args)``: run one kernel launch.
Launcher = Callable[[KernelVariant, int, int, int, tuple], None]


def _cupy_launcher(variant: KernelVariant, blocks: int, threads: int, shared: int,
                   args: tuple) -> None:
    from .device import compile_kernel

    compile_kernel(variant)((blocks,), (threads,), args, shared_mem=shared)


def edge_nodes(compact: CompactTiling, q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per fluid node: its compact value index of direction 0, its tile's direction block
    length (direction i adds i times it), and its tiled XYZ index of direction 0 (direction i
    adds 64 i). int32 where the indices fit (12 bytes per fluid node), else the tiled one int64,
    and the compact one the storage's offset type (int64 where ``compact.wide``): the
    conversion tables of :class:`CompactRun`, a fraction of :meth:`CompactTiling.edge_index`
    (16 q bytes per fluid node)."""
    # One pass over the flat fluid indices (ranks as int8 running counts, int32 arithmetic
    # where it fits): 0.23 s instead of 1.7 s for the 400x200x200 mirrored box of a 200³
    # sample on the CPU, the same tables (issue 29: most of a 300³ tensor's allocation phase).
    fluid = ~compact.tiling.solid
    flat = np.flatnonzero(fluid)
    tile, node = flat >> 6, flat & 63
    at = (q * compact.base)[tile]
    at += np.cumsum(fluid, axis=1, dtype=np.int8).reshape(-1)[flat]  # rank + 1
    at -= 1
    if wide_edges(compact, q):
        tiled = tile * (q * 64) + node
    else:
        tiled = tile.astype(np.int32) * np.int32(q * 64) + node.astype(np.int32)
    return at.astype(compact.offset_dtype), compact.padded.astype(np.int32)[tile], tiled


@dataclass(frozen=True)
class CompactHost:
    """The host tables of a :class:`CompactRun` (:func:`compact_host`): its
    :class:`~.compact.CompactTiling`, the conversion tables :func:`edge_nodes` (None: the run
    makes them on its device, :func:`~.compact_edges.device_edges`) and each tile's first
    entry in them (``starts``, :func:`~.compact_readout.fluid_starts`)."""

    compact: CompactTiling
    edge: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    starts: np.ndarray

    def fits(self, problem: Problem, pad: int, wide: bool) -> bool:
        """Whether these are the tables of ``problem`` stored with ``pad`` and ``wide``."""
        c = self.compact
        return c.tiling is problem.tiling and c.pad == pad and c.wide == wide


def compact_host(problem: Problem, pad: int | None = None, wide: bool = False,
                 edges: bool = True) -> CompactHost:
    """The host tables a :class:`CompactRun` of ``problem`` reads (``pad`` None: one 32-byte
    sector, as the run's default), host work only: made ahead of the allocation where a study
    prepares the next run (on the CPU the edge tables were 0.23 s for the 400x200x200 mirrored
    box of a 200³ sample; a 1000³ image's 1/2 start level has 16 times its fluid nodes).
    ``edges`` False: without the edge tables, which a run on a GPU makes on its device
    (:func:`~.compact_edges.device_edges`: 8 GB for the 1000³ image's mirrored box, most of
    its compact fine run's host set-up and allocation when made here and uploaded)."""
    pad = pad or sector_pad(problem.storage_dtype.itemsize)
    compact = CompactTiling(problem.tiling, pad, wide)
    compact.check_offsets(problem.lattice.q)
    edge = edge_nodes(compact, problem.lattice.q) if edges else None
    return CompactHost(compact, edge, fluid_starts(compact))


class CompactRun:
    """Two compact copies of ``problem``'s populations on the device, stepped two-copy.

    ``pad``: values per direction block rounded up to it (default: one 32-byte sector).
    ``wide``: the kernels with 64-bit value offsets and bases (the plan's ``wide``: a copy of
    2^31 values or more; refused without it). Refuses (ValueError, with what to use instead)
    what the compact kernel lacks.
    """

    #: Launches per captured CUDA graph (:data:`.capture.GRAPH_STEPS`, shared with the tiled run).
    GRAPH_STEPS = GRAPH_STEPS
    #: The openings' pass: none (the compact family has no openings, :mod:`..plan`).
    iolets = None

    def __init__(self, problem: Problem, pad: int | None = None, xp=None,
                 launcher: Launcher | None = None, tiles_per_block: int = 2,
                 cuda=None, packed: int = 0, code: CompactCode = DEFAULT_CODE,
                 wide: bool = False, host: CompactHost | None = None) -> None:
        """``cuda``: the CUDA runtime namespace for streams, events and graphs (``cupy.cuda``
        with CuPy; a fake in the CPU tests); None with NumPy arrays (plain launches, host
        clock). ``packed`` K: the packed kernel (K tiles per block, one thread per fluid node;
        ``tiles_per_block`` is then ignored). ``code``: how the kernel locates and reads its
        halo (a register cap allows at most 4 tiles per block: more are launched as 4).
        ``host``: its host tables made ahead (:func:`compact_host`), used where they fit."""
        if xp is None:
            import cupy as xp
        self.problem, self.xp = problem, xp
        self.cuda = cuda if cuda is not None else getattr(xp, "cuda", None)
        self.stream = self.cuda.Stream(non_blocking=True) if self.cuda is not None else None
        #: Captured graphs by ``current`` (:mod:`.capture`; none without ``cuda``).
        self.graphs = RunGraphs(self.stream)
        self.loaded: set[str] = set()  # kernels launched once (loading is not capturable)
        self.launcher = launcher or _cupy_launcher
        pad = pad or sector_pad(problem.storage_dtype.itemsize)
        #: The kernel of each phase (in place: AA pattern, :mod:`.streaming`; two copies: one).
        self.variants = [replace(KernelVariant.for_problem(problem, "full", phase), compact=pad,
                                 packed=packed, code=code, wide=wide).canonical()
                         for phase in (0, 1)]
        self.variant = self.variants[0]
        self.in_place = problem.population_copies == 1
        kernel_source(self.variant)  # ValueError: boundary code, 2D
        if host is None or not host.fits(problem, pad, wide):
            host = compact_host(problem, pad, wide, edges=xp is np)
        self.compact = host.compact
        q = problem.lattice.q
        t = problem.tiling
        self.tables = (xp.asarray(self.compact.masks.astype(np.uint64)),
                       xp.asarray(self.compact.base_table()),
                       xp.asarray(np.ascontiguousarray(t.tiles, dtype=np.int32).ravel()),
                       xp.asarray(np.ascontiguousarray(t.tile_map.transpose(),
                                                       dtype=np.int32).ravel()))
        self.ints = tuple(np.int32(v) for v in self.compact.int_args(problem.periodic))
        self.physics = list(physics_args(problem))
        self.reals = tuple(real_args(self.variant, self.physics))
        # One array, copy 0 first: the float16 step counter's slot is the copy a launch reads
        # (fin < fout), so slot = current, as in the tiled state.
        copies = xp.zeros((problem.population_copies, q * self.compact.n_slots),
                          dtype=problem.storage_dtype)
        self.f = [copies[c] for c in range(problem.population_copies)]
        filled = False
        if host.edge is not None:
            self.edge = tuple(xp.asarray(a) for a in host.edge)
        elif xp is np:  # host arrays (the CPU tests): the host's tables
            self.edge = edge_nodes(self.compact, q)
        else:  # made on the device from its tile tables, copy 0 filled at rest on the way
            self.edge = device_edges(self.compact, q, host.starts, *self.tables[:2], xp,
                                     fill=(self.f[0], self.rest_stored()))
            filled = True
        self.starts = host.starts  # host: each tile's first edge-table entry
        del host  # the host edge tables go once uploaded
        #: float16 storage: the kernels' two-slot step counter (uint32), None otherwise.
        self.seeds = xp.zeros(2, dtype=np.uint32) if problem.storage.encoded else None
        #: float16 storage on a distributed rank: the step-counter pair of each tile range
        #: that starts past tile 0, by its first tile (:meth:`launch_tiles`).
        self.key_seeds: dict[int, object] = {}
        self.current = 0
        self.tiles_per_block = tiles_per_block
        #: Tiles per chunk of a readout (:mod:`.compact_readout`: bounded temporaries).
        self.readout_tiles = readout_tiles(problem, compact_state_bytes(problem, self.compact))
        if not filled:
            self.fill_rest()
        elif self.cuda is not None:  # written on the default stream, before the next step
            self.cuda.Device().synchronize()

    def rest_stored(self):
        """The rest equilibrium as stored, (q,) of the storage dtype on the device (float16
        storage: encoded as a tiled chunk is; cast as storing it into a copy casts)."""
        p, xp = self.problem, self.xp
        rest = p.rest_populations()[None, :, None]  # (1, q, 1)
        encoded = p.storage.encode(xp.asarray(rest), xp).reshape(-1)
        return xp.ascontiguousarray(encoded.astype(p.storage_dtype, copy=False))

    def fill_rest(self) -> None:
        """Every fluid node at the rest equilibrium, on the device: the bits of
        ``set_populations(problem.initial_populations())`` without that host array of every tile
        node (1 GB of float64 for a 200³ rock run, built and uploaded at each allocation)."""
        p, xp = self.problem, self.xp
        self._natural()
        encoded = self.rest_stored().reshape(1, -1)
        at, block, _ = self.edge
        i = xp.arange(p.lattice.q, dtype=at.dtype)
        per = self.readout_tiles * p.tiling.nodes_per_tile  # bounded index temporaries
        for lo in range(0, int(at.shape[0]), per):
            part = slice(lo, lo + per)
            self.f[self.current][at[part, None] + block[part, None] * i] = encoded
        if self.cuda is not None:  # written on the default stream, before the next step
            self.cuda.Device().synchronize()

    def set_populations(self, f: np.ndarray, tiles: slice | None = None) -> None:
        """Overwrite the latest populations from tiled XYZ ones (n_tiles, q, 64; of the tiles
        ``tiles``, a slice, only when given); solid nodes are not stored."""
        self._natural()  # in place: the values arrive in the natural layout (phase 0)
        lo, hi, _ = (slice(None) if tiles is None else tiles).indices(self.problem.tiling.n_tiles)
        # readout_tiles tiles at a time, host or device input: temporaries of one chunk
        # (the peak memory of a compact run, .footprint.device_bytes).
        for first in range(lo, hi, self.readout_tiles):
            write_chunk(self, first, f[first - lo:first - lo + self.readout_tiles])
        if self.cuda is not None:  # written on the default stream, before the next step
            self.cuda.Device().synchronize()

    def device_populations(self, tiles=None):
        """Latest populations in the tiled XYZ layout (tiles, q, 64), arithmetic precision, an
        array of ``xp`` (solid nodes at the rest equilibrium): of all tiles, or of ``tiles`` (a
        slice or an index array) only, which is what a chunked readout asks for
        (:attr:`readout_tiles` at a time). float16 storage: decoded as the tiled state
        decodes."""
        self._natural()
        return tiled_chunk(self, slice(None) if tiles is None else tiles)

    def node_index(self, tile: np.ndarray, node: np.ndarray, solid: np.ndarray):
        """Where host (tile, XYZ in-tile node) pairs lie in the compact copies
        (:func:`.compact_readout.compact_node_index`), for :meth:`node_populations`."""
        return compact_node_index(self.compact, self.problem.lattice.q, tile, node, solid,
                                  self.xp)

    def node_populations(self, index):
        """Latest populations (q, n) of ``index``'s nodes, arithmetic precision, gathered from
        the compact copy: the values :meth:`device_populations` shows there."""
        self._natural()
        return compact_node_populations(self, index)

    def fluid_populations(self, part: slice):
        """Latest populations (q, k) of the fluid nodes ``part`` (in tile order, XYZ within a
        tile: the edge tables' order), arithmetic precision, gathered from the compact copy as
        stored (no tile converted): the values :meth:`device_populations` shows there."""
        self._natural()
        return fluid_populations(self, part)

    def latest(self):
        """The compact array holding the latest populations as stored (natural layout: in
        place in phase 1 it is first decoded where it lies), a view of ``f``, after the queued
        steps."""
        self._natural()
        return self.f[self.current]

    def stored_tiled(self):
        """Latest populations of all tiles in the tiled XYZ layout (n_tiles, q, 64) as stored
        (float16 storage: binary16, decoded by ``problem.storage``), an array of ``xp``; solid
        nodes hold the stored rest equilibrium (binary16 zero with float16 storage)."""
        self._natural()
        return tiled_chunk(self, slice(None), stored=True)

    def populations(self) -> np.ndarray:
        """Latest populations, tiled XYZ (n_tiles, q, 64), float64 on the host (float16
        storage: exactly the stored values); solid nodes at the rest equilibrium. Converted
        :attr:`readout_tiles` tiles at a time: the device never holds a tiled copy of all
        populations."""
        p = self.problem
        out = np.empty((p.tiling.n_tiles, p.lattice.q, p.tiling.nodes_per_tile))
        self._natural()
        for first in range(0, p.tiling.n_tiles, self.readout_tiles):
            part = slice(first, first + self.readout_tiles)
            chunk = tiled_chunk(self, part, stored=True)
            host = chunk.get() if hasattr(chunk, "get") else np.asarray(chunk)
            out[part] = p.storage.exact(host)
        return out

    def set_step(self, step: int) -> None:
        """Set the float16 stochastic-rounding step counter the next launch reads (resume)."""
        if self.seeds is not None:
            self.synchronize()  # after the queued steps, which advance the counter
            self.seeds[self.current] = np.uint32(step & 0xFFFFFFFF)
            self._sync_key_seeds()
            if self.cuda is not None:  # written on the default stream, before the next step
                self.cuda.Device().synchronize()

    def _natural(self) -> None:
        """Wait for the queued steps; in place in phase 1, first decode the copy where it lies
        (one 'swap' launch): phase 0 steps on to the same populations bit for bit."""
        if self.in_place and self.current == 1:
            swap = replace(self.variant, mode="swap").canonical()
            self._launch_variant(swap, tuple(real_args(swap, self.physics)))
            self.current = 0
            if self.key_seeds:  # the swap moved the run's counter to phase 0
                self.synchronize()
                self._sync_key_seeds()
        self.synchronize()

    def synchronize(self) -> None:
        """Wait for the steps queued on this run's stream."""
        if self.stream is not None:
            self.stream.synchronize()

    def _launch(self) -> None:
        self._launch_variant(self.variants[self.current if self.in_place else 0], self.reals)
        self.current = 1 - self.current  # two copies: the other copy; in place: the phase

    def _launch_variant(self, variant: KernelVariant, reals: tuple) -> None:
        tpb, k = self.tiles_per_block, variant.packed
        blocks = -(-self.problem.tiling.n_tiles // (k or tpb))
        shared = probe_shared_bytes(tpb, True, k, variant.wide, variant.spec().count_bytes)
        src, dst = (self.f[0], self.f[0]) if self.in_place else \
            (self.f[self.current], self.f[1 - self.current])
        self.loaded.add(variant.name)
        with self.stream if self.stream is not None else nullcontext():
            self.launcher(variant, blocks, packed_threads(k) if k else 64 * tpb,
                          shared,
                          (src, dst, *self.tables, *self.ints, *reals,
                           *(() if self.seeds is None else (self.seeds,))))

    def load_range_kernels(self, ranges: tuple[tuple[int, int], ...]) -> None:
        """Compile and load every phase's kernel (one kernel steps any tile range)."""
        from .device import compile_kernel

        for variant in self.variants:
            compile_kernel(variant)
            self.loaded.add(variant.name)

    def launch_tiles(self, first: int, end: int) -> None:
        """Enqueue one full step of tiles ``[first, end)`` on the current stream (the caller's,
        not the run's own), from the current copy into the other (in place: the phase's
        kernel on the one copy), without swapping them or flipping the phase: a distributed
        rank's phase (:class:`.phases.CupyPhases`).

        The kernel steps tiles ``[0, n_tiles)`` of the tile list it is given and finds every
        other tile through the tile map, so it is given the list from ``first`` on and
        ``end - first`` tiles: the values are those of a launch over all tiles. float16
        storage keys its random bits by the place in that list, so a range from ``first > 0``
        reads its own step-counter pair, ahead by :func:`~solver.storage.key_shift`: the bits
        of one launch over all tiles."""
        if end <= first:
            return
        variant = self.variants[self.current if self.in_place else 0]
        k = variant.packed
        masks, base, tiles, tile_map = self.tables
        n = end - first
        src, dst = (self.f[0], self.f[0]) if self.in_place else \
            (self.f[self.current], self.f[1 - self.current])
        self.loaded.add(variant.name)
        self.launcher(variant, -(-n // (k or self.tiles_per_block)),
                      packed_threads(k) if k else 64 * self.tiles_per_block,
                      probe_shared_bytes(self.tiles_per_block, True, k, variant.wide,
                                         variant.spec().count_bytes),
                      (src, dst, masks, base, tiles[3 * first:], tile_map, np.int32(n),
                       *self.ints[1:], *self.reals, *self._range_seeds(first)))

    def _range_seeds(self, first: int) -> tuple:
        """The step-counter pair of a range from tile ``first`` (float16 storage), else ()."""
        if self.seeds is None:
            return ()
        if first == 0:
            return (self.seeds,)
        if first not in self.key_seeds:  # made on a range's first (plain) launch
            self.key_seeds[first] = self.seeds + np.uint32(
                key_shift(first, self.problem.tiling.nodes_per_tile))
        return (self.key_seeds[first],)

    def _sync_key_seeds(self) -> None:
        """Set the ranges' step-counter pairs from the run's (after it changed outside them)."""
        for first, pair in self.key_seeds.items():
            pair[...] = self.seeds + np.uint32(key_shift(first,
                                                         self.problem.tiling.nodes_per_tile))
        if self.key_seeds and self.cuda is not None:  # default stream: before the next step
            self.cuda.Device().synchronize()

    def value_index(self, flat: np.ndarray) -> np.ndarray:
        """Compact value indices (int64) of tiled XYZ flat indices ``(tile q + i) 64 + node``
        of fluid nodes (a halo plan's): ``q base + i padded + rank``; ValueError for a solid
        node, which the compact copies do not hold."""
        q = self.problem.lattice.q
        block, node = np.divmod(np.asarray(flat, dtype=np.int64), 64)
        tile, i = np.divmod(block, q)
        mask = self.compact.masks[tile]
        bit = np.left_shift(np.uint64(1), node.astype(np.uint64))
        if np.any(mask & bit == 0):
            raise ValueError("A halo value of a solid node: compact copies hold fluid nodes "
                             "only.")
        rank = popcount(mask & (bit - np.uint64(1))).astype(np.int64)
        return q * self.compact.base[tile] + i * self.compact.padded[tile] + rank

    def _graph(self):
        """A captured graph of GRAPH_STEPS launches from the current copy, or None (the kernel
        must have been launched once already: loading it is not capturable)."""
        current = self.current
        return self.graphs.get_or_capture(current, self._launch,
                                          lambda: setattr(self, "current", current),
                                          prepare=self.stream.synchronize)

    def step(self, n: int = 1) -> float:
        """Advance ``n`` steps (two copies, one launch each; captured graphs of GRAPH_STEPS
        launches where ``n`` allows); the steps' seconds (CUDA events, else the host clock).

        Before the first capture two of the ``n`` steps run as plain launches (they load the
        kernel) outside the timed span; that call's seconds are scaled from ``n - 2`` steps."""
        if self.cuda is None:
            start = time.perf_counter()
            for _ in range(n):
                self._launch()
            return time.perf_counter() - start
        # Copies queued on the current stream (a rollback copy, set_stored_populations) read
        # or write f before the run's stream steps it, as the tiled backend's steps wait.
        self.cuda.get_current_stream().synchronize()
        done = warm = 0
        kernels = {v.name for v in (self.variants if self.in_place else self.variants[:1])}
        if n >= self.GRAPH_STEPS + 2 and self.graphs.enabled and not kernels <= self.loaded:
            with self.stream:
                self._launch()
                self._launch()
            done = warm = 2
        ready = kernels <= self.loaded  # every kernel is loaded: capture is safe
        graph = self._graph() if ready and n - done >= self.GRAPH_STEPS else None
        seconds = replay_timed(self.cuda, self.stream, n - done, graph, self.GRAPH_STEPS,
                               self._launch)
        return seconds * n / (n - warm)

    def release(self) -> None:
        """Drop the device arrays (the caller frees its memory pool)."""
        self.f, self.tables, self.edge, self.seeds = [], (), (), None
        self.graphs.clear()
        self.key_seeds = {}

    def memory_bytes(self) -> int:
        """Device bytes of the copies (one or two; float16 storage: 2 bytes a value), the
        tables, the edge conversion tables and the float16 step counter."""
        return compact_state_bytes(self.problem, self.compact) \
            + (0 if self.seeds is None else int(self.seeds.nbytes))
