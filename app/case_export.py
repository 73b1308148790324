"""The dashboard's run as a case file (``python -m solver run CASE.yaml`` reruns it headless).

The case (:mod:`solver.case`) holds where the geometry came from (a sample, an uploaded file
with its loader options, or a generator call), the config values that differ from the defaults,
the fluid (``run.viscosity`` m²/s, ``run.density`` kg/m³) and the openings section in SI by
opening id (:mod:`solver.opening_specs`): an inlet's mean speed (m/s) and profile, an outlet's
pressure (Pa relative to the reference). Read back on the same geometry, the openings give the
same lattice values as the dashboard's ``SimulationConfig.openings``.
"""

from __future__ import annotations

from typing import Any

import yaml

from solver.config import SimulationConfig
from solver.opening_kinds import DENSITY, SPEED, opening_kind
from solver.units import UnitSystem
from solver.waveform import parse_waveform
from solver.windkessel import parse_windkessel, windkessel_to_si

__all__ = ["openings_section", "case_document", "case_yaml"]

#: Config values a case does not carry: the openings have their own SI section.
_NOT_IN_CONFIG = ("name", "openings")


def openings_section(openings: dict[int, dict], units: UnitSystem, rho0: float) -> list[dict]:
    """SI case entries by id of ``SimulationConfig.openings`` (lattice units)."""
    section = []
    for opening_id in sorted(openings):
        spec = openings[opening_id]
        entry: dict[str, Any] = {"id": int(opening_id), "kind": spec["kind"]}
        quantity = opening_kind(spec["kind"]).quantity
        if quantity == SPEED:
            if spec.get("waveform"):  # pulsatile: the Fourier series in m/s, period in s
                wave = parse_waveform(spec["waveform"])
                entry["waveform"] = {
                    "period_s": _readable(units.time_to_si(wave.period)),
                    "quantity": "mean_speed",
                    "fourier": [[_readable(units.velocity_to_si(c.real)),
                                 _readable(units.velocity_to_si(c.imag))]
                                for c in wave.coefficients]}
            else:
                entry["mean_speed"] = _readable(units.velocity_to_si(float(spec["value"])))
            entry["profile"] = spec.get("profile", "uniform")
        elif quantity == DENSITY:
            density = spec.get("value")
            entry["pressure"] = _readable(units.pressure_to_si(
                (rho0 if density is None else float(density)) - rho0))
            if spec.get("windkessel"):  # an RCR outlet, SI
                model = windkessel_to_si(parse_windkessel(spec["windkessel"]), units)
                entry["windkessel"] = {
                    "Rp": _readable(model.resistance_proximal), "C": _readable(model.compliance),
                    "Rd": _readable(model.resistance_distal),
                    "Pd": _readable(model.distal_pressure)}
        section.append(entry)
    return section


def _readable(value: float) -> float:
    """``value`` to 12 significant digits: 0.2 Pa, not 0.19999999999999948 (round-off)."""
    return float(f"{float(value):.12g}")


def case_document(name: str, geometry: dict, config: SimulationConfig, units: UnitSystem,
                  viscosity: float, density: float) -> dict:
    """A case as a mapping: ``geometry`` (its section), ``config`` (the run's), ``units`` (the
    run's SI units), the fluid's ``viscosity`` (m²/s) and ``density`` (kg/m³)."""
    defaults = SimulationConfig().param.values()
    values = {}
    for key, value in config.param.values().items():
        if key in _NOT_IN_CONFIG or value == defaults.get(key):
            continue
        values[key] = list(value) if isinstance(value, tuple) else value
    document: dict[str, Any] = {"name": name, "geometry": dict(geometry), "config": values,
                                "run": {"viscosity": float(viscosity), "density": float(density)}}
    if config.openings:
        document["openings"] = openings_section(config.openings, units,
                                                float(config.initial_density))
    return document


def case_yaml(document: dict) -> str:
    """The case file text of :func:`case_document`'s mapping, with how to run it."""
    head = ("# Saved from the dashboard. Run headless:  python -m solver run CASE.yaml\n"
            "# Openings by id, in SI: mean_speed m/s, pressure Pa relative to the reference.\n")
    if "file" in document["geometry"]:
        head += "# Put the uploaded file next to this case file (geometry.file).\n"
    return head + yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
