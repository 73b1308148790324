"""The registry of opening boundary kinds: what drives the flow through a geometry's openings.

An opening (:class:`geometries.openings.Opening`) is a plane inside the box where fluid enters or
leaves a vessel; the links that cross it (:func:`solver.opening_links.crossing_links`) bounce back
like a wall unless a kind below replaces them. ``SimulationConfig.openings`` maps an opening id to
its condition, in lattice units (SI conversion happens at the edges, :mod:`solver.units`):

- ``velocity``: an inlet (or a prescribed outflow) with ``value`` the mean speed through the
  opening, positive into the fluid, and ``profile`` ``uniform`` or ``poiseuille`` (fitted to
  the opening's equivalent radius).
- ``pressure``: an outlet held at density ``value`` (default ``initial_density``).
- ``outflow``: zero normal gradient; no value.
- ``closed``: a wall; no value. Openings not listed are closed.

Each kind is registered once here with its parser, its SI conversion, its labels and its link
rule (:class:`solver.link_rules.LinkRule`: the per-link values and the NumPy arithmetic of the
openings' pass); its CUDA code is registered under the same name in
:mod:`solver.backends.cuda.opening_kinds`. A crossing link's integer code in the pass's tables
is its kind's place among the kinds with a link rule (:func:`link_code`); only this module and
the CUDA registry turn codes back into kinds (:func:`links_by_kind`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .link_rules import ANTI_BOUNCE_BACK, LADD_VELOCITY, ZERO_GRADIENT, LinkRule
from .registry import Registry
from .values import MAX_MACH, PROFILE_PEAK, ConfigError, is_number, mean_speed_limit

__all__ = ["OpeningCondition", "OpeningKind", "OPENING_KIND_REGISTRY", "OPENING_TYPES",
           "PROFILES", "SPEED", "DENSITY", "opening_kind", "opening_conditions", "link_kinds",
           "link_code", "links_by_kind"]

#: What an opening kind's value is (:attr:`OpeningKind.quantity`).
SPEED, DENSITY = "speed", "density"
#: Velocity profiles of a velocity opening.
PROFILES = tuple(PROFILE_PEAK)


@dataclass(frozen=True)
class OpeningCondition:
    """Validated condition of one opening (lattice units).

    ``value``: mean speed into the fluid (``velocity``), density (``pressure``), None otherwise.
    ``waveform``: a velocity opening's periodic mean speed (:class:`solver.waveform.Waveform`,
    ``value`` its mean), None for a steady one; with the ``poiseuille`` profile each harmonic
    gets its Womersley profile.
    """

    kind: str
    value: float | None = None
    profile: str = "uniform"
    waveform: Any = None


#: ``parse(kind, opening_id, spec, initial_density)``: the validated condition.
ParseFn = Callable[[str, int, dict, float], OpeningCondition]


#: ``si_value(entry, area_m2, units, rho0)``: the lattice value of a case file's SI entry.
SiValueFn = Callable[[dict, float, Any, float], "float | None"]


@dataclass(frozen=True)
class OpeningKind:
    """One boundary kind of an opening: its name, parser and whether fluid crosses it.

    ``link_rule``: what the openings' pass (:mod:`solver.iolets`) does on its crossing links
    (None: they keep bounce-back); ``si_keys``: the case-file keys of its SI value,
    ``si_required`` whether one of them must be given, ``si_value`` the conversion to lattice
    units. ``quantity``: what its value is, :data:`SPEED` (a mean speed into the fluid, with a
    profile), :data:`DENSITY` (a pressure) or None (no value); user interfaces decide by it,
    never by the name. ``caveat``:
    what a user should know before choosing it (shown while it is chosen), or empty.
    ``label`` and ``colour``: what the openings table calls it and its discs' colour in the 3D
    views (the app reads both from here, never from a table of names).
    """

    name: str
    parse: ParseFn
    flux: bool = True
    doc: str = ""
    link_rule: LinkRule | None = None
    si_keys: tuple[str, ...] = ()
    si_required: bool = False
    si_value: SiValueFn | None = None
    quantity: str | None = None
    caveat: str = ""
    label: str = ""
    colour: str = "#8c8c8c"

    def __reduce__(self):
        return opening_kind, (self.name,)


OPENING_KIND_REGISTRY: Registry[OpeningKind] = Registry("opening kind")
register = OPENING_KIND_REGISTRY.register


def opening_kind(name: str) -> OpeningKind:
    """The registered opening kind called ``name``."""
    return OPENING_KIND_REGISTRY.named(name)


def _where(opening_id: int) -> str:
    return f"openings[{opening_id}]"


def _velocity(kind: str, opening_id: int, spec: dict, rho0: float) -> OpeningCondition:
    value = spec.get("value")
    waveform = None
    if spec.get("waveform") is not None:
        from .waveform import parse_waveform

        waveform = parse_waveform(spec["waveform"], f"{_where(opening_id)}: waveform")
        if value is not None and value != waveform.mean:
            raise ConfigError(f"{_where(opening_id)}: value {value!r} differs from the "
                              f"waveform's mean {waveform.mean!r}; give only the waveform.")
        value = waveform.mean
        if waveform.period < 8 * max(waveform.harmonics, 1):
            raise ConfigError(f"{_where(opening_id)}: a waveform period of "
                              f"{waveform.period:.3g} steps cannot resolve "
                              f"{waveform.harmonics} harmonics (8 steps each at least); use a "
                              "smaller time step or fewer harmonics.")
    if not is_number(value) or not math.isfinite(value):
        raise ConfigError(f"{_where(opening_id)} is a velocity opening: set its value to the "
                          "mean speed into the fluid (lattice units; negative = out of it).")
    profile = spec.get("profile", "uniform")
    if profile not in PROFILES:
        raise ConfigError(f"{_where(opening_id)}: profile {profile!r} is not one of {PROFILES}.")
    limit = mean_speed_limit(profile)
    peak = abs(value) if waveform is None else waveform.peak()
    if peak > limit:  # the profile's peak, not its mean, must stay below the limit
        raise ConfigError(f"{_where(opening_id)}: mean speed {peak:g} puts the {profile} "
                          f"profile's peak ({PROFILE_PEAK[profile]:g} x the mean) above the "
                          f"Mach limit {MAX_MACH} (mean |u| <= {limit:.3g} lattice units); "
                          "lower it or refine the grid.")
    return OpeningCondition(kind, float(value), profile, waveform)


def _density(kind: str, opening_id: int, spec: dict, rho0: float) -> OpeningCondition:
    value = spec.get("value", rho0)
    value = rho0 if value is None else value
    if not is_number(value) or not 0.0 < value < math.inf:
        raise ConfigError(f"{_where(opening_id)} is a pressure opening: its value must be a "
                          f"positive density (lattice units), got {value!r}.")
    return OpeningCondition(kind, float(value))


def _no_value(kind: str, opening_id: int, spec: dict, rho0: float) -> OpeningCondition:
    return OpeningCondition(kind)


def _si_speed(entry: dict, area: float, units: Any, rho0: float) -> float:
    """Mean speed into the fluid (lattice) of ``mean_speed`` (m/s) or ``flow_rate`` (m^3/s)."""
    speed = entry["mean_speed"] if "mean_speed" in entry else entry["flow_rate"] / area
    return units.velocity_to_lattice(float(speed))


def _si_density(entry: dict, area: float, units: Any, rho0: float) -> float:
    """Density (lattice) of ``pressure`` (Pa relative to the reference, default 0)."""
    pressure = float(entry.get("pressure", 0.0))
    return rho0 + (units.pressure_to_lattice(pressure) if pressure else 0.0)


register(OpeningKind("velocity", _velocity, doc="velocity inlet (mean speed, profile)",
                     link_rule=LADD_VELOCITY, si_keys=("flow_rate", "mean_speed", "waveform"),
                     si_required=True,
                     si_value=_si_speed, quantity=SPEED, label="inlet velocity",
                     colour="#d62728"))
register(OpeningKind("pressure", _density, doc="pressure outlet (density)",
                     link_rule=ANTI_BOUNCE_BACK,
                     si_keys=("pressure",), si_value=_si_density, quantity=DENSITY,
                     label="outlet pressure", colour="#1f77b4"))
register(OpeningKind(
    "outflow", _no_value, doc="zero-gradient outflow", link_rule=ZERO_GRADIENT, label="outflow",
    colour="#2ca02c",
    caveat="an outflow sets no pressure and in slow flows acts almost like a wall (in the "
           "vessel sample next to a pressure outlet it passed 0.1 % of the flow). Use outlet "
           "pressure for vessels; outflow suits fast flows leaving through a long straight "
           "segment."))
register(OpeningKind("closed", _no_value, flux=False, doc="wall (bounce-back)",
                     label="closed", colour="#8c8c8c"))

#: The opening kinds, in registration order (the config's option set).
OPENING_TYPES = tuple(OPENING_KIND_REGISTRY)


def link_kinds() -> tuple[OpeningKind, ...]:
    """The kinds with a link rule, in registration order: a crossing link's code in the pass's
    tables is its kind's index here (velocity 0, pressure 1, outflow 2)."""
    return tuple(kind for kind in OPENING_KIND_REGISTRY.values() if kind.link_rule is not None)


