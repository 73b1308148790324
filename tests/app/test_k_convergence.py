"""The dashboard shows the run monitor's convergence of k and never labels a negative or
unconverged k as the answer (issue 17 B9, issue 19 item 3)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.dashboard import Dashboard
from app.views.counters import counter_cards
from geometries import generators
from solver.config import SimulationConfig

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def board():
    pack = generators.random_sphere_pack((16,) * 3, porosity=0.6, diameter=6, seed=2)
    board = Dashboard(pack, SimulationConfig(backend="numpy", body_force=(2e-5, 0, 0)),
                      refresh=False)
    yield board
    board.close()


def test_negative_k_is_not_labelled_darcy_and_the_cards_show_the_flag(board):
    c = board.controller
    c.runner.step(3)
    snap = c.runner.wait_for(lambda s: s.step >= 3 and s.permeability is not None, 60)
    assert not snap.k_answer and snap.k_label.startswith("not converged yet")
    cards = {key: (value, detail) for key, _, value, detail in counter_cards(snap)}
    assert cards["k"] == ("measuring", "needs 1000 steps of history")

    c.snapshot = replace(snap, seq=snap.seq + 1, permeability=-abs(snap.permeability),
                         mean_velocity=tuple(-v for v in snap.mean_velocity), k_change=2e-3,
                         k_converged=False, steps_to_converge=4200, k_answer=False,
                         k_label="negative permeability: the mean flow runs against the drive")
    board.physics._refresh_measured()
    measured = board.physics.measured.object
    assert "Darcy's law applies" not in measured
    assert "not the answer" in measured and "negative permeability" in measured
    assert "about 4,200 more steps" in measured
    cards = {key: (value, detail) for key, _, value, detail in counter_cards(c.snapshot)}
    assert cards["k"] == ("not converged", "k changes 0.2 % / 1000 steps · ~4,200 steps to go")
