"""Permeability of simple-cubic sphere arrays against Zick & Homsy (1982).

One periodic ``n^3`` cell holds a centred sphere; a body force ``F`` along x drives Stokes flow
and Darcy's law gives ``k = nu <u_x> / F`` (:func:`solver.observables.permeability`). Zick &
Homsy tabulate the drag ``K(c) = F_sphere / (6 pi mu a U)`` against the solid fraction ``c``, so
``k = L^3 / (6 pi a K)``. The voxel sphere's fraction ``c_vox`` differs slightly from the
target; the reference is taken at ``c_vox`` (cubic spline of ln K against c^(1/3) through the
table) with the volume-equivalent radius ``a``.

TRT with the magic parameter 3/16 makes the bounce-back walls viscosity independent, so k does
not depend on tau; BGK's walls move with tau (the second case shows both).
"""

from __future__ import annotations

import csv
from functools import cache
from importlib import resources

import numpy as np
from scipy.interpolate import CubicSpline

from ..config import SimulationConfig
from ..simulation import Simulation
from .core import CaseResult, Timer, register, run_steady
from .shapes import sphere_cell

__all__ = ["zick_homsy_k", "sphere_array_k", "sc_array", "sc_tau"]

#: Cell edge per solid fraction: denser arrays have narrower throats and need more nodes.
_CELLS = {
    "ci": {0.064: 32, 0.125: 32, 0.216: 40, 0.343: 48, 0.45: 56},
    "full": {0.064: 64, 0.125: 64, 0.216: 80, 0.343: 96, 0.45: 112},
}
#: TRT's permeability does not depend on tau, so the suite runs at a large tau (fast
#: convergence, the Darcy time k / nu is short); the tau case shows it.
_TAU = 6.0
_TAUS = (0.8, 1.5, 3.0)
_TAU_CELL = {"ci": 24, "full": 64}
_FORCE = 1e-5


@cache
def _table() -> np.ndarray:
    text = resources.files(__package__).joinpath("data/zick_homsy_1982_sc.csv").read_text()
    rows = [r for r in csv.reader(line for line in text.splitlines()
                                  if line and not line.startswith("#"))][1:]
    return np.array([[float(a), float(b)] for a, b in rows])


def zick_homsy_k(n: int, fraction: float) -> float:
    """Reference permeability (lattice units) of an SC array of n-node cells at ``fraction``."""
    table = _table()
    spline = CubicSpline(table[:, 0] ** (1 / 3), np.log(table[:, 1]))
    k_drag = float(np.exp(spline(fraction ** (1 / 3))))
    radius = n * (3.0 * fraction / (4.0 * np.pi)) ** (1 / 3)
    return n**3 / (6.0 * np.pi * radius * k_drag)


def sphere_array_k(n: int, fraction: float, collision: str, tau: float,
                   backend: str) -> tuple[float, float, int, float]:
    """Permeability of the voxel SC array; returns (k, c_vox, steps, residual)."""
    solid = sphere_cell(n, fraction)
    config = SimulationConfig(lattice="D3Q19", collision=collision, tau=tau,
                              precision="float32", body_force=(_FORCE, 0.0, 0.0),
                              backend=backend)
    sim = Simulation(solid, config)
    residual = run_steady(sim, 50, 1e-4, 40_000)
    return sim.permeability(axis=0).lattice, float(solid.mean()), sim.time_step, residual


@register("sc_array", "Simple-cubic sphere arrays, D3Q19 TRT: permeability vs Zick & Homsy "
          "for c = 0.064-0.45 (<= 3 %)", slow=True)
def sc_array(size: str, backend: str, name: str) -> list[CaseResult]:
    """One TRT run per tabulated solid fraction at tau = _TAU."""
    out = []
    for fraction, n in _CELLS[size].items():
        timer = Timer()
        k, c_vox, steps, residual = sphere_array_k(n, fraction, "TRT", _TAU, backend)
        out.append(CaseResult(name, f"k at c = {fraction} (c_vox = {c_vox:.4f})", k,
                              zick_homsy_k(n, c_vox), 0.03, f"{n}^3", steps, timer(),
                              note=f"TRT tau = {_TAU}, residual {residual:.1e}"))
    return out


@register("sc_tau", "SC array c = 0.216: TRT permeability independent of tau (spread <= 1 %), "
          "BGK's tau dependence shown", slow=True)
def sc_tau(size: str, backend: str, name: str) -> list[CaseResult]:
    """TRT and BGK at several tau on a c = 0.216 cell."""
    fraction, n = 0.216, _TAU_CELL[size]
    out, ks = [], {}
    for collision in ("TRT", "BGK"):
        for tau in _TAUS:
            timer = Timer()
            k, c_vox, steps, residual = sphere_array_k(n, fraction, collision, tau, backend)
            reference = zick_homsy_k(n, c_vox)
            ks.setdefault(collision, []).append(k)
            out.append(CaseResult(name, f"k, {collision} tau = {tau}", k, reference, None,
                                  f"{n}^3", steps, timer(), note=f"residual {residual:.1e}"))
    trt = ks["TRT"]
    spread = (max(trt) - min(trt)) / np.mean(trt)
    out.append(CaseResult(name, f"TRT (k_max - k_min) / k_mean over tau = {_TAUS}", spread,
                          0.0, 0.01, f"{n}^3", 0, sum(r.seconds for r in out),
                          relative=False))
    return out
