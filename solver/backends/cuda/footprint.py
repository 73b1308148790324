"""GPU bytes a CuPy run needs at its peak, decided before anything is allocated.

The estimate follows the run's execution plan (:func:`~solver.backends.plan.plan_for`), so it
always describes the storage that gets allocated (the plan reads the device's memory from the
problem, ``Problem.device_capacity``, which :func:`solver.memory.assess_memory` and the
Simulation fill in: its tile storage for a run past the compact kernels' 32-bit offsets is
decided there, never here); :mod:`solver.memory` turns it into the verdict the app and the
command line show.
"""

from __future__ import annotations

from ...fields import cut_bytes, gather_bytes, moments_bytes
from ...problem import Problem
from ..plan import ExecutionPlan, plan_for
from .compact_readout import compact_peak_bytes

__all__ = ["device_bytes"]


def device_bytes(problem: Problem, plan: ExecutionPlan | None = None) -> int:
    """GPU bytes a run of ``problem`` needs at its peak, before allocating anything.

    The tiled state as allocated (:meth:`Tiling.memory_bytes`: population copies, node types,
    tile map and list; it agreed to 11 kB with the allocation on an H100), one byte per node
    each for the wall groups of moving walls and the fluid mask of health checks, and the
    float64 moments of a check (:func:`~solver.fields.moments_bytes`, with the gathered
    directions the pool keeps, :func:`~solver.fields.gather_bytes`). Where the plan (by
    default ``plan_for(problem)``) stores fluid nodes only: its copies and tables, its edge
    tables (both with 64-bit offsets where the plan's are wide) and one readout chunk
    (:func:`.compact_readout.compact_peak_bytes`: fields, checks and checkpoints read bounded
    chunks of tiles, :mod:`solver.readout`), the same two bytes
    per node, and the float64 moments of the tiles a cut passes through
    (:func:`~solver.fields.cut_bytes`).
    """
    t = problem.tiling
    nodes = t.n_tiles * t.nodes_per_tile
    plan = plan or plan_for(problem)
    if plan.compact:
        return int(compact_peak_bytes(problem, plan.pad, plan.wide) + 2 * nodes
                   + cut_bytes(problem))
    return int(problem.tiled_state_bytes() + 2 * nodes + moments_bytes(problem)
               + gather_bytes(problem))
