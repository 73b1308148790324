"""Observables of a flow through openings: flow rate and mean density per opening, pressure
drop between openings and mass balance (lattice units; SI through :mod:`solver.units`).

The flow rate of a driven opening is exact: the sum over its links of what the opening pass
(:mod:`solver.iolets`) added in the last step, divided by the reference density. The mean
density is the plain mean over the opening's nodes (pressure = density / 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["OpeningFlow", "opening_flows", "mean_densities", "opening_nodes", "mass_balance",
           "pressure_drop", "opening_columns", "opening_row"]


@dataclass(frozen=True)
class OpeningFlow:
    """Flow through one opening at one step (lattice units): its id and kind, the volumetric
    flow rate into the fluid (nodes^3 per step, negative = leaving) and the mean density on its
    nodes (pressure = density / 3)."""

    id: int
    kind: str
    flow_rate: float
    mean_density: float


def opening_flows(problem: Any, flux: np.ndarray | None, densities: dict[int, float]
                     ) -> tuple[OpeningFlow, ...]:
    """Readings of every opening listed in the config (closed ones have flow 0), by id.

    ``flux``: the per-link mass flux of the last step (None before the first one);
    ``densities``: mean density per opening id.
    """
    flows = flow_rates(problem, flux)
    return tuple(
        OpeningFlow(oid, cond.kind, flows[oid], float(densities.get(oid, float("nan"))))
        for oid, cond in sorted(problem.opening_conditions.items()))


def flow_rates(problem: Any, flux: np.ndarray | None) -> dict[int, float]:
    """Flow rate (lattice units, into the fluid > 0) of every opening listed in the config, by
    id, from the per-link ``flux`` of the last step (0 for closed openings and before a step)."""
    tables = problem.iolets
    flows = {}
    if tables is not None and flux is not None:
        flows = dict(zip(tables.ids, tables.flows(flux).tolist(), strict=True))
    return {oid: float(flows.get(oid, 0.0)) for oid in problem.opening_conditions}


def opening_nodes(problem: Any, xp: Any = np) -> tuple[np.ndarray, dict[int, tuple[Any, Any]]]:
    """The tiles holding the listed openings' nodes (host int64, ascending) and, per opening,
    backend index arrays (position in those tiles, node) of its nodes, made once per run: a
    readout reads those tiles alone (``backend.device_populations(state, tiles)``)."""
    tables = problem.iolets
    kept = {} if tables is None else {oid: (np.asarray(t, np.int64), node) for oid, (t, node)
                                      in tables.mean_nodes.items() if len(t)}
    tiles = np.unique(np.concatenate([t for t, _ in kept.values()])) if kept else \
        np.zeros(0, np.int64)
    return tiles, {oid: (xp.asarray(np.searchsorted(tiles, t)), xp.asarray(node))
                   for oid, (t, node) in kept.items()}


def mean_densities(nodes: dict[int, tuple[Any, Any]], populations: Any) -> dict[int, Any]:
    """Mean density on each opening's ``nodes`` (:func:`opening_nodes`) from the backend's
    populations (n, q, a^d) of the openings' tiles (device scalars: the caller moves them to
    the host)."""
    return {oid: populations[tile, :, node].sum(axis=1).mean()
            for oid, (tile, node) in nodes.items()}


def mass_balance(readings: Sequence[Any]) -> float | None:
    """Net flow over inflow through the openings (0 when what enters leaves); None without
    inflow."""
    rates = [r.flow_rate for r in readings]
    inflow = sum(q for q in rates if q > 0)
    if not inflow > 0:
        return None
    return float(sum(rates) / inflow)


def pressure_drop(readings: Sequence[Any]) -> float | None:
    """Largest minus smallest mean density over the openings (lattice density units; times
    1/3 for lattice pressure); None with fewer than two openings."""
    rho = [r.mean_density for r in readings if np.isfinite(r.mean_density)]
    if len(rho) < 2:
        return None
    return float(max(rho) - min(rho))


def opening_columns(ids: Sequence[int]) -> list[str]:
    """CSV columns of the openings ``ids``: flow rate (lattice, m^3/s), pressure (Pa), then
    mass balance and pressure drop (Pa)."""
    cols = []
    for oid in ids:
        cols += [f"q{oid}", f"q{oid}_m3_s", f"p{oid}_Pa"]
    return [*cols, "mass_balance", "pressure_drop_Pa"] if cols else []


def opening_row(flows: Sequence[OpeningFlow], units: Any, rho0: float) -> dict[str, Any]:
    """One CSV row (and summary entries) of the openings' flows; SI values None without
    ``units`` (:class:`solver.units.UnitSystem`); pressures relative to ``rho0``."""
    row: dict[str, Any] = {}
    for f in flows:
        row[f"q{f.id}"] = f.flow_rate
        row[f"q{f.id}_m3_s"] = None if units is None else units.flow_rate_to_si(f.flow_rate)
        row[f"p{f.id}_Pa"] = (None if units is None or not np.isfinite(f.mean_density)
                              else units.pressure_to_si(f.mean_density - rho0))
    drop = pressure_drop(flows)
    row["mass_balance"] = mass_balance(flows)
    row["pressure_drop_Pa"] = None if units is None or drop is None else \
        units.pressure_to_si(drop)
    return row
