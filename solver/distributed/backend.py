"""The Backend protocol over MPI ranks: rank 0 drives an ordinary Simulation, the others serve.

:class:`DistributedBackend` implements :class:`~solver.backends.Backend`, so on rank 0
``Simulation(geometry, config, backend=DistributedBackend())`` works unchanged — ``fields()``,
``slice()``, metrics, checkpoints (per-rank parts and a manifest, :mod:`solver.checkpoint_parts`)
— while every other rank runs :meth:`DistributedBackend.serve`. Each call on
rank 0 broadcasts a small command and then takes part in the same collective work as the
others:

- ``allocate(problem)``: rank 0 decomposes the global problem
  (:func:`~solver.distributed.decomposition.decompose`) and sends every other rank only its
  part (:func:`~solver.distributed.slab_parts.rank_part`: its slab, the halo layers and the
  opening links it runs or feeds), so no serving rank holds the whole problem; the ranks agree
  on the halo transport (:mod:`~solver.distributed.transport`; the NCCL communicator is built
  once, at the first allocation that uses it) and every rank builds its
  :class:`~solver.distributed.rank.RankSolver` on its own backend (``inner``). Several
  allocations may live at once (a permeability run's coarse start beside its fine run): each
  state carries a key that every later command names.
- ``tile_regions(source, config)``: before any allocation, the whole tiling of an image the
  ranks can read by slabs (a region source, :mod:`geometries.regions`) built by every rank from
  its own slab and assembled on rank 0 (:mod:`.region_tiling`): ``solver run``'s rank 0 then
  never holds the voxel image. An allocation of that tiling cut in slabs along the slowest
  axis (z) without opening links has each serving rank tile its own part again
  (:func:`~.region_tiling.own_part`); rank 0 sends only the run's constants.
- driven openings: each rank applies its links' pass; ``iolet_flux`` gathers the per-link
  flux to rank 0 in global link order (:mod:`~solver.distributed.openings`). Windkessel
  outlets are updated on rank 0 from that flux at each of their intervals (the arithmetic of
  :func:`~solver.windkessel.windkessel_update`), their densities sent to the ranks.
- ``step(state, n)``: ``n`` overlapped steps on every rank (with the NCCL transport and
  ``graphs=True``, or after :meth:`DistributedBackend.use_graphs`, mostly as replays of
  captured CUDA graphs: off by default, as they measured slower on 2 x H200, see
  ``benchmarks/scaling/README.md``); the time is rank 0's wall time up to a closing barrier, so
  MFLUPS count the global fluid nodes over the slowest rank.
- reads send only what an output needs: ``health_numbers`` (the run monitor's health check)
  and ``k_check_numbers`` (a permeability run's check) have each rank reduce its owned tiles
  to partial sums and maxima that rank 0 combines in rank order (:mod:`.reductions`: a few
  numbers a rank; equal to one process's to rounding, not bit for bit); ``tile_moments``
  (``.vti`` fields, the coarse flow) has each rank compute its owned tiles' density and velocity
  and gathers those (4 values a node instead of q populations; node by node the arithmetic of
  one process, so the same bits); ``node_populations`` (a slice's plane, probes) gathers the
  asked nodes' populations from the ranks owning them; ``device_populations(state, tiles)``
  (the openings' mean densities) gathers those tiles alone.
- checkpoints over two or more ranks (``writes_parts``): ``write_parts`` has every rank write
  its owned tiles' rows and their global numbers (:mod:`solver.checkpoint_parts`; the manifest
  is :func:`solver.io.save_simulation`'s), ``load_parts`` has every rank read its own tiles'
  rows from parts written by any number of ranks (re-slabbed by tile number; a failure on any
  rank is rank 0's CheckpointError, nothing aborts). One rank writes the single-process file.
- ``populations`` / ``set_populations``: owned tiles are gathered to / scattered from rank 0
  (``Gatherv`` of float64 blocks, ``Scatterv`` in the given array's float dtype) in global tile
  order; a scatter refreshes the halos (a single-process checkpoint and a permeability run's
  coarse start reach the ranks this way: the whole array is then on rank 0 once).
  ``device_populations`` of all tiles is the same gather in the arithmetic precision (``xp``
  is NumPy on rank 0): what still reads the whole state on rank 0 are forces,
  ``Simulation.populations`` and wall shear stress in place (one population copy).
- ``wall_shear_vectors``: each rank computes the shear vectors of the wall nodes in its own
  tiles (rank 0 sends each its nodes once per allocation), from its tiles and halo; only the
  vectors reach rank 0 (the shear indices of a pulsatile run accumulate them). A ``.pvti``'s
  wall arrays are sent to each rank as its slab's voxels and values.

Use :func:`solver.distributed.launch` (or ``with DistributedBackend() as b``) so that the
workers are released when rank 0 finishes or fails.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..backends import Backend, DeviceInfo, get_backend, may_use_gpu
from ..backends.base import NodeIndex, has_none, node_index, prepare_problem_tables, with_rest_nodes
from ..checkpoint_parts import CheckpointError, PartSet, new_token
from ..config import ConfigError
from ..fields import tile_moments
from ..io import atomic_write, remove_orphaned_temporaries
from ..problem import Problem
from ..vtk_pieces import cell_extent, cell_image, piece_path, pieces_folder, save_image, write_pvti
from ..windkessel import DENSITY, TRACE, windkessel_update
from .comm import bind_local_gpu, world
from .decomposition import decompose
from .rank import RankSolver
from .reductions import (
    RankReductions,
    combine_health,
    combine_partials,
    owned_health,
    owned_k_check,
    owned_layers,
)
from .region_tiling import own_part
from .slab_parts import RankPart, rank_part
from .transport import (
    TransportReport,
    check_transport,
    choose_transport,
    exchange_factory,
    local_report,
)

__all__ = ["DistributedBackend", "DistributedState"]

log = logging.getLogger(__name__)

#: Longest sleep of an idle serving rank between looks for the next command, seconds.
IDLE_POLL_SECONDS = 0.002
#: Message tag of the rank parts rank 0 sends at an allocation.
PART_TAG = 23


@contextlib.contextmanager
def _ignore_sigint():
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals are not ours to change
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


@dataclass
class DistributedState:
    """Rank 0's handle: the global problem, its own share, and where every rank's rows go."""

    problem: Problem
    solver: RankSolver = field(repr=False)
    order: np.ndarray = field(repr=False)
    counts: np.ndarray = field(repr=False)
    #: Populations each rank sends per step (its halo plan), in rank order.
    halo_values: list[int] = field(default_factory=list)
    #: Global numbers of each rank's opening links (int64), in rank order.
    links: list[np.ndarray] = field(default_factory=list, repr=False)
    #: Tiles of the problem each rank holds on the host, in rank order (rank 0: the whole
    #: problem; the others: their part, :mod:`~solver.distributed.slab_parts`).
    host_tiles: list[int] = field(default_factory=list)
    #: Steps done (the Windkessel outlets' clock; :meth:`DistributedBackend.set_step` sets it).
    step: int = 0
    #: Windkessel outlets (:mod:`solver.windkessel`): (table, state (4, n), trace), or None.
    windkessel: tuple | None = field(default=None, repr=False)
    #: The decomposition axis.
    axis: int = 0
    #: The slabs' bounds in tile layers along ``axis`` (int64, ranks + 1).
    bounds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    #: Which of the backend's allocations this is (commands name it).
    key: int = 0

    def decomposition_summary(self) -> dict:
        """How the run is split (for a run summary): ranks, axis, non-empty tiles and fluid
        nodes per rank, the load imbalance of each (largest over mean: the tiled storage's
        work follows tiles, the compact storage's fluid nodes), halo values per step and the
        tiles of the problem each rank holds on the host."""
        fluid = (~self.problem.tiling.solid).sum(axis=1)[self.order]
        starts = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        per_rank = np.add.reduceat(fluid, starts) if fluid.size else np.zeros(0, np.int64)
        return {"ranks": int(self.counts.size), "axis": "xyz"[self.axis],
                "tiles_per_rank": self.counts.tolist(), "fluid_nodes_per_rank":
                per_rank.tolist(), "load_imbalance_tiles": _imbalance(self.counts),
                "load_imbalance_fluid": _imbalance(per_rank),
                "halo_values_per_step": list(self.halo_values),
                "host_tiles_per_rank": list(self.host_tiles)}


def _save(path: Path, array: np.ndarray) -> None:
    """``array`` as ``.npy`` at ``path``, atomically (no pickles)."""
    atomic_write(path, lambda fh: np.save(fh, array, allow_pickle=False))


def _slab(values: Any, cut: tuple, axis: int, lo: int, hi: int, shape: tuple) -> np.ndarray:
    """The cells ``[lo, hi)`` along ``axis`` (grid ``cut``, slab ``shape``) of a whole grid,
    or of ``(voxels, values)`` placed on a NaN grid (only the slab's voxels)."""
    if not isinstance(values, tuple):
        return np.ascontiguousarray(values[cut])
    voxels, at = np.asarray(values[0]), np.asarray(values[1])
    inside = (voxels[:, axis] >= lo) & (voxels[:, axis] < hi)
    grid = np.full(shape, np.nan, dtype=np.result_type(at.dtype, np.float64))
    local = voxels[inside].copy()
    local[:, axis] -= lo
    grid[tuple(local.T)] = at[inside]
    return grid


def _imbalance(load: np.ndarray) -> float:
    """Largest load over the mean load (1: perfect balance)."""
    load = np.asarray(load, dtype=np.float64)
    return float(load.max() / load.mean()) if load.size and load.mean() > 0 else 1.0


class DistributedBackend:
    """A backend that runs ``inner`` on every rank of ``comm`` (see the module docstring);
    halos travel by ``transport`` (one of solver.config.HALO_TRANSPORTS); ``graphs``: replay
    captured multi-step CUDA graphs where the transport allows it (solver.distributed.replay)."""

    def __init__(self, inner: str | Backend = "auto", comm: Any = None,
                 axis: int | str = "longest", transport: str = "auto",
                 graphs: bool = False) -> None:
        self.transport = check_transport(transport)
        self.graphs = bool(graphs)
        self.comm = comm if comm is not None else world()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.axis = axis
        #: The transport the last allocation chose ('nccl' or 'host'), and why.
        self.transport_used: str | None = None
        self.transport_reason = ""
        self._link: Any = None  # NcclLink, built on first use
        if isinstance(inner, str) and may_use_gpu(inner):
            bind_local_gpu(self.comm)  # before CUDA starts in this process
        self.inner = get_backend(inner) if isinstance(inner, str) else inner
        self._solver: RankSolver | None = None  # the one the running command is about
        #: Every rank's live allocations by key: a run may hold two at once (a permeability
        #: run's coarse start and its fine run).
        self._solvers: dict[int, RankSolver] = {}
        self._next_key = 0
        self._counts_of: dict[int, np.ndarray] = {}  # rank 0: owned tiles per rank, by key
        #: Every rank: the global numbers of its owned tiles (its rows' order), by key.
        self._owned_of: dict[int, np.ndarray] = {}
        self._layers_of: dict[tuple[int, int], tuple] = {}  # (key, axis) -> owned_layers
        self._error: Exception | None = None  # rank 0: what a file command's ranks reported
        self._pending_extra: dict | None = None  # rank 0: a .vti's whole-grid extra arrays
        self._whole: Problem | None = None  # rank 0, while allocating: the whole problem
        self._tiled: tuple | None = None  # rank 0: what tile_regions assembled
        #: Every rank: (region source, what the ranks agreed) of the last tile_regions; rank 0
        #: the tiling it assembled (an allocation of it has each rank tile its own part).
        self._region: tuple | None = None
        self._region_tiling: Any = None
        #: Every rank: the global numbers of its part's tiles (None: the whole problem's), by key.
        self._part_tiles_of: dict[int, np.ndarray | None] = {}
        #: Every rank: its wall nodes (global numbers, local WallNodes), by key; rank 0 also
        #: which WallNodes they were cut from.
        self._walls_of: dict[int, tuple] = {}
        self._walls_cut: dict[int, Any] = {}
        self._pending_walls: tuple | None = None  # rank 0: (walls, each rank's nodes) to send
        self._stopped = False
        if self.is_root:
            atexit.register(self.shutdown)  # never leave workers waiting for a command

    #: Rank 0 sees gathered host arrays, whatever the ranks compute on.
    xp = np
    #: A checkpoint of parts is read by the ranks, each its own rows (:meth:`load_parts`).
    reads_parts = True
    #: It is no rank: the ranks' inner backends make their own steppers.
    phase_stepper = None

    @property
    def reductions(self) -> RankReductions:
        """Readouts' sums made on the ranks (each its own tiles; only numbers travel)."""
        return RankReductions(self)

    @property
    def name(self) -> str:
        """Name of the backend each rank runs ('numpy' or 'cupy')."""
        return self.inner.name

    @property
    def is_root(self) -> bool:
        """Whether this rank drives the run."""
        return self.rank == 0

    # -- rank 0: the Backend protocol -------------------------------------------------------
    def prepare(self, problem: Problem) -> None:
        """Build the whole problem's host tables ahead of :meth:`allocate`
        (:meth:`~solver.backends.base.Backend.prepare`); the ranks' own shares are made there."""
        prepare_problem_tables(problem)

    def allocate(self, problem: Problem) -> DistributedState:
        """Decompose ``problem`` over the ranks and allocate every rank's share."""
        # A fresh copy: a cached pull table of the global problem must not travel; the
        # openings' tables do (small; their values may have been set since they were built).
        key = self._next_key
        self._next_key += 1
        self._whole = dataclasses.replace(problem).use_iolets(problem.iolets)  # rank 0 only
        try:
            self._command("allocate", (self.inner.name, self.axis, self.transport,
                                       self.graphs, key))
        finally:
            self._whole = None
        return DistributedState(problem=problem, solver=self._solver, order=self._order, key=key,
                                counts=self._counts, halo_values=self._halo_values,
                                links=self._links, axis=self._axis,
                                host_tiles=self._host_tiles, bounds=self._bounds)

    def step(self, state: DistributedState, n: int = 1) -> float:
        """Advance every rank by ``n`` steps; rank 0's wall time to a closing barrier, s
        (with Windkessel outlets, stopping at each of their updates)."""
        start = time.perf_counter()
        while n > 0:
            k = n
            if state.windkessel is not None:  # up to the next update
                every = state.windkessel[0].every
                k = min(n, every - state.step % every)
            self._command("step", k, state.key)
            state.step += k
            n -= k
            if state.windkessel is not None:
                table, values, trace = state.windkessel
                if windkessel_update(table, values, self.iolet_flux(state), state.step, trace):
                    self._set_outlet_densities(state)
        return time.perf_counter() - start

    def populations(self, state: DistributedState) -> np.ndarray:
        """All owned tiles gathered on rank 0, float64 (n_tiles, q, a**d), global order."""
        return self._gathered_populations(state, np.float64)

    def device_populations(self, state: DistributedState, tiles=None) -> np.ndarray:
        """The gathered populations in the arithmetic precision (host, global order; of
        ``tiles``, a slice or an index array, if given): fields on rank 0, reduced in the
        precision one process reduces them in. Each rank casts its float64 rows (which hold
        every stored value exactly) before the gather: the values of a cast on rank 0, half
        the bytes in float32 and no float64 copy of the whole state on rank 0."""
        n = state.problem.tiling.n_tiles
        if isinstance(tiles, slice):
            tiles = None if tiles.indices(n) == (0, n, 1) else np.arange(n)[tiles]
        if tiles is None:
            return self._gathered_populations(state, state.problem.dtype)
        # Only those tiles travel (an opening's nodes, a chunk), read as a readout reads them.
        self._command("rows", (np.asarray(tiles, np.int64), np.dtype(state.problem.dtype).name),
                      state.key)
        return self._rows_out

    def _gathered_populations(self, state: DistributedState, dtype: Any) -> np.ndarray:
        """Every rank's owned rows as ``dtype``, gathered on rank 0 in global tile order."""
        self._command("gather", np.dtype(dtype).name, state.key)
        gathered, self._gathered = self._gathered, None  # not kept between reads
        out = np.empty_like(gathered)
        out[state.order] = gathered
        return out

    def tile_moments(self, state: DistributedState, tiles: Any = None
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Density (t, N) and velocity (d, t, N), float64 on rank 0, of all tiles or of
        ``tiles`` (a slice or an index array, global order): each rank computes its owned
        tiles' moments from its readout (``device_populations`` a readout chunk at a time,
        the arithmetic precision: what one process's readout reads; node by node the
        arithmetic of :func:`solver.fields.tile_moments`, so the same bits) and only the
        moments travel: 4 values a node instead of q populations."""
        n = state.problem.tiling.n_tiles
        if isinstance(tiles, slice):
            tiles = None if tiles.indices(n) == (0, n, 1) else np.arange(n)[tiles]
        self._command("moments", None if tiles is None else np.asarray(tiles, np.int64),
                      state.key)
        return self._moments_out

    def health_numbers(self, state: DistributedState, axis: int) -> np.ndarray:
        """The health check's numbers on rank 0 (:meth:`solver.readout.Readout.health`:
        finite, max speed, sums of u and j over fluid nodes, the end layers' mean densities
        along ``axis``), reduced on the ranks (:mod:`.reductions`): a few numbers a rank
        travel, not the moments of every node. Equal to one process's to rounding (the sums
        are added per rank, then in rank order)."""
        self._command("health", int(axis), state.key)
        return self._health_out

    def k_check_numbers(self, state: DistributedState, axis: int, window: tuple[int, int]
                        ) -> np.ndarray:
        """A permeability check's numbers on rank 0 (:class:`solver.rock.check.KCheck`:
        finite, max speed, sums of |u| and u along ``axis`` over the Darcy window of layers
        ``window``, its Darcy sums), reduced on the ranks (:mod:`.reductions`); equal to one
        process's to rounding."""
        self._command("k_check", (int(axis), (int(window[0]), int(window[1]))), state.key)
        return self._k_check_out

    def node_index(self, state: DistributedState, tile: np.ndarray, node: np.ndarray,
                   solid: np.ndarray) -> NodeIndex:
        """Where host (tile, XYZ node) pairs lie in the global tile order."""
        return node_index(tile, node, solid)

    def node_populations(self, state: DistributedState, index: NodeIndex) -> np.ndarray:
        """Populations (q, n) of ``index``'s nodes on rank 0 in the arithmetic precision: the
        ranks owning them send those nodes' values alone (a slice's plane, the probes'
        points), not the whole state."""
        self._command("nodes", (np.asarray(index.first, np.int64),
                                np.asarray(index.node, np.int64)), state.key)
        return with_rest_nodes(state.problem, self._nodes_out, index.solid)

    def wall_shear_vectors(self, state: DistributedState, walls: Any) -> np.ndarray | None:
        """Wall shear stress vectors (n, d) at ``walls``' nodes on rank 0 (float64, lattice
        units), computed by the rank owning each node from its own tiles and halo
        (:func:`solver.wall_shear.wall_shear_vector`, node by node the arithmetic rank 0 applied
        to the gathered state: the same bits); only the vectors travel, not the state. Each
        rank is sent its wall nodes once per allocation. None with one population copy (in
        place: a halo holds the other phase's values), where the readout gathers the state."""
        if state.problem.population_copies == 1:
            return None
        if self._walls_cut.get(state.key) is not walls:
            owner = np.empty(state.problem.tiling.n_tiles, dtype=np.int64)
            owner[state.order] = np.repeat(np.arange(self.size), self._counts_of[state.key])
            mine = owner[np.asarray(walls.tile[0])]  # direction 0: the node's own tile
            self._pending_walls = (walls, [np.flatnonzero(mine == r) for r in range(self.size)])
            self._command("walls", None, state.key)
            self._walls_cut[state.key] = walls
        self._command("wall_shear", None, state.key)
        return self._wall_out

    def tile_regions(self, source: Any, config: Any) -> tuple[Any, Any]:
        """The whole tiling of the region source ``source`` (``config``'s tile edge, offset
        search and periodic axes) built by every rank from its own slab and assembled on rank
        0 (:mod:`.region_tiling`): no rank reads the whole image. (Tiling, what the ranks
        agreed: offset, axis, slab bounds and the survey's fluid nodes and pore size.)"""
        from ..tiling import default_tile_edge

        a = config.tile_edge or default_tile_edge(len(source.shape))
        self._command("tile_regions", (source, int(a), tuple(config.periodic_axes()),
                                       tuple(float(f) for f in config.body_force),
                                       config.tile_offset == "best"))
        self._raise_reported()
        tiled, self._tiled = self._tiled, None
        return tiled

    @property
    def keeps_voxel_mask(self) -> bool:
        """Whether rank 0's ``solver run`` keeps the whole voxel mask (one rank only): over
        two or more ranks it keeps the tiling alone, which holds the same mask
        (:meth:`solver.simulation.Simulation.release_mask`)."""
        return self.size == 1

    @property
    def writes_parts(self) -> bool:
        """Whether checkpoints are written as per-rank parts (:mod:`solver.checkpoint_parts`):
        over two or more ranks; one rank writes the single-process file."""
        return self.size > 1

    def write_parts(self, state: DistributedState, folder: Any, step: int, dtype: Any
                    ) -> PartSet:
        """Every rank writes its owned tiles' populations (as ``dtype``) and their global
        numbers to ``folder`` (atomically, each file); the :class:`PartSet` naming them (what
        the manifest records). OSError, after every rank finished, if one failed (the previous
        checkpoint stays whole: its manifest is not replaced)."""
        parts = PartSet(folder=Path(folder), token=new_token(step),
                        tiles_per_part=np.asarray(self._counts_of[state.key], np.int64),
                        shape=(state.problem.tiling.n_tiles, state.problem.lattice.q,
                               state.problem.tiling.nodes_per_tile),
                        dtype=np.dtype(dtype), axis=state.axis, bounds=state.bounds)
        self._command("write_parts", parts, state.key)
        self._raise_reported()
        return parts

    def write_vti_pieces(self, state: DistributedState, path: Any,
                         voxel_size: float | None, origin: Any,
                         extra: dict[str, np.ndarray] | None = None) -> Path:
        """Every rank writes its slab's cells as a ``.vti`` piece (:mod:`solver.vtk_pieces`):
        ``rho``, ``u`` and ``solid`` from its own tiles, then ``extra`` (whole-grid arrays on
        rank 0, each rank sent its slab; or ``(voxels (n, d), values (n,))``, values at some
        voxels and NaN elsewhere, e.g. wall shear stress: each rank sent its slab's voxels
        alone, no whole grid made); rank 0 writes the
        ``.pvti`` at ``path`` naming them. The arrays and values of :func:`solver.io.write_vti`
        of the gathered fields. OSError, after every rank finished, if one failed."""
        path, extra = Path(path), dict(extra or {})
        names = [(name, np.asarray(values[1] if isinstance(values, tuple) else values).dtype.name)
                 for name, values in extra.items()]
        self._pending_extra = extra
        self._command("vti_piece", (path, voxel_size, origin, state.axis,
                                    tuple(int(b) for b in state.bounds), names), state.key)
        self._raise_reported()
        tiling = state.problem.tiling
        pieces = []
        for rank in range(self.size):
            lo, hi = tiling.slab_cells(state.axis, state.bounds[rank], state.bounds[rank + 1])
            if hi > lo:
                pieces.append((cell_extent(tiling.shape, state.axis, lo, hi),
                               piece_path(path, rank)))
        for stale in pieces_folder(path).glob("rank_*.vti"):  # of a run on more ranks
            if stale not in {p for _, p in pieces}:
                stale.unlink(missing_ok=True)
        remove_orphaned_temporaries(pieces_folder(path))  # a killed rank's half-written piece
        arrays = [("rho", np.float64, 1), ("u", np.float64, 3), ("solid", np.uint8, 1)]
        arrays += [(name, np.dtype(dtype), 1) for name, dtype in names]
        return write_pvti(path, tiling.shape, voxel_size, origin, arrays, pieces)

    def load_parts(self, state: DistributedState, parts: PartSet) -> None:
        """Every rank reads its owned tiles' rows from the parts (written by any number of
        ranks: re-slabbed by tile number, no whole state on any rank) and refreshes its halo;
        CheckpointError if a rank could not read its rows (no rank's state is changed then)."""
        self._command("load_parts", parts, state.key)
        self._raise_reported()

    def _raise_reported(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def readout_tiles(self, state: DistributedState) -> int:
        """Tiles per readout chunk: all (one gather per readout)."""
        return state.problem.tiling.n_tiles

    def state_bytes(self, problem: Problem) -> int:
        """Bytes of the whole run's populations and tiling tables (Tiling.memory_bytes)."""
        return problem.tiled_state_bytes()

    def to_host(self, array: np.ndarray) -> np.ndarray:
        """Rank 0's arrays are host arrays already."""
        return np.asarray(array)

    def set_populations(self, state: DistributedState, f: np.ndarray) -> None:
        """Scatter global populations (n_tiles, q, a**d) to the owners; refresh halos. Sent
        in ``f``'s float dtype (each rank widens its rows exactly): rank 0 makes one reordered
        copy of ``f``, not two float64 ones."""
        f = np.asarray(f)
        dtype = f.dtype if f.dtype in (np.float32, np.float64) else np.dtype(np.float64)
        self._scatter_rows = np.ascontiguousarray(f[state.order], dtype=dtype)
        self._command("scatter", dtype.name, state.key)

    def stored_populations(self, state: DistributedState) -> np.ndarray:
        """The gathered populations: float64 holds every stored value exactly (float16
        storage's decoded binary16 values too)."""
        return self.populations(state)

    def set_stored_populations(self, state: DistributedState, stored: np.ndarray) -> None:
        """Scatter a copy of :meth:`stored_populations` back, bit for bit."""
        self.set_populations(state, stored)

    def iolet_flux(self, state: DistributedState) -> np.ndarray | None:
        """Net mass flux into the fluid per opening link in the last step, gathered from the
        ranks holding the links, in global link order (host float64); None without driven
        openings."""
        tables = state.problem.iolets
        if tables is None:
            return None
        self._command("flux", None, state.key)
        out = np.empty(tables.n_links)
        for links, flux in zip(state.links, self._fluxes, strict=True):
            out[links] = flux
        return out

    def set_iolet_flux(self, state: DistributedState, flux: np.ndarray) -> None:
        """Give every rank its links' share of the per-link flux ``flux`` (global order)."""
        tables = state.problem.iolets
        if tables is None or np.shape(flux) != (tables.n_links,):
            raise ValueError(f"{np.shape(flux)} opening-link fluxes for a run with "
                             f"{0 if tables is None else tables.n_links}.")
        self._command("set_flux", np.asarray(flux, dtype=np.float64), state.key)

    def set_iolet_values(self, state: DistributedState, values: np.ndarray) -> None:
        """Set the opening links' target values (global order) on the ranks holding them."""
        tables = state.problem.iolets
        if tables is None or np.shape(values) != tables.value.shape:
            raise ValueError(f"{np.shape(values)} opening-link values for a run with "
                             f"{0 if tables is None else tables.n_links}.")
        self._command("set_values", np.asarray(values, dtype=np.float64), state.key)

    def set_windkessel(self, state: DistributedState, table: Any, values: np.ndarray) -> None:
        """Update ``table``'s Windkessel outlets from the state ``values`` (4, n) on: rank 0
        holds the models; :meth:`step` stops at each update interval, gathers the per-link
        flux of the step just taken (an outlet's links may lie on several ranks) and sets the
        outlets' densities on the ranks holding their links (:mod:`solver.windkessel`)."""
        if state.problem.iolets is None:
            raise ConfigError("This run has no openings' pass (driven openings) to couple a "
                              "Windkessel outlet to.")
        values = np.array(values, dtype=np.float64)
        state.windkessel = (table, values, np.zeros((TRACE, 2, table.n)))
        self._set_outlet_densities(state)

    def windkessel_state(self, state: DistributedState) -> np.ndarray | None:
        """The Windkessel outlets' state (4, n) float64 now, None without any."""
        return None if state.windkessel is None else state.windkessel[1].copy()

    def windkessel_trace(self, state: DistributedState) -> np.ndarray | None:
        """The outlets' (flow, pressure) per update slot (TRACE, 2, n), None without any."""
        return None if state.windkessel is None else state.windkessel[2].copy()

    def _set_outlet_densities(self, state: DistributedState) -> None:
        """The outlets' links' values: their densities (what the pass of one process
        writes), on the ranks holding them."""
        table, values, _ = state.windkessel
        tables = state.problem.iolets
        for o in range(table.n):
            tables.value[table.start[o]:table.stop[o]] = values[DENSITY, o]
        self.set_iolet_values(state, tables.value)

    def set_step(self, state: DistributedState, step: int) -> None:
        """Set every rank's step counter (the openings' soft start and waveforms; resume)."""
        state.step = int(step)
        self._command("set_step", int(step), state.key)

    def device_info(self) -> DeviceInfo:
        """Rank 0's device; bandwidths summed over ranks (identical devices assumed)."""
        info = DeviceInfo(self.inner.device_info())
        info["name"] = f"{info.get('name')} x {self.size} MPI ranks"
        info["ranks"] = self.size
        info["halo_transport"] = self.transport_used
        for key in ("peak_bandwidth", "copy_bandwidth"):
            if info.get(key):
                info[key] = info[key] * self.size
        return info

    def device_bytes(self) -> list[int | None]:
        """Device bytes each rank's arrays hold now, in rank order (the inner backend's
        ``used_memory``; None where it has none, e.g. NumPy)."""
        self._command("memory", None)
        return self._used

    # None: no estimate of the whole on one device (each rank checks its own part), the
    # ranks' devices each have their own memory (:meth:`device_bytes` says what they hold),
    # and rank 0 holds gathered host arrays (the ranks choose their halo transport).
    memory_required = free_memory = memory_capacity = used_memory = nccl_status = has_none

    def release(self, state: DistributedState) -> None:
        """Free every rank's state (the workers keep serving)."""
        self._command("release", None, state.key)

    def use_graphs(self, enabled: bool) -> None:
        """Replay captured multi-step CUDA graphs where the transport allows it, or launch
        every step from Python (the default), on every rank, from now on."""
        self._command("graphs", bool(enabled))

    def shutdown(self) -> None:
        """Release the serving ranks (rank 0 only; idempotent)."""
        if self.is_root and not self._stopped and self.size > 1:
            self._stopped = True
            self._broadcast(("stop", None, None))
        self._stopped = True
        self._close_link()

    def _close_link(self) -> None:
        if self._link is not None:  # every rank, right after the stop command
            for solver in self._solvers.values():  # their graphs hold NCCL work: first
                solver.release()
            self._solvers.clear()
            self._solver = None
            self._link.close()
            self._link = None

    def __enter__(self) -> DistributedBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- every rank --------------------------------------------------------------------------
    def serve(self) -> None:
        """Follow rank 0's commands until it shuts down (ranks other than 0).

        Ctrl-C is left to rank 0 (mpirun forwards it to every rank): rank 0 decides, e.g.
        writes a checkpoint, which needs the serving ranks alive.
        """
        with _ignore_sigint():
            while True:
                command, payload, key = self._receive()
                if command == "stop":
                    self._close_link()
                    return
                self._run(command, payload, key)

    def _broadcast(self, message: tuple[str, Any, int | None]) -> None:
        self.comm.Ibcast(np.ones(1, np.int8), root=0).Wait()  # wakes the idle workers
        self.comm.bcast(message, root=0)

    def _receive(self) -> tuple[str, Any, int | None]:
        # Poll with sleeps: a blocking bcast spins a core while rank 0 writes output, and
        # ranks often share the cores of one node.
        request = self.comm.Ibcast(np.zeros(1, np.int8), root=0)
        delay = 1e-4
        while not request.Test():
            time.sleep(delay)
            delay = min(2 * delay, IDLE_POLL_SECONDS)
        return self.comm.bcast(None, root=0)

    def _command(self, command: str, payload: Any, key: int | None = None) -> None:
        if self._stopped:
            raise RuntimeError("The DistributedBackend was shut down; create a new one.")
        if self.size > 1:
            self._broadcast((command, payload, key))
        self._run(command, payload, key)

    def _run(self, command: str, payload: Any, key: int | None = None) -> None:
        if command == "allocate":
            self._allocate(*payload)
            return
        self._solver = self._solvers.get(key) if key is not None else None
        self._key = key
        if self.is_root and key in self._counts_of:  # rank 0: that allocation's rows per rank
            self._counts = self._counts_of[key]
        try:
            getattr(self, f"_{command}")(payload)
        except BaseException:
            if self.size == 1:
                raise
            # A rank failing inside a collective leaves the others blocked in it for good.
            log.exception("Rank %d failed during %r; aborting all ranks.", self.rank, command)
            self.comm.Abort(1)

    def _allocate(self, inner: str, axis: int | str, transport: str, graphs: bool,
                  key: int) -> None:
        self.graphs = graphs
        self._solver = None
        error, report = None, TransportReport(False, "not asked")
        problem = decomposition = None
        try:
            if self.inner.name != inner:
                self.inner = get_backend(inner)
            if self.is_root:  # the whole problem is rank 0's alone
                problem = self._agreed_storage(self._whole)
                decomposition = decompose(problem.tiling, self.size, axis, problem.force)
            if transport != "host":
                report = local_report(self.inner)
        except Exception as exc:  # reported to rank 0, which raises it for the user
            error = exc
        gathered = self.comm.allgather((self._message(error), report))
        if not self._check(error, [e for e, _ in gathered]) or \
                not self._agree(transport, [r for _, r in gathered]):
            return
        factory = exchange_factory(self.transport_used, self.comm, self._link)
        part, error = self._share_parts(problem, decomposition)
        if part is not None:
            problem, decomposition = part.problem, part.decomposition
        self._axis = None if decomposition is None else decomposition.axis
        try:
            if error is None:
                self._solver = RankSolver(problem, decomposition, self.rank, self.inner,
                                          factory, graphs=graphs,
                                          link_numbers=None if part is None else part.links)
        except Exception as exc:
            error = exc
        if not self._check(error, self.comm.allgather(self._message(error))):
            return
        self._solvers[key] = self._solver
        owned = self._solver.layout.global_tiles[: self._solver.n_owned]
        owned = owned if part is None else part.global_tiles(owned)
        self._owned_of[key] = np.asarray(owned, dtype=np.int64)
        self._part_tiles_of[key] = None if part is None else np.asarray(part.tiles, np.int64)
        rows = self.comm.gather((owned, self._solver.plan.values_sent(), self._solver.links,
                                 problem.tiling.n_tiles))
        if self.is_root:  # where each rank's owned rows go in the global tile order
            self._bounds = np.asarray(decomposition.bounds, dtype=np.int64)
            self._counts = np.array([len(r[0]) for r in rows], dtype=np.int64)
            self._counts_of[key] = self._counts
            self._order = np.concatenate([r[0] for r in rows])
            self._halo_values = [r[1] for r in rows]
            self._links = [r[2] for r in rows]
            self._host_tiles = [int(r[3]) for r in rows]

    def _agreed_storage(self, problem: Problem) -> Problem:
        """``problem`` with the tile storage every rank steps: 'auto' resolved once, on the
        whole problem as a rank sees it (a part's own tile utilisation differs; tiled and
        compact storage agree to rounding only)."""
        if problem.tile_storage != "auto" or self.inner.phase_stepper is None:
            return problem
        from ..backends.plan import plan_for

        as_rank = dataclasses.replace(problem, owned=np.ones(problem.tiling.n_tiles, bool))
        storage = plan_for(as_rank.use_iolets(problem.iolets)).tile_storage
        return dataclasses.replace(problem, tile_storage=storage).use_iolets(problem.iolets)

    def _share_parts(self, problem: Problem | None, decomposition: Any
                     ) -> tuple[RankPart | None, Exception | None]:
        """Rank 0 cuts every other rank's part and sends it; (the part this rank received,
        or None on rank 0, which keeps the whole problem; the error, if its part failed)."""
        if self.is_root:
            # The tiling the ranks built by slabs (along the slowest axis, no opening links):
            # each rank tiles its own part again, rank 0 sends only the run's constants.
            own = self._region is not None and problem.tiling is self._region_tiling and \
                problem.iolets is None and self._region[1].axis == problem.tiling.ndim - 1 \
                and tuple(self._region[1].bounds) == tuple(decomposition.bounds)
            if own:
                log.info("Each rank tiles its own part from its slab of the image.")
            for rank in range(1, self.size):
                try:
                    message = ((dataclasses.replace(problem, tiling=None), None) if own else
                               (rank_part(problem, decomposition, rank), None))
                except Exception as exc:  # the rank reports it; rank 0 raises it
                    message = (None, f"cutting rank {rank}'s part on rank 0: {exc}")
                self.comm.send(message, dest=rank, tag=PART_TAG)
            return None, None
        part, why = self.comm.recv(source=0, tag=PART_TAG)
        if why is None and isinstance(part, Problem):  # its own part, from its own slab
            try:
                part = own_part(*self._region, part, self.rank)
            except Exception as exc:  # reported to rank 0 with the others' errors
                part, why = None, f"tiling rank {self.rank}'s own part: {exc}"
        return part, None if why is None else RuntimeError(why)

    def _message(self, error: Exception | None) -> str | None:
        return None if error is None else f"rank {self.rank}: {error}"

    def _check(self, error: Exception | None, errors: list[str | None]) -> bool:
        """True if no rank failed; else free this rank's share and (rank 0) raise."""
        if not any(errors):
            return True
        if self._solver is not None:
            self._solver.release()
        self._solver = None
        if self.is_root:
            if error is not None:
                raise error
            raise RuntimeError("; ".join(e for e in errors if e))
        return False

    def _agree(self, transport: str, reports: list[TransportReport]) -> bool:
        """Choose the transport from all ranks' reports (the same answer on every rank) and
        set it up; False (rank 0: raise) if the requested one cannot run."""
        try:
            self.transport_used, self.transport_reason = choose_transport(transport, reports)
        except Exception:  # every rank computed the same refusal from the same reports
            if self.is_root:
                raise
            return False
        if self.is_root:
            log.info("Halo transport: %s (%s)", self.transport_used, self.transport_reason)
        if self.transport_used == "nccl" and self._link is None:
            try:
                self._link = self.inner.nccl_link(self.comm)  # collective over all ranks
            except BaseException:
                # The others are inside (or past) ncclCommInitRank and cannot be told.
                log.exception("Rank %d: NCCL set-up failed; aborting all ranks.", self.rank)
                self.comm.Abort(1)
        return True

    def _step(self, n: int) -> None:
        self._solver.step(n)
        self.comm.Barrier()

    def _gather(self, dtype: str | None) -> None:
        from mpi4py.util.dtlib import from_numpy_dtype

        dtype = np.dtype(dtype or np.float64)
        block = np.ascontiguousarray(self._solver.owned_populations(), dtype=dtype)
        q, n_node = block.shape[1:]
        recv = None
        if self.is_root:
            self._gathered = np.empty((int(self._counts.sum()), q, n_node), dtype=dtype)
            recv = [self._gathered, self._counts * q * n_node, None, from_numpy_dtype(dtype)]
        self.comm.Gatherv(block, recv, root=0)

    def _owned_rows(self, dtype: Any) -> np.ndarray:
        """This rank's owned rows (n_owned, q, a**d) as ``dtype``."""
        return np.ascontiguousarray(self._solver.owned_populations(), dtype=dtype)

    def _moments(self, tiles: np.ndarray | None) -> None:
        owned = self._owned_of[self._key]
        pick = np.arange(owned.size) if tiles is None else \
            np.flatnonzero(np.isin(owned, tiles))
        rho, u = self._owned_moments(pick, tiles is None)
        where = owned[pick]
        got = self._gather_blocks([rho, *u], where, tiles, np.float64)
        if self.is_root:
            self._moments_out = (got[0], np.stack(got[1:]) if len(got) > 1 else
                                 np.empty((0, *got[0].shape)))

    def _health(self, axis: int) -> None:
        layers = self._layers_of.get((self._key, axis))
        if layers is None:  # the end layers' owned nodes, found once per allocation and axis
            layers = self._layers_of[(self._key, axis)] = owned_layers(self._solver, axis)
        got = self.comm.gather(owned_health(self._solver, layers), root=0)
        if self.is_root:
            self._health_out = combine_health(got, self._solver.problem.lattice.d)

    def _k_check(self, payload: tuple[int, tuple[int, int]]) -> None:
        got = self.comm.gather(owned_k_check(self._solver, *payload), root=0)
        if self.is_root:
            self._k_check_out = combine_partials(got)

    def _owned_moments(self, pick: np.ndarray, contiguous: bool = True
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Density (n, N) and velocity (d, n, N) of the owned tiles ``pick`` (ascending rows;
        ``contiguous``: all of them), a readout chunk at a time, float64."""
        solver = self._solver
        problem = solver.problem
        n_node = problem.tiling.nodes_per_tile
        rho = np.empty((pick.size, n_node))
        u = np.empty((problem.lattice.d, pick.size, n_node))
        per = solver.readout_tiles()
        for first in range(0, pick.size, per):  # a readout chunk at a time, no whole copy
            part = slice(first, min(pick.size, first + per))
            which = slice(int(pick[first]), int(pick[part.stop - 1]) + 1) if contiguous \
                else pick[part]
            rho[part], u[:, part] = tile_moments(solver.owned_readout(which), problem.lattice,
                                                 problem.force, problem.incompressible)
        return rho, u

    def _rows(self, payload: tuple[np.ndarray, str]) -> None:
        tiles, dtype = payload
        owned = self._owned_of[self._key]
        pick = np.flatnonzero(np.isin(owned, tiles))
        rows = np.asarray(self._solver.owned_readout(pick), dtype=dtype)
        shape = rows.shape[1:]
        got = self._gather_blocks([rows.reshape(len(pick), -1)], owned[pick], tiles, dtype)
        if self.is_root:
            self._rows_out = got[0].reshape(len(tiles), *shape)

    def _gather_blocks(self, blocks: list[np.ndarray], where: np.ndarray,
                       tiles: np.ndarray | None, dtype: Any) -> list[np.ndarray] | None:
        """Rank 0: the 2D blocks (n, m) each rank holds for its global tiles ``where``, as
        ``dtype``, placed in the order of ``tiles`` (None: global order), one Gatherv each."""
        from mpi4py.util.dtlib import from_numpy_dtype

        dtype = np.dtype(dtype)
        counts = np.asarray(self.comm.gather(len(where), root=0) or [0], np.int64)
        places = self.comm.gather(where, root=0)
        out = []
        for block in blocks:
            block = np.ascontiguousarray(block, dtype=dtype)
            recv = None
            if self.is_root:
                got = np.empty((int(counts.sum()), block.shape[1]), dtype=dtype)
                recv = [got, counts * block.shape[1], None, from_numpy_dtype(dtype)]
            self.comm.Gatherv(block, recv, root=0)
            if self.is_root:
                out.append(self._in_order(got, np.concatenate(places), tiles))
        return out if self.is_root else None

    @staticmethod
    def _in_order(got: np.ndarray, where: np.ndarray, tiles: np.ndarray | None) -> np.ndarray:
        """Rows ``got`` of global tiles ``where`` reordered as ``tiles`` (None: 0..T-1)."""
        if tiles is None:
            if np.array_equal(where, np.arange(where.size)):
                return got
            out = np.empty_like(got)
            out[where] = got
            return out
        order = np.argsort(where, kind="stable")
        return got[order[np.searchsorted(where[order], tiles)]]

    def _nodes(self, payload: tuple[np.ndarray, np.ndarray]) -> None:
        tiles, nodes = payload
        owned = self._owned_of[self._key]
        sorted_at = np.argsort(owned, kind="stable")
        at = np.minimum(np.searchsorted(owned[sorted_at], tiles), max(owned.size - 1, 0))
        mine = np.flatnonzero(owned[sorted_at][at] == tiles) if owned.size else \
            np.zeros(0, np.int64)
        local, where = np.unique(sorted_at[at[mine]], return_inverse=True)
        rows = self._solver.owned_readout(local)  # only the tiles holding the nodes
        values = rows[where.reshape(-1), :, nodes[mine]]  # (k, q)
        got = self.comm.gather((mine, values), root=0)
        if self.is_root:
            q = self._solver.problem.lattice.q
            out = np.zeros((q, tiles.size), dtype=self._solver.problem.dtype)
            for which, vals in got:
                out[:, which] = vals.T
            self._nodes_out = out

    def _write_parts(self, parts: PartSet) -> None:
        error = None
        try:
            tiles_path, rows_path = parts.paths(self.rank)
            tiles_path.parent.mkdir(parents=True, exist_ok=True)
            _save(rows_path, self._owned_rows(parts.dtype))
            _save(tiles_path, self._owned_of[self._key])
        except Exception as exc:  # reported to rank 0 after every rank is done
            error = f"rank {self.rank}: {type(exc).__name__}: {exc}"
        self._collect(error, "Writing the checkpoint's per-rank parts", OSError)

    def _vti_piece(self, payload: tuple) -> None:
        path, voxel_size, origin, axis, bounds, names = payload
        tiling = self._solver.problem.tiling
        first, end = bounds[self.rank], bounds[self.rank + 1]
        lo, hi = tiling.slab_cells(axis, first, end)
        extra = self._extra_slabs(tiling, axis, bounds, names)
        error = None
        try:
            if hi > lo:
                self._write_piece(piece_path(path, self.rank), (axis, first, end, lo),
                                  voxel_size, origin, extra)
        except Exception as exc:  # reported to rank 0 after every rank is done
            error = f"rank {self.rank}: {type(exc).__name__}: {exc}"
        self._collect(error, "Writing the .vti pieces", OSError)

    def _extra_slabs(self, tiling: Any, axis: int, bounds: tuple, names: list
                     ) -> dict[str, np.ndarray]:
        """Each rank's slab of rank 0's whole-grid ``extra`` arrays (sent point to point)."""
        if not names:
            return {}
        if not self.is_root:
            return self.comm.recv(source=0)
        extra, self._pending_extra = self._pending_extra, None
        mine = {}
        for rank in range(self.size):
            lo, hi = tiling.slab_cells(axis, bounds[rank], bounds[rank + 1])
            cut = tuple(slice(lo, hi) if k == axis else slice(None) for k in range(tiling.ndim))
            shape = tuple(hi - lo if k == axis else n for k, n in enumerate(tiling.shape))
            slabs = {name: _slab(extra[name], cut, axis, lo, hi, shape) for name, _ in names}
            if rank == 0:
                mine = slabs
            else:
                self.comm.send(slabs, dest=rank)
        return mine

    def _write_piece(self, path: Path, slab: tuple, voxel_size: float | None, origin: Any,
                     extra: dict[str, np.ndarray]) -> None:
        """This rank's owned tiles' fields over its slab's cells, written as a piece."""
        axis, first, end, lo = slab
        solver = self._solver
        problem, n = solver.problem, solver.n_owned
        tiling = problem.tiling
        rho, u = self._owned_moments(np.arange(n))
        solid, at = tiling.solid[:n], tiling.tiles[:n]
        rho = tiling.scatter_slab(np.where(solid, np.nan, rho), at, axis, first, end)
        u = np.where(solid, np.nan, u).transpose(1, 2, 0)
        u = np.moveaxis(tiling.scatter_slab(u, at, axis, first, end), -1, 0)
        mask = tiling.scatter_slab(solid, at, axis, first, end, fill=True)
        start = [0] * tiling.ndim
        start[axis] = lo
        grid = cell_image(rho, u, {"solid": mask.astype(np.uint8), **extra}, voxel_size,
                          origin, start)
        save_image(grid, path)

    def _load_parts(self, parts: PartSet) -> None:
        error, rows = None, None
        try:
            rows = parts.read_rows(self._owned_of[self._key])
        except Exception as exc:  # every rank must learn it before the halo exchange
            error = f"rank {self.rank}: {exc}"
        if self._collect(error, "Resuming from the checkpoint's parts", CheckpointError,
                         everyone=True):
            self._solver.set_owned_populations(rows.astype(np.float64))  # collective

    def _collect(self, error: str | None, doing: str, kind: type[Exception],
                 everyone: bool = False) -> bool:
        """Whether no rank failed; rank 0 keeps the failures as a ``kind`` error for its
        caller (raised outside the command, so no rank aborts: an OSError of a write is the
        run's output error, a CheckpointError of a read the user's)."""
        errors = self.comm.allgather(error) if everyone else self.comm.gather(error, root=0)
        if self.is_root and any(errors):
            self._error = kind(f"{doing} failed: " + "; ".join(e for e in errors if e))
        return not any(errors or [])

    def _scatter(self, dtype: str | None) -> None:
        from mpi4py.util.dtlib import from_numpy_dtype

        dtype = np.dtype(dtype or np.float64)
        solver = self._solver
        lat, tiling = solver.problem.lattice, solver.problem.tiling
        block = np.empty((solver.n_owned, lat.q, tiling.nodes_per_tile), dtype=dtype)
        send = None
        if self.is_root:
            send = [self._scatter_rows, self._counts * lat.q * tiling.nodes_per_tile, None,
                    from_numpy_dtype(dtype)]
        self.comm.Scatterv(send, block, root=0)
        self._scatter_rows = None
        solver.set_owned_populations(block.astype(np.float64, copy=False))

    def _walls(self, _: Any) -> None:
        from ..wall_shear import WallNodes

        if self.is_root:  # each rank its own nodes' tables (global tile numbers), no others'
            (walls, picks), self._pending_walls = self._pending_walls, None
            for rank in range(self.size):
                pick = picks[rank]
                part = (pick, walls.normals[pick], walls.tile[:, pick],
                        walls.direction[:, pick], walls.node[:, pick])
                if rank == 0:
                    mine = part
                else:
                    self.comm.send(part, dest=rank, tag=PART_TAG)
        else:
            mine = self.comm.recv(source=0, tag=PART_TAG)
        pick, normals, tile, direction, node = mine
        part_tiles = self._part_tiles_of[self._key]
        numbered = tile if part_tiles is None else np.searchsorted(part_tiles, tile)
        held = np.asarray(self._solver.layout.global_tiles, dtype=np.int64)
        sorter = np.argsort(held, kind="stable")
        local = sorter[np.searchsorted(held[sorter], numbered)]
        tiles, where = np.unique(local, return_inverse=True)  # the tiles the nodes read
        self._walls_of[self._key] = (pick, tiles, WallNodes(
            np.zeros((len(pick), 0), np.int64), normals, where.reshape(local.shape), direction,
            node))

    def _wall_shear(self, _: Any) -> None:
        from ..wall_shear import wall_shear_vector

        pick, tiles, walls = self._walls_of[self._key]
        f = self._solver.owned_readout(tiles) if len(pick) else None
        vectors = wall_shear_vector(self._solver.problem, f, walls) if len(pick) else \
            np.zeros((0, self._solver.problem.lattice.d))
        got = self.comm.gather((pick, np.asarray(vectors, dtype=np.float64)), root=0)
        if self.is_root:
            out = np.empty((sum(len(p) for p, _ in got), self._solver.problem.lattice.d))
            for where, values in got:
                out[where] = values
            self._wall_out = out

    def _tile_regions(self, payload: tuple) -> None:
        from .region_tiling import tile_regions

        source, a, periodic, force, search = payload
        try:
            tiled = tile_regions(source, a, periodic, force, self.axis, search, self.comm)
        except (RuntimeError, ConfigError) as exc:  # raised on every rank alike: none waits
            if self.is_root:
                self._error = exc
            return
        self._region = (source, tiled[1])  # every rank: its own part is tiled from it
        if self.is_root:
            self._tiled = tiled
            self._region_tiling = tiled[0]

    def _flux(self, _: Any) -> None:
        self._fluxes = self.comm.gather(self._solver.iolet_flux(), root=0)

    def _memory(self, _: Any) -> None:
        self._used = self.comm.gather(self.inner.used_memory(), root=0)

    def _set_flux(self, flux: np.ndarray) -> None:
        self._solver.set_iolet_flux(flux)

    def _set_values(self, values: np.ndarray) -> None:
        self._solver.set_iolet_values(values)

    def _set_step(self, step: int) -> None:
        self._solver.set_step(step)

    def _graphs(self, enabled: bool) -> None:
        self.graphs = enabled  # for later allocations too
        for solver in self._solvers.values():
            if solver.graphs is not None:
                solver.graphs.enabled = enabled

    def _release(self, _: Any) -> None:
        for key, solver in list(self._solvers.items()):
            if solver is self._solver:
                solver.release()
                del self._solvers[key]
                self._owned_of.pop(key, None)
                self._part_tiles_of.pop(key, None)
                self._walls_of.pop(key, None)
                self._walls_cut.pop(key, None)
                for held in [k for k in self._layers_of if k[0] == key]:
                    del self._layers_of[held]
        self._solver = None
