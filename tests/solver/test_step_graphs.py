"""Replaying captured multi-step graphs: the step-count bookkeeping, checked on the CPU.

:func:`~solver.distributed.replay.plan_steps` must advance exactly ``n`` steps, replay only
from the copy a graph was captured for, keep the first step of a rank plain (NCCL connects its
peers there) and align with one plain step rather than capture a second graph. End to end,
ranks on threads exchange halos through :class:`~solver.distributed.exchange.NcclExchange`
over a blocking loopback link (a receive waits for the peer's send, as in an NCCL group), and
their NumPy steppers stand in for a GPU capture: a "graph" is the closure of its steps, which
a replay calls. Runs of several lengths must then equal one process bit for bit. The real
capture runs in ``tests/solver/test_distributed_gpu.py`` (two GPUs).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import defaultdict

import numpy as np
import pytest

from solver.backends.numpy_backend import NumpyBackend
from solver.distributed import LoopbackHub, NcclExchange, NumpyPhases, RankSolver, decompose
from solver.distributed.__main__ import build_parser as distributed_parser
from solver.distributed.replay import STEPS_PER_GRAPH, ReplayPlan, StepGraphs, plan_steps
from solver.problem import Problem

from .test_distributed import config, noisy_start, porous, reference
from .test_halo_transport import _HostAsDevice

K = STEPS_PER_GRAPH


@pytest.mark.parametrize("n,current,graphs,warm,expected", [
    # first run of a rank: one plain step (NCCL connects), capture for the copy reached
    (20, 0, set(), False, ReplayPlan(1, 1, 3, parity=1, capture=True)),
    (1000, 0, {1}, True, ReplayPlan(1, 62, 7, parity=1)),  # align rather than capture
    (1000, 1, {1}, True, ReplayPlan(0, 62, 8, parity=1)),
    (1000, 0, {0, 1}, True, ReplayPlan(0, 62, 8, parity=0)),
    (40, 0, set(), True, ReplayPlan(0, 2, 8, parity=0, capture=True)),
    (K, 0, set(), False, ReplayPlan(0, 0, K)),  # too short once the first step is plain
    (K + 1, 0, set(), False, ReplayPlan(1, 1, 0, parity=1, capture=True)),
    (K, 0, {1}, True, ReplayPlan(0, 0, K)),  # aligning would leave too few steps
    (K - 1, 1, {1}, True, ReplayPlan(0, 0, K - 1)),
    (0, 0, {0}, True, ReplayPlan(0, 0, 0)),
])
def test_plans(n, current, graphs, warm, expected):
    assert plan_steps(n, current, graphs, warm) == expected


def test_every_plan_advances_exactly_n_steps_from_a_graphs_copy():
    for n in range(0, 3 * K + 3):
        for current in (0, 1):
            for graphs in (set(), {0}, {1}, {0, 1}):
                for warm in (False, True):
                    plan = plan_steps(n, current, graphs, warm)
                    assert plan.steps == n and plan.after >= 0 and plan.before <= 2
                    if not warm:
                        assert plan.before >= 1 or plan.replays == 0
                    if plan.replays:
                        assert plan.parity == (current + plan.before) % 2
                        assert plan.capture == (plan.parity not in graphs)
                        assert plan.after < K
                        assert not (plan.capture and graphs)  # never a second graph


def test_plan_refuses_an_odd_graph_and_bad_input():
    with pytest.raises(ValueError, match="even number"):
        plan_steps(10, 0, set(), True, steps_per_graph=3)
    with pytest.raises(ValueError, match="n >= 0"):
        plan_steps(-1, 0, set(), True)
    with pytest.raises(ValueError, match="current 0 or 1"):
        plan_steps(1, 2, set(), True)


# -- ranks on threads with a stand-in capture ----------------------------------------------------
class _BlockingNccl:
    """Per (source, destination) message queues; a receive waits for its message."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[tuple[int, int], queue.Queue] = defaultdict(queue.Queue)

    def _queue(self, key) -> queue.Queue:
        with self._lock:
            return self._queues[key]

    def link(self, rank: int):
        hub = self

        class Link:
            def exchange(self, send, recv, stream):
                for peer, buffer in send.items():
                    hub._queue((rank, peer)).put(buffer.copy())
                for peer, buffer in recv.items():
                    buffer[...] = hub._queue((peer, rank)).get(timeout=60)

        return Link()

    def empty(self) -> bool:
        return all(q.empty() for q in self._queues.values())


