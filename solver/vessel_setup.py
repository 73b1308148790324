"""One call from SI values to a ready vessel run: tau, time step and openings in lattice units.

:func:`vessel_setup` is the Python API of "SI in, lattice parameters out" (issue 28): it takes a
loaded geometry with openings, the openings' entries in a case file's form (SI: m^3/s, m/s, Pa;
:mod:`solver.opening_specs`), the fluid (m^2/s, kg/m^3) and a Mach target, and returns the
:class:`solver.config.SimulationConfig` with ``tau`` and ``openings`` set, and the
:class:`solver.lattice_parameters.LatticeChoice` that states tau, the time step, the steps of
one flow-through, the expected peak Mach number and what would meet the target where it cannot
be met. Case files (:func:`case_setup`, called by :class:`solver.run.HeadlessRun`) go through
the same function, so a case and a script with the same values get the same configuration.
"""

from __future__ import annotations

import math
from typing import Any

from .config import SimulationConfig
from .lattice_parameters import MACH_TARGET, LatticeChoice, choose_lattice, demand_of_specs
from .opening_specs import parse_opening_specs, resolve_openings, specs_by_id
from .values import ConfigError

__all__ = ["vessel_setup", "case_setup", "case_lattice", "backend_name"]


def _positive(value: Any, name: str, unit: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not (number > 0 and math.isfinite(number)):
        raise ConfigError(f"{name} must be a positive number in {unit}, got {value!r}"
                          + (" (blood is about 3.3e-6 m^2/s, water 1.0e-6)."
                             if name == "viscosity" else "."))
    return number


def backend_name(config: SimulationConfig, backend: str | None = None) -> str:
    """The backend a run of ``config`` will use ('numpy' or 'cupy'; 'auto' resolved), for
    pricing its steps."""
    name = backend or config.backend
    if name == "auto":
        from .backends import gpu_available

        name = "cupy" if gpu_available()[0] else "numpy"
    return str(name)


def _choice(specs: list[dict], geometry: Any, viscosity: float, density: float,
            tau: float | None, mach_target: float, backend: str,
            precision: str, collision: str = "auto") -> LatticeChoice:
    """The lattice choice of entries already resolved to opening ids (the one place both the
    case files and the API choose)."""
    demand = demand_of_specs(specs, geometry, viscosity, density)
    return choose_lattice(demand, tau=tau, mach_target=mach_target, backend=backend,
                          precision=precision, collision=collision)


def vessel_setup(geometry: Any, openings: list[dict], *, viscosity: float,
                 density: float = 1000.0, voxel_size: float | None = None,
                 tau: float | None = None, mach_target: float = MACH_TARGET,
                 config: SimulationConfig | None = None, backend: str | None = None,
                 source: str = "openings") -> tuple[SimulationConfig, LatticeChoice]:
    """``(config, report)`` of a run through ``geometry``'s openings driven by SI entries.

    ``openings``: a case file's entries, e.g. ``{"id": 1, "kind": "velocity", "flow_rate":
    1.25e-8, "profile": "poiseuille"}`` (m^3/s; or ``mean_speed`` m/s, ``pressure`` Pa, ``at``
    [x, y, z] m instead of ``id``); ``viscosity`` m^2/s, ``density`` kg/m^3; ``voxel_size`` (m)
    places a geometry that has none (voxels are kept). ``tau`` None: chosen so that the
    expected peak stays at ``mach_target``; given: kept, with a warning in the report when it
    breaks the target. ``config`` (default a new SimulationConfig) gets ``tau`` and
    ``openings`` set in place; ``backend`` ('numpy' | 'cupy', default the config's) prices the
    steps. Returns the config and the :class:`LatticeChoice` (``report.text()`` says it all).
    """
    viscosity = _positive(viscosity, "viscosity", "m^2/s")
    density = _positive(density, "density", "kg/m^3")
    mach_target = _positive(mach_target, "mach_target", "Mach (e.g. 0.1)")
    if voxel_size is not None:
        geometry = geometry.in_frame(_positive(voxel_size, "voxel_size", "metres"))
    if not getattr(geometry, "voxel_size", None):
        raise ConfigError(f"{source}: SI values need the geometry's voxel size: pass "
                          "voxel_size= (metres per voxel) or load the geometry with one.")
    if not getattr(geometry, "openings", ()):
        raise ConfigError(f"{source}: the geometry has no openings; load it with openings "
                          "detected (e.g. samples.load_sample(..., openings='auto')).")
    config = SimulationConfig() if config is None else config
    specs = specs_by_id(parse_opening_specs(list(openings), source), geometry, source)
    choice = _choice(specs, geometry, viscosity, density, tau, mach_target,
                     backend_name(config, backend), config.precision, config.collision)
    if choice.peak <= 0 and not any(config.body_force):
        raise ConfigError(f"{source}: nothing drives the flow: give a velocity opening a "
                          "flow_rate (m^3/s) or mean_speed (m/s), or two pressure openings "
                          "different pressures (Pa).")
    config.tau = choice.tau
    config.openings = resolve_openings(specs, geometry, choice.units, config.initial_density,
                                       source)
    return config, choice


def case_setup(case: Any, geometry: Any, backend: str = "numpy") -> LatticeChoice | None:
    """Set a case's ``config.tau`` and ``config.openings`` from its SI entries through
    :func:`vessel_setup`; the choice, or None for a case without SI openings, viscosity or
    voxel size (its openings, if any, are resolved as given)."""
    source = str(case.path or case.name)
    if not (case.openings and case.run.viscosity and getattr(geometry, "voxel_size", None)):
        if case.openings:  # lattice values only, or a clear error for SI ones
            case.config.openings = resolve_openings(case.openings, geometry, None,
                                                    case.config.initial_density, source)
        return None
    _, choice = vessel_setup(geometry, case.openings, viscosity=case.run.viscosity,
                             density=case.run.density,
                             tau=case.config.tau if case.tau_given else None,
                             config=case.config, backend=backend, source=source)
    return choice


def case_lattice(case: Any, geometry: Any, backend: str = "numpy") -> LatticeChoice | None:
    """The lattice choice of a case (as :func:`case_setup` makes it) without changing the
    case; None without SI openings, viscosity or voxel size."""
    if not (case.openings and case.run.viscosity and getattr(geometry, "voxel_size", None)):
        return None
    specs = specs_by_id(case.openings, geometry, str(case.path or case.name))
    return _choice(specs, geometry, case.run.viscosity, case.run.density,
                   case.config.tau if case.tau_given else None, MACH_TARGET, backend,
                   case.config.precision, case.config.collision)
