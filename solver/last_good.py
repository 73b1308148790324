"""The last healthy state of a run, kept so that a divergence can be undone.

:class:`LastGood` holds a copy of a Simulation's latest populations, taken right after a health
check passed: the stored array itself (:meth:`~solver.backends.base.Backend.stored_populations`:
the storage dtype at its stored size, float16 included, whose values float32 populations cannot
all hold), the opening links' flux of that step and the Windkessel outlets' state. It lives
where the state lives when the backend has room for it (a device-to-device copy: about a
millisecond for a 256 x 256 x 128 float32 state on a GPU, nothing crosses to the host), else on
the host (a read-back of the whole state, seconds at that size). Either way it is refreshed at
most every :data:`REFRESH_S` seconds and never more often than keeps its own cost below
:data:`MAX_SHARE` of the wall time, so a long run loses at most a few seconds of steps when it
diverges. Restoring writes the copy back bit for bit: the run continues as if the steps after it
never ran.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

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
        self._flux: np.ndarray | None = None  # the opening links' flux of that step
        self._windkessel: np.ndarray | None = None  # the Windkessel outlets' state then
        self._taken = float("-inf")
        self._cost = 0.0

    def keep(self, sim: Any) -> float:
        """Copy ``sim``'s current stored populations now; the seconds it took on this thread."""
        start = time.perf_counter()
        backend = sim.backend
        stored = backend.stored_populations(sim.state)
        if self.on_device and self._f.shape == stored.shape and self._f.dtype == stored.dtype:
            backend.xp.copyto(self._f, stored)  # reuse the buffer: no allocation per refresh
        else:
            self.clear()  # the old copy's memory counts for the decision below
            if _device_has_room(backend, stored.nbytes):
                self._f, self.on_device = backend.xp.array(stored, copy=True), True
            else:
                host = backend.to_host(stored)
                if isinstance(stored, np.ndarray) and np.may_share_memory(host, stored):
                    host = host.copy()  # a host backend's stored array is the state itself
                self._f, self.on_device = host, False
                log.info("last good state kept on the host (%.0f MB): not enough free device "
                         "memory for a copy", self._f.nbytes / 1e6)
        self._flux = backend.iolet_flux(sim.state)
        self._windkessel = getattr(sim, "windkessel_state", lambda: None)()  # a few numbers
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
        sim.backend.set_stored_populations(sim.state, self._f)
        sim.backend.set_step(sim.state, self.step)  # float16 storage: that step's rounding
        if self._flux is not None:  # the openings read that step's flows until the next one
            sim.backend.set_iolet_flux(sim.state, self._flux)
        if self._windkessel is not None:  # the outlets' pressures of that step, not NaN
            sim.restore_windkessel(sim.windkessel_ids(), self._windkessel)
        sim.metrics.steps = self.step
        return self.step

    def clear(self) -> None:
        """Drop the copy (frees its memory)."""
        self._f, self._flux, self.on_device, self.step = None, None, False, None
        self._windkessel = None
        self._taken = float("-inf")


def _device_has_room(backend: Any, nbytes: int) -> bool:
    """Whether a copy of ``nbytes`` leaves as much again free on the backend's device (room for
    the moment computation's temporaries), as far as the backend can tell."""
    free = backend.free_memory()
    return free is not None and free >= 2 * nbytes
