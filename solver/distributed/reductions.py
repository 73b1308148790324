"""Readouts of a distributed run reduced where the populations live: only scalars move.

Gathering a 1.6e9-node state to rank 0 in float64 (:meth:`DistributedBackend.populations`) is
240 GB; a permeability check needs four numbers. Each rank reads its owned tiles a bounded chunk
at a time from its backend (``device_populations``: NumPy arrays, or CuPy arrays on the GPU),
computes the moments as :func:`solver.fields.tile_moments` does and reduces them on the device
to: whether every owned fluid value is finite, the largest fluid speed, the sums of ``|u|`` and
of the momentum density along the flow axis (:func:`solver.observables.momentum_density`), and
the flux through every layer normal to that axis; then the ranks combine their numbers (min,
max, sums; a few kB) with one ``allgather``. Lattice units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..fields import speed, tile_moments
from ..observables import momentum_density
from .rank import RankSolver

__all__ = ["FlowNumbers", "owned_numbers", "combine", "READ_TILES"]

#: Tiles read per chunk at most (64 nodes each; at the readout's upper bound of 49 kB per tile
#: with D3Q19 and float32, 0.8 GB a chunk).
READ_TILES = 16384


@dataclass(frozen=True)
class FlowNumbers:
    """A check's numbers over fluid nodes: ``finite``, ``max_speed``, ``speed_sum`` (sum of
    |u|), ``momentum`` (sum of j along ``axis``), ``plane_flux`` (that sum per layer along
    ``axis``, float64 (n,)) and ``fluid`` nodes counted."""

    axis: int
    finite: bool
    max_speed: float
    speed_sum: float
    momentum: float
    plane_flux: np.ndarray
    fluid: int

    @property
    def flux_spread(self) -> float:
        """(largest - smallest) layer flux over their mean: 0 at a steady state (mass is
        conserved through every layer of a periodic box); inf without flow."""
        mean = float(self.plane_flux.mean()) if self.plane_flux.size else 0.0
        if mean == 0.0:
            return float("inf")
        return float(self.plane_flux.max() - self.plane_flux.min()) / abs(mean)


def owned_numbers(solver: RankSolver, axis: int) -> FlowNumbers:
    """:class:`FlowNumbers` of the tiles ``solver`` owns, reduced on its device."""
    p, backend, xp = solver.problem, solver.backend, solver.backend.xp
    tiling = p.tiling
    solver.stepper.idle()
    n_layers = tiling.shape[axis]
    per = max(1, min(READ_TILES, int(backend.readout_tiles(solver.state))))
    local = xp.asarray(tiling.local_coordinates()[:, axis].astype(np.int64))
    finite, top, total, along = True, 0.0, 0.0, 0.0
    flux = xp.zeros(n_layers, dtype=xp.float64)
    fluid_count = 0
    for first in range(0, solver.n_owned, per):
        part = slice(first, min(solver.n_owned, first + per))
        f = backend.device_populations(solver.state, part)
        rho, u = tile_moments(f, p.lattice, p.force, p.incompressible, xp)
        host_fluid = ~tiling.solid[part]
        fluid = xp.asarray(host_fluid)
        magnitude = xp.where(fluid, speed(u, xp), 0.0)
        j = xp.where(fluid, momentum_density(p, rho, u[axis]), 0.0)
        ok = xp.isfinite(xp.where(fluid, rho, 1.0)).all() & xp.isfinite(magnitude).all()
        # The layer of every node made on the device from the tiles' corners: a host-made
        # table sent 8 bytes per node per check (6.4 GB a check of a 1600³ mirrored rank).
        corner = xp.asarray(tiling.tiles[part, axis].astype(np.int64) * tiling.a
                            - tiling.offset[axis])
        coord = xp.clip(corner[:, None] + local[None, :], 0, n_layers - 1)
        flux += xp.bincount(coord.reshape(-1), weights=j.reshape(-1),
                            minlength=n_layers)
        numbers = backend.to_host(xp.stack([ok.astype(xp.float64), magnitude.max(),
                                            magnitude.sum(), j.sum()]))
        finite &= bool(numbers[0] == 1.0)
        top = max(top, float(numbers[1]))
        total += float(numbers[2])
        along += float(numbers[3])
        fluid_count += int(host_fluid.sum())
    return FlowNumbers(axis, finite, top, total, along,
                       np.asarray(backend.to_host(flux), dtype=np.float64), fluid_count)


def combine(mine: FlowNumbers, comm: Any) -> FlowNumbers:
    """Every rank's numbers combined (collective over ``comm``; the same on every rank)."""
    parts = [mine] if comm is None else comm.allgather(mine)
    return FlowNumbers(mine.axis, all(p.finite for p in parts),
                       max(p.max_speed for p in parts), sum(p.speed_sum for p in parts),
                       sum(p.momentum for p in parts),
                       np.sum([p.plane_flux for p in parts], axis=0),
                       sum(p.fluid for p in parts))
