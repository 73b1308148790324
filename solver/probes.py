"""Point probes and line profiles: the flow at a few chosen nodes, read on the device.

A :class:`ProbeSet` names points (a time series each) and lines (a profile each) in voxel
indices. :func:`sample` reads the velocity and pressure at just those nodes: their populations
are gathered and reduced where the state lives (:meth:`solver.readout.Readout.node_moments`)
and only the sampled values cross to the host, never the domain. Values are lattice units
(:data:`solver.flow_fields.FIELDS` gives the SI factors); a point in the solid reads NaN.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .flow_fields import pressure

__all__ = ["Probe", "Line", "ProbeSet", "Readings", "sample", "gather", "PROBE_FIELDS",
           "line_nodes", "probe_nodes", "node_flat", "node_values", "readings",
           "probe_columns", "probe_row", "line_columns", "line_rows", "probe_set_from_specs",
           "probe_specs"]

#: What a probe or a line reads, in this order.
PROBE_FIELDS = ("ux", "uy", "uz", "umag", "pressure")


@dataclass(frozen=True)
class Probe:
    """A named point, voxel indices (x, y[, z])."""

    name: str
    point: tuple[int, ...]


@dataclass(frozen=True)
class Line:
    """A named straight line between two voxel-index points, sampled at every node it crosses
    (one per voxel along its longest axis)."""

    name: str
    start: tuple[int, ...]
    end: tuple[int, ...]


def _inside(point: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether voxel indices ``point`` lie inside a grid of ``shape``."""
    return len(point) == len(shape) and all(0 <= int(i) < n for i, n in
                                            zip(point, shape, strict=True))


@dataclass(frozen=True)
class ProbeSet:
    """The probes and lines of a run (empty: nothing is sampled)."""

    probes: tuple[Probe, ...] = ()
    lines: tuple[Line, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.probes or self.lines)

    def fits(self, shape: tuple[int, ...]) -> bool:
        """Whether every point lies inside ``shape`` (a new geometry may be smaller)."""
        try:
            self.check(shape)
        except ValueError:
            return False
        return True

    def check(self, shape: tuple[int, ...]) -> ProbeSet:
        """This set if every point lies inside ``shape``; else ValueError naming the point."""
        named = [(p.name, p.point) for p in self.probes]
        named += [(f"{ln.name} (start)", ln.start) for ln in self.lines]
        named += [(f"{ln.name} (end)", ln.end) for ln in self.lines]
        for name, point in named:
            if not _inside(point, shape):
                raise ValueError(f"Probe {name} at {tuple(point)} is outside the domain "
                                 f"{tuple(shape)} (voxel indices from 0): move it inside.")
        names = [p.name for p in self.probes] + [ln.name for ln in self.lines]
        if len(set(names)) != len(names):
            raise ValueError(f"Probe and line names must be unique, got {names}.")
        return self

    def within(self, shape: tuple[int, ...]) -> tuple[ProbeSet, tuple[Probe | Line, ...]]:
        """(the probes and lines inside ``shape``, those outside it): a line with either end
        outside is left out whole (a new, smaller geometry; voxel indices)."""
        probes = tuple(p for p in self.probes if _inside(p.point, shape))
        lines = tuple(ln for ln in self.lines
                      if _inside(ln.start, shape) and _inside(ln.end, shape))
        outside = tuple(p for p in self.probes if p not in probes) + tuple(
            ln for ln in self.lines if ln not in lines)
        return ProbeSet(probes, lines), outside


@dataclass(frozen=True)
class Readings:
    """One sample of a :class:`ProbeSet` at ``step``: per probe a value per PROBE_FIELDS name;
    per line the distance ``s`` along it (nodes) and an array per PROBE_FIELDS name."""

    step: int
    probes: dict[str, dict[str, float]] = field(default_factory=dict)
    lines: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)


def line_nodes(line: Line) -> np.ndarray:
    """The voxel indices (n, d) along ``line``, one per step along its longest axis."""
    start, end = np.asarray(line.start, dtype=float), np.asarray(line.end, dtype=float)
    n = int(np.abs(end - start).max()) + 1
    t = np.linspace(0.0, 1.0, n)[:, None]
    return np.rint(start + t * (end - start)).astype(np.int64)


