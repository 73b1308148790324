"""Openings of a case file in SI: which opening (by id or by a point) gets which condition.

A case's ``openings:`` section is a list of entries::

    openings:
      - id: 1                      # or  at: [x, y, z]  (metres: the nearest opening centre)
        kind: velocity             # velocity | pressure | outflow | closed
        flow_rate: 2.0e-7          # m^3/s into the fluid  (or  mean_speed: 0.1  in m/s)
        profile: poiseuille        # uniform | poiseuille (Womersley per harmonic of a waveform)
        # or, pulsatile:  waveform: inflow.csv  (header t,flow_rate or t,mean_speed; SI)
        #             or  waveform: {period_s: 0.8, quantity: flow_rate, fourier: [c0, [re, im]]}
      - id: 2
        kind: pressure
        pressure: 0.0              # Pa relative to the reference pressure (default 0)
        # or an RCR outlet (SI):  windkessel: {Rp: 1.2e8, C: 1.0e-9, Rd: 1.5e9}  (Pa s/m^3,
        #   m^3/Pa; {R, C} for two elements; optional Pd, P0 in Pa), updated every
        #   run.windkessel_every steps

:func:`parse_opening_specs` checks the entries' shape when the case is read;
:func:`resolve_openings` turns them, once the geometry is loaded, into
``SimulationConfig.openings`` (lattice units) through :class:`solver.units.UnitSystem`, which
needs the voxel size, ``run.viscosity`` (m^2/s) and ``run.density`` (kg/m^3).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .opening_kinds import DENSITY, OPENING_TYPES, PROFILES, opening_conditions, opening_kind
from .units import UnitSystem
from .values import ConfigError, is_number
from .windkessel import WindkesselCoupling, parse_windkessel

__all__ = ["SPEC_KEYS", "parse_opening_specs", "resolve_openings", "nearest_opening",
           "case_units", "specs_by_id", "case_coupling"]

#: Largest relative density change a pressure opening may ask for (weakly compressible LBM).
MAX_DENSITY_CHANGE = 0.1

SPEC_KEYS = ("id", "at", "kind", "flow_rate", "mean_speed", "pressure", "profile", "waveform",
             "windkessel")


def parse_opening_specs(data: Any, source: str = "case", base: Any = None) -> list[dict]:
    """The ``openings`` entries of a case, checked for shape (not yet against a geometry);
    a waveform CSV's relative path is made relative to the folder ``base``."""
    if not isinstance(data, list):
        raise ConfigError(f"{source}: `openings` must be a list of entries such as "
                          "{id: 1, kind: velocity, flow_rate: 1.0e-7}.")
    out = []
    for k, entry in enumerate(data):
        where = f"{source}: openings[{k}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where} must be a mapping with `id` or `at` and `kind`.")
        unknown = sorted(set(entry) - set(SPEC_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown keys {unknown}; use {list(SPEC_KEYS)}.")
        if ("id" in entry) == ("at" in entry):
            raise ConfigError(f"{where} needs exactly one of `id` (an opening id) or `at` "
                              "([x, y, z] in metres, the nearest opening).")
        if entry.get("kind") not in OPENING_TYPES:
            raise ConfigError(f"{where}: `kind` must be one of {list(OPENING_TYPES)}, got "
                              f"{entry.get('kind')!r}.")
        if entry.get("profile", "uniform") not in PROFILES:
            raise ConfigError(f"{where}: `profile` must be one of {list(PROFILES)}.")
        kind = opening_kind(entry["kind"])
        given = [k for k in kind.si_keys if k in entry]
        if len(given) > 1 or (kind.si_required and not given):
            raise ConfigError(f"{where}: a {kind.name} opening needs exactly one of "
                              f"{['`' + k + '`' for k in kind.si_keys]} (flow_rate in m^3/s "
                              "into the fluid, mean_speed in m/s, waveform a CSV or Fourier "
                              "coefficients, pressure in Pa).")
        if "windkessel" in entry:
            if kind.quantity != DENSITY:  # it sets the opening's density
                raise ConfigError(f"{where}: a windkessel closes a pressure opening, not a "
                                  f"{kind.name} one; set kind: pressure.")
            parse_windkessel(entry["windkessel"], f"{where}: windkessel")
        if "waveform" in entry and not isinstance(entry["waveform"], (str, dict)):
            raise ConfigError(f"{where}: `waveform` must be a CSV file name or a mapping "
                              "{period_s, fourier: [...]}.")
        extra = sorted({"flow_rate", "mean_speed", "pressure"} & set(entry) - set(kind.si_keys))
        if extra:
            raise ConfigError(f"{where}: a {kind.name} opening takes no {extra}.")
        for key in ("flow_rate", "mean_speed", "pressure"):
            if key in entry and not (is_number(entry[key]) and math.isfinite(entry[key])):
                raise ConfigError(f"{where}: `{key}` must be a number, got {entry[key]!r}.")
        out.append(_absolute_waveform(dict(entry), base))
    return out


def _absolute_waveform(entry: dict, base: Any) -> dict:
    """The entry with a waveform CSV path made relative to the case file's folder ``base``."""
    from pathlib import Path

    wave = entry.get("waveform")
    name = wave if isinstance(wave, str) else (wave or {}).get("file") \
        if isinstance(wave, dict) else None
    if not name or Path(name).is_absolute() or base is None:
        return entry
    path = str(Path(base).resolve() / name)
    entry["waveform"] = path if isinstance(wave, str) else {**wave, "file": path}
    return entry


def nearest_opening(openings, point: Any, where: str) -> Any:
    """The opening whose centre is nearest ``point`` (metres); refused when farther than that
    opening's diameter."""
    try:
        p = np.asarray(point, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: `at` must be [x, y, z] in metres, got {point!r}.") from exc
    if not openings:
        raise ConfigError(f"{where}: the geometry has no openings; load it with openings "
                          "detected (e.g. geometry options: {openings: auto}).")
    if len(p) != len(openings[0].centre):
        raise ConfigError(f"{where}: `at` must have {len(openings[0].centre)} coordinates.")
    dist = [float(np.linalg.norm(np.asarray(o.centre) - p)) for o in openings]
    best = int(np.argmin(dist))
    opening = openings[best]
    if dist[best] > opening.diameter:
        raise ConfigError(f"{where}: no opening near {list(p)} m; the nearest, opening "
                          f"{opening.id} at {[round(c, 6) for c in opening.centre]} m, is "
                          f"{dist[best]:.3g} m away (more than its diameter "
                          f"{opening.diameter:.3g} m).")
    return opening


def specs_by_id(specs: list[dict], geometry: Any, source: str = "case") -> list[dict]:
    """The entries with ``at`` replaced by the ``id`` of the nearest opening; ConfigError for
    an unknown id or an opening set twice."""
    openings = tuple(getattr(geometry, "openings", ()) or ())
    by_id = {o.id: o for o in openings}
    out, seen = [], set()
    for k, entry in enumerate(specs):
        where = f"{source}: openings[{k}]"
        if "id" in entry:
            if entry["id"] not in by_id:
                raise ConfigError(f"{where}: the geometry has no opening {entry['id']!r} "
                                  f"(its openings: {sorted(by_id) or 'none'}).")
            oid = entry["id"]
        else:
            oid = nearest_opening(openings, entry["at"], where).id
        if oid in seen:
            raise ConfigError(f"{where}: opening {oid} is set twice.")
        seen.add(oid)
        out.append({**{k: v for k, v in entry.items() if k != "at"}, "id": oid})
    return out


def resolve_openings(specs: list[dict], geometry: Any, units: UnitSystem | None,
                     rho0: float = 1.0, source: str = "case") -> dict[int, dict]:
    """``SimulationConfig.openings`` (lattice units) of SI entries on a loaded geometry;
    pressures are relative to the reference density ``rho0``."""
    openings = tuple(getattr(geometry, "openings", ()) or ())
    by_id = {o.id: o for o in openings}
    out: dict[int, dict] = {}
    for k, entry in enumerate(specs_by_id(specs, geometry, source)):
        where = f"{source}: openings[{k}]"
        opening = by_id[entry["id"]]
        kind = opening_kind(entry["kind"])
        spec: dict[str, Any] = {"kind": kind.name}
        if "profile" in entry:
            spec["profile"] = entry["profile"]
        if any(k in entry for k in kind.si_keys) and units is None:
            raise ConfigError(f"{where}: SI values need the voxel size and the fluid: set "
                              "run.viscosity (m^2/s) and use a geometry with a voxel size.")
        if "waveform" in entry:  # pulsatile: the waveform's mean is the value
            from .waveform import si_waveform

            spec["waveform"] = si_waveform(entry["waveform"], opening.area, units)
        elif kind.si_value is not None:
            spec["value"] = kind.si_value(entry, opening.area, units, rho0)
        if "pressure" in entry and abs(spec["value"] - rho0) > MAX_DENSITY_CHANGE * rho0:
            raise ConfigError(
                f"{where}: {entry['pressure']:g} Pa is a density change of "
                f"{(spec['value'] - rho0) / rho0:+.1%} on this grid (time step "
                f"{units.dt:.3g} s), beyond {MAX_DENSITY_CHANGE:.0%}: the weakly compressible "
                "scheme would be wrong or diverge. Lower the pressure, or shorten the time step "
                "(a smaller tau or voxel size).")
        try:  # the lattice limits (Mach), said in the user's units
            opening_conditions({opening.id: spec}, rho0)
        except ConfigError as exc:
            si = {k: entry[k] for k in kind.si_keys if k in entry}
            raise ConfigError(f"{where}: {si} (SI) is too fast on this grid, time step "
                              f"{units.dt:.3g} s: {exc} Lower it, or shorten the time step "
                              "(a smaller tau or voxel size).") from exc
        out[opening.id] = spec
    return out


def case_units(case: Any, voxel_size: float | None) -> UnitSystem | None:
    """SI units of a case's run: voxel size (m), ``run.viscosity`` (m^2/s), ``run.density``
    (kg/m^3) and tau; None when the voxel size or the viscosity is unknown."""
    if not (voxel_size and case.run.viscosity):
        return None
    return UnitSystem.from_viscosity(voxel_size, case.run.viscosity, case.run.density,
                                     case.config.tau)


def case_coupling(specs: list[dict], geometry: Any, units: Any, rho0: float, every: int,
                  source: str = "case") -> WindkesselCoupling | None:
    """The coupling of a case file's ``windkessel`` entries (SI), None without any."""
    models = {e["id"]: parse_windkessel(e["windkessel"], f"{source}: windkessel")
              for e in specs_by_id(specs, geometry, source) if "windkessel" in e}
    if not models:
        return None
    if units is None:
        raise ConfigError(f"{source}: Windkessel outlets are in SI: set run.viscosity (m^2/s) "
                          "and use a geometry with a voxel size.")
    return WindkesselCoupling(models, units, rho0, every)
