"""Flows past bodies: drag of a sphere moving in a pipe, vortex shedding behind a cylinder.

Sphere in a pipe (Tolke & Krafczyk 2008, section 6): in the sphere's frame the fluid enters
with the sphere's speed ``U`` (Zou-He velocity inlet), the pipe wall (label 2) slides at ``U``
(Ladd), the sphere (label 1) is at rest and the outlet is a Zou-He pressure face. The drag
coefficient is ``c_d,w = F / (rho0 U^2 pi d^2 / 8)`` (their eq. 16) and the reference is
Schiller-Naumann with the Haberman-Sayre wall factor, eqs. 14, 17, 18 (144.48 at Re = 1,
d/D = 0.5). d and D are the volume-equivalent diameters of the voxel sphere and pipe.

Cylinder (2D, Re = U D / nu = 100): uniform inflow, velocity faces at y_min/y_max as far field,
pressure outlet; the Strouhal number f D / U of the lift oscillation from its zero crossings.
"""

from __future__ import annotations

import numpy as np

from ..config import SimulationConfig
from ..simulation import Simulation
from .core import CaseResult, Timer, register, start_flow
from .shapes import cylinder_2d, equivalent_diameter, pipe_with_sphere

__all__ = ["sphere_drag_reference", "sphere_pipe", "cylinder_strouhal", "strouhal"]

_PIPE = {"ci": dict(pipe=24, length=72), "full": dict(pipe=64, length=256)}
#: Drag tolerance: D3Q19 TRT reaches ~2 % at CI size; D3Q13 resolves the sphere on each of its
#: two sublattices with half the nodes (-5.0 % at CI size, the paper: 5.3 % at 32^2, Table 2).
_PIPE_TOL = {("D3Q19", "ci"): 0.04, ("D3Q13", "ci"): 0.06, ("D3Q19", "full"): 0.02,
             ("D3Q13", "full"): 0.02}
_CYLINDER = {"ci": dict(d=10, nx=220, ny=80), "full": dict(d=40, nx=880, ny=320)}


def sphere_drag_reference(re: float, ratio: float) -> float:
    """Wall-corrected drag coefficient c_d,w of a sphere in a pipe (Tolke eqs. 14, 17, 18)."""
    cd = 24.0 / re * (1.0 + 0.15 * re**0.687)
    lam = ratio
    k = (1.0 - 0.75857 * lam**5) / (1.0 - 2.1050 * lam + 2.0865 * lam**3 - 1.7068 * lam**5
                                   + 0.72603 * lam**6)
    return cd + 24.0 / re * (k - 1.0)


@register("sphere_pipe_re1_d3q13", "Same with the paper's D3Q13 MRT (both sublattices; GPU "
          "size 2 %; at 24^2 it is -5.0 %, near the paper's 5.3 % at 32^2: CI covers D3Q13 "
          "with Poiseuille, Couette and Zou-He tests instead)", slow=True, sizes=("full",),
          lattice="D3Q13", collision="MRT")
@register("sphere_pipe_re1", "Sphere moving in a pipe at Re = 1, d/D = 0.5, D3Q19 TRT: drag "
          "vs Schiller-Naumann + Haberman-Sayre (CI 4 %, GPU size 2 %)", slow=True,
          lattice="D3Q19", collision="TRT")
