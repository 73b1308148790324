"""The turns of pytest-xdist workers (tests/conftest.py): a test that runs alone waits for the
test another worker is running, and the other worker's next test waits for it."""

from __future__ import annotations

import threading
import time

import pytest

from tests.conftest import WorkerTurns, fcntl

pytestmark = pytest.mark.skipif(fcntl is None, reason="no flock(2) on this platform")


def test_a_test_that_runs_alone_waits_and_then_goes_before_new_tests(tmp_path):
    # Two workers are two open file descriptions of the same files (flock is per description).
    running, alone = WorkerTurns(tmp_path / "run"), WorkerTurns(tmp_path / "run")
    events: list[str] = []

    def run_alone() -> None:
        alone.take(alone=True)
        events.append("alone starts")
        alone.take(alone=True)  # the next test runs alone too: the turn is kept
        time.sleep(0.3)
        events.append("alone ends")
        alone.give_back()

    running.take(alone=False)
    thread = threading.Thread(target=run_alone)
    thread.start()
    time.sleep(0.3)
    assert events == [], "a test that runs alone must wait for the running test"
    running.give_back()
    running.take(alone=False)  # the next test of the other worker
    events.append("next test starts")
    running.give_back()
    thread.join(timeout=10)
    assert events == ["alone starts", "alone ends", "next test starts"]


def test_tests_that_do_not_run_alone_share_the_machine(tmp_path):
    first, second = WorkerTurns(tmp_path / "run"), WorkerTurns(tmp_path / "run")
    first.take(alone=False)
    done = threading.Event()
    thread = threading.Thread(target=lambda: (second.take(alone=False), done.set()))
    thread.start()
    assert done.wait(timeout=10), "two ordinary tests must run at the same time"
    second.give_back()
    first.give_back()
    thread.join(timeout=10)
