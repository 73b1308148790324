"""Shared fixtures: the backend fixture, the visible skip of GPU tests without a GPU, and the
sharing of the machine between pytest-xdist workers (README's test command runs two).

README's command sends each test file to one worker (``--dist loadfile``: a module-scoped
fixture is built once). Under xdist, tests marked ``browser`` or ``serial`` run alone: they
measure wall-clock time, or run several processes (a served app and Chromium, MPI ranks) that a
second busy worker would starve on a 2-core machine. Before such a test the other workers
finish the test they are running and wait; consecutive tests that run alone keep the turn.
(``--dist loadgroup`` could send them all to one worker, but with pytest 9.2 it ignores the
groups: pytest-xdist issue 1386.)
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import IO

import pytest

from solver.backends import gpu_available

try:
    import fcntl
except ImportError:  # no flock (Windows): workers do not wait for each other
    fcntl = None

RUNS_ALONE = ("browser", "serial")


def runs_alone(item: pytest.Item) -> bool:
    """Whether no other test may run while ``item`` runs."""
    return any(item.get_closest_marker(name) for name in RUNS_ALONE)


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``gpu`` with the reason the CuPy backend cannot run here."""
    ok, why = gpu_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"GPU test skipped: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class WorkerTurns:
    """Two flock(2) files shared by the workers of one run: ``turn`` is held shared by each
    running test and exclusively by a block of tests that run alone; ``gate`` makes a waiting
    block go first (the other workers queue behind it instead of starting new tests)."""

    def __init__(self, prefix: Path):
        self._paths = [Path(f"{prefix}.gate"), Path(f"{prefix}.turn")]
        self._gate: IO[bytes] = self._paths[0].open("ab")  # noqa: SIM115 (held for the run)
        self._turn: IO[bytes] = self._paths[1].open("ab")  # noqa: SIM115
        self.held: str | None = None

    def take(self, alone: bool) -> None:
        """Wait for a turn: alone (no other test runs) or shared."""
        want = "alone" if alone else "shared"
        if self.held == want == "alone":
            return
        self.give_back()
        if alone:
            fcntl.flock(self._gate, fcntl.LOCK_EX)
            fcntl.flock(self._turn, fcntl.LOCK_EX)
        else:
            fcntl.flock(self._gate, fcntl.LOCK_SH)
            fcntl.flock(self._turn, fcntl.LOCK_SH)
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        self.held = want

    def give_back(self) -> None:
        """End this worker's turn."""
        if self.held is None:
            return
        fcntl.flock(self._turn, fcntl.LOCK_UN)
        if self.held == "alone":
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        self.held = None

    def close(self) -> None:
        """At the end of the run: no worker opens the files any more (each opened them before
        its first test), so the first to finish removes them."""
        self.give_back()
        self._gate.close()
        self._turn.close()
        for path in self._paths:
            path.unlink(missing_ok=True)


_turns: list[WorkerTurns] = []


def _worker_turns() -> WorkerTurns | None:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if fcntl is None or not run or not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    if not _turns:
        _turns.append(WorkerTurns(Path(tempfile.gettempdir()) / f"porous-lbm-tests-{run}"))
    return _turns[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist, run ``item`` in its turn; a block of tests that run alone keeps its turn
    from its first test to its last."""
    turns = _worker_turns()
    if turns is None:
        return (yield)
    alone = runs_alone(item)
    turns.take(alone)
    try:
        return (yield)
    finally:
        if not (alone and nextitem is not None and runs_alone(nextitem)):
            turns.give_back()


def pytest_sessionfinish(session, exitstatus):
    """Remove this run's turn files."""
    while _turns:
        _turns.pop().close()


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def backend_name(request) -> str:
    """Every physics test runs on the NumPy reference and, on a GPU machine, on CuPy."""
    return request.param
