"""Reading and writing a CuPy run's populations, tiled or compact, decoded or as stored.

:class:`StateAccess` gives :class:`~.backend.CupyBackend` the :class:`~solver.backends.base
.Backend` methods that read and write a run: populations in XYZ order (host float64, exact;
or on the device in the arithmetic precision, a chunk of tiles at a time for compact runs,
:mod:`.compact_readout`), the float16 step counter, and what a run holds bit for bit at the
size it is stored: the latest copy of the populations (tiled: the whole copy with its solid
nodes at rest; compact: the fluid slots only) and the opening links' flux of the last step.
Populations decoded to float32 cannot carry every float16-stored value
(:mod:`solver.storage`), so :class:`solver.last_good.LastGood` keeps the stored copy.
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from ..base import NodeIndex, node_index, tiled_node_populations, with_rest_solids
from .compact_readout import state_bytes
from .compact_run import CompactRun

__all__ = ["StateAccess"]


class StateAccess:
    """Mixin of :class:`~.backend.CupyBackend` (which gives ``_natural``)."""

    def populations(self, state: Any) -> np.ndarray:
        """Latest populations, host float64 (n_tiles, q, a**d) in XYZ order, as stored."""
        if isinstance(state, CompactRun):  # exact values, read in bounded chunks
            return state.populations()
        return cp.asnumpy(state.problem.storage.exact(self._stored(state), cp))

    def device_populations(self, state: Any, tiles=None) -> cp.ndarray:
        """Latest populations on the device (of ``tiles``: a slice or index array), XYZ order."""
        if isinstance(state, CompactRun):
            return state.device_populations(tiles)
        # The tiles first: a cut reads one layer of them, not a decoded copy of the state.
        return state.problem.storage.decode(self._stored(state, tiles), cp)

    def node_index(self, state: Any, tile: np.ndarray, node: np.ndarray,
                   solid: np.ndarray) -> NodeIndex:
        """Where host (tile, XYZ node) pairs lie in the state (compact: popcount slots)."""
        if isinstance(state, CompactRun):
            return state.node_index(tile, node, solid)
        return node_index(tile, node, solid, cp)

    def node_populations(self, state: Any, index: NodeIndex) -> cp.ndarray:
        """Latest populations (q, n) of ``index``'s nodes gathered from the stored layout."""
        if isinstance(state, CompactRun):
            return state.node_populations(index)
        return tiled_node_populations(state.problem, self._natural(state), index, state.slots,
                                      cp)

    def fluid_populations(self, state: Any, part: slice) -> cp.ndarray:
        """Latest populations (q, k) of the fluid nodes ``part`` in tile order, read as stored
        (compact runs, whose readout is chunked; a tiled run reads its tiles whole)."""
        if not isinstance(state, CompactRun):
            raise TypeError("fluid_populations reads compact runs; a tiled run reads its "
                            "tiles in one chunk (device_populations).")
        return state.fluid_populations(part)

    def readout_tiles(self, state: Any) -> int:
        """Tiles per readout chunk (compact: bounded, .compact_readout; tiled: all)."""
        run = isinstance(state, CompactRun)
        return state.readout_tiles if run else state.problem.tiling.n_tiles

    #: Device bytes of the resident state :meth:`allocate` makes for a problem.
    state_bytes = staticmethod(state_bytes)

    def _stored(self, state: Any, tiles=None) -> cp.ndarray:
        """The stored values of all tiles (or of ``tiles``) in XYZ order (XYZ layout, all
        tiles: a view)."""
        current = self._natural(state)
        if tiles is not None:
            current = current[tiles]
        if state.identity_slots is None:
            state.identity_slots = bool((state.slots == cp.arange(state.slots.shape[1])).all())
        if not state.identity_slots:
            return current[:, cp.arange(state.problem.lattice.q)[:, None], state.slots]
        return current

    def to_host(self, array: cp.ndarray) -> np.ndarray:
        """Copy a device array to the host."""
        return cp.asnumpy(array)

    def set_populations(self, state: Any, f: np.ndarray) -> None:
        """Overwrite the latest populations from a host or device array in XYZ in-tile order
        (rounded to the storage on the device).

        Solid nodes of every copy get the rest equilibrium (:mod:`solver.backends.base`).
        """
        if isinstance(state, CompactRun):  # solid nodes are not stored: always at rest
            return state.set_populations(f)
        problem, q = state.problem, cp.arange(state.problem.lattice.q)[:, None]
        if state.in_place:  # values arrive in the natural layout: decode to phase 0 first,
            self._natural(state)  # which also moves the float16 step counter there
        others = [c for c in range(state.f.shape[0]) if c != state.current]
        for copy in (state.current, *others):
            stored = (problem.storage.encode(cp.asarray(f), cp) if copy == state.current
                      else state.f[copy][:, q, state.slots])
            state.f[copy][:, q, state.slots] = with_rest_solids(problem, stored, cp)

    def set_step(self, state: Any, step: int) -> None:
        """Set the step counter that seeds float16 stochastic rounding (on resume)."""
        if isinstance(state, CompactRun):  # written before its stream's next step
            return state.set_step(step)
        if getattr(state, "seeds", None) is not None:  # float16 storage
            state.seeds[state.current] = np.uint32(step & 0xFFFFFFFF)
        if getattr(state, "iolets", None) is not None:  # the openings' soft start
            state.iolets.set_step(step)

    def iolet_flux(self, state: Any) -> np.ndarray | None:
        """Net mass flux into the fluid per opening link in the last step (host float64)."""
        iolets = getattr(state, "iolets", None)  # compact runs have no openings' pass
        return None if iolets is None else iolets.host_flux()

    def stored_populations(self, state: Any) -> cp.ndarray:
        """The latest copy exactly as stored, in the state's own layout (a view of it); in
        place in phase 0, as every reader of the state sees it (one decoding launch from phase
        1, same values after)."""
        if isinstance(state, CompactRun):
            return state.latest()
        return self._natural(state)

    def set_stored_populations(self, state: Any, stored: Any) -> None:
        """Write a host or device copy of :meth:`stored_populations` back bit for bit."""
        target = self.stored_populations(state)
        if target.shape != stored.shape:
            raise ValueError(f"A stored copy of shape {stored.shape} does not fit this run's "
                             f"{target.shape}.")
        cp.copyto(target, cp.asarray(stored), casting="no")  # another dtype: TypeError
        cp.cuda.get_current_stream().synchronize()  # before steps queued on the run's stream

    def set_iolet_values(self, state: Any, values: np.ndarray) -> None:
        """Set the opening links' target values (m,) the pass applies from the next step
        (a Windkessel outlet's density); the graphs read the same buffer."""
        iolets = getattr(state, "iolets", None)
        if iolets is None or np.shape(values) != iolets.value.shape:
            raise ValueError(f"{np.shape(values)} opening-link values for a run with "
                             f"{0 if iolets is None else iolets.value.size}.")
        iolets.value[...] = cp.asarray(values, dtype=iolets.value.dtype)
        cp.cuda.get_current_stream().synchronize()  # the host array may change after

    def set_windkessel(self, state: Any, table: Any, values: np.ndarray) -> None:
        """Update ``table``'s Windkessel outlets in the openings' pass from the state ``values``
        (4, n) on (:mod:`solver.windkessel`); the CUDA graphs are captured again with it."""
        iolets = getattr(state, "iolets", None)
        if iolets is None:
            raise ValueError("This run has no openings' pass (driven openings) to couple a "
                             "Windkessel outlet to.")
        state.stream.synchronize()  # no replay of the old graphs in flight
        iolets.attach_windkessel(table, values)
        state.graphs.clear()
        cp.cuda.get_current_stream().synchronize()

    def windkessel_state(self, state: Any) -> np.ndarray | None:
        """The Windkessel outlets' state (4, n) float64 now, None without any."""
        wk = getattr(getattr(state, "iolets", None), "windkessel", None)
        return None if wk is None else cp.asnumpy(wk.state)

    def windkessel_trace(self, state: Any) -> np.ndarray | None:
        """The outlets' (flow, pressure) per update slot (TRACE, 2, n), None without any."""
        wk = getattr(getattr(state, "iolets", None), "windkessel", None)
        return None if wk is None else cp.asnumpy(wk.trace)

    def set_iolet_flux(self, state: Any, flux: np.ndarray) -> None:
        """Set the per-link flux :meth:`iolet_flux` reads until the next step."""
        iolets = getattr(state, "iolets", None)  # compact runs have no openings' pass
        if iolets is None or np.shape(flux) != iolets.flux.shape:
            raise ValueError(f"{np.shape(flux)} opening-link fluxes for a run with "
                             f"{0 if iolets is None else iolets.flux.size}.")
        iolets.flux[...] = cp.asarray(flux, dtype=iolets.flux.dtype)  # graphs hold this buffer
