"""Cycle-resolved outputs of a pulsatile run: per-opening flow and pressure over each heart
cycle, periodic convergence, and the wall-shear indices TAWSS, OSI and RRT.

A :class:`CycleMonitor` samples a run ``samples`` times per period ``T`` (steps, may be
fractional: sample ``k`` of cycle ``c`` at step ``round((c + k / samples) T)``). At each sample
it reads every opening's flow rate and mean density (one small host read) and, from the end of
``warmup`` cycles on, adds the wall shear stress vectors of all wall nodes to two running sums
that stay on the backend (CuPy on the GPU: nothing is copied to the host until the indices are
asked for):

    TAWSS = <|tau|>,   OSI = (1 - |<tau>| / <|tau|>) / 2,   RRT = 1 / ((1 - 2 OSI) TAWSS),

``<.>`` the mean over the samples of whole cycles (uniform in phase: the trapezoidal rule of
a periodic signal, exact for its harmonics below ``samples / 2``); Ku et al., Arteriosclerosis
5, 293 (1985) (OSI), Himburg et al., Am. J. Physiol. 286, H1916 (2004) (RRT). The run is
periodic-converged when the sampled flow rates and pressures of the last two cycles differ by
at most ``tolerance`` times their range over the cycle (every opening). Lattice units; the SI
conversions are :meth:`solver.units.UnitSystem.stress_to_si` (TAWSS, Pa) and its inverse (RRT).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .values import ConfigError

__all__ = ["CycleMonitor", "ShearIndices", "shear_indices"]


@dataclass(frozen=True)
class ShearIndices:
    """TAWSS (lattice stress), OSI (0..1/2) and RRT (1 / lattice stress) per wall node (n,),
    over ``cycles`` whole cycles."""

    tawss: np.ndarray
    osi: np.ndarray
    rrt: np.ndarray
    cycles: int


def shear_indices(sum_vector: np.ndarray, sum_magnitude: np.ndarray, samples: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(TAWSS, OSI, RRT) of the sums over ``samples`` samples of the shear vectors (n, d) and
    of their magnitudes (n,); nodes without shear get OSI 0 and RRT inf."""
    tawss = sum_magnitude / samples
    mean = np.sqrt((sum_vector * sum_vector).sum(axis=1)) / samples
    with np.errstate(divide="ignore", invalid="ignore"):
        osi = np.where(tawss > 0, 0.5 * (1.0 - mean / tawss), 0.0)
        rrt = np.where(tawss > 0, 1.0 / ((1.0 - 2.0 * osi) * tawss), np.inf)
    return tawss, np.clip(osi, 0.0, 0.5), rrt


