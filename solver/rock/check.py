"""One look at a permeability run on its device: health and k, a few scalars to the host.

A check used to copy the whole field to a dense host box (``Simulation.fields``) to read k over
the protocol's window, after a separate health pass: on an H100 that was 73 of the 121 s of a
200³ tensor with both protocols. Here one pass over the readout chunks
(:class:`solver.readout.Readout`) reduces the tile moments on the device to ``finite``, the
largest fluid speed and the sums of :func:`solver.observables.darcy_sums` (the Darcy flux over
the window's fluid nodes and the densities of its end layers); ``1 + 2 + len(ends)`` numbers
cross to the host and :func:`solver.observables.window_permeability` turns them into the same k
as :func:`solver.observables.permeability` of the fields (tests/solver/test_rock_check.py).
On a fluid-compacted run (:class:`solver.backends.cuda.compact_run.CompactRun`) the pass reads
the compact copy directly, fluid node by fluid node (:class:`_CompactNodes`): no tiled chunk is
built and solid nodes cost nothing. A 200³ tensor spent 5.6 s in ~60 fine checks on an H100
with the chunked tiled readout (issue 29). Each node's moments are computed as
:func:`solver.fields.tile_moments` computes them; the sums add the same nodes in another order
(k may differ in its last bits). Lattice units.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .. import observables
from ..fields import tile_moments
from ..observables import DarcyWindow, Permeability
from ..readout import Readout, k_check_partial
from ..simulation import Simulation

__all__ = ["CheckAhead", "KCheck", "Phases", "check_ahead"]


#: The flags of a fluid node in a whole-box window (:func:`node_flags`: bit 0 window, bit 3
#: fluid).
WHOLE_BOX_FLAG = 9


@dataclass
class CheckAhead:
    """The host part of a :class:`KCheck` made before its run is allocated
    (:func:`check_ahead`): the window with host masks and the fused check's node flags for
    the storage the run's plan chooses (``compact``), None where no fused check applies or
    where the check makes them on its device (:func:`_fused_flags`: one value)."""

    window: DarcyWindow
    flags: np.ndarray | None
    compact: bool

    def flags_for(self, sim: Simulation) -> np.ndarray | None:
        """The flags, where they fit ``sim``'s allocated state (fused checks, the storage they
        were made for); else None (the check makes its own)."""
        if self.flags is None or not _fuses(sim) or _compacted(sim) != self.compact:
            return None
        return self.flags


def check_ahead(sim: Simulation, axis: int, window: tuple[int, int]) -> CheckAhead:
    """What :class:`KCheck` of ``sim`` builds on the host, made now, without device memory
    (a study makes it beside the previous run's steps: the flags of the 8.4e8 tile nodes of a
    1000³ image's mirrored box took 1.3 s of each fine run's allocation on an H200 host)."""
    from ..backends.plan import plan_for

    host = observables.darcy_window(sim.problem, axis, window, np)
    if not _fuses(sim):
        return CheckAhead(host, None, False)
    compact = plan_for(sim.problem).compact  # what the allocation will store
    if compact and _whole_box(host):  # one value a fluid node: made on the device instead
        return CheckAhead(host, None, compact)
    return CheckAhead(host, node_flags(sim.problem, host, compact), compact)


class KCheck:
    """Health and k of ``sim`` over the layers ``window`` along ``axis``, read on its device
    (``ahead``: its host part, :func:`check_ahead`, when made before)."""

    def __init__(self, sim: Simulation, axis: int, window: tuple[int, int],
                 voxel_size: float | None, ahead: CheckAhead | None = None) -> None:
        sim.allocate()
        self.sim, self.voxel_size = sim, voxel_size
        xp = sim.backend.xp
        # The window's masks are made on the host; the fused check reads only its node flags.
        host = observables.darcy_window(sim.problem, axis, window, np) if ahead is None \
            else ahead.window
        #: The fused check (:mod:`solver.backends.cuda.compact_check`): its node flags (None:
        #: the chunked readout) and, for a tiled state, its slot table.
        ready = None if ahead is None else ahead.flags_for(sim)
        self.flags = _fused_flags(sim, host) if ready is None else sim.backend.xp.asarray(ready)
        self.slots = None
        if self.flags is not None and not getattr(sim.state, "edge", None):
            from ..backends.cuda.compact_check import tiled_slots

            self.slots = tiled_slots(sim.problem)
        self.window: DarcyWindow = host if self.flags is not None else DarcyWindow(
            host.axis, host.lo, host.hi, host.volume,
            None if host.inside is None else xp.asarray(host.inside),
            tuple(xp.asarray(e) for e in host.ends), host.end_counts)
        self.fluid = None if self.flags is not None else xp.asarray(~sim.tiling.solid)
        self.reader = Readout(sim.problem, sim.backend, sim.state, axis)
        self.nodes = None if self.flags is not None else _CompactNodes.of(sim, self.window)

    def read(self) -> tuple[dict, Permeability | None]:
        """``({'finite', 'max_speed', 'flow_tortuosity'}, k)`` of the current state; k is None
        when not finite. ``flow_tortuosity``: sum of |u| over sum of u along the axis over the
        window's fluid nodes (:func:`solver.observables.tortuosity`)."""
        sim = self.sim
        if self.reader.state is not sim.state:  # reallocated (e.g. a new start)
            self.reader = Readout(sim.problem, sim.backend, sim.state, self.window.axis)
        if self.flags is not None:
            return self._fused()
        if self.nodes is not None and self.nodes.run is not sim.state:
            self.nodes = _CompactNodes.of(sim, self.window)
        w = self.window
        # Summed where the populations lie (MPI ranks: each its own tiles'), or here.
        return self._result(sim.backend.reductions.k_check_numbers(
            sim.state, w.axis, (w.lo, w.hi), self._local_numbers))

    def _local_numbers(self) -> np.ndarray:
        """:meth:`read`'s numbers summed on the state's device, a readout chunk at a time."""
        sim, xp = self.sim, self.sim.backend.xp
        total = None
        for fluid, window, rho, u in (self.nodes.chunks() if self.nodes is not None
                                      else self._tiled_chunks()):
            numbers = k_check_partial(sim.problem, window, fluid, rho, u, xp)
            total = numbers if total is None else xp.concatenate([
                xp.minimum(total[:1], numbers[:1]), xp.maximum(total[1:2], numbers[1:2]),
                total[2:] + numbers[2:]])
        return np.asarray(sim.backend.to_host(total), dtype=np.float64)

    def _fused(self) -> tuple[dict, Permeability | None]:
        """:meth:`read` in one launch (:func:`~solver.backends.cuda.compact_check.darcy_check`)."""
        from ..backends.cuda.compact_check import state_check

        numbers = state_check(self.sim.backend, self.sim.state, self.flags, self.slots,
                              self.window.axis)
        return self._result(fused_numbers(numbers, len(self.window.ends)))

    def _result(self, host: np.ndarray) -> tuple[dict, Permeability | None]:
        """Health and k from the host numbers ``[finite, max speed, sum |u|, sum u_axis,
        Darcy sums...]``."""
        sim = self.sim
        if host[0] != 1.0:
            return {"finite": False, "max_speed": float("inf")}, None
        along = float(host[3])
        health = {"finite": True, "max_speed": float(host[1]),
                  "flow_tortuosity": float(host[2]) / along if along else float("nan")}
        return health, observables.window_permeability(sim.problem, self.window, host[4:],
                                                        self.voxel_size)

    def _tiled_chunks(self):
        """``(fluid, window, rho, u)`` per readout chunk of tiles, solid nodes' flow zeroed
        and density 1 (they may hold NaN)."""
        xp = self.sim.backend.xp
        for part, rho, u in self.reader.chunks():
            fluid = self.fluid[part]
            yield (fluid, self.window.part(part), xp.where(fluid, rho, 1.0),
                   xp.where(fluid, u, 0.0))


