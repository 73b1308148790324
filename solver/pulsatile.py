"""Stepping a pulsatile run: the Windkessel outlets' coupling and the heart-cycle sampler together.

A :class:`PulsatileDriver` advances a :class:`~solver.simulation.Simulation` through its
:class:`~solver.windkessel.WindkesselCoupling` (outlet pressures updated by the backend in its
openings' pass) and stops at each sample step of its :class:`~solver.cycles.CycleMonitor` to
observe the openings and the wall shear. The CLI (:class:`solver.run.HeadlessRun`) and the
dashboard's runner (:class:`solver.runner.SimulationRunner`) both step through it, so a case
runs the same in either. Lattice units.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .cycles import CycleMonitor
from .windkessel import WindkesselCoupling

__all__ = ["PulsatileDriver", "cycle_monitor", "CycleView"]


@dataclass(frozen=True)
class CycleView:
    """Flow rates (lattice) of the openings ``ids`` over the last whole cycle (``last``,
    (samples, n), None before one) and over the cycle in progress (``current``, (k, n)),
    with ``samples`` per cycle, complete ``cycles``, and the periodic convergence."""

    ids: tuple[int, ...]
    last: np.ndarray | None
    current: np.ndarray
    samples: int
    cycles: int
    change: float | None
    periodic: bool


def cycle_monitor(sim: Any, warmup: int = 2, samples: int = 32, tolerance: float = 0.01
                  ) -> CycleMonitor | None:
    """The heart-cycle sampler of a run with a waveform inlet, None for steady openings."""
    tables = sim.problem.iolets
    if tables is None or not tables.harmonics:
        return None
    return CycleMonitor(tables.wave_period, warmup=warmup, samples=samples,
                        tolerance=tolerance or 1.0)


class PulsatileDriver:
    """Steps ``sim`` through ``coupling`` (or plainly, None) and samples ``cycles`` (None:
    no waveform) at their sample steps."""

    def __init__(self, coupling: WindkesselCoupling | None, cycles: CycleMonitor | None
                 ) -> None:
        self.coupling, self.cycles = coupling, cycles

    @property
    def active(self) -> bool:
        """Whether there is anything beyond plain stepping."""
        return self.coupling is not None or self.cycles is not None

    def start(self, sim: Any) -> None:
        """Apply the outlets' initial pressures (before the first step)."""
        if self.coupling is not None:
            self.coupling.start(sim)

    def step(self, sim: Any, n: int) -> None:
        """Advance ``sim`` by exactly ``n`` steps, observing every sample step passed."""
        if n <= 0 or not self.active:  # plain stepping (and its own refusal of n < 0)
            sim.step(n)
            return
        while n > 0:
            k, sample = n, None
            if self.cycles is not None:  # stop at the next sample of the heart cycle
                sample = self.cycles.sample_step(self.cycles.index + 1)
                if sample <= sim.time_step:  # e.g. joined mid-run: start at the next cycle
                    self.cycles.skip_to(sim.time_step + 1)
                    sample = self.cycles.sample_step(self.cycles.index + 1)
                k = max(1, min(k, sample - sim.time_step))
            if self.coupling is None:
                sim.step(k)
            else:
                self.coupling.run(sim, k)
            n -= k
            if sample is not None and sim.time_step == sample:
                self.cycles.observe(sim)

    def periodic(self) -> bool:
        """Whether the cycles after the warm-up agree within the sampler's tolerance."""
        c = self.cycles
        return c is not None and c.periodic and c.cycles > c.warmup

    def view(self) -> CycleView | None:
        """The openings' flow over the last and the current cycle, None without cycles."""
        c = self.cycles
        if c is None or not c.ids:
            return None
        return CycleView(c.ids, c.flows[-1] if c.flows else None, c.current_flows, c.samples,
                         c.cycles, c.cycle_change(), c.periodic)
