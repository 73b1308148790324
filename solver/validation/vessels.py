"""Flow through openings: Hagen-Poiseuille in a straight tube at an angle to the grid, and the
mass balance of the shipped bifurcating vessel.

The tube (radius R voxels, length 6 R, open at both ends) is voxelised from an STL with its
openings detected (:mod:`geometries.openings`), driven by a Poiseuille velocity inlet (a flow
rate) and a pressure outlet (:mod:`solver.iolets`). Away from both ends the pressure gradient
must be Hagen-Poiseuille's ``8 mu Q / (pi R^4)`` (lattice units, ``mu = rho0 nu``). TRT with
Lambda = 3/16 puts the halfway bounce-back wall at the same place for every tau.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from ..config import SimulationConfig
from ..simulation import Simulation
from .core import CaseResult, Timer, register

__all__ = ["tube_geometry", "tube_gradient", "TubeResult", "tube_case", "bifurcation_balance"]

_TAU = 1.0
_SPEED = 0.01  # mean inlet speed, lattice units (Re = U 2R / nu = 2 at R = 10)


def tube_geometry(radius: float, angle_deg: float, length: float = 6.0):
    """A straight tube open at both ends (STL voxelised, openings detected), ``radius`` voxels,
    ``length`` radii long, its axis tilted by ``angle_deg`` from z towards x (voxel 1 mm)."""
    import trimesh

    import geometries

    mesh = trimesh.creation.cylinder(radius=radius, height=length * radius, sections=96)
    keep = np.abs(mesh.face_normals[:, 2]) < 0.9  # drop the caps: open at both ends
    mesh = trimesh.Trimesh(mesh.vertices, mesh.faces[keep], process=True)
    mesh.apply_transform(trimesh.transformations.rotation_matrix(math.radians(angle_deg),
                                                                 [0, 1, 0]))
    buffer = io.BytesIO()
    mesh.export(buffer, file_type="stl")
    return geometries.load(buffer.getvalue(), format="stl", inside="fluid", unit=1e-3,
                           voxel_size=1e-3, openings="loops", name=f"tube {angle_deg:g} deg")


def tube_config(backend: str = "numpy", precision: str = "float64", **extra) -> SimulationConfig:
    """The tube's run: D3Q19 TRT, inlet = opening 1 (Poiseuille), outlet = opening 2."""
    openings = {1: {"kind": "velocity", "value": _SPEED, "profile": "poiseuille"},
                2: {"kind": "pressure"}}
    return SimulationConfig(lattice="D3Q19", collision="TRT", trt_magic=3 / 16, tau=_TAU,
                            backend=backend, precision=precision, openings=openings, **extra)


def section_density(sim: Simulation, centre: np.ndarray, axis: np.ndarray, s: float) -> float:
    """Mean density of the fluid nodes within half a voxel of the cross-section at ``s`` voxels
    along ``axis`` from ``centre`` (voxel index coordinates)."""
    rho = sim.fields()["rho"]
    idx = np.stack(np.meshgrid(*(np.arange(n) for n in rho.shape), indexing="ij"), axis=-1)
    along = (idx - centre) @ axis
    near = (np.abs(along - s) <= 0.5) & np.isfinite(rho)
    return float(rho[near].mean())


def steady(sim: Simulation, every: int, max_steps: int) -> float:
    """Step ``every`` steps at a time until the openings' flow is steady by the run monitor's
    one definition (:class:`solver.monitor.FlowConvergence`, after the soft start) or
    ``max_steps``; return its last relative change per window."""
    from ..monitor import FlowConvergence, steady_window

    tables = sim.problem.iolets
    convergence = FlowConvergence(window=steady_window(sim.problem).steps,
                                  start=0 if tables is None else tables.ramp_steps)
    change = math.inf
    while sim.time_step < max_steps:
        sim.step(every)
        flows = sim.opening_flows()
        if not all(math.isfinite(f.flow_rate) for f in flows):
            raise FloatingPointError("the vessel diverged")
        latest, done = convergence.update(sim.time_step, flows)
        change = change if latest is None else latest
        if done:
            break
    return change


