"""Exact access to a CuPy run's stored state, for a rollback copy and a resumed run.

:class:`StoredState` gives :class:`~.backend.CupyBackend` the :class:`~solver.backends.base
.Backend` methods that read and write what a run holds bit for bit, at the size it is stored:
the latest copy of the populations (tiled: the whole copy with its solid nodes at rest;
compact: the fluid slots only) and the opening links' flux of the last step. Populations
decoded to float32 cannot carry every float16-stored value (:mod:`solver.storage`), so
:class:`solver.last_good.LastGood` keeps this copy, not :meth:`device_populations`.
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from .compact_run import CompactRun

__all__ = ["StoredState"]


class StoredState:
    """Mixin of :class:`~.backend.CupyBackend` (which gives ``_natural``)."""

    def _latest(self, state: Any) -> cp.ndarray:
        """The array holding the latest populations as stored; in place in phase 0, as every
        reader of the state sees it (one decoding launch from phase 1, same values after)."""
        if isinstance(state, CompactRun):
            state._natural()  # same package: CompactRun has no public stored-state access yet
            return state.f[state.current]
        return self._natural(state)

    def stored_populations(self, state: Any) -> cp.ndarray:
        """The latest copy exactly as stored, in the state's own layout (a view of it)."""
        return self._latest(state)

    def set_stored_populations(self, state: Any, stored: Any) -> None:
        """Write a host or device copy of :meth:`stored_populations` back bit for bit."""
        target = self._latest(state)
        if target.shape != stored.shape:
            raise ValueError(f"A stored copy of shape {stored.shape} does not fit this run's "
                             f"{target.shape}.")
        cp.copyto(target, cp.asarray(stored), casting="no")  # another dtype: TypeError
        cp.cuda.get_current_stream().synchronize()  # before steps queued on the run's stream

    def set_iolet_flux(self, state: Any, flux: np.ndarray) -> None:
        """Set the per-link flux :meth:`iolet_flux` reads until the next step."""
        iolets = getattr(state, "iolets", None)  # compact runs have no openings' pass
        if iolets is None or np.shape(flux) != iolets.flux.shape:
            raise ValueError(f"{np.shape(flux)} opening-link fluxes for a run with "
                             f"{0 if iolets is None else iolets.flux.size}.")
        iolets.flux[...] = cp.asarray(flux, dtype=iolets.flux.dtype)  # graphs hold this buffer
