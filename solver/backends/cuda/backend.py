"""CuPy backend: the tiled stream-collide kernel of the paper on an NVIDIA GPU.

With :mod:`.device`, :mod:`.iolet_launch` and :mod:`.state_access` (reading and writing a
run's populations), the only modules that import CuPy. Kernels from :mod:`.kernels` are
compiled by NVRTC once per variant (:mod:`.device`) and run on device copies
``f[copy][tile][i][slot]`` in the configured in-tile layout: two copies, or one updated in
place by the AA pattern (:mod:`.streaming`; ``state.current`` is then the phase and readers
decode phase 1 in place first). :meth:`CupyBackend.populations` returns XYZ order like every
backend; step times are CUDA-event times (the paper's probe kernels and re-laid views, which only
benchmarks use, are :class:`~.probe_backend.ProbeBackend`'s). Everything the NumPy reference
does runs here: BGK, TRT, MRT with Guo forcing, halfway bounce-back, Zou-He faces, Ladd's
moving walls and objects (``templates/PHYSICS_FOR_GPU.md``), the openings' link pass
(:mod:`solver.iolets`, launched before each step) and float16 storage (:mod:`solver.storage`),
encoded and decoded on the device. Solid nodes hold the rest equilibrium in every copy
(:mod:`solver.backends.base`). Fluid-compacted runs are :class:`~.compact_run.CompactRun`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import cupy as cp
import numpy as np

from ...problem import Problem
from ..base import DeviceInfo
from ..plan import ExecutionPlan, plan_for
from .capture import GRAPH_STEPS, capture_or_none, replay_timed
from .compact_run import CompactRun
from .device import (
    compile_kernel,
    copy_bandwidth,
    device_info,
    free_pool,
    probe_device,
)
from .footprint import device_bytes
from .iolet_launch import device_iolets
from .kernels import KernelVariant, kernel_source, real_args
from .state_access import StateAccess
from .streaming import next_phase
from .tables import (
    check_tile_shape,
    device_tables,
    geometry_args,
    launch_shape,
    physics_args,
    slot_table,
)

__all__ = ["CupyBackend", "CupyState", "probe_device", "compile_kernel", "copy_bandwidth"]

log = logging.getLogger(__name__)


@dataclass
class CupyState:
    """Device arrays of one run.

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
    graphs: dict = field(default_factory=dict, repr=False)
    identity_slots: bool | None = None
    #: float16 storage: the kernel's two-slot step counter (uint32), seeding its stochastic
    #: rounding; a launch from ``current`` c (copy c, or in place phase c) reads slot c
    #: (:mod:`solver.backends.cuda.storage`). None otherwise.
    seeds: cp.ndarray | None = field(default=None, repr=False)
    iolets: object = field(default=None, repr=False)  # openings' pass (.iolet_launch) or None

    @property
    def in_place(self) -> bool:
        """Whether one copy is updated in place (AA pattern)."""
        return self.f.shape[0] == 1

    def copies(self) -> tuple[cp.ndarray, cp.ndarray]:
        """(source, destination) copies of the next step (the same array in place)."""
        if not self.views:  # fixed views: slicing on every launch costs host time
            self.views = (self.f[0], self.f[0]) if self.in_place else (self.f[0], self.f[1])
        if self.in_place:
            return self.views
        return self.views[self.current], self.views[1 - self.current]