class CycleMonitor:
    """Samples a run over its heart cycles (module text). ``period``: steps per cycle;
    ``warmup``: cycles before the shear indices accumulate; ``samples``: per cycle;
    ``tolerance``: of the periodic convergence."""

    def __init__(self, period: float, warmup: int = 2, samples: int = 32,
                 tolerance: float = 0.01) -> None:
        if not period >= 2 * samples:
            raise ConfigError(f"A period of {period:g} steps cannot hold {samples} samples; "
                              "lower samples or lengthen the period.")
        if warmup < 0 or samples < 4 or not tolerance > 0:
            raise ConfigError("CycleMonitor needs warmup >= 0 cycles, samples >= 4 per cycle "
                              "and a positive tolerance.")
        self.period, self.warmup, self.samples = float(period), int(warmup), int(samples)
        self.tolerance = float(tolerance)
        self.ids: tuple[int, ...] = ()
        self.flows: list[np.ndarray] = []      # per complete cycle: (samples, openings)
        self.densities: list[np.ndarray] = []
        self._cycle_flow: list = []
        self._cycle_rho: list = []
        self._sum_vec: Any = None
        self._sum_mag: Any = None
        self._count = 0
        self._walls: Any = None
        self._whole: tuple = (None, None, 0)  # the sums at the end of the last whole cycle
        self.index = 0  # samples taken (or skipped: :meth:`skip_to`)

    def sample_step(self, index: int) -> int:
        """The step of sample ``index`` (0-based, counted from the start of the run)."""
        cycle, k = divmod(index, self.samples)
        return int(round((cycle + k / self.samples) * self.period))

    def skip_to(self, step: int) -> None:
        """Start sampling at the first whole cycle at or after ``step`` (a resumed run: the
        cycles before it are not known)."""
        cycle = int(np.ceil(step / self.period - 1e-12))
        while self.sample_step(cycle * self.samples) < step:
            cycle += 1
        self.index = cycle * self.samples
        self._cycle_flow, self._cycle_rho = [], []

    @property
    def cycles(self) -> int:
        """Complete cycles sampled."""
        return len(self.flows)

    def run(self, sim: Any, cycles: int, coupling: Any = None) -> None:
        """Advance ``sim`` by ``cycles`` more cycles' worth of samples (through ``coupling``,
        e.g. a :class:`solver.windkessel.WindkesselCoupling`, when given)."""
        for _ in range(cycles * self.samples):
            n = self.sample_step(self.index + 1) - sim.time_step
            if n > 0:
                (sim.step(n) if coupling is None else coupling.run(sim, n))
            self.observe(sim)

    def observe(self, sim: Any) -> None:
        """Take sample ``index``: the openings' flows and densities; the wall shear after the
        warm-up (a sample that ends a cycle closes it)."""
        flows = sim.opening_flows()
        self.ids = tuple(f.id for f in flows)
        self._cycle_flow.append([f.flow_rate for f in flows])
        self._cycle_rho.append([f.mean_density for f in flows])
        self.index += 1
        if self.index > self.warmup * self.samples:  # after the warm-up: whole cycles only
            walls, tau = sim.wall_shear_vectors()
            if self._sum_vec is None:
                self._walls = walls
                self._sum_vec, self._sum_mag = tau * 0.0, (tau * tau).sum(axis=1) * 0.0
            self._sum_vec += tau
            self._sum_mag += ((tau * tau).sum(axis=1)) ** 0.5
            self._count += 1
        if self.index % self.samples == 0:
            if self._count:  # a device copy of the sums, once per cycle
                self._whole = (self._sum_vec.copy(), self._sum_mag.copy(), self._count)
            self.flows.append(np.asarray(self._cycle_flow, dtype=np.float64))
            self.densities.append(np.asarray(self._cycle_rho, dtype=np.float64))
            self._cycle_flow, self._cycle_rho = [], []

    def cycle_change(self) -> float | None:
        """Largest change between the last two cycles' samples, relative to each opening's
        range over the last cycle (flows and densities), None before two cycles."""
        if self.cycles < 2:
            return None
        worst = 0.0
        for series in (self.flows, self.densities):
            a, b = series[-1], series[-2]
            scale = np.maximum(a.max(axis=0) - a.min(axis=0), 1e-12 * np.abs(a).max(axis=0))
            scale = np.where(scale > 0, scale, 1.0)
            worst = max(worst, float((np.abs(a - b) / scale).max()))
        return worst

    @property
    def current_flows(self) -> np.ndarray:
        """Flow rates (samples so far, openings) of the cycle in progress (lattice)."""
        return np.asarray(self._cycle_flow, dtype=np.float64).reshape(-1, len(self.ids))

    @property
    def has_indices(self) -> bool:
        """Whether a whole cycle after the warm-up has been summed."""
        return self._whole[2] > 0

    @property
    def periodic(self) -> bool:
        """Whether the last two cycles agree within the tolerance."""
        change = self.cycle_change()
        return change is not None and change <= self.tolerance

    def indices(self, to_host: Any = np.asarray) -> ShearIndices:
        """TAWSS, OSI and RRT over the whole cycles after the warm-up (host arrays;
        ``to_host`` the backend's copy to the host)."""
        sum_vec, sum_mag, count = self._whole
        if count == 0:
            raise ConfigError(f"No whole cycle after the {self.warmup} warm-up cycles yet; run "
                              "longer before asking for TAWSS/OSI/RRT.")
        tawss, osi, rrt = shear_indices(np.asarray(to_host(sum_vec), dtype=np.float64),
                                        np.asarray(to_host(sum_mag), dtype=np.float64), count)
        return ShearIndices(tawss, osi, rrt, count // self.samples)

    def state_arrays(self, to_host: Any = np.asarray) -> dict[str, np.ndarray]:
        """What a checkpoint keeps so that a resumed run samples, sums and judges periodic
        convergence as an unbroken one (host arrays, by name; ``to_host`` the backend's copy)."""
        n = len(self.ids)
        out = {"cycle_index": np.array([self.index, self._count, self._whole[2]],
                                       dtype=np.int64),
               "cycle_ids": np.array(self.ids, dtype=np.int64),
               "cycle_flows": np.asarray(self.flows, dtype=np.float64).reshape(
                   len(self.flows), self.samples, n),
               "cycle_densities": np.asarray(self.densities, dtype=np.float64).reshape(
                   len(self.densities), self.samples, n),
               "cycle_current_flow": np.asarray(self._cycle_flow, dtype=np.float64).reshape(
                   len(self._cycle_flow), n),
               "cycle_current_rho": np.asarray(self._cycle_rho, dtype=np.float64).reshape(
                   len(self._cycle_rho), n)}
        if self._count:
            out["cycle_sum_vec"], out["cycle_sum_mag"] = (np.asarray(to_host(a)) for a in (
                self._sum_vec, self._sum_mag))
        if self._whole[2]:
            out["cycle_whole_vec"], out["cycle_whole_mag"] = (np.asarray(to_host(a)) for a in
                                                              self._whole[:2])
        return out

    def restore_arrays(self, arrays: dict[str, np.ndarray], sim: Any) -> None:
        """Continue from :meth:`state_arrays` on ``sim`` (the sums back on its backend); a
        ValueError says what does not fit this run."""
        index, count, whole = (int(x) for x in _shaped(arrays, "cycle_index", (3,)))
        ids = tuple(int(i) for i in _shaped(arrays, "cycle_ids", (None,)))
        n = len(ids)
        flows = _shaped(arrays, "cycle_flows", (None, self.samples, n))
        rho = _shaped(arrays, "cycle_densities", flows.shape)
        current = _shaped(arrays, "cycle_current_flow", (None, n))
        current_rho = _shaped(arrays, "cycle_current_rho", current.shape)
        if not (0 <= count <= index and 0 <= whole <= count
                and len(current) == index % self.samples):
            raise ValueError(f"its cycle counters (samples {index}, summed {count}, in whole "
                             f"cycles {whole}) do not fit {len(current)} samples of the cycle "
                             f"in progress at {self.samples} samples per cycle")
        sums: list = [None, None]
        walls = None
        if count:  # the sums go back onto the run's backend, beside its wall nodes
            xp = sim.backend.xp
            walls, tau = sim.wall_shear_vectors()
            sums = [xp.asarray(_shaped(arrays, "cycle_sum_vec", tau.shape)),
                    xp.asarray(_shaped(arrays, "cycle_sum_mag", tau.shape[:1]))]
        kept = (None, None, 0)
        if whole:
            kept = (xp.asarray(_shaped(arrays, "cycle_whole_vec", sums[0].shape)),
                    xp.asarray(_shaped(arrays, "cycle_whole_mag", sums[1].shape)), whole)
        self.ids, self.index, self._count, self._whole = ids, index, count, kept
        self.flows, self.densities = list(flows), list(rho)
        self._cycle_flow, self._cycle_rho = current.tolist(), current_rho.tolist()
        self._sum_vec, self._sum_mag, self._walls = sums[0], sums[1], walls

    @property
    def walls(self) -> Any:
        """The wall nodes the indices are given at (:class:`solver.wall_shear.WallNodes`)."""
        return self._walls


def _shaped(arrays: dict[str, np.ndarray], name: str, shape: tuple) -> np.ndarray:
    """``arrays[name]`` of ``shape`` (None: any length), else a ValueError naming it."""
    if name not in arrays:
        raise ValueError(f"it lacks the cycle array {name!r}")
    value = arrays[name]
    if value.ndim != len(shape) or any(want is not None and have != want
                                       for have, want in zip(value.shape, shape, strict=True)):
        raise ValueError(f"its cycle array {name!r} has shape {value.shape}, this run needs "
                         f"{tuple('any' if w is None else w for w in shape)}")
    return value
