"""When the runner thread steps, publishes and checks the flow (wall-clock seconds).

:class:`Pacer` keeps three schedules for :class:`~solver.runner.SimulationRunner`:

- Chunks of about :data:`CHUNK_SECONDS` of steps, so that commands are answered quickly; a chunk
  grows at most twofold over the previous one, so one slow step cannot cause a long unresponsive
  chunk.
- Snapshots on a fixed-rate clock of period ``interval``, with at least three times the cost of
  a publish spent stepping between two (so publishing takes at most a quarter of the wall
  time). The chunk before a publish is shortened to end on time: publishing only at the end of
  whole chunks would stretch a 0.1 s period to three 35 ms chunks plus the publish, and a
  dashboard polling at 10 Hz would miss frames; on the clock it finds a new one at every poll.
- Health checks (moments of the whole state: NaN, peak speed, permeability) ride on a publish at
  most every ``max(interval, cost / HEALTH_SHARE)``, so they cost at most :data:`HEALTH_SHARE` of
  the wall time. The other publishes read only the slice's nodes.
"""

from __future__ import annotations

import math

__all__ = ["Pacer", "CHUNK_SECONDS", "SNAPSHOT_INTERVAL", "HEALTH_SHARE", "MAX_CHUNK"]

#: Default seconds between snapshots: the dashboard's 10 Hz refresh. Measured on an H100
#: (benchmarks/dashboard_cost/results/dashboard-cost-nvidia-h100-80gb-hbm3-2026-11-23.md): 0.1 s
#: gave 9.98 new frames per second at a 10 Hz consumer for 4.6 % of the headless MFLUPS; 0.08 s gave
#: 9.99 for 5.8 %, so the faster clock buys nothing the user sees.
SNAPSHOT_INTERVAL = 0.1
#: Wall time one chunk of steps should take, seconds.
CHUNK_SECONDS = 0.035
#: Largest fraction of the wall time health checks may take. A compact 256x256x128 run's check
#: took 91 ms on an H100 (benchmarks/results/dashboard-cost-nvidia-h100-80gb-hbm3-2026-11-28.md),
#: so 2 % was a fifth of the dashboard's 10 % budget; at 1 % a check as fast as that one
#: comes every 9 s, one of 20 ms every 2 s (the pace of the last good copy, solver.last_good).
HEALTH_SHARE = 0.01
#: Most steps in one chunk.
MAX_CHUNK = 100_000


class Pacer:
    """Chunk sizes, publish clock and health-check schedule of one runner (seconds)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.chunk = 1
        self._step_s = 0.0  # wall seconds per step, from the last chunk
        self._next = 0.0  # perf_counter time of the next publish
        self._publish_cost = 0.0
        self._health_at = -math.inf
        self._health_cost = 0.0

    def restart(self) -> None:
        """Forget the step rate (a new simulation): chunks start again from one step."""
        self.chunk, self._step_s = 1, 0.0

    def check_next(self) -> None:
        """Make the next publish carry a health check (a run just started)."""
        self._health_at = -math.inf

    def steps(self, now: float) -> int:
        """Steps of the next chunk: a full chunk, or fewer so that it ends when a publish is due."""
        if self._step_s <= 0.0:
            return self.chunk
        remaining = self._next - now
        return int(min(self.chunk, max(1, round(remaining / self._step_s))))

    def stepped(self, n: int, elapsed: float) -> None:
        """Record a chunk of ``n`` steps that took ``elapsed`` seconds; adapt the chunk size."""
        elapsed = max(elapsed, 1e-6)
        self._step_s = elapsed / n
        if n == self.chunk:  # a shortened chunk says little about the best size
            ideal = n * CHUNK_SECONDS / elapsed
            self.chunk = int(min(max(1, round(ideal)), 2 * self.chunk, MAX_CHUNK))

    def publish_due(self, now: float) -> bool:
        """Whether the publish clock has come round (within half a step)."""
        return now >= self._next - 0.5 * self._step_s

    def health_due(self, now: float) -> bool:
        """Whether the next publish should also check the health of the whole state."""
        return now - self._health_at >= max(self.interval, self._health_cost / HEALTH_SHARE)

    def published(self, start: float, end: float, health: bool) -> None:
        """Record a publish from ``start`` to ``end`` (with a health check or not); set the clock.

        Health checks have their own budget, so only publishes without one set the publish
        cost. The clock keeps its rate while it can; the next publish comes no sooner than
        half a period, nor than three times the publish cost, after this one ended.
        """
        if health:
            self._health_at, self._health_cost = start, end - start
        else:
            self._publish_cost = end - start
        stepping = 3.0 * self._publish_cost
        period = max(self.interval, stepping)
        self._next = max(self._next + period, end + max(0.5 * period, stepping))
