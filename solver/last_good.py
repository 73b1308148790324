"""The last healthy state of a run, kept so that a divergence can be undone.

:class:`LastGood` holds a copy of a Simulation's latest populations, taken right after a health
check passed. It lives where the state lives when the backend has room for it (a device-to-device
copy: about a millisecond for a 256 x 256 x 128 float32 state on a GPU, nothing crosses to the
host), else on the host (a read-back of the whole state, seconds at that size). Either way it is
refreshed at most every :data:`REFRESH_S` seconds and never more often than keeps its own cost
below :data:`MAX_SHARE` of the wall time, so a long run loses at most a few seconds of steps when
it diverges. Restoring writes the copy back bit for bit.
"""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["LastGood", "REFRESH_S", "MAX_SHARE"]

log = logging.getLogger(__name__)

#: Shortest time between two copies, seconds.
REFRESH_S = 2.0
#: Largest fraction of the wall time the copies may take.
MAX_SHARE = 0.02


class LastGood:
    """A copy of the populations at step :attr:`step` (None before the first :meth:`keep`)."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.on_device = False
        self._f: Any = None
        self._taken = float("-inf")
        self._cost = 0.0

    def keep(self, sim: Any) -> float:
        """Copy ``sim``'s current populations now; the seconds it took on this thread."""
        start = time.perf_counter()
        backend, n = sim.backend, sim.tiling.n_tiles
        # Read as the backend reads (solver.readout): all tiles at once where the state holds
        # the tiled layout, bounded chunks where it converts (compact storage), so taking the
        # copy costs no second tiled copy beside it.
        per = backend.readout_tiles(sim.state)
        first = backend.device_populations(sim.state, slice(0, per))
        shape = (n, *first.shape[1:])
        if not (self.on_device and self._f.shape == shape and self._f.dtype == first.dtype):
            self.clear()  # the old copy's memory counts for the decision below
            if _device_has_room(backend, n * first[:1].nbytes):
                self._f, self.on_device = backend.xp.empty(shape, dtype=first.dtype), True
        if self.on_device:  # the same buffer on every refresh: no allocation
            backend.xp.copyto(self._f[:per], first)
            for lo in range(per, n, per):
                backend.xp.copyto(self._f[lo:lo + per],
                                  backend.device_populations(sim.state, slice(lo, lo + per)))
        else:
            del first
            self._f = backend.populations(sim.state)
            log.info("last good state kept on the host (%.0f MB): not enough free device "
                     "memory for a copy", self._f.nbytes / 1e6)
        self.step = sim.time_step
        self._taken = time.perf_counter()
        self._cost = self._taken - start
        return self._cost

    def due(self, now: float | None = None) -> bool:
        """Whether a new copy would keep the schedule (every ``REFRESH_S`` s at most)."""
        now = time.perf_counter() if now is None else now
        return now - self._taken >= max(REFRESH_S, self._cost / MAX_SHARE)

    def refresh(self, sim: Any) -> float:
        """:meth:`keep` if due and the step is new; the seconds it took (0 if skipped)."""
        if self.step == sim.time_step or not self.due():
            return 0.0
        return self.keep(sim)

    def restore(self, sim: Any) -> int:
        """Write the copy back into ``sim`` and rewind its step count; the restored step."""
        if self.step is None:
            raise RuntimeError("No good state was kept: nothing to restore.")
        sim.backend.set_populations(sim.state, self._f)
        sim.backend.set_step(sim.state, self.step)  # float16 storage: that step's rounding
        sim.metrics.steps = self.step
        return self.step

    def clear(self) -> None:
        """Drop the copy (frees its memory)."""
        self._f, self.on_device, self.step = None, False, None
        self._taken = float("-inf")


def _device_has_room(backend: Any, nbytes: int) -> bool:
    """Whether a copy of ``nbytes`` leaves as much again free on the backend's device (room for
    the moment computation's temporaries), as far as the backend can tell."""
    free_memory = getattr(backend, "free_memory", None)
    free = free_memory() if free_memory is not None else None
    return free is not None and free >= 2 * nbytes