class _ClosureCapture:
    """A capturing stepper's interface over NumPy phases: a graph is its steps' closure."""

    def __init__(self, phases, fail: bool = False) -> None:
        self.state, self.fail = phases.state, fail

    def capture_steps(self, run):
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        return run  # the real capture enqueues ``run``'s work into a graph and runs nothing

    def replay(self, graph) -> None:
        graph()


def _threaded_ranks(n_ranks, fail=False, steps_per_graph=4):
    problem = Problem.from_config(porous(), config())
    f0 = noisy_start(problem)
    hub, dec = _BlockingNccl(), decompose(problem.tiling, n_ranks, 2)
    ranks = [RankSolver(problem, dec, r, NumpyBackend(threads=1),
                        lambda plan, s, r=r: NcclExchange(hub.link(r), plan, _HostAsDevice(s)))
             for r in range(n_ranks)]
    for rank in ranks:
        assert rank.graphs is None  # NumPy phases cannot capture ...
        rank.graphs = StepGraphs(_ClosureCapture(rank.stepper, fail), steps_per_graph)  # ... so
        rank.backend.set_populations(rank.state, f0[rank.layout.global_tiles])
    return problem, f0, hub, ranks


def _run_on_threads(ranks, calls) -> None:
    errors = []

    def work(rank):
        try:
            for n in calls:
                rank.step(n)
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(rank,)) for rank in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors


def _owned(ranks, shape) -> np.ndarray:
    got = np.full(shape, np.nan)
    for rank in ranks:
        got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
    return got


@pytest.mark.parametrize("n_ranks", [2, 3])
def test_replayed_runs_of_several_lengths_match_one_process_bitwise(n_ranks):
    calls = [3, 9, 6, 1, 12]  # plans with k = 4: plain; capture + 2; align + 1; plain; 3
    problem, f0, hub, ranks = _threaded_ranks(n_ranks)
    _run_on_threads(ranks, calls)
    expected = reference(porous(), config(), f0, sum(calls))
    assert np.array_equal(_owned(ranks, expected.shape), expected)
    assert hub.empty()
    for rank in ranks:
        assert dict(rank.graphs.counts) == {"plain": 7, "replayed": 24, "captures": 1}
        assert set(rank.graphs.graphs) == {1} and rank.state.current == sum(calls) % 2
        assert rank.host_seconds["replay"] > 0


def test_a_failed_capture_warns_once_and_steps_plain(caplog):
    calls = [9, 12]
    problem, f0, hub, ranks = _threaded_ranks(2, fail=True)
    with caplog.at_level(logging.WARNING, logger="solver.distributed.replay"):
        _run_on_threads(ranks, calls)
    expected = reference(porous(), config(), f0, sum(calls))
    assert np.array_equal(_owned(ranks, expected.shape), expected)
    assert len(caplog.records) == len(ranks)  # once per rank, not once per call
    assert "launching them one by one" in caplog.records[0].getMessage()
    for rank in ranks:
        assert rank.graphs.failed and dict(rank.graphs.counts) == {"plain": 21}


def test_disabled_graphs_step_plain_and_host_exchanges_never_capture():
    problem, f0, hub, ranks = _threaded_ranks(2)
    for rank in ranks:
        rank.graphs.enabled = False
    _run_on_threads(ranks, [20])
    assert all(dict(r.graphs.counts) == {"plain": 20} for r in ranks)
    dec, loop = decompose(problem.tiling, 2, 2), LoopbackHub()
    plain = RankSolver(problem, dec, 0, NumpyBackend(threads=1),
                       lambda plan, s: loop.exchange(0, plan, s))
    assert not plain.exchange.capturable and plain.graphs is None


def test_ranks_replay_only_when_asked_and_the_command_line_asks(monkeypatch):
    problem = Problem.from_config(porous(), config())
    dec, hub = decompose(problem.tiling, 2, 2), _BlockingNccl()
    monkeypatch.setattr(NumpyPhases, "replay", lambda self, graph: graph(), raising=False)
    for graphs in (False, True):
        rank = RankSolver(problem, dec, 0, NumpyBackend(threads=1),
                          lambda plan, s: NcclExchange(hub.link(0), plan, _HostAsDevice(s)),
                          graphs=graphs)
        assert rank.graphs is not None and rank.graphs.enabled is graphs
        assert rank.graphs.plan(40).replays == (2 if graphs else 0)
    args = distributed_parser().parse_args(["solid.npy", "--steps", "1", "19", "--graphs"])
    assert args.steps == [1, 19] and args.graphs
    assert not distributed_parser().parse_args(["solid.npy"]).graphs
