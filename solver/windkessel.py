"""Windkessel outlets: two- and three-element (RCR) lumped models closing a pressure opening, SI.

An RCR model (Westerhof et al., Med. Biol. Eng. Comput. 47, 131 (2009); the outlet model of
HemeLB and SimVascular) has a proximal resistance ``R_p``, a compliance ``C`` and a distal
resistance ``R_d`` to a distal pressure ``P_d``. With ``Q`` the flow rate out of the fluid
through the outlet (m^3/s):

    C dP_c/dt = Q - (P_c - P_d) / R_d,        P = P_c + R_p Q,

``P`` the outlet's pressure (Pa, relative to the reference pressure of the run). The
two-element model is ``R_p = 0``. :func:`rcr_step` integrates ``P_c`` over an interval with
``Q`` held constant exactly (exponential step), so it is stable for any interval.

Coupling (:class:`WindkesselCoupling`), explicit: every ``every`` steps the host reads the
openings' flow rates of the last step (:meth:`solver.simulation.Simulation.opening_flow_rates`: the
exact per-link flux of the opening pass), advances each model by ``every`` time steps and
writes the new pressure as the pressure opening's density (:meth:`Simulation.
set_opening_densities`). On the GPU that is one small device-to-host read per ``every`` steps,
not per step; the price is a zero-order hold of ``Q`` over ``every`` steps, a lag of half that
interval in the outlet pressure (negligible while ``every`` time steps are short against
``R_d C`` and the heart period: 10 steps of a 5000-step cycle lag 0.1 % of it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .units import UnitSystem
from .values import ConfigError, is_number

__all__ = ["Windkessel", "rcr_step", "periodic_pressure", "WindkesselCoupling",
           "parse_windkessel", "windkessel_to_lattice", "windkessel_to_si", "retimed_windkessel",
           "lattice_coupling", "LATTICE_UNITS", "windkessel_spec"]


@dataclass(frozen=True)
class Windkessel:
    """An RCR outlet model, SI: ``resistance_proximal`` and ``resistance_distal`` (Pa s/m^3),
    ``compliance`` (m^3/Pa), ``distal_pressure`` and ``initial_pressure`` of the capacitor
    (Pa; None: the distal pressure)."""

    resistance_proximal: float
    compliance: float
    resistance_distal: float
    distal_pressure: float = 0.0
    initial_pressure: float | None = None

    @property
    def time_constant(self) -> float:
        """``R_d C`` (s)."""
        return self.resistance_distal * self.compliance

    def pressure(self, capacitor: float, flow_out: float) -> float:
        """Outlet pressure (Pa) of the capacitor pressure and the flow out (m^3/s)."""
        return capacitor + self.resistance_proximal * flow_out


def parse_windkessel(spec: Any, where: str = "windkessel") -> Windkessel:
    """A :class:`Windkessel` from ``{R: ..., C: ...}`` (two elements) or ``{Rp, C, Rd}`` (RCR),
    optional ``Pd`` and ``P0`` (Pa); resistances in Pa s/m^3, compliance in m^3/Pa."""
    if isinstance(spec, Windkessel):
        return spec
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a mapping {{Rp, C, Rd}} (RCR) or {{R, C}} (two "
                          f"elements), SI, got {spec!r}.")
    keys = set(spec) - {"Pd", "P0"}
    if keys == {"R", "C"}:
        rp, rd = 0.0, spec["R"]
    elif keys == {"Rp", "C", "Rd"}:
        rp, rd = spec["Rp"], spec["Rd"]
    else:
        raise ConfigError(f"{where}: give R and C (two elements) or Rp, C and Rd (RCR), "
                          f"optionally Pd and P0 (Pa); got keys {sorted(spec)}.")
    values = {"Rp": rp, "C": spec["C"], "Rd": rd}
    for name, v in values.items():
        if not is_number(v) or not math.isfinite(v) or v < 0 or (name != "Rp" and v == 0):
            raise ConfigError(f"{where}: {name} must be a positive number (SI), got {v!r}.")
    pd, p0 = spec.get("Pd", 0.0), spec.get("P0")
    for name, v in (("Pd", pd), ("P0", p0)):
        if v is not None and not (is_number(v) and math.isfinite(v)):
            raise ConfigError(f"{where}: {name} must be a pressure in Pa, got {v!r}.")
    return Windkessel(float(rp), float(spec["C"]), float(rd), float(pd),
                      None if p0 is None else float(p0))


def _scaled(model: Windkessel, resistance: float, compliance: float, pressure: float
            ) -> Windkessel:
    p0 = model.initial_pressure
    return Windkessel(model.resistance_proximal * resistance, model.compliance * compliance,
                      model.resistance_distal * resistance, model.distal_pressure * pressure,
                      None if p0 is None else p0 * pressure)


def _scales(units: Any) -> tuple[float, float, float]:
    """Lattice pressure of 1 Pa, lattice flow rate of 1 m^3/s, lattice volume of 1 m^3."""
    return (units.pressure_to_lattice(1.0) / 3.0, units.flow_rate_to_lattice(1.0),
            units.flow_rate_to_lattice(1.0) / units.dt)


def windkessel_to_lattice(model: Windkessel, units: Any) -> Windkessel:
    """The model in lattice units of ``units`` (:class:`solver.units.UnitSystem`): pressures
    as ``c_s^2`` times a density change, flow rates in nodes^3/step (the units of
    :data:`LATTICE_UNITS`), so a config can hold it whatever the time step was."""
    pressure, flow, volume = _scales(units)
    return _scaled(model, pressure / flow, volume / pressure, pressure)


def windkessel_to_si(model: Windkessel, units: Any) -> Windkessel:
    """The inverse of :func:`windkessel_to_lattice` (a lattice model back in SI)."""
    pressure, flow, volume = _scales(units)
    return _scaled(model, flow / pressure, pressure / volume, 1.0 / pressure)


def retimed_windkessel(model: Windkessel, ratio: float) -> Windkessel:
    """The same SI model in lattice units on a time step ``ratio`` times the old one
    (resistances scale with dt, compliances with 1/dt^2, pressures with dt^2)."""
    return _scaled(model, ratio, 1.0 / ratio**2, ratio**2)


def rcr_step(capacitor: float, flow_out: float, dt: float, model: Windkessel) -> float:
    """The capacitor pressure (Pa) ``dt`` seconds later with the flow out ``flow_out`` (m^3/s)
    held constant: the exact solution of the linear ODE over the interval."""
    target = model.distal_pressure + model.resistance_distal * flow_out
    return target + (capacitor - target) * math.exp(-dt / model.time_constant)


def periodic_pressure(t: np.ndarray, mean: float, harmonics: list[complex], omega: float,
                      model: Windkessel) -> np.ndarray:
    """The periodic outlet pressure (Pa) at times ``t`` (s) of the flow out ``Q(t) = mean +
    Re sum_k c_k e^{i k omega t}`` (m^3/s): impedance ``R_p + R_d / (1 + i k omega R_d C)``."""
    t = np.asarray(t, dtype=np.float64)
    p = model.distal_pressure + (model.resistance_proximal + model.resistance_distal) * mean
    out = np.full(t.shape, p)
    for k, c in enumerate(harmonics, start=1):
        z = model.resistance_proximal + model.resistance_distal / (
            1.0 + 1j * k * omega * model.time_constant)
        out = out + np.real(z * c * np.exp(1j * k * omega * t))
    return out


class WindkesselCoupling:
    """Explicit coupling of Windkessel models to a simulation's pressure openings.

    ``models``: {opening id: Windkessel}; ``units``: the run's
    :class:`solver.units.UnitSystem`; ``rho0``: the reference density (lattice) the pressures
    are relative to; ``every``: steps between updates (module text). :meth:`run` advances a
    simulation (duck-typed: ``step``, ``opening_flow_rates``, ``set_opening_densities``)."""

    def __init__(self, models: dict[int, Windkessel], units: Any, rho0: float = 1.0,
                 every: int = 10) -> None:
        if every < 1:
            raise ConfigError(f"Windkessel update interval must be >= 1 step, got {every}.")
        self.models = dict(models)
        self.units, self.rho0, self.every = units, float(rho0), int(every)
        self.capacitor = {oid: (m.distal_pressure if m.initial_pressure is None
                                else m.initial_pressure) for oid, m in self.models.items()}
        self.pressure = dict(self.capacitor)  # outlet pressures (Pa) applied now
        self.history: list[tuple[float, dict, dict]] = []  # (t s, {id: Q out}, {id: P})

    def density(self, pressure: float) -> float:
        """The opening density (lattice) of a pressure (Pa) relative to the reference."""
        return self.rho0 + self.units.pressure_to_lattice(pressure)

    def start(self, sim: Any) -> None:
        """Apply the initial pressures (before the first step)."""
        sim.set_opening_densities({oid: self.density(p) for oid, p in self.pressure.items()})

    def update(self, sim: Any, steps: int) -> None:
        """Advance the models over ``steps`` steps with the flows of the last step and apply
        the new outlet pressures."""
        flows = sim.opening_flow_rates()  # the flux alone: no populations leave the device
        dt = self.units.time_to_si(steps)
        q_out = {}
        for oid, model in self.models.items():
            q = -self.units.flow_rate_to_si(flows[oid])  # out of the fluid, m^3/s
            self.capacitor[oid] = rcr_step(self.capacitor[oid], q, dt, model)
            self.pressure[oid] = model.pressure(self.capacitor[oid], q)
            q_out[oid] = q
        sim.set_opening_densities({oid: self.density(p) for oid, p in self.pressure.items()})
        self.history.append((self.units.time_to_si(sim.time_step), q_out, dict(self.pressure)))

    def run(self, sim: Any, steps: int) -> None:
        """Advance ``sim`` by ``steps`` steps, updating the outlets at every multiple of
        ``every`` steps of the run (a partial interval waits for the next call)."""
        done = 0
        while done < steps:
            n = min(self.every - sim.time_step % self.every, steps - done)
            sim.step(n)
            done += n
            if sim.time_step % self.every == 0:
                self.update(sim, self.every)



#: Lattice units as a unit system (1 node, 1 step, density 1): the units of a config's
#: lattice Windkessel entries (:func:`windkessel_to_lattice`).
LATTICE_UNITS = UnitSystem(dx=1.0, dt=1.0, density=1.0)


def lattice_coupling(openings: dict, rho0: float, every: int = 10
                     ) -> WindkesselCoupling | None:
    """The coupling of a ``SimulationConfig.openings`` mapping's ``windkessel`` entries
    (lattice units, :func:`windkessel_to_lattice`), None without any."""
    models = {oid: parse_windkessel(spec["windkessel"], f"openings[{oid}]: windkessel")
              for oid, spec in openings.items()
              if isinstance(spec, dict) and spec.get("windkessel") is not None}
    return WindkesselCoupling(models, LATTICE_UNITS, rho0, every) if models else None


def windkessel_spec(model: Windkessel) -> dict:
    """The JSON-friendly mapping :func:`parse_windkessel` reads back (a config entry)."""
    spec = {"Rp": model.resistance_proximal, "C": model.compliance,
            "Rd": model.resistance_distal, "Pd": model.distal_pressure}
    if model.initial_pressure is not None:
        spec["P0"] = model.initial_pressure
    return spec
