"""Windkessel outlets: two- and three-element (RCR) lumped models closing a pressure opening, SI.

An RCR model (Westerhof et al., Med. Biol. Eng. Comput. 47, 131 (2009); the outlet model of
HemeLB and SimVascular) has a proximal resistance ``R_p``, a compliance ``C`` and a distal
resistance ``R_d`` to a distal pressure ``P_d``. With ``Q`` the flow rate out of the fluid
through the outlet (m^3/s):

    C dP_c/dt = Q - (P_c - P_d) / R_d,        P = P_c + R_p Q,

``P`` the outlet's pressure (Pa, relative to the reference pressure of the run). The
two-element model is ``R_p = 0``. :func:`rcr_step` integrates ``P_c`` over an interval with
``Q`` held constant exactly (exponential step), so it is stable for any interval.

Coupling (:class:`WindkesselCoupling`), explicit, on the backend: every ``every`` steps the
openings' pass sums each outlet's per-link flux of the step just taken (exact to 2^-40 per
link: :data:`FIXED`), advances each
model by ``every`` time steps (:func:`windkessel_update`; on the GPU three tiny kernels in the
pass, captured in the CUDA graphs: no host read or upload per step) and writes the new pressure
as the pressure opening's density for the next steps. The price is a zero-order hold of ``Q``
over ``every`` steps, a lag of half that interval in the outlet pressure (negligible while
``every`` time steps are short against ``R_d C`` and the heart period: 10 steps of a 5000-step
cycle lag 0.1 % of it). The host version (flow rates read, ODE stepped in Python, densities
uploaded every 10 steps) cost 27 % of a step on the 15 M node H100 vessel; on the backend
0.45 % (H200, ``benchmarks/pulsatile_cost/pulsatile_cost.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .units import UnitSystem
from .values import ConfigError, is_number

__all__ = ["Windkessel", "rcr_step", "periodic_pressure", "WindkesselCoupling",
           "WindkesselTable", "windkessel_table", "initial_state", "windkessel_update",
           "FIXED", "TRACE",
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


#: Fixed-point scale of the outlets' flux sums (2^40): each link's mass flux is rounded to a
#: multiple of 2^-40 (9.1e-13, lattice units) and the integers summed, exactly and in any order,
#: on the device (warp sums and atomics) as in the NumPy reference: the same bits on both, and
#: run to run. Sums up to 2^23 (8.4e6) fit the 64-bit integers.
FIXED = float(2**40)
#: Updates kept in the trace (flow and pressure per outlet) a coupling's history reads.
TRACE = 4096
#: Rows of a Windkessel state array (4, n outlets), lattice units, float64.
CAPACITOR, PRESSURE, FLOW, DENSITY = 0, 1, 2, 3


@dataclass(frozen=True, eq=False)
class WindkesselTable:
    """The Windkessel outlets of one run in lattice units (pressure ``c_s^2`` times a density
    change, flow in nodes^3/step), as the openings' pass updates them on the backend.

    ``ids`` the pressure openings; ``start``/``stop`` (n,) their links' range in the openings'
    tables; ``rp``, ``rd``, ``pd`` (n,) the models; ``decay`` (n,) ``exp(-every / (R_d C))``;
    ``rho_ref`` the density of the volume flux, ``rho0`` the density of zero pressure; every
    ``every`` steps (after the pass of the step that completes a multiple of it) each outlet's
    capacitor advances over ``every`` steps with the flow of that pass held (exact step) and
    its density for the following passes is ``rho0 + 3 P``; the flow is the sum of the links'
    flux in fixed point (:data:`FIXED`)."""

    ids: tuple[int, ...]
    start: np.ndarray
    stop: np.ndarray
    rp: np.ndarray
    rd: np.ndarray
    pd: np.ndarray
    decay: np.ndarray
    rho_ref: float
    rho0: float
    every: int

    @property
    def n(self) -> int:
        """Number of Windkessel outlets."""
        return len(self.ids)


def windkessel_table(models: dict[int, Windkessel], tables: Any, rho0: float, every: int
                     ) -> WindkesselTable:
    """The :class:`WindkesselTable` of lattice ``models`` ({opening id: model}) on a run's
    openings' tables (:class:`solver.iolets.IoletTables`)."""
    ids, start, stop = [], [], []
    for oid in sorted(models):
        if tables is None:
            raise ValueError(f"Opening {oid} is not a driven opening of this run.")
        links = tables.density_links(oid)
        if links.size == 0:
            raise ValueError(f"Opening {oid} is not a pressure opening.")
        assert links[-1] - links[0] + 1 == links.size, "an opening's links are contiguous"
        ids.append(oid)
        start.append(int(links[0]))
        stop.append(int(links[-1]) + 1)
    ordered = [models[oid] for oid in ids]
    f64 = lambda xs: np.array(xs, dtype=np.float64)  # noqa: E731
    return WindkesselTable(
        tuple(ids), np.array(start, dtype=np.int64), np.array(stop, dtype=np.int64),
        f64([m.resistance_proximal for m in ordered]), f64([m.resistance_distal for m in ordered]),
        f64([m.distal_pressure for m in ordered]),
        f64([math.exp(-every / m.time_constant) for m in ordered]),
        float(tables.rho_ref), float(rho0), int(every))