def fused_numbers(numbers: np.ndarray, ends: int) -> np.ndarray:
    """The fused check's ``[bad, max speed, sum |u|, sum u_axis, Darcy flux, end densities
    (2)]`` as :meth:`KCheck.read`'s numbers (``finite`` first, ``ends`` end sums)."""
    return np.concatenate([[1.0 if numbers[0] == 0 else 0.0], numbers[1:5],
                           numbers[5:5 + ends]])


def _fuses(sim: Simulation) -> bool:
    """Whether ``sim``'s checks are fused: a CuPy run with plain 3D storage."""
    return (sim.backend.name == "cupy" and not sim.problem.storage.encoded
            and sim.problem.lattice.d == 3)


def _fused_flags(sim: Simulation, window: DarcyWindow):
    """The device flags of :func:`node_flags` (``window`` with host masks) for the fused check
    of a CuPy run with plain 3D storage (compacted: per fluid node; tiled: per tile node);
    None where it does not apply (the chunked readout reads the run)."""
    if not _fuses(sim):
        return None
    xp, compact = sim.backend.xp, _compacted(sim)
    if compact and _whole_box(window):
        # Every fluid node in the window: a fill on the device, no host array of one value
        # a fluid node to make and upload (0.4 GB for a 1000³ image's mirrored box).
        return xp.full(int(sim.problem.tiling.n_fluid), WHOLE_BOX_FLAG, dtype=np.uint8)
    return xp.asarray(node_flags(sim.problem, window, compact))


def _whole_box(window: DarcyWindow) -> bool:
    """Whether ``window`` is the whole box without end layers (every fluid node in it)."""
    return window.inside is None and not window.ends


