"""Many steps of one rank as replays of a captured multi-step graph (NCCL transport on GPUs).

With the NCCL transport a rank's step never waits on the host, so a run of ``n`` steps can be
captured once and replayed: :class:`StepGraphs` asks the stepper to capture
:data:`STEPS_PER_GRAPH` steps (an even number, so the two copies end where they began) into one
graph (``stepper.capture_steps(run)``: the stepper records what ``run`` enqueues on its
streams, NCCL's grouped send/recv included, and runs nothing) and replays it
(``stepper.replay(graph)``) instead of launching every kernel from Python. The host transport
waits on the host inside each step (MPI), so it cannot be captured and keeps plain steps.

A graph reads and writes fixed copies: it is captured for the copy that is current when the
capture starts (its *parity*) and replays only from that copy. :func:`plan_steps` splits ``n``
steps into plain steps before, replays, and plain steps after:

- the first step of a rank is plain: NCCL connects a pair of peers on their first exchange,
  which must not happen inside a capture;
- a replay starts from the parity of an existing graph: when only the other parity has one,
  one plain step aligns the copies instead of capturing a second graph;
- runs shorter than a graph stay plain.

Every rank computes the same plan from the same ``n`` and the same history, so the sequence of
NCCL operations (plain or inside a replay) is the same on every rank. If a capture fails, the
stepper's error is logged once, graphs stay off for this rank, and the planned steps run plain:
the NCCL operations are the same, only launched one by one.

Replays are opt-in (``DistributedBackend(graphs=True)``, ``--graphs``): on 2 x H200 they cut
rank 0's host time per step from about 0.11 to 0.02 ms but made the step about 12 us longer
(weak scaling 192^2 x 96 per rank: 0.150 -> 0.162 ms fp32): the host was not what limited
it, and, likely, a graph runs every kernel at the priority of the stream it is launched into
(CuPy instantiates without ``cudaGraphInstantiateFlagUseNodePriority``), so the boundary tiles
lose the comm stream's priority (``benchmarks/scaling/README.md``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

__all__ = ["STEPS_PER_GRAPH", "ReplayPlan", "plan_steps", "StepGraphs"]

log = logging.getLogger(__name__)

#: Steps per captured graph (even: the copies end where they began).
STEPS_PER_GRAPH = 16


@dataclass(frozen=True)
class ReplayPlan:
    """How ``n`` steps run: ``before`` plain steps, then (capturing a graph for ``parity``
    first when ``capture``) ``replays`` replays of ``steps_per_graph`` steps, then ``after``
    plain steps."""

    before: int
    replays: int
    after: int
    parity: int | None = None
    capture: bool = False
    steps_per_graph: int = STEPS_PER_GRAPH

    @property
    def steps(self) -> int:
        """Time steps the plan advances."""
        return self.before + self.replays * self.steps_per_graph + self.after


def plan_steps(n: int, current: int, graphs: Collection[int], warm: bool,
               steps_per_graph: int = STEPS_PER_GRAPH) -> ReplayPlan:
    """The plan for ``n`` steps from copy ``current`` (0 or 1), given the parities that have a
    graph already and whether this rank has stepped before (see the module docstring)."""
    if n < 0 or current not in (0, 1):
        raise ValueError(f"plan_steps needs n >= 0 and current 0 or 1, got {n}, {current}.")
    if steps_per_graph < 2 or steps_per_graph % 2:
        raise ValueError(f"A graph holds an even number of steps (>= 2), not {steps_per_graph}: "
                         "the copies must end where they began.")
    before = 0 if warm else 1
    parity = (current + before) % 2
    if parity not in graphs and 1 - parity in graphs:
        before, parity = before + 1, 1 - parity  # one plain step beats a second capture
    replays = max(n - before, 0) // steps_per_graph
    if replays == 0:
        return ReplayPlan(before=0, replays=0, after=n, steps_per_graph=steps_per_graph)
    return ReplayPlan(before=before, replays=replays,
                      after=n - before - replays * steps_per_graph, parity=parity,
                      capture=parity not in graphs, steps_per_graph=steps_per_graph)


class StepGraphs:
    """Captured multi-step graphs of one rank's stepper, replayed for long runs.

    ``stepper`` provides ``state.current``, ``capture_steps(run)`` and ``replay(graph)``
    (:class:`~solver.backends.cuda.phases.CupyPhases`). :attr:`counts` adds up the plain
    steps, replayed steps and captures; :attr:`enabled` switches replays on and off (plain
    steps only).
    """

    def __init__(self, stepper: Any, steps_per_graph: int = STEPS_PER_GRAPH,
                 enabled: bool = True) -> None:
        self.stepper = stepper
        self.steps_per_graph = steps_per_graph
        self.enabled = enabled
        self.failed = False
        self.warm = False
        self.graphs: dict[int, Any] = {}
        self.counts: Counter[str] = Counter()
        #: Host seconds spent capturing and launching replays.
        self.host_seconds: Counter[str] = Counter()

    def plan(self, n: int) -> ReplayPlan:
        """The plan :meth:`run` follows for ``n`` steps now."""
        if not self.enabled or self.failed:
            return ReplayPlan(before=0, replays=0, after=n, steps_per_graph=self.steps_per_graph)
        return plan_steps(n, self.stepper.state.current, self.graphs.keys(), self.warm,
                          self.steps_per_graph)

    def run(self, n: int, step: Callable[[], None]) -> None:
        """Advance ``n`` steps: plain ones by calling ``step`` (one step each), the rest as
        replays; returns once they are queued (the caller waits for the device)."""
        plan = self.plan(n)
        self._plain(plan.before, step)
        graph = self._graph(plan, step) if plan.replays else None
        replays = plan.replays if graph is not None else 0
        if replays:
            t0 = time.perf_counter()
            for _ in range(replays):
                self.stepper.replay(graph)
            self.host_seconds["replay"] += time.perf_counter() - t0
            self.counts["replayed"] += replays * plan.steps_per_graph
        self._plain(n - plan.before - replays * plan.steps_per_graph, step)

    def _plain(self, n: int, step: Callable[[], None]) -> None:
        for _ in range(n):
            step()
        if n:
            self.warm = True
            self.counts["plain"] += n

    def _graph(self, plan: ReplayPlan, step: Callable[[], None]) -> Any:
        if not plan.capture:
            return self.graphs[plan.parity]

        def run() -> None:
            for _ in range(plan.steps_per_graph):
                step()

        t0 = time.perf_counter()
        try:
            graph = self.stepper.capture_steps(run)
        except Exception as exc:  # capture unsupported here: plain steps from now on
            log.warning("Capturing %d distributed steps in a CUDA graph failed (%s: %s); "
                        "launching them one by one from now on.", plan.steps_per_graph,
                        exc.__class__.__name__, exc)
            self.failed = True
            return None
        finally:
            self.host_seconds["capture"] += time.perf_counter() - t0
        self.graphs[plan.parity] = graph
        self.counts["captures"] += 1
        return graph

    def clear(self) -> None:
        """Drop the graphs (before the state they replay on, or NCCL's communicator, goes)."""
        self.graphs.clear()