def link_code(name: str) -> int:
    """The integer code of the links of kind ``name`` in the pass's tables."""
    return link_kinds().index(opening_kind(name))


def links_by_kind(code: np.ndarray) -> list[tuple[OpeningKind, np.ndarray]]:
    """(kind, indices of its links) for every kind present in the per-link ``code`` array."""
    out = []
    for index, kind in enumerate(link_kinds()):
        links = np.flatnonzero(np.asarray(code) == index)
        if links.size:
            out.append((kind, links))
    return out


def _spec(opening_id: Any, spec: Any) -> dict:
    if isinstance(spec, OpeningCondition):
        return {"kind": spec.kind, "value": spec.value, "profile": spec.profile,
                "waveform": spec.waveform}
    if isinstance(spec, str):
        return {"kind": spec}
    if isinstance(spec, dict) and "kind" in spec:
        return spec
    raise ConfigError(f"{_where(opening_id)} must be a kind name or a mapping with 'kind' "
                      f"(one of {OPENING_TYPES}) and 'value', got {spec!r}.")


def opening_conditions(openings: dict, initial_density: float) -> dict[int, OpeningCondition]:
    """Validated ``{opening id: OpeningCondition}`` from a config's ``openings`` mapping."""
    out = {}
    for key, spec in openings.items():
        if isinstance(key, bool) or not isinstance(key, int) or key < 1:
            raise ConfigError(f"openings keys are opening ids (integers >= 1), got {key!r}.")
        spec = _spec(key, spec)
        kind = opening_kind(spec["kind"]) if spec["kind"] in OPENING_KIND_REGISTRY else None
        if kind is None:
            raise ConfigError(f"{_where(key)}: unknown kind {spec['kind']!r}; use one of "
                              f"{OPENING_TYPES}.")
        out[key] = kind.parse(kind.name, key, spec, initial_density)
    return out