def _compacted(sim: Simulation) -> bool:
    """Whether ``sim``'s allocated state holds fluid nodes only (has edge tables)."""
    return bool(getattr(sim.state, "edge", None))


def node_flags(problem, window: DarcyWindow, compact: bool) -> np.ndarray:
    """Host uint8 flags (bit 0: in the Darcy window, bits 1 and 2: in its first and last layer
    on a non-periodic axis; bit 3: fluid) of every tile node (T x N, tiled), or of every fluid
    node in the order of ``np.flatnonzero(~tiling.solid)`` (``compact``: the edge tables'
    order); ``window``: :func:`solver.observables.darcy_window` with host masks."""
    if _whole_box(window):  # every fluid node is in it
        if compact:
            return np.full(int(problem.tiling.n_fluid), WHOLE_BOX_FLAG, np.uint8)
        # 9 where fluid, 0 where solid, in one pass over the mask's bytes (a bool is 0 or 1):
        # the general path below made five passes over 8.4e8 tile nodes at 1000³, per run.
        fluid = np.logical_not(problem.tiling.solid.reshape(-1)).view(np.uint8)
        return fluid * np.uint8(WHOLE_BOX_FLAG)
    fluid = ~problem.tiling.solid.reshape(-1)
    inside = fluid if window.inside is None else window.inside.reshape(-1)
    flags = inside.astype(np.uint8) | (fluid.astype(np.uint8) << np.uint8(3))
    for bit, end in zip((2, 4), window.ends, strict=False):
        flags |= end.reshape(-1).astype(np.uint8) * np.uint8(bit)
    return flags[np.flatnonzero(fluid)] if compact else flags


class _CompactNodes:
    """The fluid nodes of a compacted run (its edge tables' order) with their window masks:
    ``chunks()`` gives their moments straight from the compact copy, a bounded number of
    nodes at a time (at most a readout chunk's tiles times 64: within its memory budget)."""

    def __init__(self, sim: Simulation, window: DarcyWindow) -> None:
        run, xp = sim.state, sim.backend.xp
        self.run, self.problem, self.xp = run, sim.problem, xp
        q = sim.problem.lattice.q
        at, block, tiled = run.edge
        tiled = tiled.astype(xp.int64)
        flat = (tiled // (q * 64)) * 64 + tiled % (q * 64)  # (T, N) flat index of the node
        self.at, self.block, self.count = at, block, int(at.shape[0])
        self.inside = None if window.inside is None else window.inside.reshape(-1)[flat]
        self.ends = tuple(e.reshape(-1)[flat] for e in window.ends)
        self.window = window
        self.per = max(1, int(run.readout_tiles) * 64)

    @classmethod
    def of(cls, sim: Simulation, window: DarcyWindow) -> _CompactNodes | None:
        """The fluid nodes of ``sim``'s state when it is compacted (has edge tables)."""
        state = sim.state
        if not getattr(state, "edge", None) or not hasattr(state, "latest"):
            return None
        return cls(sim, window)

    def chunks(self):
        """``(fluid, window, rho, u)`` per chunk of fluid nodes: an all-true mask (1, m), the
        window cut alike, density (1, m) and velocity (d, 1, m), float64."""
        p, xp = self.problem, self.xp
        f = self.run.latest()  # waits for the queued steps
        i = xp.arange(p.lattice.q, dtype=self.at.dtype)[:, None]
        w = self.window
        for lo in range(0, self.count, self.per):
            part = slice(lo, min(self.count, lo + self.per))
            # (q, m): direction-major as the tiled layout (T, q, N), so the moments sum alike.
            values = f[self.at[part][None, :] + self.block[part][None, :] * i]
            values = p.storage.decode(values, xp)[None]
            rho, u = tile_moments(values, p.lattice, p.force, p.incompressible, xp)
            fluid = xp.ones(rho.shape, dtype=bool)
            inside = None if self.inside is None else self.inside[part][None]
            window = DarcyWindow(w.axis, w.lo, w.hi, w.volume, inside,
                                 tuple(e[part][None] for e in self.ends), w.end_counts)
            yield fluid, window, rho, u


class Phases(dict):
    """Wall seconds per phase of a study (name -> seconds), added up over its runs."""

    def timed(self, name: str):
        """Context manager adding the wall time of its block to ``name``."""
        return _Timed(self, name)

    def add(self, other: dict) -> None:
        """Add another run's phases."""
        for name, seconds in other.items():
            self[name] = self.get(name, 0.0) + seconds


class _Timed:
    def __init__(self, phases: Phases, name: str) -> None:
        self.phases, self.name = phases, name

    def __enter__(self) -> None:
        self.tic = time.perf_counter()

    def __exit__(self, *exc) -> None:
        self.phases[self.name] = self.phases.get(self.name, 0.0) + time.perf_counter() - self.tic