def initial_state(models: dict[int, Windkessel], table: WindkesselTable) -> np.ndarray:
    """The state (4, n) before the first step: capacitor and outlet pressure ``P0`` (or
    ``P_d``), no flow, the density of that pressure (lattice ``models``)."""
    state = np.zeros((4, table.n))
    for o, oid in enumerate(table.ids):
        m = models[oid]
        cap = m.distal_pressure if m.initial_pressure is None else m.initial_pressure
        state[:, o] = (cap, cap, 0.0, table.rho0 + 3.0 * cap)
    return state


def windkessel_update(table: WindkesselTable, state: np.ndarray, flux: np.ndarray, step: int,
                      trace: np.ndarray | None = None) -> bool:
    """After the openings' pass of the step that completes ``step`` steps: when ``step`` is a
    multiple of ``every``, advance ``state`` (4, n) in place from the pass's per-link mass
    flux ``flux`` (m,) and record it in ``trace`` (TRACE, 2, n); True when it updated. The
    arithmetic and its order are the device kernels' (:mod:`solver.backends.cuda.windkessel`)."""
    if step % table.every:
        return False
    flux = np.asarray(flux).astype(np.float64)
    slot = (step // table.every) % TRACE
    for o in range(table.n):
        seg = flux[table.start[o]:table.stop[o]]
        total = float(np.rint(seg * FIXED).astype(np.int64).sum()) / FIXED
        q = -(total / table.rho_ref)
        target = table.pd[o] + table.rd[o] * q
        cap = target + (state[CAPACITOR, o] - target) * table.decay[o]
        p = cap + table.rp[o] * q
        state[:, o] = (cap, p, q, table.rho0 + 3.0 * p)
        if trace is not None:
            trace[slot, :, o] = (q, p)
    return True


class WindkesselCoupling:
    """Explicit coupling of Windkessel models to a simulation's pressure openings.

    ``models``: {opening id: Windkessel}; ``units``: the run's
    :class:`solver.units.UnitSystem`; ``rho0``: the reference density (lattice) the pressures
    are relative to; ``every``: steps between updates (module text). :meth:`start` hands the
    models to the run's backend, which updates them in its openings' pass (no host work per
    step); :meth:`run` steps. ``capacitor`` and ``pressure`` (Pa) and ``history`` read the
    backend's state when asked."""

    def __init__(self, models: dict[int, Windkessel], units: Any, rho0: float = 1.0,
                 every: int = 10) -> None:
        if every < 1:
            raise ConfigError(f"Windkessel update interval must be >= 1 step, got {every}.")
        self.models = dict(models)
        self.units, self.rho0, self.every = units, float(rho0), int(every)
        self.lattice = {oid: windkessel_to_lattice(m, units) for oid, m in self.models.items()}
        self._sim: Any = None
        self._history: list[tuple[float, dict, dict]] = []
        self._synced = 0  # the last update number read into the history

    def density(self, pressure: float) -> float:
        """The opening density (lattice) of a pressure (Pa) relative to the reference."""
        return self.rho0 + self.units.pressure_to_lattice(pressure)

    def start(self, sim: Any) -> None:
        """Hand the models to ``sim``'s backend and apply the initial pressures (before the
        first step; a resumed run keeps the state its checkpoint saved)."""
        table = windkessel_table(self.lattice, sim.problem.iolets, self.rho0, self.every)
        sim.attach_windkessel(table, initial_state(self.lattice, table))
        self._sim, self._history = sim, []
        self._synced = sim.time_step // self.every

    def run(self, sim: Any, steps: int) -> None:
        """Advance ``sim`` by ``steps`` steps (the backend updates the outlets)."""
        sim.step(steps)

    def _si(self, state: np.ndarray, row: int) -> dict[int, float]:
        scale = self.units.pressure_to_si(3.0)  # Pa per lattice pressure (c_s^2 d rho)
        ids = self._sim.windkessel_ids()
        return {oid: float(state[row, o]) * scale for o, oid in enumerate(ids)}

    @property
    def capacitor(self) -> dict[int, float]:
        """Capacitor pressure (Pa) of each outlet now."""
        return self._si(self._sim.windkessel_state(), CAPACITOR)

    @property
    def pressure(self) -> dict[int, float]:
        """Outlet pressure (Pa) applied now."""
        return self._si(self._sim.windkessel_state(), PRESSURE)

    @property
    def history(self) -> list[tuple[float, dict, dict]]:
        """(t s, {id: flow out m^3/s}, {id: pressure Pa}) of every update since :meth:`start`
        (the last :data:`TRACE` updates between two reads)."""
        sim = self._sim
        if sim is None:
            return []
        last = sim.time_step // self.every
        first = max(self._synced + 1, last - TRACE + 1)
        if last >= first:
            trace, ids = sim.windkessel_trace(), sim.windkessel_ids()
            pa = self.units.pressure_to_si(3.0)
            for u in range(first, last + 1):
                q, p = trace[u % TRACE]
                self._history.append((
                    self.units.time_to_si(u * self.every),
                    {oid: self.units.flow_rate_to_si(float(q[o]))
                     for o, oid in enumerate(ids)},
                    {oid: float(p[o]) * pa for o, oid in enumerate(ids)}))
            self._synced = last
        return self._history


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
