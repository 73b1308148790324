"""The openings' flow next to the counters, from synthetic snapshots (#18 item 3)."""

from __future__ import annotations

import pytest

from app.dashboard import Dashboard
from app.views.opening_flows import flow_cards
from geometries import generators
from solver.config import SimulationConfig
from solver.snapshot import OpeningFlow, Snapshot
from solver.units import UnitSystem

pytestmark = pytest.mark.timeout(300)

UNITS = UnitSystem(dx=1e-4, dt=1e-3, density=1000.0)  # 1 node^3/step = 1e-9 m^3/s = 1 µL/s


def vessel_snapshot(seq: int = 1, closed: bool = False) -> Snapshot:
    flows = (OpeningFlow(1, "velocity", 2.0e3, 1.003),
             OpeningFlow(2, "closed" if closed else "pressure", -1.2e3, 1.0),
             OpeningFlow(3, "pressure", -0.79e3, 1.0))
    return Snapshot(seq=seq, step=100, shape=(20, 10, 10), openings=flows,
                    mass_balance=0.005, config={"tau": 0.8, "initial_density": 1.0})


def test_cards_give_flow_rates_pressure_drop_and_mass_balance_in_si():
    cards = {key: (label, value, detail) for key, label, value, detail
             in flow_cards(vessel_snapshot(), UNITS)}
    # 2000 nodes^3/step = 2e-6 m^3/s = 2 mL/s into the fluid.
    assert cards["opening-1"] == ("Opening 1 · inlet", "2 mL/s", "in · p 0.01 Pa")
    assert cards["opening-2"] == ("Opening 2 · outlet", "1.2 mL/s", "out · p 0 Pa")
    # p = c_s^2 (rho_in - rho_out) rho dx^2/dt^2 = 0.003 / 3 * 10 Pa = 0.01 Pa.
    assert cards["pressure-drop"][1:] == ("0.01 Pa", "inlet 1 − outlet 2, 3, mean p")
    assert cards["mass-balance"][1] == "0.50 %"


def test_no_cards_without_a_driven_opening():
    assert flow_cards(Snapshot(), UNITS) == []
    closed = Snapshot(openings=(OpeningFlow(1, "closed", 0.0, 1.0),))
    assert flow_cards(closed, UNITS) == []
    small = Snapshot(openings=(OpeningFlow(1, "velocity", 2.0, 1.0),), shape=(4, 4, 4))
    assert flow_cards(small, UNITS)[0][2] == "2 µL/s"


def test_the_dashboard_shows_them_next_to_the_counters_only_for_driven_runs():
    pack = generators.random_sphere_pack((16,) * 3, porosity=0.6, diameter=6, seed=2)
    board = Dashboard(pack, SimulationConfig(backend="numpy", body_force=(2e-5, 0, 0)),
                      refresh=False, autostart=False)
    try:
        flows = board.flows.pane
        assert not flows.visible  # a body-force run
        assert board.main.objects[0].objects == [board.counters.cards, flows]
        board.physics.setup.param.update(voxel_size_um=100.0, viscosity=1e-5)
        # tau 0.8: dt = 0.1 dx^2 / nu = 1e-4 s, so 1 node^3/step = 1e-8 m^3/s.
        board.controller.snapshot = vessel_snapshot()
        assert flows.visible
        assert 'data-counter="opening-1"' in flows.object and "20 mL/s" in flows.object
        assert 'data-counter="mass-balance"' in flows.object and "0.50 %" in flows.object
        board.controller.snapshot = Snapshot(seq=2)
        assert not flows.visible
    finally:
        board.close()


def test_the_steady_state_card_shows_the_monitors_verdict():
    from dataclasses import replace

    snap = replace(vessel_snapshot(), steady=True, steady_label="converged: the openings' ...")
    cards = {key: (value, detail) for key, _, value, detail in flow_cards(snap, UNITS)}
    assert cards["steady-state"] == ("converged", "converged: the openings' ...")
    assert "steady-state" not in {c[0] for c in flow_cards(vessel_snapshot(), UNITS)}


def test_a_pulsatile_run_plots_the_current_cycle_against_the_last():
    import dataclasses
    import re

    import numpy as np

    from app.views.opening_flows import PLOT_HEIGHT, _cards_html, cycle_plots
    from solver.pulsatile import CycleView

    phase = np.arange(1, 9) / 8
    last = np.stack([2e3 + 1e3 * np.sin(2 * np.pi * phase), -2e3 + 0 * phase], axis=1)
    view = CycleView(ids=(1, 2), last=last, current=last[:3] * 1.1, samples=8, cycles=3,
                     change=0.004, periodic=True)
    snap = dataclasses.replace(vessel_snapshot(), cycle=view)
    cards = {key: rest for key, *rest in flow_cards(snap, UNITS)}
    assert cards["heart-cycle"] == ["Heart cycle", "3 done", "change 0.4 % · periodic"]
    assert "steady-state" not in cards  # a pulsatile flow is judged periodic, never steady
    plots = cycle_plots(snap)
    assert set(plots) == {"opening-1", "opening-2"}
    dashed, solid = re.findall(r'points="([^"]+)"', plots["opening-1"])
    assert len(dashed.split()) == 8 and len(solid.split()) == 3  # last whole, current so far
    ys = [float(p.split(",")[1]) for p in dashed.split()]
    assert min(ys) >= 0 and max(ys) <= PLOT_HEIGHT  # inside the plot
    assert ys[1] < ys[5]  # the peak (phase 1/4) drawn above the trough (3/4): SVG y is down
    html = _cards_html(flow_cards(snap, UNITS), plots)
    assert html.count('class="cycle-plot"') == 2
    assert cycle_plots(vessel_snapshot()) == {}  # steady: no plots
