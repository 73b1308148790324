"""A run on tiled storage: every node of the non-empty tiles, one :class:`~.device_run.DeviceRun`.

:class:`TiledRun` holds device copies ``f[copy][tile][i][slot]`` in the configured in-tile
layout: two copies, or one updated in place by the AA pattern (:mod:`.streaming`; ``current``
is then the phase and readers decode phase 1 in place first, :meth:`TiledRun.latest`). It steps
them with the tiled kernel of :mod:`.kernels` through the graph launcher both runs share
(:mod:`.capture`) and reads them out in XYZ order like every backend. With float16 storage the
kernel takes a two-slot step counter seeding its stochastic rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cupy as cp
import numpy as np

from ...problem import Problem
from ..base import NodeIndex, node_index, tiled_node_populations, with_rest_solids
from .capture import GRAPH_STEPS, RunGraphs, replay_timed
from .device import compile_kernel
from .iolet_launch import device_iolets
from .kernels import KernelVariant, kernel_source, real_args
from .streaming import next_phase
from .tables import (
    TablesAhead,
    check_tile_shape,
    device_tables,
    geometry_args,
    launch_shape,
    physics_args,
    slot_table,
)

__all__ = ["TiledRun"]


@dataclass
class TiledRun:
    """Device arrays of one run on tiled storage.

    ``f`` holds two copies, and ``current`` is the one with the latest populations; or one
    copy updated in place, and ``current`` is its phase (0 natural layout, 1 streamed).
    """

    problem: Problem
    f: cp.ndarray = field(repr=False)
    tables: dict = field(repr=False)
    slots: cp.ndarray = field(repr=False)
    int_args: list = field(repr=False)
    real_args: list = field(repr=False)
    current: int = 0
    launches: dict = field(default_factory=dict, repr=False)
    views: tuple = field(default=(), repr=False)
    stream: object = None
    #: Captured graphs by (mode, tiles per block, current); built from ``stream`` if None.
    graphs: RunGraphs | None = field(default=None, repr=False)
    identity_slots: bool | None = None
    #: float16 storage: the kernel's two-slot step counter (uint32), seeding its stochastic
    #: rounding; a launch from ``current`` c (copy c, or in place phase c) reads slot c
    #: (:mod:`solver.backends.cuda.storage`). None otherwise.
    seeds: cp.ndarray | None = field(default=None, repr=False)
    iolets: object = field(default=None, repr=False)  # openings' pass (.iolet_launch) or None

    def __post_init__(self) -> None:
        if self.graphs is None:
            self.graphs = RunGraphs(self.stream)

    @classmethod
    def allocate(cls, problem: Problem, ahead: TablesAhead | None = None) -> TiledRun:
        """Upload the tiling tables (those ``ahead`` holds for ``problem``, made before;
        else built now) and set the copies (one or two) to the rest equilibrium."""
        lat, tiling = problem.lattice, problem.tiling
        check_tile_shape(lat.name, tiling.a, problem.tiles_per_block)
        variant = KernelVariant.for_problem(problem)
        kernel_source(variant)  # unsupported physics is refused here, before any allocation
        reals = physics_args(problem)
        host = None if ahead is None else ahead.take(problem, ("tiled", variant.boundary))
        if host is None:
            host = device_tables(problem, variant.boundary)
        tables = {k: cp.asarray(v) for k, v in host.items()}
        del host  # the host copies go once uploaded (the 1000³ box's: about 1.3 GB)
        # Rest equilibrium is uniform per direction, so it is layout-free: no host array.
        feq = problem.storage.encode(problem.rest_populations()[:, None])[:, 0]
        f = cp.empty((problem.population_copies, tiling.n_tiles, lat.q, tiling.nodes_per_tile),
                     dtype=problem.storage_dtype)
        f[...] = cp.asarray(feq)[None, None, :, None]
        slots = cp.asarray(slot_table(lat.name, problem.layout, tiling.a))
        seeds = cp.zeros(2, dtype=np.uint32) if problem.storage.encoded else None
        return cls(problem=problem, f=f, tables=tables, slots=slots,
                   int_args=geometry_args(problem), real_args=reals,
                   stream=cp.cuda.Stream(non_blocking=True), seeds=seeds,
                   iolets=device_iolets(problem, cp.asnumpy(slots)))

    @property
    def in_place(self) -> bool:
        """Whether one copy is updated in place (AA pattern)."""
        return self.f.shape[0] == 1

    @property
    def readout_tiles(self) -> int:
        """Tiles per readout chunk: all of them (the state holds the tiled layout already)."""
        return self.problem.tiling.n_tiles

    def copies(self) -> tuple[cp.ndarray, cp.ndarray]:
        """(source, destination) copies of the next step (the same array in place)."""
        if not self.views:  # fixed views: slicing on every launch costs host time
            self.views = (self.f[0], self.f[0]) if self.in_place else (self.f[0], self.f[1])
        if self.in_place:
            return self.views
        return self.views[self.current], self.views[1 - self.current]

    # -- stepping ----------------------------------------------------------------------------
    def entry(self, mode: str, tiles_per_block: int, tiles: tuple[int, int] | None = None
              ) -> tuple:
        """Kernel, grid, block, trailing arguments and shared bytes of a launch over the tile
        range ``tiles`` (default all), resolved once per range (and in place per phase)."""
        phase = self.current if self.in_place else 0  # in place: the kernel follows the phase
        key = (mode, tiles_per_block, tiles, phase)
        if key not in self.launches:  # launches must stay cheap on the host
            variant = KernelVariant.for_problem(self.problem, mode, phase)
            kernel = compile_kernel(variant)
            first, end = tiles if tiles is not None else (0, self.problem.tiling.n_tiles)
            blocks, threads, smem = launch_shape(self.problem, tiles_per_block, mode,
                                                 end - first, variant.wide_sources)
            ints = self.int_args if tiles is None else geometry_args(self.problem, tiles)
            tail = (*self.tables.values(), *ints, *real_args(variant, self.real_args),
                    *(() if self.seeds is None else (self.seeds,)))
            self.launches[key] = (kernel, (blocks,), (threads,), tail, smem)
        return self.launches[key]

    def launch_tiles(self, first: int, end: int) -> None:
        """Enqueue one full step of tiles ``[first, end)`` on the current CuPy stream, from the
        current copy into the other; the copies are not swapped (a distributed rank's phase)."""
        if end > first:
            kernel, grid, block, tail, smem = self.entry(
                "full", self.problem.tiles_per_block, (first, end))
            kernel(grid, block, (*self.copies(), *tail), shared_mem=smem)

    def load_range_kernels(self, ranges: tuple[tuple[int, int], ...]) -> None:
        """Resolve (compile, load, cache) the launch of every range in both phases: the tiled
        launches are resolved per range and phase."""
        current, tpb = self.current, self.problem.tiles_per_block
        try:
            for phase in (0, 1):
                self.current = phase
                for first, end in ranges:
                    if end > first:
                        self.entry("full", tpb, (first, end))
        finally:
            self.current = current

    def launch(self, mode: str, tiles_per_block: int) -> None:
        """Enqueue one launch of kernel ``mode`` over all tiles (the openings' pass first for
        a step) and move ``current`` on."""
        kernel, grid, block, tail, smem = self.entry(mode, tiles_per_block)
        if self.iolets is not None and mode == "full":
            self.iolets.launch(self.copies()[0], self.current)  # before the step reads
        kernel(grid, block, (*self.copies(), *tail), shared_mem=smem)
        self.current = next_phase(self.problem.streaming, mode, self.current)

    def _load(self, mode: str, tiles_per_block: int) -> None:
        """Compile and load both phases' kernels (loading is not capturable)."""
        for _ in range(2):
            self.entry(mode, tiles_per_block)
            self.current = next_phase(self.problem.streaming, mode, self.current)
        self.copies()

    def _graph(self, mode: str, tiles_per_block: int):
        """A captured CUDA graph of GRAPH_STEPS launches from the current copy, or None.

        Small domains run a step in tens of microseconds, about what one launch from Python
        costs; replaying a graph removes that host overhead (paper-style back-to-back kernels).
        """
        current = self.current
        return self.graphs.get_or_capture(
            (mode, tiles_per_block, current), lambda: self.launch(mode, tiles_per_block),
            lambda: setattr(self, "current", current),
            prepare=lambda: self._load(mode, tiles_per_block))

    def timed(self, n: int, mode: str, tiles_per_block: int) -> float:
        """``n`` launches of kernel ``mode`` (graphs where ``n`` allows); CUDA-event seconds."""
        cp.cuda.get_current_stream().synchronize()  # uploads queued elsewhere come first
        graph = self._graph(mode, tiles_per_block) if n >= GRAPH_STEPS else None
        return replay_timed(cp.cuda, self.stream, n, graph, GRAPH_STEPS,
                            lambda: self.launch(mode, tiles_per_block))

    def step(self, n: int = 1) -> float:
        """Advance ``n`` steps; return their CUDA-event time in seconds."""
        return self.timed(n, "full", self.problem.tiles_per_block)

    def value_index(self, flat: np.ndarray) -> np.ndarray:
        """Indices (int64) into a flat copy (the in-tile layout's slots, ``slot = slots[i,
        node]``) of tiled XYZ flat indices ``(tile q + i) a^d + node``."""
        slots = slot_table(self.problem.lattice.name, self.problem.layout, self.problem.tiling.a)
        q, npt = slots.shape
        block, node = np.divmod(np.asarray(flat, dtype=np.int64), npt)
        return block * npt + slots[block % q, node]

    # -- readout -----------------------------------------------------------------------------
    def latest(self) -> cp.ndarray:
        """The copy holding the latest populations in the natural (two-copy) layout.

        In place in phase 1 the one copy is first decoded where it lies (one 'swap' launch,
        the same bytes as a step); the state is then in phase 0, whose next step gives the
        same populations bit for bit, so reading never changes the run.
        """
        if not self.in_place:
            return self.f[self.current]
        if self.current == 1:
            cp.cuda.get_current_stream().synchronize()
            with self.stream:  # after the steps queued there, before the reader's copy
                self.launch("swap", self.problem.tiles_per_block)
            self.stream.synchronize()
        return self.f[0]

    def _stored(self, tiles=None) -> cp.ndarray:
        """The stored values of all tiles (or of ``tiles``) in XYZ order (XYZ layout, all
        tiles: a view)."""
        current = self.latest()
        if tiles is not None:
            current = current[tiles]
        if self.identity_slots is None:
            self.identity_slots = bool((self.slots == cp.arange(self.slots.shape[1])).all())
        if not self.identity_slots:
            return current[:, cp.arange(self.problem.lattice.q)[:, None], self.slots]
        return current

    def populations(self) -> np.ndarray:
        """Latest populations, host float64 (n_tiles, q, a**d) in XYZ order, as stored."""
        return cp.asnumpy(self.problem.storage.exact(self._stored(), cp))

    def device_populations(self, tiles=None) -> cp.ndarray:
        """Latest populations on the device (of ``tiles``: a slice or index array), XYZ order."""
        # The tiles first: a cut reads one layer of them, not a decoded copy of the state.
        return self.problem.storage.decode(self._stored(tiles), cp)

    def node_index(self, tile: np.ndarray, node: np.ndarray, solid: np.ndarray) -> NodeIndex:
        """Where host (tile, XYZ node) pairs lie in the tiled copies."""
        return node_index(tile, node, solid, cp)

    def node_populations(self, index: NodeIndex) -> cp.ndarray:
        """Latest populations (q, n) of ``index``'s nodes gathered from the stored layout."""
        return tiled_node_populations(self.problem, self.latest(), index, self.slots, cp)

    def fluid_populations(self, part: slice) -> cp.ndarray:
        """Refused: a tiled run reads its tiles in one chunk (:meth:`device_populations`)."""
        raise TypeError("fluid_populations reads compact runs; a tiled run reads its tiles in "
                        "one chunk (device_populations).")

    # -- writing -----------------------------------------------------------------------------
    def set_populations(self, f, tiles: slice | None = None) -> None:
        """Overwrite the latest populations from a host or device array in XYZ in-tile order
        (rounded to the storage on the device), of the tiles ``tiles`` (a slice) only when
        given; solid nodes of every copy get the rest equilibrium (:mod:`solver.backends.base`)."""
        problem, q = self.problem, cp.arange(self.problem.lattice.q)[:, None]
        part = slice(None) if tiles is None else tiles
        if self.in_place:  # values arrive in the natural layout: decode to phase 0 first,
            self.latest()  # which also moves the float16 step counter there
        others = [c for c in range(self.f.shape[0]) if c != self.current]
        for copy in (self.current, *others):
            stored = (problem.storage.encode(cp.asarray(f), cp) if copy == self.current
                      else self.f[copy][part, q, self.slots])
            self.f[copy][part, q, self.slots] = with_rest_solids(problem, stored, cp, tiles)

    def set_step(self, step: int) -> None:
        """Set the step counter that seeds float16 stochastic rounding and the openings' soft
        start (on resume)."""
        if self.seeds is not None:  # float16 storage
            self.seeds[self.current] = np.uint32(step & 0xFFFFFFFF)
        if self.iolets is not None:
            self.iolets.set_step(step)

    def release(self) -> None:
        """Drop the device arrays (the backend frees its memory pool)."""
        self.f, self.views, self.launches, self.tables, self.iolets = \
            cp.empty((2, 0, 0, 0), dtype=self.f.dtype), (), {}, {}, None
        self.graphs.clear()