class CupyBackend(StateAccess):
    """Tiled fused stream-collide on the GPU (float32/float64 arithmetic, storage per problem)."""

    name = "cupy"
    xp = cp

    def __init__(self) -> None:
        self._use_graphs = True

    def allocate(self, problem: Problem, plan: ExecutionPlan | None = None
                 ) -> CupyState | CompactRun:
        """Upload the tiling tables and set the copies (one or two) to the rest equilibrium;
        a :class:`.compact_run.CompactRun` where the execution plan (``plan``, by default
        :func:`~solver.backends.plan.plan_for` ``problem``) stores fluid nodes only."""
        if problem.owned is not None and not np.all(problem.owned):
            raise ValueError("step() advances every tile; a rank-local problem (owned tiles of "
                             "a distributed run) is allocated by phase_stepper(), which steps "
                             "only the owned tiles.")
        plan = plan or plan_for(problem)
        log.info("tile storage: %s (%s)", plan.tile_storage, plan.reason)
        log.debug("execution plan:\n%s", plan.describe())
        return self._allocate_planned(problem, plan)

    def _allocate_planned(self, problem: Problem, plan: ExecutionPlan) -> CupyState | CompactRun:
        if plan.compact:
            return CompactRun(problem, plan.pad, cp, tiles_per_block=plan.tiles_per_block,
                              packed=plan.packed, code=plan.code)
        return self._allocate(problem)

    def phase_stepper(self, problem: Problem, n_boundary_tiles: int, n_owned_tiles: int):
        """A rank's two-phase stepper (:class:`.phases.CupyPhases`) for a rank-local ``problem``
        owning tiles ``[0, n_owned_tiles)``, the first ``n_boundary_tiles`` read by others, on
        the storage its execution plan chooses (tiled, or a :class:`.compact_run.CompactRun`:
        both step tile ranges, :meth:`launch_tiles`)."""
        from .phases import CupyPhases, refuse_undistributable

        refuse_undistributable(problem)
        n = problem.tiling.n_tiles
        owned = np.arange(n) < n_owned_tiles
        if not 0 <= n_boundary_tiles <= n_owned_tiles <= n or (
                problem.owned is not None and not np.array_equal(problem.owned, owned)):
            raise ValueError(f"phase_stepper needs the owned tiles first: tiles [0, "
                             f"{n_owned_tiles}) of {n}, boundary tiles [0, {n_boundary_tiles}).")
        plan = plan_for(problem)
        log.info("rank tile storage: %s (%s)", plan.tile_storage, plan.reason)
        return CupyPhases(self, self._allocate_planned(problem, plan), n_boundary_tiles,
                          n_owned_tiles)

    def _allocate(self, problem: Problem) -> CupyState:
        lat, tiling = problem.lattice, problem.tiling
        check_tile_shape(lat.name, tiling.a, problem.tiles_per_block)
        variant = KernelVariant.for_problem(problem)
        kernel_source(variant)  # unsupported physics is refused here, before any allocation
        real_args = physics_args(problem)
        tables = {k: cp.asarray(v) for k, v in device_tables(problem, variant.boundary).items()}
        # Rest equilibrium is uniform per direction, so it is layout-free: no host array.
        feq = problem.storage.encode(problem.rest_populations()[:, None])[:, 0]
        f = cp.empty((problem.population_copies, tiling.n_tiles, lat.q, tiling.nodes_per_tile),
                     dtype=problem.storage_dtype)
        f[...] = cp.asarray(feq)[None, None, :, None]
        slots = cp.asarray(slot_table(lat.name, problem.layout, tiling.a))
        seeds = cp.zeros(2, dtype=np.uint32) if problem.storage.encoded else None
        return CupyState(problem=problem, f=f, tables=tables, slots=slots,
                         int_args=geometry_args(problem), real_args=real_args,
                         stream=cp.cuda.Stream(non_blocking=True), seeds=seeds,
                         iolets=device_iolets(problem, cp.asnumpy(slots)))

    def _entry(self, state: CupyState, mode: str, tiles_per_block: int,
               tiles: tuple[int, int] | None = None) -> tuple:
        """Kernel, grid, block, trailing arguments and shared bytes of a launch over the tile
        range ``tiles`` (default all), resolved once per range (and in place per phase)."""
        phase = state.current if state.in_place else 0  # in place: the kernel follows the phase
        key = (mode, tiles_per_block, tiles, phase)
        if key not in state.launches:  # launches must stay cheap on the host
            variant = KernelVariant.for_problem(state.problem, mode, phase)
            kernel = compile_kernel(variant)
            first, end = tiles if tiles is not None else (0, state.problem.tiling.n_tiles)
            blocks, threads, smem = launch_shape(state.problem, tiles_per_block, mode,
                                                 end - first, variant.wide_sources)
            ints = state.int_args if tiles is None else geometry_args(state.problem, tiles)
            tail = (*state.tables.values(), *ints, *real_args(variant, state.real_args),
                    *(() if state.seeds is None else (state.seeds,)))
            state.launches[key] = (kernel, (blocks,), (threads,), tail, smem)
        return state.launches[key]

    def launch_tiles(self, state: CupyState, first: int, end: int) -> None:
        """Enqueue one full step of tiles ``[first, end)`` on the current CuPy stream, from the
        current copy into the other; the copies are not swapped (a distributed rank's phase)."""
        if isinstance(state, CompactRun):
            state.launch_tiles(first, end)
        elif end > first:
            kernel, grid, block, tail, smem = self._entry(
                state, "full", state.problem.tiles_per_block, (first, end))
            kernel(grid, block, (*state.copies(), *tail), shared_mem=smem)

    def _launch(self, state: CupyState, mode: str, tiles_per_block: int) -> None:
        kernel, grid, block, tail, smem = self._entry(state, mode, tiles_per_block)
        if state.iolets is not None and mode == "full":
            state.iolets.launch(state.copies()[0], state.current)  # before the step reads
        kernel(grid, block, (*state.copies(), *tail), shared_mem=smem)
        state.current = next_phase(state.problem.streaming, mode, state.current)

    def _graph(self, state: CupyState, mode: str, tiles_per_block: int):
        """A captured CUDA graph of GRAPH_STEPS launches from the current copy, or None.

        Small domains run a step in tens of microseconds, about what one launch from Python
        costs; replaying a graph removes that host overhead (paper-style back-to-back kernels).
        """
        if not self._use_graphs:
            return None
        key = (mode, tiles_per_block, state.current)
        if key not in state.graphs:
            for _ in range(2):  # compile and load both phases' kernels outside the capture
                self._entry(state, mode, tiles_per_block)
                state.current = next_phase(state.problem.streaming, mode, state.current)
            state.copies()
            current = state.current
            graph = capture_or_none(state.stream,
                                    lambda: self._launch(state, mode, tiles_per_block),
                                    GRAPH_STEPS, lambda: setattr(state, "current", current))
            if graph is None:
                self._use_graphs = False
                return None
            state.graphs[key] = graph
        return state.graphs[key]

    def _timed(self, state: CupyState, n: int, mode: str, tiles_per_block: int) -> float:
        cp.cuda.get_current_stream().synchronize()  # uploads queued elsewhere come first
        graph = self._graph(state, mode, tiles_per_block) if n >= GRAPH_STEPS else None
        return replay_timed(cp.cuda, state.stream, n, graph, GRAPH_STEPS,
                            lambda: self._launch(state, mode, tiles_per_block))

    def step(self, state: CupyState, n: int = 1) -> float:
        """Advance ``n`` steps; return their CUDA-event time in seconds."""
        if isinstance(state, CompactRun):
            return state.step(n)
        return self._timed(state, n, "full", state.problem.tiles_per_block)

    def _natural(self, state: CupyState) -> cp.ndarray:
        """The copy holding the latest populations in the natural (two-copy) layout.

        In place in phase 1 the one copy is first decoded where it lies (one 'swap' launch,
        the same bytes as a step); the state is then in phase 0, whose next step gives the
        same populations bit for bit, so reading never changes the run.
        """
        if not state.in_place:
            return state.f[state.current]
        if state.current == 1:
            cp.cuda.get_current_stream().synchronize()
            with state.stream:  # after the steps queued there, before the reader's copy
                self._launch(state, "swap", state.problem.tiles_per_block)
            state.stream.synchronize()
        return state.f[0]

    def device_info(self) -> DeviceInfo:
        """GPU name, memory (bytes), theoretical and measured copy bandwidth (bytes/s)."""
        return device_info()

    def nccl_status(self) -> tuple[bool, str]:
        """Whether CuPy's NCCL binding is usable, and its version or what is missing."""
        from .nccl import nccl_status

        return nccl_status()

    def nccl_link(self, comm):
        """An NCCL communicator over the MPI communicator ``comm`` on the current device
        (:class:`~solver.backends.cuda.nccl.NcclLink`; collective over ``comm``)."""
        from cupy.cuda import nccl

        from .nccl import NcclLink

        return NcclLink(nccl, comm)

    def gpu_id(self) -> str:
        """PCI bus id of the current device: which physical GPU this process computes on."""
        return str(cp.cuda.Device().pci_bus_id)

    def memory_required(self, problem: Problem) -> int:
        """Device bytes a run of ``problem`` needs at its peak (:func:`.footprint.device_bytes`)."""
        return device_bytes(problem)

    def used_memory(self) -> int:
        """Device bytes this process's arrays hold now (CuPy's memory pool in use)."""
        return int(cp.get_default_memory_pool().used_bytes())

    def free_memory(self) -> int:
        """Device memory a new allocation can use, bytes: free on the device plus CuPy's pool."""
        return int(cp.cuda.runtime.memGetInfo()[0] + cp.get_default_memory_pool().free_bytes())

    def release(self, state: CupyState) -> None:
        """Free the device arrays."""
        if isinstance(state, CompactRun):
            state.release()
        else:
            state.f, state.views, state.launches, state.graphs, state.tables, state.iolets = \
                cp.empty((2, 0, 0, 0), dtype=state.f.dtype), (), {}, {}, {}, None
        free_pool()  # not while a run on another thread captures a graph
