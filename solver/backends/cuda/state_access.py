"""The one state access: how :class:`~.backend.CupyBackend` reads and writes a run's populations.

:class:`StateAccess` gives the backend the :class:`~solver.backends.base.Backend` methods that
read and write a run and delegates each to the run's :class:`~.device_run.DeviceRun` protocol,
tiled or compact alike (:class:`~.tiled_run.TiledRun`, :class:`~.compact_run.CompactRun`):
populations in XYZ order (host float64, exact; or on the device in the arithmetic precision, a
chunk of tiles at a time for compact runs, :mod:`.compact_readout`), the float16 step counter,
and what a run holds bit for bit at the size it is stored: the latest copy of the populations
(tiled: the whole copy with its solid nodes at rest; compact: the fluid slots only) and the
opening links' flux of the last step. Populations decoded to float32 cannot carry every
float16-stored value (:mod:`solver.storage`), so :class:`solver.last_good.LastGood` keeps the
stored copy.
"""

from __future__ import annotations

from typing import Any

import cupy as cp
import numpy as np

from ..base import NodeIndex
from .compact_readout import state_bytes
from .device_run import DeviceRun

__all__ = ["StateAccess"]


class StateAccess:
    """Mixin of :class:`~.backend.CupyBackend`: reading and writing a :class:`DeviceRun`."""

    def populations(self, state: DeviceRun) -> np.ndarray:
        """Latest populations, host float64 (n_tiles, q, a**d) in XYZ order, as stored."""
        return state.populations()

    def device_populations(self, state: DeviceRun, tiles=None) -> cp.ndarray:
        """Latest populations on the device (of ``tiles``: a slice or index array), XYZ order."""
        return state.device_populations(tiles)

    def node_index(self, state: DeviceRun, tile: np.ndarray, node: np.ndarray,
                   solid: np.ndarray) -> NodeIndex:
        """Where host (tile, XYZ node) pairs lie in the state (compact: popcount slots)."""
        return state.node_index(tile, node, solid)

    def node_populations(self, state: DeviceRun, index: NodeIndex) -> cp.ndarray:
        """Latest populations (q, n) of ``index``'s nodes gathered from the stored layout."""
        return state.node_populations(index)

    def fluid_populations(self, state: DeviceRun, part: slice) -> cp.ndarray:
        """Latest populations (q, k) of the fluid nodes ``part`` in tile order, read as stored
        (compact runs, whose readout is chunked; a tiled run reads its tiles in one chunk)."""
        return state.fluid_populations(part)

    def readout_tiles(self, state: DeviceRun) -> int:
        """Tiles per readout chunk (compact: bounded, .compact_readout; tiled: all)."""
        return state.readout_tiles

    #: Device bytes of the resident state :meth:`allocate` makes for a problem.
    state_bytes = staticmethod(state_bytes)

    def to_host(self, array: cp.ndarray) -> np.ndarray:
        """Copy a device array to the host."""
        return cp.asnumpy(array)

    def set_populations(self, state: DeviceRun, f: np.ndarray,
                        tiles: slice | None = None) -> None:
        """Overwrite the latest populations from a host or device array in XYZ in-tile order
        (rounded to the storage on the device), of ``tiles`` only when given.

        Solid nodes of every copy get the rest equilibrium (:mod:`solver.backends.base`).
        """
        if tiles is None:
            state.set_populations(f)
        else:
            state.set_populations(f, tiles)

    def set_step(self, state: DeviceRun, step: int) -> None:
        """Set the step counter that seeds float16 stochastic rounding (on resume)."""
        state.set_step(step)

    def iolet_flux(self, state: DeviceRun) -> np.ndarray | None:
        """Net mass flux into the fluid per opening link in the last step (host float64)."""
        return None if state.iolets is None else state.iolets.host_flux()

    def stored_populations(self, state: DeviceRun) -> cp.ndarray:
        """The latest copy exactly as stored, in the state's own layout (a view of it); in
        place in phase 0, as every reader of the state sees it (one decoding launch from phase
        1, same values after)."""
        return state.latest()

    def set_stored_populations(self, state: DeviceRun, stored: Any) -> None:
        """Write a host or device copy of :meth:`stored_populations` back bit for bit."""
        target = self.stored_populations(state)
        if target.shape != stored.shape:
            raise ValueError(f"A stored copy of shape {stored.shape} does not fit this run's "
                             f"{target.shape}.")
        cp.copyto(target, cp.asarray(stored), casting="no")  # another dtype: TypeError
        cp.cuda.get_current_stream().synchronize()  # before steps queued on the run's stream

    def set_iolet_values(self, state: DeviceRun, values: np.ndarray) -> None:
        """Set the opening links' target values (m,) the pass applies from the next step
        (a Windkessel outlet's density); the graphs read the same buffer."""
        iolets = state.iolets
        if iolets is None or np.shape(values) != iolets.value.shape:
            raise ValueError(f"{np.shape(values)} opening-link values for a run with "
                             f"{0 if iolets is None else iolets.value.size}.")
        iolets.value[...] = cp.asarray(values, dtype=iolets.value.dtype)
        cp.cuda.get_current_stream().synchronize()  # the host array may change after

    def set_windkessel(self, state: DeviceRun, table: Any, values: np.ndarray) -> None:
        """Update ``table``'s Windkessel outlets in the openings' pass from the state ``values``
        (4, n) on (:mod:`solver.windkessel`); the CUDA graphs are captured again with it."""
        iolets = state.iolets
        if iolets is None:
            raise ValueError("This run has no openings' pass (driven openings) to couple a "
                             "Windkessel outlet to.")
        state.stream.synchronize()  # no replay of the old graphs in flight
        iolets.attach_windkessel(table, values)
        state.graphs.clear()
        cp.cuda.get_current_stream().synchronize()

    def windkessel_state(self, state: DeviceRun) -> np.ndarray | None:
        """The Windkessel outlets' state (4, n) float64 now, None without any."""
        wk = getattr(state.iolets, "windkessel", None)
        return None if wk is None else cp.asnumpy(wk.state)

    def windkessel_trace(self, state: DeviceRun) -> np.ndarray | None:
        """The outlets' (flow, pressure) per update slot (TRACE, 2, n), None without any."""
        wk = getattr(state.iolets, "windkessel", None)
        return None if wk is None else cp.asnumpy(wk.trace)

    def set_iolet_flux(self, state: DeviceRun, flux: np.ndarray) -> None:
        """Set the per-link flux :meth:`iolet_flux` reads until the next step."""
        iolets = state.iolets  # compact runs have no openings' pass
        if iolets is None or np.shape(flux) != iolets.flux.shape:
            raise ValueError(f"{np.shape(flux)} opening-link fluxes for a run with "
                             f"{0 if iolets is None else iolets.flux.size}.")
        iolets.flux[...] = cp.asarray(flux, dtype=iolets.flux.dtype)  # graphs hold this buffer
