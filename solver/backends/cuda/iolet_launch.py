"""The opening links' pass on the device: tables uploaded once, two launches before each step.

The host tables and the arithmetic are :mod:`solver.iolets`'; the kernel text is
:mod:`solver.backends.cuda.iolets`'. Addresses are per AA phase (two copies use phase 0) in the
problem's in-tile layout; :class:`DeviceIolets` launches on the current CuPy stream, so the
backend's CUDA graphs capture the pass with the steps.
"""

from __future__ import annotations

from functools import cache

import cupy as cp
import numpy as np

from ...problem import Problem
from .capture import CAPTURE_LOCK
from .iolets import IOLET_KERNELS, NVCC_OPTIONS, iolet_plan, iolet_source, wave_columns
from .windkessel import WINDKESSEL_KERNELS, windkessel_links, windkessel_source

__all__ = ["DeviceIolets", "device_iolets"]

_THREADS = 128


@cache
def _kernels(source: str, device: int, names: tuple[str, ...] = IOLET_KERNELS) -> tuple:
    with CAPTURE_LOCK:  # loading a module must not meet a capture on another thread
        module = cp.RawModule(code=source, options=NVCC_OPTIONS)
        return tuple(module.get_function(name) for name in names)


class DeviceWindkessel:
    """Device arrays of a run's Windkessel outlets (:class:`solver.windkessel.WindkesselTable`)
    and the three launches that update them after the openings' pass."""

    def __init__(self, table, state: np.ndarray, real: np.dtype) -> None:
        from ...windkessel import TRACE

        self.table, self.n = table, np.int32(table.n)
        self.rp, self.rd, self.pd, self.decay = (cp.asarray(a) for a in (
            table.rp, table.rd, table.pd, table.decay))
        self.state = cp.asarray(np.ascontiguousarray(state, dtype=np.float64))
        self.acc = cp.zeros(table.n, dtype=np.uint64)
        self.trace = cp.zeros((TRACE, 2, table.n), dtype=np.float64)
        link, outlet = windkessel_links(table)
        self.link, self.outlet = cp.asarray(link), cp.asarray(outlet)
        self.links = np.int32(link.size)
        self.every = np.int64(table.every)
        self._kernels = _kernels(windkessel_source(real.name), cp.cuda.Device().id,
                                 WINDKESSEL_KERNELS)
        grid = lambda k: ((int(k) + _THREADS - 1) // _THREADS,)  # noqa: E731
        self._grids = (grid(self.links), grid(table.n), grid(self.links))

    def values(self) -> tuple[np.ndarray, np.ndarray]:
        """(the outlets' links, their densities (host float64) of the current state), for
        the value table."""
        from ...windkessel import DENSITY

        link, outlet = windkessel_links(self.table)
        real = link >= 0
        return link[real], cp.asnumpy(self.state[DENSITY])[outlet[real]]

    def launch(self, flux: cp.ndarray, value: cp.ndarray, step: cp.ndarray) -> None:
        """Update the outlets from ``flux`` when ``step`` completes an interval."""
        total, update, values = self._kernels
        g = self._grids
        total(g[0], (_THREADS,), (flux, self.link, self.outlet, self.acc, step, self.every,
                                  self.links))
        update(g[1], (_THREADS,), (self.acc, self.state, self.rp, self.rd, self.pd,
                                   self.decay, np.float64(self.table.rho_ref),
                                   np.float64(self.table.rho0), self.trace, step, self.every,
                                   self.n))
        values(g[2], (_THREADS,), (value, self.link, self.outlet, self.state, step,
                                   self.every, self.links, self.n))


class DeviceIolets:
    """Device tables of one run's opening links and the launches that apply them."""

    def __init__(self, problem: Problem, slots: np.ndarray) -> None:
        tables, lat, storage = problem.iolets, problem.lattice, problem.storage
        self.m = tables.n_links
        real = np.dtype(problem.dtype)
        self.real = real
        phases = (0, 1) if problem.population_copies == 1 else (0,)
        self.plans = {}
        for parity in phases:
            plan = iolet_plan(tables, lat.q, problem.tiling.nodes_per_tile, slots, parity)
            self.plans[parity] = tuple(cp.asarray(a) for a in (
                plan.own_j, plan.donor, plan.write, plan.node_own, plan.link_node))
        self.n = plan.n_nodes
        self.node_u = cp.zeros((lat.d, max(self.n, 1)), dtype=real)
        self.code = cp.asarray(tables.code.astype(np.int8))
        self.dir = cp.asarray(tables.direction.astype(np.int32))
        self.value = cp.asarray(tables.value.astype(real))
        self.shift = cp.asarray(np.asarray(storage.shift, dtype=real))
        self.scale, self.inv_scale = real.type(storage.scale), real.type(1.0 / storage.scale)
        self.step = cp.zeros(1, dtype=np.int64)  # the run's step: the soft start's clock
        self.ramp_steps = np.int64(tables.ramp_steps)
        # Waveform harmonics of the waveform links (2K, mw) float64, each link's column (-1:
        # none) and the step's cosines and sines (2K), computed once per step on the device.
        self.harmonics = tables.harmonics
        col, wave = wave_columns(tables)
        self.wave_col, self.wave = cp.asarray(col), cp.asarray(wave)
        self.mw = np.int32(wave.shape[1] if wave.ndim == 2 else 0)
        self.phase = cp.zeros(max(2 * self.harmonics, 1), dtype=np.float64)
        self.period = np.float64(tables.wave_period)
        self.out = cp.zeros(self.m, dtype=real)
        self.flux = cp.zeros(self.m, dtype=real)
        source = iolet_source(lat.name, real.name, storage.encoded, problem.incompressible,
                              tuple(float(x) for x in problem.force), float(tables.rho0),
                              tables.harmonics)
        self._moments, self._values, self._write = _kernels(source, cp.cuda.Device().id)
        self._grid = ((self.m + _THREADS - 1) // _THREADS,)
        self.windkessel: DeviceWindkessel | None = None
        threads = max(self.n, self.harmonics)  # pressure nodes; the first K: the phases
        self._node_grid = ((threads + _THREADS - 1) // _THREADS,)

    def launch(self, f: cp.ndarray, parity: int) -> None:
        """Rewrite the opening links' slots of the copy ``f`` the next step reads (AA phase
        ``parity``; two copies: 0) and record each link's mass flux."""
        own_j, donor, write, node_own, link_node = self.plans[
            parity if parity in self.plans else 0]
        m, n = np.int32(self.m), np.int32(self.n)
        if self.n or self.harmonics:
            self._moments(self._node_grid, (_THREADS,),
                          (f, node_own, self.shift, self.inv_scale, self.node_u, n, self.step,
                           self.phase, self.period))
        self._values(self._grid, (_THREADS,),
                     (f, own_j, donor, self.code, self.dir, self.value, link_node, self.node_u,
                      self.shift, self.inv_scale, self.out, self.flux, m, n, self.step,
                      self.ramp_steps, self.wave, self.wave_col, self.phase, self.mw))
        self._write(self._grid, (_THREADS,),
                    (f, write, self.dir, self.out, self.shift, self.scale, m, self.step))
        if self.windkessel is not None:  # after the write: the counter holds the steps done
            self.windkessel.launch(self.flux, self.value, self.step)

    def attach_windkessel(self, table, state: np.ndarray) -> None:
        """Update ``table``'s outlets in the pass from ``state`` (4, n) on; their links' values
        set to its densities now."""
        wk = DeviceWindkessel(table, state, self.real)
        links, density = wk.values()
        self.value[cp.asarray(links)] = cp.asarray(density, dtype=self.real)
        self.windkessel = wk

    def set_step(self, step: int) -> None:
        """Set the device step counter (resume, rollback): the ramp goes on from ``step``."""
        self.step[...] = np.int64(step)

    def host_flux(self) -> np.ndarray:
        """Mass flux per link of the last step, host float64 (m,)."""
        return cp.asnumpy(self.flux).astype(np.float64)


def device_iolets(problem: Problem, slots: np.ndarray) -> DeviceIolets | None:
    """The device pass of ``problem``'s driven openings, or None without any."""
    return None if problem.iolets is None else DeviceIolets(problem, slots)
