"""A run on fluid-compacted storage: the device state the CuPy backend can delegate to.

:class:`CompactRun` holds the two compact copies of a problem's populations and the tables of
:class:`~.compact.CompactTiling`, steps them with the ``KernelVariant(compact=pad)`` kernel and
converts at its edges: populations go in and come out in the tiled XYZ layout the rest of the
solver uses (solid nodes at the rest equilibrium, as every backend keeps them), so fields and
checkpoints need not know. The array module (CuPy, or NumPy with an emulated launcher in the
CPU tests) and the launcher are arguments; by default CuPy and the compiled kernel.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace

import numpy as np

from ...problem import Problem
from .capture import CAPTURE_LOCK, capture_graph
from .compact import (
    DEFAULT_CODE,
    CompactCode,
    CompactTiling,
    packed_threads,
    probe_name,
    probe_shared_bytes,
    probe_source,
    sector_pad,
)
from .compact_readout import fluid_starts, readout_tiles, tiled_chunk, write_chunk
from .kernels import KernelVariant, kernel_source
from .tables import physics_args

__all__ = ["CompactRun", "CompactProbe", "Launcher", "edge_nodes", "EDGE_BYTES"]

log = logging.getLogger(__name__)

#: ``launcher(variant, blocks, threads, shared_bytes, args)``: run one kernel launch.
Launcher = Callable[[KernelVariant, int, int, int, tuple], None]


def _cupy_launcher(variant: KernelVariant, blocks: int, threads: int, shared: int,
                   args: tuple) -> None:
    from .device import compile_kernel

    compile_kernel(variant)((blocks,), (threads,), args, shared_mem=shared)


def edge_nodes(compact: CompactTiling, q: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per fluid node: its compact value index of direction 0, its tile's direction block
    length (direction i adds i times it), and its tiled XYZ index of direction 0 (direction i
    adds 64 i). int32 where the indices fit (12 bytes per fluid node), else the tiled one int64:
    the conversion tables of :class:`CompactRun`, a fraction of :meth:`CompactTiling.edge_index`
    (16 q bytes per fluid node)."""
    ranks = compact.ranks()
    tile, node = np.nonzero(ranks >= 0)
    at = q * compact.base[tile] + ranks[tile, node]
    tiled = tile * (q * 64) + node
    wide = compact.tiling.n_tiles * q * 64 >= 2**31
    return (at.astype(np.int32), compact.padded[tile].astype(np.int32),
            tiled.astype(np.int64 if wide else np.int32))


#: Device bytes per fluid node of :func:`edge_nodes`' tables (tiled index int32).
EDGE_BYTES = 12


