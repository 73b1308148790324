"""Openings in the user's units: groups of openings, their defaults and the SI <-> lattice map.

The truth is ``SimulationConfig.openings`` (lattice units, :mod:`solver.opening_kinds`); the
dashboard shows and edits it in SI through :class:`OpeningUnits`, the one place that converts an
opening's value: an inlet's mean speed (m/s) or flow rate (mL/s, µL/s) to the lattice mean speed
into the fluid, an outlet's pressure (Pa, relative to the reference density) to a lattice
density, and back. Values above the Mach limit are refused with the largest allowed SI value.

An :class:`OpeningGroup` is one row of the table: one opening of an STL, or every fluid patch of
one box face of an image (the flow-axis picker), set to the same condition.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from geometries import VoxelGeometry
from geometries.openings import Opening, face_openings
from solver.opening_kinds import DENSITY, OPENING_TYPES, SPEED, opening_kind
from solver.opening_kinds import opening_conditions as parse_opening_conditions
from solver.opening_specs import MAX_DENSITY_CHANGE
from solver.units import UnitSystem
from solver.values import MAX_MACH, PROFILE_PEAK, ConfigError, mean_speed_limit
from solver.waveform import BUILTIN_WAVEFORMS, parse_waveform, parse_waveform_text, table_fourier
from solver.windkessel import (
    parse_windkessel,
    retimed_windkessel,
    windkessel_spec,
    windkessel_to_lattice,
    windkessel_to_si,
)

__all__ = [
    "KIND_LABELS", "VALUE_UNITS", "PROFILE_PEAK", "DEFAULT_INLET_SPEED", "OpeningGroup",
    "OpeningUnits", "opening_groups", "face_drive", "default_openings", "driven_values",
    "length_text", "flow_rate_text", "value_units", "DRIVES", "default_drive", "drive_setup",
    "si_specs", "retimed_openings", "WAVEFORMS", "builtin_shape", "csv_shape", "FLOW_UNITS",
    "STEADY", "UPLOADED", "inlet_mean",
]

#: Solver kind -> what the table calls it (each kind's own label, solver/opening_kinds.py).
KIND_LABELS = {name: opening_kind(name).label or name for name in OPENING_TYPES}
#: Units a value may be entered in, per what it is (the kind's ``quantity``; first: default).
_QUANTITY_UNITS = {SPEED: ("m/s", "mL/s", "µL/s"), DENSITY: ("Pa",), None: ("",)}
#: Units an opening's value may be entered in, per kind (the first is the default).
VALUE_UNITS = {name: _QUANTITY_UNITS[opening_kind(name).quantity] for name in OPENING_TYPES}
#: m^3/s in one unit of each flow-rate choice.
FLOW_UNITS = {"mL/s": 1e-6, "µL/s": 1e-9}
#: Default inlet mean speed, lattice units (Mach 0.017: well inside the limit at any resolution).
DEFAULT_INLET_SPEED = 0.01
#: What a velocity inlet's value does over time: constant, a built-in heartbeat (period 1 s,
#: :data:`solver.waveform.BUILTIN_WAVEFORMS`) or the shape of an uploaded CSV, each scaled to
#: the row's value as the cycle's mean.
STEADY, UPLOADED = "steady", "uploaded CSV"
WAVEFORMS = (STEADY, *BUILTIN_WAVEFORMS, UPLOADED)
#: What drives the flow -> None (the body force, periodic box), "openings" (the geometry's own:
#: a vessel's), or the axis whose two box faces become inlet (min) and outlet (max).
DRIVES: dict[str, int | str | None] = {
    "body force (pressure gradient)": None,
    "openings of the geometry": "openings",
    "x faces: inlet x min, outlet x max": 0,
    "y faces: inlet y min, outlet y max": 1,
    "z faces: inlet z min, outlet z max": 2,
}


@dataclass(frozen=True)
class OpeningGroup:
    """Openings set to one condition: ids, name, total area (nodes²), diameter (m or voxels),
    centre in node coordinates (the largest member's) and outward normal."""

    ids: tuple[int, ...]
    name: str
    area_nodes: float
    diameter: float
    centre_nodes: tuple[float, ...]
    normal: tuple[float, ...]
    voxel_size: float | None

    @property
    def label(self) -> str:
        """What the 3D view and the table call it, e.g. ``1 (d 2.0 mm)``."""
        size = (length_text(self.diameter) if self.voxel_size is not None
                else f"{self.diameter:.3g} voxels")
        count = f", {len(self.ids)} patches" if len(self.ids) > 1 else ""
        return f"{self.name} (d {size}{count})"


def quantity(kind: str) -> str | None:
    """What a value of opening ``kind`` is: SPEED, DENSITY or None (the solver's registry)."""
    return opening_kind(kind).quantity


def caveat(kind: str) -> str:
    """What to know before choosing opening ``kind`` (empty for most), from the registry."""
    return opening_kind(kind).caveat


def drives(kind: str) -> bool:
    """Whether fluid crosses an opening of ``kind`` (everything but a closed one)."""
    return opening_kind(kind).flux


def value_units(kind: str, group: OpeningGroup) -> tuple[str, ...]:
    """Units a value of ``kind`` may be given in for ``group`` (2D: no volumetric flow rate)."""
    units = VALUE_UNITS[kind]
    return units[:1] if quantity(kind) == SPEED and len(group.centre_nodes) == 2 else units


def length_text(metres: float) -> str:
    """A length in mm from 1 mm up, in µm below (the unit a vessel or a pore is read in)."""
    return f"{metres * 1e3:.3g} mm" if metres >= 1e-3 else f"{metres * 1e6:.3g} µm"


def flow_rate_text(q_si: float) -> str:
    """A flow rate (m³/s) in mL/s, or µL/s below 0.01 mL/s."""
    return f"{q_si / 1e-6:.3g} mL/s" if abs(q_si) >= 1e-8 else f"{q_si / 1e-9:.3g} µL/s"


def _centre_nodes(opening: Opening, geometry: VoxelGeometry) -> tuple[float, ...]:
    h = geometry.voxel_size or 1.0
    centre = (np.asarray(opening.centre) - np.asarray(geometry.origin)) / h - 0.5
    return tuple(float(v) for v in centre)


def _group(members: Sequence[Opening], name: str, geometry: VoxelGeometry) -> OpeningGroup:
    h = geometry.voxel_size or 1.0
    area = sum(o.area for o in members)
    ndim = geometry.ndim
    largest = max(members, key=lambda o: o.area)
    return OpeningGroup(
        ids=tuple(o.id for o in members), name=name,
        area_nodes=area / h ** (ndim - 1),
        diameter=largest.diameter if len(members) == 1 else (
            area if ndim == 2 else 2.0 * math.sqrt(area / math.pi)),
        centre_nodes=_centre_nodes(largest, geometry), normal=tuple(largest.normal),
        voxel_size=geometry.voxel_size)


def opening_groups(geometry: VoxelGeometry) -> tuple[OpeningGroup, ...]:
    """One group per opening of ``geometry``, in id order."""
    return tuple(_group([o], str(o.id), geometry)
                 for o in sorted(geometry.openings, key=lambda o: o.id))


def face_drive(geometry: VoxelGeometry, axis: int) -> tuple[VoxelGeometry, tuple[OpeningGroup,
                                                                                 ...]]:
    """The geometry with the fluid patches of both faces normal to ``axis`` as its openings, and
    the two groups (min face = inlet first, max face = outlet)."""
    openings = face_openings(geometry, axes=(axis,))
    groups = []
    for side, sign in (("min", -1.0), ("max", 1.0)):
        members = [o for o in openings if o.normal[axis] == sign]
        if not members:
            raise ConfigError(f"The {'xyz'[axis]} {side} face has no fluid voxel: no flow can "
                              f"enter or leave there; pick another flow axis.")
        groups.append(_group(members, f"{'xyz'[axis]} {side} face", geometry))
    return dataclasses.replace(geometry, openings=openings), tuple(groups)


def default_openings(groups: Sequence[OpeningGroup], initial_density: float,
                     inlet: OpeningGroup | None = None) -> dict[int, dict]:
    """Default conditions (lattice units): ``inlet`` (the largest group if None) a uniform
    velocity inlet at :data:`DEFAULT_INLET_SPEED`, the others pressure outlets at 0 Pa."""
    if not groups:
        return {}
    inlet = inlet or max(groups, key=lambda g: g.area_nodes)
    out: dict[int, dict] = {}
    for group in groups:
        spec = ({"kind": "velocity", "value": DEFAULT_INLET_SPEED, "profile": "uniform"}
                if group is inlet else {"kind": "pressure", "value": float(initial_density)})
        out.update({i: dict(spec) for i in group.ids})
    return out


def driven_values(openings: dict[int, dict], ndim: int) -> dict:
    """Config values of a run driven by its openings: walls on every box face, no body force."""
    faces = ("x_min", "x_max", "y_min", "y_max", "z_min", "z_max")[: 2 * ndim]
    return {"openings": openings, "body_force": (0.0, 0.0, 0.0),
            **{face: "wall" for face in faces}, **{f"{face}_value": None for face in faces}}


@dataclass(frozen=True)
class OpeningUnits:
    """SI <-> lattice conversion of opening values for one run: its units and reference
    density (lattice units)."""

    units: UnitSystem
    initial_density: float = 1.0

    def spec(self, kind: str, value: float | None, unit: str, group: OpeningGroup,
             profile: str = "uniform", check: bool = True, shape: dict | None = None,
             windkessel: dict | None = None) -> dict:
        """The config entry (lattice units) of ``value`` in ``unit``; ConfigError in SI when out
        of range (``check``; off while a new tau is being chosen for it). ``shape``: an
        inlet's waveform ``{period_s, fourier}`` relative to its mean (``value`` is the
        cycle's mean); ``windkessel``: an outlet's ``{Rp, C, Rd}`` (SI; ``value`` is the
        distal pressure)."""
        if quantity(kind) is None:
            return {"kind": kind}
        if value is None or not math.isfinite(value):
            raise ConfigError(f"Opening {group.name}: enter a number ({unit}).")
        if quantity(kind) == DENSITY:
            spec = self._pressure(kind, value, group, check)
            if windkessel is not None:
                model = parse_windkessel({**windkessel, "Pd": float(value)},
                                         f"Opening {group.name}: RCR outlet")
                spec["windkessel"] = windkessel_spec(windkessel_to_lattice(model, self.units))
            return spec
        return self._inlet(kind, value, unit, group, profile, check, shape)

    def _pressure(self, kind: str, value: float, group: OpeningGroup, check: bool) -> dict:
        # The kind's own SI conversion (solver.opening_kinds), as case files use it.
        density = opening_kind(kind).si_value({"pressure": float(value)}, 0.0, self.units,
                                              self.initial_density)
        # The limit case files hold (solver.opening_specs): a saved case must rerun.
        limit = MAX_DENSITY_CHANGE * self.initial_density
        if check and abs(density - self.initial_density) > limit:
            largest = self.units.pressure_to_si(limit)
            raise ConfigError(
                f"Opening {group.name}: {value:g} Pa is a density change of "
                f"{(density - self.initial_density) / self.initial_density:+.1%} on this "
                f"grid, beyond {MAX_DENSITY_CHANGE:.0%} (the weakly compressible scheme "
                f"would be wrong or diverge); enter at most ±{largest:.3g} Pa, or shorten "
                "the time step (a smaller τ or voxel size).")
        return {"kind": kind, "value": density}

    def _inlet(self, kind: str, value: float, unit: str, group: OpeningGroup, profile: str,
               check: bool, shape: dict | None) -> dict:
        speed = self._speed(kind, value, unit, group)
        spec: dict = {"kind": kind, "value": speed, "profile": profile}
        # A waveform's peak, not its mean, must stay below the limit (solver.opening_kinds).
        peak = 1.0
        if shape is not None:
            spec["waveform"] = {"period": float(shape["period_s"]) / self.units.dt,
                                "fourier": [[re * speed, im * speed]
                                            for re, im in shape["fourier"]]}
            peak = _shape_peak(shape)
        limit = mean_speed_limit(profile) / peak  # the limit case files hold (solver.values)
        if check and abs(speed) > limit:
            largest = self.to_si(limit, unit, group)
            of_cycle = " as the cycle's mean (its peak is higher)" if shape is not None else ""
            raise ConfigError(
                f"Opening {group.name}: {value:g} {unit}{of_cycle} is above the Mach limit "
                f"{MAX_MACH} of the lattice (a {profile} profile); the largest allowed value "
                f"is {largest:.3g} {unit}. Lower it, or raise the viscosity or τ, or use a "
                "finer voxel size.")
        if check and shape is not None:  # the period must resolve its harmonics
            try:
                parse_opening_conditions({group.ids[0]: spec}, self.initial_density)
            except ConfigError as exc:
                raise ConfigError(f"Opening {group.name}: {exc}") from exc
        return spec

    def shape(self, spec: dict) -> dict | None:
        """The waveform of a config entry relative to its mean, SI period (None: steady)."""
        if not spec.get("waveform"):
            return None
        wave = parse_waveform(spec["waveform"])
        if wave.mean == 0.0:  # no mean to scale (never written by the table)
            return None
        return {"period_s": wave.period * self.units.dt,
                "fourier": [[c.real / wave.mean, c.imag / wave.mean]
                            for c in wave.coefficients]}

    def rcr(self, spec: dict) -> dict | None:
        """An outlet's Windkessel ``{Rp, C, Rd}`` in SI (None: a fixed pressure)."""
        if not spec.get("windkessel"):
            return None
        model = windkessel_to_si(parse_windkessel(spec["windkessel"]), self.units)
        return {"Rp": model.resistance_proximal, "C": model.compliance,
                "Rd": model.resistance_distal}

    def _speed(self, kind: str, value: float, unit: str, group: OpeningGroup) -> float:
        """The lattice mean speed of ``value`` in ``unit`` by the kind's own SI conversion
        (:mod:`solver.opening_kinds`, as case files use it): m/s, or a flow rate through the
        group's area."""
        if unit == "m/s":
            entry = {"mean_speed": float(value)}
        elif unit in FLOW_UNITS:
            entry = {"flow_rate": float(value) * FLOW_UNITS[unit]}
        else:
            raise ConfigError(f"Unknown inlet unit {unit!r}; use one of {VALUE_UNITS['velocity']}.")
        area = group.area_nodes * self.units.dx ** (len(group.centre_nodes) - 1)  # m^2
        return opening_kind(kind).si_value(entry, area, self.units, self.initial_density)

    def to_si(self, speed: float, unit: str, group: OpeningGroup) -> float:
        """A lattice mean inlet speed in ``unit`` (m/s, or a flow rate through ``group``)."""
        if unit == "m/s":
            return self.units.velocity_to_si(speed)
        return self.units.flow_rate_to_si(speed * group.area_nodes) / FLOW_UNITS[unit]

    def value(self, spec: dict, unit: str, group: OpeningGroup) -> float | None:
        """The SI value of a config entry in ``unit`` (None for kinds without a value)."""
        if quantity(spec["kind"]) == DENSITY:
            density = spec.get("value")
            density = self.initial_density if density is None else density
            return self.units.pressure_to_si(density - self.initial_density)
        if quantity(spec["kind"]) == SPEED:
            return self.to_si(inlet_mean(spec), unit, group)
        return None


def default_drive(geometry: VoxelGeometry) -> str:
    """A vessel with openings is driven through them; anything else by the body force."""
    return next(k for k, v in DRIVES.items() if v == ("openings" if geometry.openings else None))


def drive_setup(geometry: VoxelGeometry, drive: str, initial_density: float
                ) -> tuple[VoxelGeometry, tuple[OpeningGroup, ...], dict[int, dict]]:
    """(geometry with the openings the drive uses, the table's groups, default
    ``SimulationConfig.openings``) of one of :data:`DRIVES` (empty for the body force)."""
    if drive not in DRIVES:
        raise ConfigError(f"Unknown drive {drive!r}; choose one of {list(DRIVES)}.")
    how = DRIVES[drive]
    if how is None:
        return geometry, (), {}
    if how == "openings":
        groups = opening_groups(geometry)
        if not groups:
            raise ConfigError("This geometry has no openings: upload the STL with 'STL openings' "
                              "set, or pick a pair of box faces or the body force as the drive.")
        return geometry, groups, default_openings(groups, initial_density)
    if how >= geometry.ndim:
        raise ConfigError(f"A {geometry.ndim}D geometry has no {'xyz'[how]} faces; pick "
                          f"{' or '.join('xyz'[: geometry.ndim])}.")
    geometry, groups = face_drive(geometry, how)
    return geometry, groups, default_openings(groups, initial_density, inlet=groups[0])


def si_specs(openings: dict[int, dict], groups: Sequence[OpeningGroup],
             units: OpeningUnits) -> list[dict]:
    """The table's conditions in SI, one entry per group (its first opening's id): a mean
    speed (m/s) or a pressure (Pa), as :func:`solver.lattice_parameters.demand_of_specs`
    reads them."""
    out = []
    for group in groups:
        spec = openings.get(group.ids[0])
        if spec is None:  # unlisted: closed
            continue
        entry = {"id": group.ids[0], "kind": spec["kind"]}
        if quantity(spec["kind"]) == SPEED:
            entry.update(mean_speed=units.to_si(inlet_mean(spec), "m/s", group),
                         profile=spec.get("profile", "uniform"))
            shape = units.shape(spec)
            if shape is not None:  # its peak sets the Mach number (demand_of_specs)
                mean = entry.pop("mean_speed")
                entry["waveform"] = {"period_s": shape["period_s"], "quantity": "mean_speed",
                                     "fourier": [[re * mean, im * mean]
                                                 for re, im in shape["fourier"]]}
        elif quantity(spec["kind"]) == DENSITY:
            entry["pressure"] = units.value(spec, "Pa", group)
        out.append(entry)
    return out


def retimed_openings(openings: dict[int, dict], ratio: float, initial_density: float
                     ) -> dict[int, dict]:
    """The same SI conditions on a time step ``ratio`` times the old one: lattice speeds scale
    with dt, lattice pressures (density changes) with dt^2."""
    out = {}
    for oid, spec in openings.items():
        spec = dict(spec)
        if quantity(spec["kind"]) == SPEED:
            spec["value"] = inlet_mean(spec) * ratio
            if spec.get("waveform"):  # period in steps ~ 1/dt, speeds ~ dt
                wave = parse_waveform(spec["waveform"])
                spec["waveform"] = {"period": wave.period / ratio,
                                    "fourier": [[c.real * ratio, c.imag * ratio]
                                                for c in wave.coefficients]}
        elif quantity(spec["kind"]) == DENSITY and spec.get("value") is not None:
            spec["value"] = initial_density + (float(spec["value"]) - initial_density) * ratio**2
        if spec.get("windkessel"):
            spec["windkessel"] = windkessel_spec(
                retimed_windkessel(parse_windkessel(spec["windkessel"]), ratio))
        out[oid] = spec
    return out


def inlet_mean(spec: dict) -> float:
    """A velocity entry's mean speed (lattice): its value, or its waveform's mean (a case
    file's entry has only the waveform)."""
    if spec.get("value") is None and spec.get("waveform"):
        return parse_waveform(spec["waveform"]).mean
    return float(spec["value"])


def _shape_peak(shape: dict) -> float:
    """Largest |value / mean| of a waveform shape over its cycle."""
    return parse_waveform({"period": 1.0, "fourier": shape["fourier"]}).peak()


def builtin_shape(name: str) -> dict:
    """A built-in waveform's shape ``{period_s, fourier}`` relative to its mean."""
    return {"period_s": 1.0, "fourier": [[c.real, c.imag] for c in BUILTIN_WAVEFORMS[name]]}


def csv_shape(text: str, name: str = "waveform CSV") -> tuple[str, float, dict]:
    """(quantity ``flow_rate`` | ``mean_speed``, the cycle's mean in SI, the shape relative
    to it) of an uploaded waveform CSV (the case files' parser,
    :func:`solver.waveform.parse_waveform_text`); ConfigError when its mean is zero."""
    what, t, value = parse_waveform_text(text, name)
    period, coeffs = table_fourier(t, value)
    mean = coeffs[0].real
    peak = max(abs(c) for c in coeffs)
    if not abs(mean) > 1e-9 * peak:
        raise ConfigError(f"{name}: the mean {what} over the cycle is zero; the table's value "
                          "is its mean, so give a waveform with net flow.")
    return what, mean, {"period_s": period,
                        "fourier": [[c.real / mean, c.imag / mean] for c in coeffs]}
