"""CuPy backend: the tiled stream-collide kernel of the paper on an NVIDIA GPU.

With :mod:`.device`, :mod:`.iolet_launch`, :mod:`.state_access` and :mod:`.tiled_run`, the only
modules that import CuPy. :class:`CupyBackend` allocates the run its execution plan chooses, one
of the two implementations of :class:`~.device_run.DeviceRun`: a :class:`~.tiled_run.TiledRun`
(kernels from :mod:`.kernels`, compiled by NVRTC once per variant, :mod:`.device`, on device
copies ``f[copy][tile][i][slot]`` in the configured in-tile layout, two copies or one updated
in place, :mod:`.streaming`) or a :class:`~.compact_run.CompactRun` (fluid nodes only), and
steps, reads and writes it through that protocol alone (:class:`~.state_access.StateAccess`).
:meth:`CupyBackend.populations` returns XYZ order like every backend; step times are
CUDA-event times (the paper's probe kernels and re-laid views, which only benchmarks use, are
``solver.benchmarking.probe_backend.ProbeBackend``'s). Everything the NumPy reference does
runs here: BGK, TRT, MRT with Guo forcing, halfway bounce-back, Zou-He faces, Ladd's moving
walls and objects (``templates/PHYSICS_FOR_GPU.md``), the openings' link pass
(:mod:`solver.iolets`, launched before each step) and float16 storage (:mod:`solver.storage`),
encoded and decoded on the device. Solid nodes hold the rest equilibrium in every copy
(:mod:`solver.backends.base`).
"""

from __future__ import annotations

import logging

import cupy as cp
import numpy as np

from ...problem import Problem
from ..base import LOCAL_REDUCTIONS, DeviceInfo, prepare_problem_tables
from ..plan import ExecutionPlan, plan_for
from .compact_run import CompactRun, compact_host
from .device import (
    compile_kernel,
    copy_bandwidth,
    device_info,
    free_pool,
    probe_device,
)
from .device_run import DeviceRun
from .footprint import device_bytes
from .kernels import KernelVariant
from .state_access import StateAccess
from .tables import TablesAhead, device_tables
from .tiled_run import TiledRun

__all__ = ["CupyBackend", "probe_device", "compile_kernel", "copy_bandwidth"]

log = logging.getLogger(__name__)


class CupyBackend(StateAccess):
    """Tiled fused stream-collide on the GPU (float32/float64 arithmetic, storage per problem)."""

    name = "cupy"
    xp = cp
    reductions = LOCAL_REDUCTIONS
    writes_parts = reads_parts = False  # one device: one checkpoint file, one .vti
    keeps_voxel_mask = True

    @property
    def tables_ahead(self) -> TablesAhead:
        """The runs' host tables made ahead by :meth:`prepare`, until allocated."""
        if "_tables_ahead" not in self.__dict__:
            self.__dict__["_tables_ahead"] = TablesAhead()
        return self.__dict__["_tables_ahead"]

    def prepare(self, problem: Problem) -> None:
        """Build ``problem``'s host tables ahead of :meth:`allocate`
        (:meth:`~solver.backends.base.Backend.prepare`): the problem's own and those of the
        run its plan stores (tiled: :func:`~.tables.device_tables`; compact:
        :func:`~.compact_run.compact_host`), held in :class:`.TablesAhead` until allocated.
        No device memory: a study makes them beside another run's steps."""
        prepare_problem_tables(problem)
        plan = plan_for(problem)
        if plan.compact:
            # The edge tables are made on the device at the allocation (compact_edges).
            self.tables_ahead.put(problem, "compact",
                                  compact_host(problem, plan.pad, plan.wide, edges=False))
        else:
            boundary = KernelVariant.for_problem(problem).boundary
            self.tables_ahead.put(problem, ("tiled", boundary), device_tables(problem, boundary))

    def allocate(self, problem: Problem, plan: ExecutionPlan | None = None) -> DeviceRun:
        """The run of ``problem`` at the rest equilibrium as its execution plan (``plan``, by
        default :func:`~solver.backends.plan.plan_for` ``problem``) stores it: a
        :class:`.tiled_run.TiledRun`, or a :class:`.compact_run.CompactRun` (fluid nodes
        only)."""
        if problem.owned is not None and not np.all(problem.owned):
            raise ValueError("step() advances every tile; a rank-local problem (owned tiles of "
                             "a distributed run) is allocated by phase_stepper(), which steps "
                             "only the owned tiles.")
        plan = plan or plan_for(problem)
        log.info("tile storage: %s (%s)", plan.tile_storage, plan.reason)
        log.debug("execution plan:\n%s", plan.describe())
        return self._allocate_planned(problem, plan)

    def _allocate_planned(self, problem: Problem, plan: ExecutionPlan) -> DeviceRun:
        if plan.compact:
            return CompactRun(problem, plan.pad, cp, tiles_per_block=plan.tiles_per_block,
                              packed=plan.packed, code=plan.code, wide=plan.wide,
                              host=self.tables_ahead.take(problem, "compact"))
        return TiledRun.allocate(problem, self.tables_ahead)

    def phase_stepper(self, problem: Problem, n_boundary_tiles: int, n_owned_tiles: int):
        """A rank's two-phase stepper (:class:`.phases.CupyPhases`) for a rank-local ``problem``
        owning tiles ``[0, n_owned_tiles)``, the first ``n_boundary_tiles`` read by others, on
        the storage its execution plan chooses (either :class:`.device_run.DeviceRun`: both
        step tile ranges, ``launch_tiles``)."""
        from .phases import CupyPhases

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

    def step(self, state: DeviceRun, n: int = 1) -> float:
        """Advance ``n`` steps; return their CUDA-event time in seconds."""
        return state.step(n)

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

    def memory_capacity(self) -> int:
        """Bytes of memory of the current device: all of it, not what is free now (the plan's
        storage choice must not depend on a run beside it, ``Problem.device_capacity``), or
        CuPy's pool limit where one is set below it (a GPU shared on purpose)."""
        total = int(cp.cuda.runtime.memGetInfo()[1])
        limit = int(cp.get_default_memory_pool().get_limit())
        return min(total, limit) if limit else total

    def free_memory(self) -> int:
        """Device memory a new allocation can use, bytes: free on the device plus CuPy's pool,
        within the pool's limit where one is set."""
        pool = cp.get_default_memory_pool()
        free = int(cp.cuda.runtime.memGetInfo()[0] + pool.free_bytes())
        limit = int(pool.get_limit())
        return min(free, limit - int(pool.used_bytes())) if limit else free

    def release(self, state: DeviceRun) -> None:
        """Free the device arrays."""
        state.release()
        free_pool()  # not while a run on another thread captures a graph
