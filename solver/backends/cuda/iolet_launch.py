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
from .iolets import IOLET_KERNELS, NVCC_OPTIONS, iolet_plan, iolet_source

__all__ = ["DeviceIolets", "device_iolets"]

_THREADS = 128


@cache
def _kernels(source: str, device: int) -> tuple:
    with CAPTURE_LOCK:  # loading a module must not meet a capture on another thread
        module = cp.RawModule(code=source, options=NVCC_OPTIONS)
        return tuple(module.get_function(name) for name in IOLET_KERNELS)


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
        # Waveform harmonics (2K, m) float64; one dummy element without a waveform.
        self.wave = cp.asarray(tables.wave if tables.harmonics else np.zeros(1))
        self.period = np.float64(tables.wave_period)
        self.out = cp.zeros(self.m, dtype=real)
        self.flux = cp.zeros(self.m, dtype=real)
        source = iolet_source(lat.name, real.name, storage.encoded, problem.incompressible,
                              tuple(float(x) for x in problem.force), float(tables.rho0),
                              tables.harmonics)
        self._moments, self._values, self._write = _kernels(source, cp.cuda.Device().id)
        self._grid = ((self.m + _THREADS - 1) // _THREADS,)
        self._node_grid = ((self.n + _THREADS - 1) // _THREADS,)

    def launch(self, f: cp.ndarray, parity: int) -> None:
        """Rewrite the opening links' slots of the copy ``f`` the next step reads (AA phase
        ``parity``; two copies: 0) and record each link's mass flux."""
        own_j, donor, write, node_own, link_node = self.plans[
            parity if parity in self.plans else 0]
        m, n = np.int32(self.m), np.int32(self.n)
        if self.n:
            self._moments(self._node_grid, (_THREADS,),
                          (f, node_own, self.shift, self.inv_scale, self.node_u, n))
        self._values(self._grid, (_THREADS,),
                     (f, own_j, donor, self.code, self.dir, self.value, link_node, self.node_u,
                      self.shift, self.inv_scale, self.out, self.flux, m, n, self.step,
                      self.ramp_steps, self.wave, self.period))
        self._write(self._grid, (_THREADS,),
                    (f, write, self.dir, self.out, self.shift, self.scale, m, self.step))

    def set_step(self, step: int) -> None:
        """Set the device step counter (resume, rollback): the ramp goes on from ``step``."""
        self.step[...] = np.int64(step)

    def host_flux(self) -> np.ndarray:
        """Mass flux per link of the last step, host float64 (m,)."""
        return cp.asnumpy(self.flux).astype(np.float64)


def device_iolets(problem: Problem, slots: np.ndarray) -> DeviceIolets | None:
    """The device pass of ``problem``'s driven openings, or None without any."""
    return None if problem.iolets is None else DeviceIolets(problem, slots)