def probe_nodes(probes: ProbeSet, ndim: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Voxel indices (n, ndim) of every probe then every line node, and each line's nodes."""
    points = np.asarray([p.point for p in probes.probes], dtype=np.int64).reshape(-1, ndim)
    lines = [line_nodes(ln) for ln in probes.lines]
    return np.concatenate([points, *lines]), lines


def node_flat(tiling: Any, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat tile-node index (n,) of voxel ``nodes`` (n, d) in a tiled state (0 where solid)
    and the host solid mask (n,): outside every tile or a solid node."""
    tile, node = tiling.locate(nodes)
    flat = np.where(tile >= 0, tile.astype(np.int64) * tiling.nodes_per_tile + node, 0)
    return flat, (tile < 0) | tiling.solid.reshape(-1)[flat]


def node_values(rho: Any, u: Any, rho0: float, xp: Any) -> Any:
    """PROBE_FIELDS (5, n) as a backend array from density (n,) and velocity (d, n)."""
    u3 = u if u.shape[0] == 3 else xp.concatenate([u, xp.zeros((3 - u.shape[0], u.shape[1]))])
    return xp.concatenate([u3, xp.sqrt((u3 * u3).sum(axis=0))[None],
                           pressure(rho, rho0)[None]])


def readings(probes: ProbeSet, step: int, values: np.ndarray) -> Readings:
    """The :class:`Readings` of ``probes`` at ``step`` from host PROBE_FIELDS ``values``
    (5, n) at :func:`probe_nodes`' nodes, NaN in solids."""
    out = Readings(step)
    n = len(probes.probes)
    for i, probe in enumerate(probes.probes):
        out.probes[probe.name] = {name: float(values[k, i]) for k, name in
                                  enumerate(PROBE_FIELDS)}
    for line in probes.lines:
        where = line_nodes(line)
        part = values[:, n:n + len(where)]
        n += len(where)
        distance = np.linalg.norm(where - where[0], axis=1).astype(float)
        out.lines[line.name] = {"s": distance, **{name: part[k] for k, name in
                                                  enumerate(PROBE_FIELDS)}}
    return out


def sample(sim: Any, probes: ProbeSet, reader: Any) -> Readings:
    """The :class:`Readings` of ``probes`` on a :class:`~solver.simulation.Simulation`'s
    current state, read through its :class:`~solver.readout.Readout`: only the nodes are
    reduced and only their values move (use :meth:`Simulation.sample`; a live view samples
    them with its cut, :meth:`Simulation.view`)."""
    nodes, _ = probe_nodes(probes, len(sim.shape))
    return readings(probes, sim.time_step, _node_values(sim, reader, nodes, ("probes", probes)))


def gather(sim: Any, reader: Any, nodes: np.ndarray, key: Any = None
           ) -> tuple[Any, Any, np.ndarray]:
    """Density (n,) and velocity (3, n) at voxel ``nodes`` (n, d) as backend arrays (zero
    velocity and rho0 in solids), and the host solid mask (n,). Only those nodes' populations
    are read, straight from the stored layout (:meth:`solver.readout.Readout.node_moments`,
    its index remembered under ``key``): nothing but the gathered values is made."""
    xp = sim.backend.xp
    flat, solid, fluid = _located(sim, reader, nodes, key)
    rho_nodes, u_nodes = reader.node_moments(flat, solid, key)
    rho = xp.where(fluid, rho_nodes, float(sim.config.initial_density))
    u = xp.zeros((3, len(nodes)))
    u[: u_nodes.shape[0]] = xp.where(fluid, u_nodes, 0.0)
    return rho, u, solid


def _located(sim: Any, reader: Any, nodes: np.ndarray, key: Any) -> tuple:
    """:func:`node_flat` of ``nodes`` and the backend fluid mask, made once per ``key``
    (None: every time)."""
    def make() -> tuple:
        flat, solid = node_flat(sim.tiling, nodes)
        return flat, solid, sim.backend.xp.asarray(~solid)

    return make() if key is None else reader.memo(("located", key), make)


def _node_values(sim: Any, reader: Any, nodes: np.ndarray, key: Any = None) -> np.ndarray:
    """PROBE_FIELDS (len, n) at voxel ``nodes`` (n, d), host float64, NaN in solids."""
    flat, solid, _ = _located(sim, reader, nodes, key)
    rho, u = reader.node_moments(flat, solid, key)
    values = node_values(rho, u, sim.config.initial_density, sim.backend.xp)
    out = np.array(sim.backend.to_host(values), dtype=np.float64)
    out[:, solid] = np.nan
    return out


#: CSV column suffix per PROBE_FIELDS name in SI (``lu`` marks lattice units).
_SI_SUFFIX = {"ux": "m_s", "uy": "m_s", "uz": "m_s", "umag": "m_s", "pressure": "Pa"}


def _suffix(name: str, units: Any) -> str:
    return _SI_SUFFIX[name] if units is not None else "lu"


def _factor(name: str, units: Any) -> float:
    from .flow_fields import FIELDS

    return 1.0 if units is None else FIELDS[name].si_factor(units)


def probe_columns(probes: ProbeSet, units: Any) -> list[str]:
    """CSV columns of the probes' time series: step, time (s, with units), then
    ``<probe>_<field>_<unit>`` per probe and PROBE_FIELDS name (SI; ``lu`` without units)."""
    return ["step", "time_s", *(f"{p.name}_{f}_{_suffix(f, units)}" for p in probes.probes
                                for f in PROBE_FIELDS)]


def probe_row(readings: Readings, units: Any) -> dict[str, Any]:
    """One row of :func:`probe_columns` (SI with ``units``, a UnitSystem, else lattice)."""
    row: dict[str, Any] = {"step": readings.step,
                           "time_s": None if units is None else units.time_to_si(readings.step)}
    for name, values in readings.probes.items():
        for f in PROBE_FIELDS:
            value = values[f] * _factor(f, units)
            row[f"{name}_{f}_{_suffix(f, units)}"] = value if np.isfinite(value) else None
    return row


def line_columns(units: Any) -> list[str]:
    """CSV columns of the lines' profiles: one row per line node and output step."""
    length = "s_m" if units is not None else "s_lu"
    return ["step", "line", length, *(f"{f}_{_suffix(f, units)}" for f in PROBE_FIELDS)]


def line_rows(readings: Readings, units: Any) -> list[dict[str, Any]]:
    """Rows of :func:`line_columns`: every node of every line at ``readings.step``."""
    rows = []
    length = "s_m" if units is not None else "s_lu"
    for name, profile in readings.lines.items():
        for i, s in enumerate(profile["s"]):
            row = {"step": readings.step, "line": name,
                   length: float(s) * (units.dx if units is not None else 1.0)}
            for f in PROBE_FIELDS:
                value = float(profile[f][i]) * _factor(f, units)
                row[f"{f}_{_suffix(f, units)}"] = value if np.isfinite(value) else None
            rows.append(row)
    return rows


def probe_set_from_specs(probes: Any, lines: Any, source: str = "case") -> ProbeSet:
    """A :class:`ProbeSet` from a case's ``probes:`` (``[{name, at: [i, j, k]}]``) and
    ``lines:`` (``[{name, from: [...], to: [...]}]``) entries, voxel indices; ValueError
    saying what is wrong."""
    def point(entry: dict, key: str, what: str) -> tuple[int, ...]:
        value = entry.get(key)
        if (not isinstance(value, list | tuple) or len(value) not in (2, 3)
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
            raise ValueError(f"{source}: {what} needs `{key}: [i, j, k]`, voxel indices "
                             f"(whole numbers), got {value!r}.")
        return tuple(int(v) for v in value)

    def entries(items: Any, what: str, keys: tuple[str, ...]) -> list[dict]:
        if items is None:
            return []
        if not isinstance(items, list):
            raise ValueError(f"{source}: `{what}` must be a list of mappings with the keys "
                             f"{list(keys)}.")
        for k, item in enumerate(items):
            if not isinstance(item, dict) or set(item) - set(keys):
                raise ValueError(f"{source}: {what} entry {k + 1} must be a mapping with the "
                                 f"keys {list(keys)}, got {item!r}.")
        return items

    made_probes = tuple(
        Probe(str(e.get("name") or f"probe{k + 1}"), point(e, "at", f"probe {k + 1}"))
        for k, e in enumerate(entries(probes, "probes", ("name", "at"))))
    made_lines = tuple(
        Line(str(e.get("name") or f"line{k + 1}"), point(e, "from", f"line {k + 1}"),
             point(e, "to", f"line {k + 1}"))
        for k, e in enumerate(entries(lines, "lines", ("name", "from", "to"))))
    return ProbeSet(made_probes, made_lines)


def probe_specs(probes: ProbeSet) -> dict[str, list[dict]]:
    """The ``probes:`` and ``lines:`` case entries of a :class:`ProbeSet` (inverse of
    :func:`probe_set_from_specs`; empty sections left out)."""
    out: dict[str, list[dict]] = {}
    if probes.probes:
        out["probes"] = [{"name": p.name, "at": list(p.point)} for p in probes.probes]
    if probes.lines:
        out["lines"] = [{"name": ln.name, "from": list(ln.start), "to": list(ln.end)}
                        for ln in probes.lines]
    return out
