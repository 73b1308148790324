"""Where a distributed GPU step's time goes: timed CUDA events at the phase edges of each step.

Set ``POROUS_LBM_HALO_TIMELINE`` to a folder and every rank's :class:`~solver.backends.
phases.CupyPhases` records, for its last :data:`KEEP` steps, a timed event on its stream at
each edge (boundary tiles queued and done, gather done, transfers done, scatter done, interior
queued and done); at release each rank writes ``timeline-rank<r>.json`` to that folder: per
step, microseconds since the step's first edge. An edge is the moment its stream reached it, so
"queued" edges show when a stream's waits were satisfied, not when the kernel's first block ran.
For diagnosis only: creating events costs host time per step.
"""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path
from typing import Any

__all__ = ["TIMELINE_VARIABLE", "KEEP", "StepTimeline", "timeline_from_environment"]

TIMELINE_VARIABLE = "POROUS_LBM_HALO_TIMELINE"
#: Steps kept (the last ones, after warm-up).
KEEP = 64


class StepTimeline:
    """Timed events per step on the given streams; :meth:`write` saves them as JSON."""

    def __init__(self, cp: Any, folder: Path) -> None:
        self._cp, self.folder = cp, folder
        self._steps: deque[list[tuple[str, Any]]] = deque(maxlen=KEEP)
        self._current: list[tuple[str, Any]] = []

    def mark(self, stream: Any, edge: str) -> None:
        """Record a timed event named ``edge`` on ``stream`` (unless the stream is capturing)."""
        if stream.is_capturing():
            return
        event = self._cp.cuda.Event()
        event.record(stream)
        self._current.append((edge, event))

    def end_step(self) -> None:
        """Close the current step's list of edges."""
        if self._current:
            self._steps.append(self._current)
        self._current = []

    def write(self, rank: int) -> Path:
        """Write ``timeline-rank<rank>.json``: per kept step, µs of each edge after its first
        (and of its first edge after the previous step's)."""
        self._cp.cuda.Device().synchronize()
        elapsed_us = lambda a, b: round(self._cp.cuda.get_elapsed_time(a, b) * 1e3, 2)  # noqa: E731
        rows, previous = [], None
        for edges in self._steps:
            first = edges[0][1]
            row = {name: elapsed_us(first, event) for name, event in edges}
            if previous is not None:  # the step period, from first edge to first edge
                row["since previous step"] = elapsed_us(previous, first)
            rows.append(row)
            previous = first
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"timeline-rank{rank}.json"
        path.write_text(json.dumps(rows, indent=0))
        return path


def timeline_from_environment(cp: Any) -> StepTimeline | None:
    """A :class:`StepTimeline` into the folder ``POROUS_LBM_HALO_TIMELINE`` names, else None."""
    folder = os.environ.get(TIMELINE_VARIABLE)
    return StepTimeline(cp, Path(folder)) if folder else None
