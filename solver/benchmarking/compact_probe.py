"""Timing one compact kernel on the device: the benchmarks' twin of
:class:`~solver.backends.cuda.compact_run.CompactRun`, kept out of the backend package.

:class:`CompactProbe` holds two compact copies of one
:class:`~solver.backends.cuda.compact.CompactTiling` and launches one compact kernel
(propagation probe or full step, either addressing, per-node or packed) between them, timed
with CUDA events around captured graphs; :mod:`.compact_suite`,
``benchmarks/compact/compact_probe.py`` and ``benchmarks/kernel_tuning/kernel_profile.py`` drive
it. CuPy comes as an argument (``xp``: the backend's array module, or a fake in the CPU tests):
only the backend package imports it.
"""

from __future__ import annotations

import numpy as np

from ..backends.cuda.capture import CAPTURE_LOCK, GRAPH_STEPS, RunGraphs, replay_timed
from ..backends.cuda.compact import CompactTiling
from ..backends.cuda.compact_source import (
    DEFAULT_CODE,
    CompactCode,
    packed_threads,
    probe_name,
    probe_shared_bytes,
    probe_source,
)
from ..backends.cuda.tables import physics_args
from ..problem import Problem

__all__ = ["CompactProbe"]


class CompactProbe:
    """One compact kernel (probe or full step, either addressing) on the device for timing:
    two copies, CUDA events around launches (a captured graph of 16 launches where capture
    works). The benchmark's twin of :class:`CompactRun`, which steps real runs."""

    GRAPH_STEPS = GRAPH_STEPS

    def __init__(self, compact: CompactTiling, periodic, precision: str, q: int = 19,
                 halo: bool = False, step: Problem | None = None, packed: int = 0,
                 code: CompactCode = DEFAULT_CODE, *, xp) -> None:
        """``step``: run the full step of that problem's collision (its physics arguments)
        instead of the propagation probe; ``packed`` K: the packed kernel (K tiles per block,
        one thread per fluid node; launches ignore their tiles per block); ``code``: how the
        kernel locates and reads its halo; ``xp``: CuPy (``backend.xp``)."""
        cp = xp
        self.cp, self.compact, self.q = cp, compact, q
        compact.check_offsets(q)
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
        self.graphs = RunGraphs(self.stream)  # by tiles per block: the runs' graph launcher
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

    @property
    def use_graphs(self) -> bool:
        """Whether launches are captured into graphs (False once a capture failed here)."""
        return self.graphs.enabled

    def _load(self, tpb: int) -> None:
        """Load the kernel outside the capture (two launches)."""
        self.launch(tpb)
        self.launch(tpb)
        self.stream.synchronize()

    def _graph(self, tpb: int):
        return self.graphs.get_or_capture(tpb, lambda: self.launch(tpb),
                                          lambda: None,  # the probe keeps no phase
                                          prepare=lambda: self._load(tpb))

    def time(self, n: int, tpb: int) -> float:
        """Seconds of ``n`` launches (CUDA events)."""
        graph = self._graph(tpb) if n >= self.GRAPH_STEPS else None
        return replay_timed(self.cp.cuda, self.stream, n, graph, self.GRAPH_STEPS,
                            lambda: self.launch(tpb))

    def release(self) -> None:
        """Free the device arrays."""
        self.f, self.tables = [], ()
        self.graphs.clear()
        with CAPTURE_LOCK:  # not while a run on another thread captures a graph
            self.cp.get_default_memory_pool().free_all_blocks()