class TubeResult:
    """Measured and Hagen-Poiseuille pressure gradients (lattice units) of one tube run."""

    def __init__(self, measured: float, exact: float, balance: float | None, steps: int,
                 change: float) -> None:
        self.measured, self.exact, self.balance = measured, exact, balance
        self.steps, self.change = steps, change

    @property
    def error(self) -> float:
        """Relative error of the gradient."""
        return abs(self.measured - self.exact) / abs(self.exact)


def tube_gradient(radius: float, angle_deg: float, backend: str = "numpy",
                  max_steps: int = 6000) -> TubeResult:
    """Run the tube to a steady state; pressure gradient between the cross-sections at +-1.5 R
    from the middle vs Hagen-Poiseuille with the prescribed flow rate."""
    from ..vessel import mass_balance

    geom = tube_geometry(radius, angle_deg)
    sim = Simulation(geom, tube_config(backend))
    inlet, outlet = sorted(geom.openings, key=lambda o: o.id)
    h = geom.voxel_size
    c1 = (np.asarray(inlet.centre) - geom.origin) / h - 0.5
    c2 = (np.asarray(outlet.centre) - geom.origin) / h - 0.5
    axis = (c2 - c1) / np.linalg.norm(c2 - c1)
    middle = 0.5 * (c1 + c2)
    change = steady(sim, 100, max_steps)
    half = 1.5 * radius
    drho = section_density(sim, middle, axis, -half) - section_density(sim, middle, axis, half)
    measured = drho / 3.0 / (2 * half)
    q = _SPEED * inlet.area / h**2
    mu = sim.config.initial_density * sim.config.viscosity
    exact = 8.0 * mu * q / (math.pi * radius**4)
    return TubeResult(measured, exact, mass_balance(sim.opening_flows()), sim.time_step, change)


_RADII = {"ci": (5, 10), "full": (5, 10, 15)}
# CI checks the axis-aligned and the most oblique tube; 30 deg lies between them (full size).
_ANGLES = {"ci": (0.0, 45.0), "full": (0.0, 30.0, 45.0)}


@register("tube_openings", "Tube at 0/30/45 deg (CI: 0/45): velocity inlet + pressure outlet "
          "on STL openings, pressure gradient vs Hagen-Poiseuille (5 % at R = 10, error shrinking "
          "with R); bifurcation sample: mass balance within 0.5 %", slow=True)
def tube_case(size: str, backend: str, name: str) -> list[CaseResult]:
    """Hagen-Poiseuille gradient at three angles and two or three radii; bifurcation balance."""
    out = []
    for angle in _ANGLES[size]:
        errors = []
        for radius in _RADII[size]:
            timer = Timer()
            r = tube_gradient(radius, angle, backend)
            errors.append(r.error)
            out.append(CaseResult(
                name, f"pressure gradient, R = {radius}, {angle:g} deg", r.measured, r.exact,
                0.05 if radius >= 10 else None, f"R{radius}", r.steps, timer(),
                note=f"mass balance {r.balance:.2e}, change {r.change:.1e}"))
        out.append(CaseResult(
            name, f"error ratio R = {_RADII[size][-1]} / R = {_RADII[size][0]}, {angle:g} deg",
            errors[-1] / errors[0], 0.0, 1.0, size, 0, 0.0, relative=False,
            note="below 1: the gradient converges with resolution"))
    timer = Timer()
    balance, steps = bifurcation_balance(backend)
    out.append(CaseResult(name, "mass balance (net / inflow), vessel_bifurcation sample",
                          abs(balance), 0.0, 0.005, size, steps, timer(), relative=False))
    return out


def bifurcation_balance(backend: str = "numpy", max_steps: int = 20000) -> tuple[float, int]:
    """Mass balance (net / inflow) of the shipped bifurcation at steady state, and steps."""
    from ..case import load_case, load_geometry
    from ..vessel import mass_balance
    from ..vessel_setup import case_setup

    case = load_case(Path(__file__).resolve().parents[2] / "examples/vessel_bifurcation.yaml")
    geometry = load_geometry(case.geometry)
    config = case.config
    config.backend = backend
    case_setup(case, geometry, backend)
    sim = Simulation(geometry, config)
    steady(sim, 200, max_steps)
    return mass_balance(sim.opening_flows()), sim.time_step
