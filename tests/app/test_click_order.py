"""Issue 31 item 13: after any burst of run-button clicks the run ends in the last click's
state within a second of the runner's queue draining, and the status bar never contradicts the
card (it said "Reset to rest" while the card read "running at step 10")."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from app.controller import Controller
from app.views.run_buttons import RunButtons
from geometries import VoxelGeometry
from solver.config import SimulationConfig

pytestmark = pytest.mark.timeout(120)

#: The state each click leaves the run in, and what its status-bar text claims.
_LEAVES = {"Start": "running", "Pause": "paused", "Step ×10": "paused", "Reset": "paused"}
_CLAIMS = {"Running": "running", "Paused": "paused", "Stepped": "paused",
           "Reset to rest": "paused"}


@pytest.fixture
def controller():
    solid = np.zeros((24, 10), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    config = SimulationConfig(lattice="D2Q9", backend="numpy", body_force=(1e-6, 0.0, 0.0))
    c = Controller(VoxelGeometry(solid, voxel_size=1e-6), config, autostart=False)
    c.runner.wait_for(lambda s: s.status == "paused", 60)
    yield c
    c.close()


def claimed(status: str) -> str | None:
    """The run state a status-bar text claims (None: it claims none, e.g. "Resetting…")."""
    for prefix, state in _CLAIMS.items():
        if status.startswith(prefix):
            return state
    head, dot, _ = status.partition(" · ")  # a runner state, as poll shows it
    return head.lower() if dot else None


def check_consistent(c: Controller) -> None:
    state = claimed(c.status)
    assert state is None or state == c.snapshot.status, (c.status, c.snapshot.status,
                                                         c.snapshot.step)


def settle(c: Controller) -> None:
    """Poll until the runner has applied every command, then at most one second more."""
    deadline = time.monotonic() + 60
    while c.runner.snapshot().applied < c.runner.sent:
        assert time.monotonic() < deadline, "the runner did not drain its queue"
        c.poll()
        check_consistent(c)
        time.sleep(0.01)
    drained = time.monotonic()
    while time.monotonic() - drained < 1.0:
        c.poll()
        check_consistent(c)
        time.sleep(0.02)


def test_reset_while_running_never_shows_reset_beside_a_running_card(controller):
    c = controller
    c.start()
    c.runner.wait_for(lambda s: s.status == "running" and s.step > 0, 60)
    c.poll()
    check_consistent(c)
    c.reset()
    check_consistent(c)  # before the fix: "Reset to rest" beside the card's "running"
    settle(c)
    assert (c.snapshot.status, c.snapshot.step) == ("paused", 0)
    assert c.status.startswith("Reset to rest")


@pytest.mark.parametrize("seed", range(6))
def test_any_burst_ends_in_the_last_clicks_state(controller, seed):
    c = controller
    rng = random.Random(seed)
    buttons = RunButtons(actions={
        "Start": ("success", c.start), "Pause": ("warning", c.pause),
        "Step ×10": ("primary", lambda: c.step(10)), "Reset": ("danger", c.reset)})
    clicks = [rng.choice(list(_LEAVES)) for _ in range(rng.randint(6, 16))]
    sent: list[tuple[int, str]] = []
    for label in clicks:
        sent.append((len(sent) + 1, label))
        buttons.send(*sent[-rng.randint(1, 3):])  # merged deliveries, as a busy server gets
        check_consistent(c)
        if rng.random() < 0.3:
            c.poll()
            check_consistent(c)
    settle(c)
    assert c.snapshot.status == _LEAVES[clicks[-1]], clicks
    assert claimed(c.status) == _LEAVES[clicks[-1]], (clicks, c.status)
    if clicks[-1] == "Reset":
        assert c.snapshot.step == 0
