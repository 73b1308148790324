"""A decimated copy of the flow for 3D views: streamlines and isosurfaces of large runs.

Streamlines and an isosurface need the velocity and a scalar over the whole box, but a 256^3
run's fields are 400 MB of float64: the dashboard takes every ``stride``-th node along each
axis instead (``stride`` = the smallest that keeps the longest edge at most ``max_edge``
nodes, 64 by default: 1/64 of a 256^3 box). Only those nodes' populations are gathered on
the device, straight from the stored layout, tiled or compact (:func:`solver.probes.gather`;
no tile is converted, the index is built once per stride), the scalar (speed, pressure,
vorticity or Q on the coarse grid, with the gradient over ``stride`` voxels) is computed there
too, and only the coarse arrays cross to the host, float32. Lattice units.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .flow_fields import (
    GRADIENT_FIELDS,
    pressure,
    q_criterion,
    velocity_gradient,
    vorticity_magnitude,
)
from .probes import gather

__all__ = ["CoarseFlow", "coarse_flow", "coarse_stride", "COARSE_FIELDS", "MAX_EDGE"]

#: Longest edge of the coarse grid, nodes.
MAX_EDGE = 64
#: Scalars a coarse flow can carry.
COARSE_FIELDS = ("umag", "pressure", "vorticity", "qcrit")


@dataclass(frozen=True, eq=False)
class CoarseFlow:
    """Velocity (3, *shape) and ``scalar`` (*shape) every ``stride`` voxels (node ``i`` of the
    coarse grid is voxel ``i * stride``), host float32, zero velocity and NaN scalar in solids;
    ``step``: the time step it was read at; ``read_at``: when it was ready on the host (wall
    clock, ``time.time()`` seconds: how long it takes to reach a browser is measured from it)."""

    step: int
    stride: int
    velocity: np.ndarray
    scalar: np.ndarray
    name: str
    fluid: np.ndarray
    read_at: float = 0.0


def coarse_stride(shape: tuple[int, ...], max_edge: int = MAX_EDGE) -> int:
    """The smallest stride keeping every edge of ``shape`` at most ``max_edge`` nodes."""
    return max(1, math.ceil(max(shape) / max_edge))


def coarse_flow(sim: Any, reader: Any, name: str = "umag", max_edge: int = MAX_EDGE
                ) -> CoarseFlow:
    """The :class:`CoarseFlow` of a 3D :class:`~solver.simulation.Simulation` now, with the
    scalar ``name`` (one of COARSE_FIELDS), read through its Readout (use
    :meth:`Simulation.coarse_flow`)."""
    if name not in COARSE_FIELDS:
        raise ValueError(f"Unknown coarse field {name!r}; choose one of {COARSE_FIELDS}.")
    xp = sim.backend.xp
    shape = tuple(sim.shape)
    stride = coarse_stride(shape, max_edge)
    axes = [np.arange(0, n, stride) for n in shape]
    coarse = tuple(len(a) for a in axes)
    # The grid's nodes once per stride: their host location took longer than the gather.
    nodes = reader.memo(("coarse nodes", stride), lambda: np.stack(
        np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(shape)))
    rho, u, solid = gather(sim, reader, nodes, key=("coarse", stride))
    u = u[: len(shape)].reshape(len(shape), *coarse)
    fluid = ~solid.reshape(coarse)
    if name == "umag":
        scalar = xp.sqrt((u * u).sum(axis=0))
    elif name == "pressure":
        scalar = pressure(rho.reshape(coarse), sim.config.initial_density)
    else:
        on_device = reader.memo(("coarse fluid", stride), lambda: xp.asarray(fluid))
        grad = velocity_gradient(u, on_device, xp, tuple(sim.problem.periodic)) / stride
        scalar = (vorticity_magnitude(grad, xp) if name == GRADIENT_FIELDS[0]
                  else q_criterion(grad, xp))
    host = np.asarray(sim.backend.to_host(xp.concatenate([u, scalar[None]])), dtype=np.float32)
    velocity, values = host[:-1], host[-1]
    values[~fluid] = np.nan
    return CoarseFlow(sim.time_step, stride, velocity, values, name, fluid, time.time())
