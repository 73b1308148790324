"""Womersley flow: a straight periodic tube driven by an oscillating body force (issue 32, item 5).

The classical set-up of Womersley, J. Physiol. 127, 553 (1955): an axial pressure gradient
``G cos(omega t)`` per unit mass in a rigid circular tube of radius ``R``, fully developed, has
the axial velocity

    u(r, t) = Re[ (G / (i omega)) (1 - J0(lambda r / R) / J0(lambda)) e^{i omega t} ],
    lambda = i^{3/2} alpha,   alpha = R sqrt(omega / nu).

The tube is a voxel disc of radius ``R`` voxels, periodic along x (a few nodes long: the flow
does not depend on x), the force the body force of the run set before every step (the NumPy
backend reads the problem's force each step; the CUDA kernels take it as a constant, so the
case runs on NumPy whatever backend is asked). The disc's radius is its effective radius
``sqrt(A / pi)`` (``A`` the fluid nodes of the cross-section), the radius of a staircase wall
with half-way bounce-back; TRT with the magic parameter 3/16 puts that wall exactly half-way
for the steady (Poiseuille) limit. The run compares one period at 16 phases with the analytic
flow after a start-up: the start-up (analytic velocity at ``t = 0``,
equilibrium populations) is left to decay over 4 e-folds of the slowest viscous mode
``exp(-nu j0^2 t / R^2)`` first (whole periods, at least one). The viscosity (tau 0.8) is the
same at every radius and the period scales with ``R^2`` (diffusive scaling: the same alpha).

Checked: the root-mean-square deviation over the cross-section and the 16 phases, relative to
the peak analytic speed over the cycle, within 3 % at 20 voxels radius for alpha 4 and 10, and
smaller at 20 than at 10 voxels (``full``). Shown beside it (information): the largest
deviation along the two diameters on the lattice axes and at any node. Those sit at the
staircase wall's nodes, where half-way bounce-back puts the wall at a distance between 0 and 1
voxel from them instead of the circle's, and fall at about first order (measured on NumPy,
alpha 4: diameters 5.7 % at R = 10 and 3.3 % at R = 20, any node 9.2 % and 5.1 %; alpha 10,
where the Stokes layer ``R sqrt 2 / alpha`` is 1.4 and 2.8 voxels: diameters 11.6 % and 8.0 %,
any node 21 % and 13 %; rms alpha 4: 2.1 % and 0.9 %, alpha 10: 4.6 % and 2.0 %). ``ci``: 6 and
10 voxels (seconds on NumPy), rms within 3 % (alpha 4) and 6 % (alpha 10) at 10 voxels and
decreasing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..config import SimulationConfig
from ..simulation import Simulation
from .core import CaseResult, Timer, register, start_flow

__all__ = ["womersley_velocity", "run_womersley", "RADII", "TOLERANCE"]

#: Tube radii (voxels) per size; the last one is checked against the tolerance.
RADII = {"ci": (6, 10), "full": (10, 20)}
#: Largest root-mean-square deviation over the cross-section and the cycle (fraction of the
#: peak speed) at the finest radius, per size and Womersley number.
TOLERANCE = {"ci": {4.0: 0.03, 10.0: 0.06}, "full": {4.0: 0.03, 10.0: 0.03}}
#: Relaxation time (viscosity 0.1), peak speed (lattice), samples per cycle, tube length (x).
TAU, PEAK, SAMPLES, LENGTH = 0.8, 0.02, 16, 4
#: First zero of J0: the slowest viscous mode of the tube decays as e^{-nu (J0_ZERO / R)^2 t}.
J0_ZERO = 2.404825557695773


def womersley_velocity(r: np.ndarray, t: float, radius: float, alpha: float, omega: float,
                       force: float) -> np.ndarray:
    """Axial velocity at radii ``r`` and time ``t`` of the force ``force cos(omega t)`` per
    unit mass (the module's formula; lattice or SI units alike)."""
    shape = womersley_profile(np.asarray(r, dtype=np.float64) / radius, alpha)
    return np.real(force / (1j * omega) * shape * np.exp(1j * omega * t))


def womersley_profile(rho: np.ndarray, alpha: float) -> np.ndarray:
    """``1 - J0(lambda rho) / J0(lambda)`` at ``rho = r / R`` (not clipped: a staircase node
    just outside ``R`` gets the continuation)."""
    from scipy.special import jv

    lam = alpha * np.exp(0.75j * math.pi)
    return 1.0 - jv(0, lam * rho) / jv(0, lam)


def _tube(radius: int) -> tuple[np.ndarray, np.ndarray]:
    """(solid mask (LENGTH, n, n), radius of each cross-section node) of a voxel disc."""
    n = 2 * radius + 3  # one solid layer around the disc at least
    c = (n - 1) / 2.0
    y, z = np.meshgrid(np.arange(n) - c, np.arange(n) - c, indexing="ij")
    r = np.hypot(y, z)
    solid = np.broadcast_to(r > radius, (LENGTH, n, n)).copy()
    return solid, r


@dataclass(frozen=True)
class WomersleyRun:
    """Deviations of one run from the analytic flow over a cycle, relative to the peak
    analytic speed: ``profile`` along the two diameters on the lattice axes, ``worst`` at any
    node of the cross-section, ``rms`` the root mean square over the cross-section."""

    profile: float
    worst: float
    rms: float
    steps: int


def run_womersley(radius: int, alpha: float) -> WomersleyRun:
    """The deviations of the tube of ``radius`` voxels at Womersley number ``alpha`` (NumPy)."""
    solid, r = _tube(radius)
    fluid = ~solid[0]
    c = radius + 1
    diameters = fluid & ((np.arange(fluid.shape[0]) == c)[:, None]
                         | (np.arange(fluid.shape[1]) == c)[None, :])
    r_eff = math.sqrt(fluid.sum() / math.pi)
    nu = (TAU - 0.5) / 3.0
    omega = alpha**2 * nu / r_eff**2
    peak_shape = np.abs(womersley_profile(np.linspace(0.0, 1.0, 201), alpha)).max()
    force = PEAK * omega / peak_shape  # |u| peaks at PEAK over the cycle
    sim = Simulation(solid, SimulationConfig(
        lattice="D3Q19", collision="TRT", trt_magic=3 / 16, tau=TAU, precision="float64",
        body_force=(force, 0.0, 0.0), backend="numpy"))
    u0 = np.zeros((3, *solid.shape))
    u0[0] = womersley_velocity(r, 0.0, r_eff, alpha, omega, force)[None]
    start_flow(sim, np.where(solid[None], 0.0, u0))
    period = 2.0 * math.pi / omega
    # The start-up decays with the slowest viscous mode, e^{-nu j0^2 t / R^2}: 4 e-folds.
    warmup = max(1, math.ceil(4.0 * r_eff**2 / (J0_ZERO**2 * nu) / period))
    worst = profile = 0.0
    squares = []
    for k in range((warmup + 1) * SAMPLES + 1):
        target = int(round(k * period / SAMPLES))
        while sim.time_step < target:  # the force of the collision each step makes
            sim.problem.force[0] = force * math.cos(omega * (sim.time_step + 1))
            sim.step(1)
        if k <= warmup * SAMPLES:
            continue
        u = sim.fields()["u"][0]
        exact = womersley_velocity(r, sim.time_step, r_eff, alpha, omega, force)[None]
        diff = np.abs(u - exact)
        worst = max(worst, float(diff[:, fluid].max()))
        profile = max(profile, float(diff[:, diameters].max()))
        squares.append(float((diff[:, fluid] ** 2).mean()))
    return WomersleyRun(profile / PEAK, worst / PEAK, math.sqrt(np.mean(squares)) / PEAK,
                        sim.time_step)


def _rows(size: str, name: str, alpha: float) -> list[CaseResult]:
    rows, errors = [], []
    radii = RADII[size]
    note = f"alpha {alpha:g}, tau {TAU}, {SAMPLES} phases of a cycle after the start-up"
    for radius in radii:
        timer = Timer()
        run = run_womersley(radius, alpha)
        seconds = timer()
        errors.append(run.rms)
        finest = radius == radii[-1]
        rows.append(CaseResult(name, f"rms |u - u_W| / peak, R = {radius}", run.rms, 0.0,
                               TOLERANCE[size][alpha] if finest else None, size, run.steps,
                               seconds, relative=False, note=note))
        rows.append(CaseResult(name, f"max |u - u_W| / peak on the diameters, R = {radius}",
                               run.profile, 0.0, None, size, run.steps, seconds,
                               relative=False, note="information: the staircase wall's nodes"))
        rows.append(CaseResult(name, f"max |u - u_W| / peak, any node, R = {radius}",
                               run.worst, 0.0, None, size, run.steps, seconds, relative=False,
                               note="information: the staircase wall's nodes"))
    order = math.log(errors[0] / errors[-1]) / math.log(radii[-1] / radii[0])
    rows.append(CaseResult(
        name, f"rms error ratio R = {radii[-1]} / R = {radii[0]}", errors[-1] / errors[0], 0.0,
        1.0, size, 0, 0.0, relative=False,
        note=f"converging: below 1 (observed order {order:.2f})"))
    return rows


@register("womersley_alpha4", "Womersley flow at alpha 4 in a periodic tube (oscillating body "
          "force): velocity over the cycle within 3 % of the peak at R = 20, converging")
def womersley_alpha4(size: str, backend: str, name: str) -> list[CaseResult]:
    """Womersley number 4 (NumPy whatever ``backend``: the force changes every step)."""
    return _rows(size, name, 4.0)


@register("womersley_alpha10", "Womersley flow at alpha 10 in a periodic tube (oscillating "
          "body force): velocity over the cycle within 3 % of the peak at R = 20, converging")
def womersley_alpha10(size: str, backend: str, name: str) -> list[CaseResult]:
    """Womersley number 10 (NumPy whatever ``backend``: the force changes every step)."""
    return _rows(size, name, 10.0)
