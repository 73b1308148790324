"""Flow through the openings next to the counters: flow rate per opening, pressure drop, mass
balance, in SI, live from the snapshots (:attr:`solver.snapshot.Snapshot.openings`). In a
pulsatile run (a waveform inlet) each opening's card also plots its flow rate over the current
heart cycle against the last one (:attr:`solver.snapshot.Snapshot.cycle`), and a card says how
many cycles ran and how far the last two differ (the periodic convergence).

Hidden while the run has no driven opening (a body-force run, or every opening closed). The SI
values use the Physics tab's units (:class:`~app.views.physics_panel.PhysicalSetup`) at the
run's τ, the same conversion as the openings table.
"""

from __future__ import annotations

import html

import numpy as np
import panel as pn

from solver.opening_kinds import DENSITY, SPEED
from solver.snapshot import Snapshot
from solver.units import UnitSystem

from ..controller import Controller
from ..openings import KIND_LABELS, drives, flow_rate_text, quantity
from .counters import CARD_CSS
from .physics_panel import PhysicalSetup

__all__ = ["OpeningFlowsView", "flow_cards", "cycle_plots"]

#: Size (px) of a card's cycle plot.
PLOT_WIDTH, PLOT_HEIGHT = 120, 34


def _flow_text(q: float, units: UnitSystem, ndim: int) -> str:
    """A lattice flow rate in SI (per unit depth in 2D)."""
    if ndim == 2:
        return f"{q * units.dx**2 / units.dt:.3g} m²/s"
    return flow_rate_text(units.flow_rate_to_si(q))


def flow_cards(snap: Snapshot, units: UnitSystem) -> list[tuple[str, str, str, str]]:
    """(key, label, value, detail) per driven opening, then the pressure drop and the mass
    balance; empty without a driven opening."""
    driven = [o for o in snap.openings if drives(o.kind)]
    if not driven:
        return []
    rho0 = float(snap.config.get("initial_density", 1.0))
    ndim = len(snap.shape) or 3
    cards = []
    for o in driven:
        pressure = units.pressure_to_si(o.mean_density - rho0)
        direction = "in" if o.flow_rate >= 0 else "out"
        cards.append((f"opening-{o.id}", f"Opening {o.id} · {_role(o.kind)}",
                      _flow_text(abs(o.flow_rate), units, ndim),
                      f"{direction} · p {pressure:.3g} Pa"))
    inlets = [o for o in driven if quantity(o.kind) == SPEED]
    outlets = [o for o in driven if quantity(o.kind) != SPEED]
    if inlets and outlets:
        drop = units.pressure_to_si(float(np.mean([o.mean_density for o in inlets]))
                                    - float(np.mean([o.mean_density for o in outlets])))
        cards.append(("pressure-drop", "Pressure drop", f"{drop:.3g} Pa",
                      f"inlet {_ids(inlets)} − outlet {_ids(outlets)}, mean p"))
    balance = snap.mass_balance
    cards.append(("mass-balance", "Mass balance",
                  "—" if balance is None or not np.isfinite(balance) else f"{100 * balance:.2f} %",
                  "net flow / inflow (0 at steady state)"))
    view = snap.cycle
    if view is not None:  # a pulsatile run: periodic convergence instead of a steady state
        change = "—" if view.change is None else f"{100 * view.change:.2g} %"
        cards.append(("heart-cycle", "Heart cycle", f"{view.cycles} done",
                      f"change {change}" + (" · periodic" if view.periodic else "")))
    elif snap.steady_label:  # the run monitor's verdict (solver.monitor.FlowConvergence)
        cards.append(("steady-state", "Steady state", "converged" if snap.steady else "not yet",
                      snap.steady_label))
    return cards


def cycle_plots(snap: Snapshot) -> dict[str, str]:
    """Card key -> an SVG of the opening's flow rate over the heart cycle in progress (solid)
    against the last whole one (dashed); empty for a steady run."""
    view = snap.cycle
    if view is None:
        return {}
    plots = {}
    for j, oid in enumerate(view.ids):
        last = None if view.last is None else view.last[:, j]
        current = view.current[:, j]
        values = np.concatenate([v for v in (last, current) if v is not None and v.size])
        if not values.size:
            continue
        low, high = float(values.min()), float(values.max())
        span = high - low or 1.0
        lines = []
        for series, style in ((last, 'stroke="#999" stroke-dasharray="3 2"'),
                              (current, 'stroke="#1f77b4"')):
            if series is None or series.size < 2:
                continue
            points = " ".join(
                f"{PLOT_WIDTH * (k + 1) / view.samples:.1f},"
                f"{PLOT_HEIGHT - 2 - (PLOT_HEIGHT - 4) * (v - low) / span:.1f}"
                for k, v in enumerate(series))
            lines.append(f'<polyline fill="none" stroke-width="1.5" {style} '
                         f'points="{points}"/>')
        plots[f"opening-{oid}"] = (
            f'<svg class="cycle-plot" data-opening="{oid}" width="{PLOT_WIDTH}" '
            f'height="{PLOT_HEIGHT}" viewBox="0 0 {PLOT_WIDTH} {PLOT_HEIGHT}">'
            f'<title>flow over this cycle (solid) and the last (dashed)</title>'
            f'{"".join(lines)}</svg>')
    return plots


def _role(kind: str) -> str:
    """What an opening of ``kind`` is in a card: inlet (a set speed), outlet (a set pressure)
    or outflow (neither)."""
    return {SPEED: "inlet", DENSITY: "outlet"}.get(quantity(kind), KIND_LABELS.get(kind, kind))


def _ids(openings) -> str:
    return ", ".join(str(o.id) for o in openings)


class OpeningFlowsView(pn.viewable.Viewer):
    """A row of cards with the openings' flow, shown only for runs driven through openings."""

    def __init__(self, controller: Controller, setup: PhysicalSetup, **params) -> None:
        super().__init__(**params)
        self.controller, self.setup = controller, setup
        # Fixed height and visibility switched only on change: no re-layout per snapshot.
        self.pane = pn.pane.HTML("", stylesheets=[CARD_CSS], sizing_mode="stretch_width",
                                 height=84, visible=False, css_classes=["opening-flows"])
        controller.param.watch(self._update, "snapshot")
        self._update()

    def _update(self, *events) -> None:
        snap = self.controller.snapshot
        tau = float(snap.config.get("tau", self.controller.config.tau))
        cards = flow_cards(snap, self.setup.units(tau, self.controller.geometry.voxel_size))
        plots = cycle_plots(snap)
        height = 84 + (PLOT_HEIGHT + 4 if plots else 0)
        if self.pane.height != height:
            self.pane.height = height
        if cards:
            self.pane.object = _cards_html(cards, plots)
        if self.pane.visible != bool(cards):
            self.pane.visible = bool(cards)

    def __panel__(self) -> pn.viewable.Viewable:
        return self.pane


def _cards_html(cards: list[tuple[str, str, str, str]], plots: dict[str, str] | None = None
                ) -> str:
    plots = plots or {}
    parts = [f'<div class="card" data-counter="{html.escape(key)}"><div class="label">'
             f'{html.escape(label)}</div><div class="value">{html.escape(value)}</div>'
             f'<div class="sub">{html.escape(detail)}</div>{plots.get(key, "")}</div>'
             for key, label, value, detail in cards]
    return f'<div class="cards">{"".join(parts)}</div>'
