"""A run on fluid-compacted storage: the device state the CuPy backend can delegate to.

:class:`CompactRun` holds the two compact copies of a problem's populations and the tables of
:class:`~.compact.CompactTiling`, steps them with the ``KernelVariant(compact=pad)`` kernel and
converts at its edges: populations go in and come out in the tiled XYZ layout the rest of the
solver uses (solid nodes at the rest equilibrium, as every backend keeps them), so fields and
checkpoints need not know. The array module (CuPy, or NumPy with an emulated launcher in the
CPU tests) and the launcher are arguments; by default CuPy and the compiled kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ...problem import Problem
from .compact import CompactTiling, probe_shared_bytes, sector_pad
from .kernels import KernelVariant, kernel_source
from .tables import physics_args

__all__ = ["CompactRun", "Launcher"]

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
