"""Flow through the openings next to the counters: flow rate per opening, pressure drop, mass
balance, in SI, live from the snapshots (:attr:`solver.snapshot.Snapshot.openings`).

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

__all__ = ["OpeningFlowsView", "flow_cards"]


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
    if snap.steady_label:  # the run monitor's verdict (solver.monitor.FlowConvergence)
        cards.append(("steady-state", "Steady state", "converged" if snap.steady else "not yet",
                      snap.steady_label))
    return cards


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
        if cards:
            self.pane.object = _cards_html(cards)
        if self.pane.visible != bool(cards):
            self.pane.visible = bool(cards)

    def __panel__(self) -> pn.viewable.Viewable:
        return self.pane


def _cards_html(cards: list[tuple[str, str, str, str]]) -> str:
    parts = [f'<div class="card" data-counter="{html.escape(key)}"><div class="label">'
             f'{html.escape(label)}</div><div class="value">{html.escape(value)}</div>'
             f'<div class="sub">{html.escape(detail)}</div></div>'
             for key, label, value, detail in cards]
    return f'<div class="cards">{"".join(parts)}</div>'
