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
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ...problem import Problem
from .compact import CompactTiling, probe_name, probe_shared_bytes, probe_source, sector_pad
from .kernels import KernelVariant, kernel_source
from .tables import physics_args

__all__ = ["CompactRun", "CompactProbe", "Launcher"]

log = logging.getLogger(__name__)

#: ``launcher(variant, blocks, threads, shared_bytes, args)``: run one kernel launch.
Launcher = Callable[[KernelVariant, int, int, int, tuple], None]


def _cupy_launcher(variant: KernelVariant, blocks: int, threads: int, shared: int,
                   args: tuple) -> None:
    from .device import compile_kernel

    compile_kernel(variant)((blocks,), (threads,), args, shared_mem=shared)


class CompactRun:
    """Two compact copies of ``problem``'s populations on the device, stepped two-copy.

    ``pad``: values per direction block rounded up to it (default: one 32-byte sector).
    Refuses (ValueError, with what to use instead) what the compact kernel lacks.
    """

    def __init__(self, problem: Problem, pad: int | None = None, xp=None,
                 launcher: Launcher | None = None, tiles_per_block: int = 2) -> None:
        if xp is None:
            import cupy as xp
        self.problem, self.xp = problem, xp
        self.launcher = launcher or _cupy_launcher
        pad = pad or sector_pad(problem.dtype.itemsize)
        tiled = KernelVariant.for_problem(problem)
        self.variant = replace(tiled, compact=pad).canonical()
        kernel_source(self.variant)  # ValueError: boundary code, in place, float16 storage, 2D
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
        c, tiled_index = self.compact.edge_index(q)
        self.edge = (xp.asarray(c), xp.asarray(tiled_index))
        self.f = [xp.zeros(q * self.compact.n_slots, dtype=problem.dtype) for _ in range(2)]
        self.current = 0
        self.tiles_per_block = tiles_per_block
        self.set_populations(problem.initial_populations())

    def set_populations(self, f: np.ndarray) -> None:
        """Overwrite the latest populations from tiled XYZ ones (n_tiles, q, 64); solid nodes
        are not stored."""
        flat = self.xp.asarray(np.asarray(f, dtype=self.problem.dtype)).ravel()
        self.f[self.current][self.edge[0]] = flat[self.edge[1]]

    def populations(self) -> np.ndarray:
        """Latest populations, tiled XYZ (n_tiles, q, 64), float64 on the host; solid nodes at
        the rest equilibrium."""
        p = self.problem
        out = p.initial_populations().astype(p.dtype).ravel()
        latest = self.f[self.current]
        host = latest.get() if hasattr(latest, "get") else np.asarray(latest)
        edge = [e.get() if hasattr(e, "get") else np.asarray(e) for e in self.edge]
        out[edge[1]] = host[edge[0]]
        return out.reshape(p.tiling.n_tiles, p.lattice.q, -1).astype(np.float64)

    def step(self, n: int = 1) -> None:
        """Advance ``n`` steps (two copies, one launch each)."""
        tpb = self.tiles_per_block
        blocks = -(-self.problem.tiling.n_tiles // tpb)
        for _ in range(n):
            src, dst = self.f[self.current], self.f[1 - self.current]
            self.launcher(self.variant, blocks, 64 * tpb, probe_shared_bytes(tpb, True),
                          (src, dst, *self.tables, *self.ints, *self.reals))
            self.current = 1 - self.current

    def memory_bytes(self) -> int:
        """Device bytes of the two copies and the tables."""
        return self.compact.memory_bytes(self.problem.lattice.q, self.problem.dtype.itemsize)


class CompactProbe:
    """One compact kernel (probe or full step, either addressing) on the device for timing:
    two copies, CUDA events around launches (a captured graph of 16 launches where capture
    works). The benchmark's twin of :class:`CompactRun`, which steps real runs."""

    GRAPH_STEPS = 16

    def __init__(self, compact: CompactTiling, periodic, precision: str, q: int = 19,
                 halo: bool = False, step: Problem | None = None) -> None:
        """``step``: run the full step of that problem's collision (its physics arguments)
        instead of the propagation probe."""
        import cupy as cp

        self.cp, self.compact, self.q = cp, compact, q
        compact.check_int32(q)
        self.halo = halo
        kind = (step.collision.name, step.incompressible) if step is not None else (None, True)
        name = probe_name("D3Q19", precision, compact.pad, halo, *kind)
        module = cp.RawModule(code=probe_source("D3Q19", precision, compact.pad, halo, *kind),
                              options=("-std=c++17",))
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
        with self.stream:
            self.kernel((-(-n_tiles // tpb),), (64 * tpb,), (src, dst, *self.tables, *self.ints,
                                                               *self.reals),
                        shared_mem=probe_shared_bytes(tpb, self.halo))
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
                with self.stream:
                    self.stream.begin_capture()
                    try:
                        for _ in range(self.GRAPH_STEPS):
                            self.launch(tpb)
                    finally:
                        self.graphs[tpb] = self.stream.end_capture()
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
        self.cp.get_default_memory_pool().free_all_blocks()