def sphere_pipe(size: str, backend: str, name: str, lattice: str,
                collision: str) -> list[CaseResult]:
    """Steady drag on a sphere (d = D/2) held in pipe flow with a sliding wall."""
    pipe, length = _PIPE[size]["pipe"], _PIPE[size]["length"]
    solid, labels = pipe_with_sphere(length, pipe + 2, pipe, pipe / 2)
    d = equivalent_diameter(int((labels == 1).sum()), 3)
    d_pipe = equivalent_diameter(int((~solid[0]).sum()), 2)
    tau = 1.5
    nu = (tau - 0.5) / 3.0
    u0 = nu / d  # Re = 1 with the equivalent diameter
    config = SimulationConfig(lattice=lattice, collision=collision, tau=tau,
                              precision="float32", backend=backend, x_min="velocity",
                              x_min_value=u0, x_max="pressure", y_min="wall", y_max="wall",
                              z_min="wall", z_max="wall", object_velocities={2: (u0, 0, 0)})
    timer = Timer()
    geometry = type("Geometry", (), {"solid": solid, "labels": labels, "flow_axis": 0})()
    sim = Simulation(geometry, config)
    start_flow(sim, (u0, 0.0, 0.0))
    drag, change = _steady_drag(sim, every=max(50, pipe * pipe // 8), tol=2e-4,
                                max_steps=200 * pipe * pipe)
    cd = drag / (0.5 * u0**2 * np.pi * d * d / 4.0)
    reference = sphere_drag_reference(1.0, d / d_pipe)
    return [CaseResult(name, f"c_d,w at Re = 1 (d = {d:.2f}, d/D = {d / d_pipe:.3f})", cd,
                       reference, _PIPE_TOL[(lattice, size)], f"{length}x{pipe + 2}^2",
                       sim.time_step, timer(),
                       note=f"{lattice} {collision} tau = {tau}, U = {u0:.4f}, "
                            f"last drag change {change:.1e}")]


def _mean_drag(sim: Simulation, label: int = 1) -> float:
    """Drag on ``label`` averaged over two steps (removes the staggered period-2 wiggle)."""
    first = sim.forces()[label].drag
    sim.step(1)
    return 0.5 * (first + sim.forces()[label].drag)


def _steady_drag(sim: Simulation, every: int, tol: float, max_steps: int) -> tuple[float, float]:
    """Step until the drag changes by less than ``tol`` (relative) per ``every`` steps."""
    previous, change = None, float("inf")
    while sim.time_step < max_steps:
        sim.step(every)
        drag = _mean_drag(sim)
        if previous is not None:
            change = abs(drag - previous) / abs(drag)
            if change < tol:
                break
        previous = drag
    return drag, change


def _potential_flow(nx: int, ny: int, x0: float, y0: float, d: float, u0: float):
    """Potential flow (2, nx, ny) past the cylinder plus a cross-flow blob in its wake.

    A smooth start avoids the strong start-up pressure waves that a uniform field or an
    impulsive inlet send into the (weakly damped, tau ~ 0.53) outlet; the blob breaks the
    symmetry so that shedding starts at once.
    """
    x, y = np.meshgrid(np.arange(nx) - x0, np.arange(ny) - y0, indexing="ij")
    r2 = (d / 2) ** 2
    r4 = np.maximum((x * x + y * y) ** 2, r2 * r2)
    blob = 0.2 * u0 * np.exp(-((x - d) ** 2 + y**2) / d**2)
    return np.stack([u0 * (1 - r2 * (x * x - y * y) / r4), -2 * u0 * r2 * x * y / r4 + blob])


def strouhal(lift: np.ndarray, every: int, diameter: float, speed: float) -> float:
    """Strouhal number from a lift series sampled every ``every`` steps (mean period)."""
    x = lift - lift.mean()
    up = np.flatnonzero((x[:-1] < 0) & (x[1:] >= 0))
    if len(up) < 3:
        return float("nan")
    # Sub-sample crossing times by linear interpolation.
    t = up + x[up] / (x[up] - x[up + 1])
    period = (t[-1] - t[0]) / (len(t) - 1) * every
    return diameter / (period * speed)


@register("cylinder_re100", "2D cylinder at Re = 100, D2Q9 MRT: periodic shedding, Strouhal "
          "number in 0.16-0.20", slow=True)
def cylinder_strouhal(size: str, backend: str, name: str) -> list[CaseResult]:
    """Shedding frequency behind a cylinder in a wide channel with far-field velocity faces."""
    p = _CYLINDER[size]
    d, nx, ny, u0 = p["d"], p["nx"], p["ny"], 0.1
    x0, y0 = 5 * d, (ny - 1) / 2
    solid, labels = cylinder_2d(nx, ny, x0, y0, d)
    d_eq = equivalent_diameter(int(solid.sum()), 2)
    tau = 3.0 * u0 * d_eq / 100.0 + 0.5
    config = SimulationConfig(lattice="D2Q9", collision="MRT", tau=tau, precision="float64",
                              backend=backend, x_min="velocity", x_min_value=u0,
                              x_max="pressure", y_min="velocity", y_min_value=(u0, 0.0),
                              y_max="velocity", y_max_value=(u0, 0.0))
    timer = Timer()
    sim = Simulation(type("Geometry", (), {"solid": solid, "labels": labels})(), config)
    start_flow(sim, _potential_flow(nx, ny, x0, y0, d, u0))
    period = d / (0.18 * u0)
    every = max(1, int(period / 40))
    sim.step(int(6 * period))  # the blob starts shedding at once: periodic after ~5 periods
    lift = []
    for _ in range(int(4 * period / every)):
        sim.step(every)
        lift.append(sim.forces(axis=0)[1].lift)
    lift = np.array(lift)
    st = strouhal(lift, every, d_eq, u0)
    amplitude = float(lift.max() - lift.min()) / (0.5 * u0**2 * d_eq)
    return [CaseResult(name, "Strouhal number f D / U", st, 0.18, 0.02, f"{nx}x{ny}",
                       sim.time_step, timer(), relative=False,
                       note=f"D = {d_eq:.2f}, tau = {tau:.4f}, lift coefficient amplitude "
                            f"{amplitude:.2f} (peak to peak)")]
