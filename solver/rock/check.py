"""One look at a permeability run on its device: health and k, a few scalars to the host.

A check used to copy the whole field to a dense host box (``Simulation.fields``) to read k over
the protocol's window, after a separate health pass: on an H100 that was 73 of the 121 s of a
200³ tensor with both protocols. Here one pass over the readout chunks
(:class:`solver.readout.Readout`) reduces the tile moments on the device to ``finite``, the
largest fluid speed and the sums of :func:`solver.observables.darcy_sums` (the Darcy flux over
the window's fluid nodes and the densities of its end layers); ``1 + 2 + len(ends)`` numbers
cross to the host and :func:`solver.observables.window_permeability` turns them into the same k
as :func:`solver.observables.permeability` of the fields (tests/solver/test_rock_check.py).
Lattice units.
"""

from __future__ import annotations

import time

import numpy as np

from .. import observables
from ..fields import speed
from ..observables import DarcyWindow, Permeability
from ..readout import Readout
from ..simulation import Simulation

__all__ = ["KCheck", "Phases"]


class KCheck:
    """Health and k of ``sim`` over the layers ``window`` along ``axis``, read on its device."""

    def __init__(self, sim: Simulation, axis: int, window: tuple[int, int],
                 voxel_size: float | None) -> None:
        sim.allocate()
        self.sim, self.voxel_size = sim, voxel_size
        xp = sim.backend.xp
        self.window: DarcyWindow = observables.darcy_window(sim.problem, axis, window, xp)
        self.fluid = xp.asarray(~sim.tiling.solid)
        self.reader = Readout(sim.problem, sim.backend, sim.state, axis)

    def read(self) -> tuple[dict, Permeability | None]:
        """``({'finite', 'max_speed', 'flow_tortuosity'}, k)`` of the current state; k is None
        when not finite. ``flow_tortuosity``: sum of |u| over sum of u along the axis over the
        window's fluid nodes (:func:`solver.observables.tortuosity`)."""
        sim, xp = self.sim, self.sim.backend.xp
        if self.reader.state is not sim.state:  # reallocated (e.g. a new start)
            self.reader = Readout(sim.problem, sim.backend, sim.state, self.window.axis)
        total = None
        for part, rho, u in self.reader.chunks():
            fluid = self.fluid[part]
            u = xp.where(fluid, u, 0.0)  # solid nodes hold no flow (may hold NaN)
            rho = xp.where(fluid, rho, 1.0)
            finite = xp.isfinite(rho).all() & xp.isfinite(u).all()
            window = self.window.part(part)
            sums = observables.darcy_sums(sim.problem, window, fluid, rho, u, xp)
            inside = fluid if window.inside is None else window.inside
            magnitude = speed(u, xp)
            flow = xp.stack([xp.where(inside, magnitude, 0.0).sum(),
                             xp.where(inside, u[window.axis], 0.0).sum()])
            numbers = xp.concatenate([finite.astype(xp.float64).reshape(1),
                                      magnitude.max().reshape(1), flow, sums])
            total = numbers if total is None else xp.concatenate([
                xp.minimum(total[:1], numbers[:1]), xp.maximum(total[1:2], numbers[1:2]),
                total[2:] + numbers[2:]])
        host = np.asarray(sim.backend.to_host(total), dtype=np.float64)
        if host[0] != 1.0:
            return {"finite": False, "max_speed": float("inf")}, None
        along = float(host[3])
        health = {"finite": True, "max_speed": float(host[1]),
                  "flow_tortuosity": float(host[2]) / along if along else float("nan")}
        return health, observables.window_permeability(sim.problem, self.window, host[4:],
                                                        self.voxel_size)


class Phases(dict):
    """Wall seconds per phase of a study (name -> seconds), added up over its runs."""

    def timed(self, name: str):
        """Context manager adding the wall time of its block to ``name``."""
        return _Timed(self, name)

    def add(self, other: dict) -> None:
        """Add another run's phases."""
        for name, seconds in other.items():
            self[name] = self.get(name, 0.0) + seconds


class _Timed:
    def __init__(self, phases: Phases, name: str) -> None:
        self.phases, self.name = phases, name

    def __enter__(self) -> None:
        self.tic = time.perf_counter()

    def __exit__(self, *exc) -> None:
        self.phases[self.name] = self.phases.get(self.name, 0.0) + time.perf_counter() - self.tic