class CompactRun:
    """Two compact copies of ``problem``'s populations on the device, stepped two-copy.

    ``pad``: values per direction block rounded up to it (default: one 32-byte sector).
    Refuses (ValueError, with what to use instead) what the compact kernel lacks.
    """

    #: Launches per captured CUDA graph (even: the copies end where they began).
    GRAPH_STEPS = 16

    def __init__(self, problem: Problem, pad: int | None = None, xp=None,
                 launcher: Launcher | None = None, tiles_per_block: int = 2,
                 cuda=None, packed: int = 0, code: CompactCode = DEFAULT_CODE) -> None:
        """``cuda``: the CUDA runtime namespace for streams, events and graphs (``cupy.cuda``
        with CuPy; a fake in the CPU tests); None with NumPy arrays (plain launches, host
        clock). ``packed`` K: the packed kernel (K tiles per block, one thread per fluid node;
        ``tiles_per_block`` is then ignored). ``code``: how the kernel locates and reads its
        halo (a register cap allows at most 4 tiles per block: more are launched as 4)."""
        if xp is None:
            import cupy as xp
        self.problem, self.xp = problem, xp
        self.cuda = cuda if cuda is not None else getattr(xp, "cuda", None)
        self.stream = self.cuda.Stream(non_blocking=True) if self.cuda is not None else None
        self.graphs: dict[int, object] = {}
        self.use_graphs = self.cuda is not None
        self.loaded: set[str] = set()  # kernels launched once (loading is not capturable)
        self.launcher = launcher or _cupy_launcher
        pad = pad or sector_pad(problem.dtype.itemsize)
        #: The kernel of each phase (in place: AA pattern, :mod:`.streaming`; two copies: one).
        self.variants = [replace(KernelVariant.for_problem(problem, "full", phase), compact=pad,
                                 packed=packed, code=code).canonical() for phase in (0, 1)]
        self.variant = self.variants[0]
        self.in_place = problem.population_copies == 1
        kernel_source(self.variant)  # ValueError: boundary code, float16 storage, 2D
        self.compact = CompactTiling(problem.tiling, pad)
        q = problem.lattice.q
        self.compact.check_int32(q)
        t = problem.tiling
        self.tables = (xp.asarray(self.compact.masks.astype(np.uint64)),
                       xp.asarray(self.compact.base.astype(np.int32)),
                       xp.asarray(np.ascontiguousarray(t.tiles, dtype=np.int32).ravel()),
                       xp.asarray(np.ascontiguousarray(t.tile_map.transpose(),
                                                       dtype=np.int32).ravel()))
        self.ints = tuple(np.int32(v) for v in self.compact.int_args(problem.periodic))
        self.reals = tuple(physics_args(problem))
        self.edge = tuple(xp.asarray(a) for a in edge_nodes(self.compact, q))
        self.starts = fluid_starts(self.compact)  # host: each tile's first edge-table entry
        self.f = [xp.zeros(q * self.compact.n_slots, dtype=problem.dtype)
                  for _ in range(problem.population_copies)]
        self.current = 0
        self.tiles_per_block = min(tiles_per_block, 4) if code.registers else tiles_per_block
        #: Tiles per chunk of a readout (:mod:`.compact_readout`: bounded temporaries).
        self.readout_tiles = readout_tiles(problem, self.memory_bytes())
        self.set_populations(problem.initial_populations())

    def set_populations(self, f: np.ndarray) -> None:
        """Overwrite the latest populations from tiled XYZ ones (n_tiles, q, 64); solid nodes
        are not stored."""
        self._natural()  # in place: the values arrive in the natural layout (phase 0)
        # readout_tiles tiles at a time, host or device input: temporaries of one chunk
        # (the peak memory of a compact run, solver.memory.device_bytes).
        for first in range(0, self.problem.tiling.n_tiles, self.readout_tiles):
            write_chunk(self, first, f[first:first + self.readout_tiles])
        if self.cuda is not None:  # written on the default stream, before the next step
            self.cuda.Device().synchronize()

    def device_populations(self, tiles=None):
        """Latest populations in the tiled XYZ layout (tiles, q, 64), arithmetic precision, an
        array of ``xp`` (solid nodes at the rest equilibrium): of all tiles, or of ``tiles`` (a
        slice or an index array) only, which is what a chunked readout asks for
        (:attr:`readout_tiles` at a time)."""
        self._natural()
        return tiled_chunk(self, slice(None) if tiles is None else tiles)

    def populations(self) -> np.ndarray:
        """Latest populations, tiled XYZ (n_tiles, q, 64), float64 on the host; solid nodes at
        the rest equilibrium. Converted :attr:`readout_tiles` tiles at a time: the device never
        holds a tiled copy of all populations."""
        p = self.problem
        out = np.empty((p.tiling.n_tiles, p.lattice.q, p.tiling.nodes_per_tile))
        self._natural()
        for first in range(0, p.tiling.n_tiles, self.readout_tiles):
            part = slice(first, first + self.readout_tiles)
            chunk = tiled_chunk(self, part)
            out[part] = chunk.get() if hasattr(chunk, "get") else np.asarray(chunk)
        return out

    def _natural(self) -> None:
        """Wait for the queued steps; in place in phase 1, first decode the copy where it lies
        (one 'swap' launch): phase 0 steps on to the same populations bit for bit."""
        if self.in_place and self.current == 1:
            self._launch_variant(replace(self.variant, mode="swap").canonical(), None)
            self.current = 0
        self.synchronize()

    def synchronize(self) -> None:
        """Wait for the steps queued on this run's stream."""
        if self.stream is not None:
            self.stream.synchronize()

    def _launch(self) -> None:
        self._launch_variant(self.variants[self.current if self.in_place else 0], self.reals)
        self.current = 1 - self.current  # two copies: the other copy; in place: the phase

    def _launch_variant(self, variant: KernelVariant, reals: tuple | None) -> None:
        tpb, k = self.tiles_per_block, variant.packed
        blocks = -(-self.problem.tiling.n_tiles // (k or tpb))
        src, dst = (self.f[0], self.f[0]) if self.in_place else \
            (self.f[self.current], self.f[1 - self.current])
        self.loaded.add(variant.name)
        with self.stream if self.stream is not None else nullcontext():
            self.launcher(variant, blocks, packed_threads(k) if k else 64 * tpb,
                          probe_shared_bytes(tpb, True, k),
                          (src, dst, *self.tables, *self.ints, *(reals or ())))

    def _graph(self):
        """A captured graph of GRAPH_STEPS launches from the current copy, or None (the kernel
        must have been launched once already: loading it is not capturable)."""
        if not self.use_graphs:
            return None
        if self.current not in self.graphs:
            self.stream.synchronize()
            current = self.current
            try:
                graph = capture_graph(self.stream, self._launch, self.GRAPH_STEPS)
            except Exception as exc:  # capture unsupported here: plain launches from now on
                log.warning("CUDA graph capture failed (%s); launching kernels one by one.", exc)
                self.use_graphs = False
                return None
            finally:
                self.current = current  # capturing runs nothing
            self.graphs[current] = graph
        return self.graphs[self.current]

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
        done = warm = 0
        kernels = {v.name for v in (self.variants if self.in_place else self.variants[:1])}
        if n >= self.GRAPH_STEPS + 2 and self.use_graphs and not kernels <= self.loaded:
            with self.stream:
                self._launch()
                self._launch()
            done = warm = 2
        ready = kernels <= self.loaded  # every kernel is loaded: capture is safe
        graph = self._graph() if ready and n - done >= self.GRAPH_STEPS else None
        start, end = self.cuda.Event(), self.cuda.Event()
        with self.stream:
            start.record(self.stream)
            while graph is not None and n - done >= self.GRAPH_STEPS:
                graph.launch(self.stream)  # an even number of steps: same copy current
                done += self.GRAPH_STEPS
            for _ in range(n - done):
                self._launch()
            end.record(self.stream)
        end.synchronize()
        return self.cuda.get_elapsed_time(start, end) / 1e3 * n / (n - warm)

    def probe(self, mode: str, n: int = 1) -> float:
        """``n`` full steps ('full'); the tiled probes are refused (ValueError)."""
        if mode != "full":  # the compact probes are benchmarks/compact_probe.py's
            raise ValueError(f"probe {mode!r} runs on the tiled storage; allocate with "
                             "tile_storage='tiled' (compact probes: benchmarks/compact_probe.py).")
        return self.step(n)

    def release(self) -> None:
        """Drop the device arrays (the caller frees its memory pool)."""
        self.f, self.tables, self.edge, self.graphs = [], (), (), {}

    def memory_bytes(self) -> int:
        """Device bytes of the copies (one or two), the tables and the edge conversion tables."""
        return self.compact.memory_bytes(self.problem.lattice.q, self.problem.dtype.itemsize,
                                         self.problem.population_copies) \
            + sum(int(a.nbytes) for a in self.edge)


class CompactProbe:
    """One compact kernel (probe or full step, either addressing) on the device for timing:
    two copies, CUDA events around launches (a captured graph of 16 launches where capture
    works). The benchmark's twin of :class:`CompactRun`, which steps real runs."""

    GRAPH_STEPS = 16

    def __init__(self, compact: CompactTiling, periodic, precision: str, q: int = 19,
                 halo: bool = False, step: Problem | None = None, packed: int = 0,
                 code: CompactCode = DEFAULT_CODE) -> None:
        """``step``: run the full step of that problem's collision (its physics arguments)
        instead of the propagation probe; ``packed`` K: the packed kernel (K tiles per block,
        one thread per fluid node; launches ignore their tiles per block); ``code``: how the
        kernel locates and reads its halo."""
        import cupy as cp

        self.cp, self.compact, self.q = cp, compact, q
        compact.check_int32(q)
        self.halo, self.packed = halo, packed
        kind = (step.collision.name, step.incompressible) if step is not None else (None, True)
        name = probe_name("D3Q19", precision, compact.pad, halo, *kind, packed, code=code)
        module = cp.RawModule(code=probe_source("D3Q19", precision, compact.pad, halo, *kind,
                                                packed, code=code), options=("-std=c++17",))
        self.reals = tuple(physics_args(step)) if step is not None else ()
        self.kernel = module.get_function(name)
        tiling = compact.tiling
        self.tables = (cp.asarray(compact.masks.astype(np.uint64)),
                       cp.asarray(compact.base.astype(np.int32)),
                       cp.asarray(np.ascontiguousarray(tiling.tiles, dtype=np.int32).ravel()),
                       cp.asarray(np.ascontiguousarray(tiling.tile_map.transpose(),
                                                       dtype=np.int32).ravel()))
        self.ints = tuple(np.int32(v) for v in compact.int_args(periodic))
        size = q * compact.n_slots
        self.f = [cp.full(size, 0.05, dtype=precision), cp.full(size, 0.05, dtype=precision)]
        self.current = 0
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.graphs: dict[int, object] = {}
        self.use_graphs = True
        cp.cuda.Device().synchronize()  # the fills ran on the default stream

    def launch(self, tpb: int) -> None:
        """One propagation from the current copy into the other."""
        n_tiles = self.compact.tiling.n_tiles
        src, dst = self.f[self.current], self.f[1 - self.current]
        k = self.packed or tpb
        threads = packed_threads(k) if self.packed else 64 * tpb
        with self.stream:
            self.kernel((-(-n_tiles // k),), (threads,), (src, dst, *self.tables, *self.ints,
                                                          *self.reals),
                        shared_mem=probe_shared_bytes(tpb, self.halo, self.packed))
        self.current = 1 - self.current

    def upload(self, values: np.ndarray, copy: int) -> None:
        """Overwrite copy ``copy`` (0 or 1) with host values (all slots, padding included)."""
        self.f[copy][...] = self.cp.asarray(values)
        self.cp.cuda.Device().synchronize()  # the upload ran on the default stream

    def download(self, copy: int) -> np.ndarray:
        """Copy ``copy`` on the host, after the launches queued so far."""
        self.stream.synchronize()
        return self.cp.asnumpy(self.f[copy])

    def _graph(self, tpb: int):
        if not self.use_graphs:
            return None
        if tpb not in self.graphs:
            self.launch(tpb)  # loads the kernel outside the capture
            self.launch(tpb)
            self.stream.synchronize()
            try:
                self.graphs[tpb] = capture_graph(self.stream, lambda: self.launch(tpb),
                                                 self.GRAPH_STEPS)
            except Exception as exc:  # capture unsupported: plain launches
                log.warning("graph capture failed (%s); plain launches", exc)
                self.use_graphs = False
                return None
        return self.graphs[tpb]

    def time(self, n: int, tpb: int) -> float:
        """Seconds of ``n`` launches (CUDA events)."""
        cp = self.cp
        graph = self._graph(tpb) if n >= self.GRAPH_STEPS else None
        start, end = cp.cuda.Event(), cp.cuda.Event()
        done = 0
        with self.stream:
            start.record(self.stream)
            while graph is not None and n - done >= self.GRAPH_STEPS:
                graph.launch(self.stream)  # an even number of launches: copies end as they began
                done += self.GRAPH_STEPS
            for _ in range(n - done):
                self.launch(tpb)
            end.record(self.stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1e3

    def release(self) -> None:
        """Free the device arrays."""
        self.f, self.tables, self.graphs = [], (), {}
        with CAPTURE_LOCK:  # not while a run on another thread captures a graph
            self.cp.get_default_memory_pool().free_all_blocks()
