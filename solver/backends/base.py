"""The interface every compute backend implements.

A backend is chosen once (:func:`solver.backends.get_backend`) and owns the array module, the
device and the precision; nothing outside ``solver/backends`` asks which one it is. The state it
allocates holds two copies of the populations in the layout ``f[copy][tile][i][node_in_tile]``
in the problem's storage (:mod:`solver.storage`); ``state.current`` says which copy holds the
latest values. The CuPy backend can instead keep one copy updated in place
(``Problem.streaming``, see :mod:`solver.backends.cuda.streaming`). Everything that reads or
writes populations through this interface sees them decoded, in the natural layout and the
arithmetic precision or float64, whichever way they are stored.

Solid nodes (tile padding included) carry no physics, but every backend keeps the same values
there so that parity tests and checkpoints compare whole arrays exactly: the rest equilibrium
``w_i rho0`` (:meth:`~solver.problem.Problem.rest_populations`, as stored: binary16 zero with
float16 storage, whose shift is the rest state) in every copy, at all times. ``allocate``
starts from it everywhere, ``set_populations`` puts it back into the solid nodes of every copy
(:func:`with_rest_solids`), and a step writes nothing else there: the NumPy backend, the
paper-layout and the in-place kernels leave solid nodes alone, the two-copy XYZ-layout kernels
store exactly this value into the solid nodes whose 32-byte sector of the written copy also
holds a fluid node (``templates/tiled_lbm.cu``). Observables read fluid nodes only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import numpy as np

from ..problem import Problem

__all__ = ["Backend", "DeviceInfo", "with_rest_solids", "NodeIndex", "node_index",
           "tiled_node_populations", "with_rest_nodes", "Reductions", "LocalReductions",
           "LOCAL_REDUCTIONS", "prepare_problem_tables", "has_none"]

#: The problem's cached host tables every backend's allocation reads (cached properties of
#: :class:`~solver.problem.Problem`): boundary kinds and tables, the openings' links, the
#: storage and the sector mix (0.3-0.6 s for a 200³ pressure-driven box on the CPU).
PROBLEM_TABLES = ("storage", "iolets", "sector_mix", "boundary")


def prepare_problem_tables(problem: Problem) -> None:
    """Build ``problem``'s cached host tables that allocation reads (:data:`PROBLEM_TABLES`),
    host work only: the part of :meth:`Backend.prepare` every backend shares."""
    for table in PROBLEM_TABLES:
        getattr(problem, table)


def has_none(_backend: Any, *_: Any) -> None:
    """A backend's answer for a :class:`Backend` part it has none of (no device memory of its
    own, no memory pool, no NCCL, no estimate): None, as the protocol's docstrings say."""
    return None


class DeviceInfo(dict):
    """Name, memory (bytes) and peak bandwidth (bytes/s, None if unknown) of a device."""


def with_rest_solids(problem: Problem, stored, xp: Any = np, tiles: slice | None = None):
    """``stored`` (n_tiles, q, a**d, XYZ order, storage dtype; of the tiles ``tiles`` only
    when given) with the stored rest equilibrium in solid nodes.

    The rule of the module doc; returns a new ``xp`` array.
    """
    rest = xp.asarray(problem.storage.encode(problem.rest_populations()[:, None]))[None]
    solid = problem.tiling.solid if tiles is None else problem.tiling.solid[tiles]
    solid = xp.asarray(solid)[:, None, :]
    return xp.where(solid, rest, xp.asarray(stored, dtype=problem.storage_dtype))


class NodeIndex(NamedTuple):
    """Where chosen nodes' populations lie in a state (built once per node set, backend
    arrays): ``first`` (n,) the index of direction 0 in the flat stored copy, ``step`` (n,)
    what direction i adds i times (None: the tiled layout's in-tile slot table is used, and
    ``first`` is the node's tile and ``node`` its XYZ in-tile index), ``solid`` (n,) the nodes
    without populations (they read the rest equilibrium)."""

    first: Any
    step: Any
    node: Any
    solid: Any

    def __len__(self) -> int:  # type: ignore[override]
        return int(self.solid.shape[0])

    def part(self, nodes: slice) -> NodeIndex:
        """The index of the nodes ``nodes`` (a slice) of this one."""
        return NodeIndex(*(None if a is None else a[nodes] for a in self))


def node_index(tile: np.ndarray, node: np.ndarray, solid: np.ndarray, xp: Any = np
               ) -> NodeIndex:
    """The :class:`NodeIndex` of host (tile, XYZ in-tile node) pairs in a tiled-layout state
    (``solid``: nodes to read as rest, their tile and node may be anything)."""
    tile = np.where(solid, 0, tile).astype(np.int64)
    return NodeIndex(xp.asarray(tile), None, xp.asarray(np.where(solid, 0, node).astype(np.int64)),
                     xp.asarray(np.asarray(solid, dtype=bool)))


def with_rest_nodes(problem: Problem, values, solid, xp: Any = np):
    """Decoded populations ``values`` (q, n) with the decoded stored rest equilibrium (what
    :meth:`Backend.device_populations` shows in a solid node) where ``solid`` (n,)."""
    storage = problem.storage
    stored = np.asarray(storage.encode(problem.rest_populations()[:, None])).astype(
        problem.storage_dtype)
    rest = xp.asarray(np.asarray(storage.decode(stored)))
    return xp.where(solid[None, :], rest.astype(values.dtype), values)


def tiled_node_populations(problem: Problem, stored, index: NodeIndex, slots=None,
                           xp: Any = np):
    """Latest populations (q, n) of ``index``'s nodes from a tiled-layout copy ``stored``
    (n_tiles, q, a**d, storage dtype; ``slots`` (q, a**d): the in-tile slot of each direction
    and XYZ node, None: XYZ), decoded to the arithmetic precision, rest at solid nodes."""
    q = problem.lattice.q
    i = xp.arange(q)[:, None]
    where = index.node[None, :] if slots is None else slots[:, index.node]
    values = problem.storage.decode(stored[index.first[None, :], i, where], xp)
    return with_rest_nodes(problem, values, index.solid, xp)


class Reductions(Protocol):
    """Where a readout's sums are made, declared once per backend (:attr:`Backend.reductions`):
    each method is given ``local``, the caller's own computation on the device holding the
    whole state, and returns the same values (host float64 numbers; moments as backend
    arrays), made there or elsewhere (MPI ranks: each reduces its own tiles, only numbers
    travel; :class:`solver.distributed.reductions.RankReductions`). Lattice units."""

    def tile_moments(self, state: Any, tiles: Any, local: Callable[[], tuple[Any, Any]]
                     ) -> tuple[Any, Any]:
        """Density (t, N) and velocity (d, t, N), float64, of the tiles ``tiles`` (a slice or
        an index array) of ``state``: :meth:`solver.readout.Readout.chunks`' moments."""

    def health_numbers(self, state: Any, axis: int, local: Callable[[], np.ndarray]
                       ) -> np.ndarray:
        """The run monitor's health numbers of ``state`` along ``axis``
        (:meth:`solver.readout.Readout.health`)."""

    def k_check_numbers(self, state: Any, axis: int, window: tuple[int, int],
                        local: Callable[[], np.ndarray]) -> np.ndarray:
        """A permeability check's numbers of ``state`` over the layers ``window`` along
        ``axis`` (:class:`solver.rock.check.KCheck`)."""

    def wall_shear_vectors(self, state: Any, walls: Any) -> np.ndarray | None:
        """Wall shear stress vectors (n, d) at ``walls``' nodes, float64 on the host, made
        where the state lives; None where the caller computes them itself
        (:meth:`solver.readout.Readout.wall_shear_vectors`)."""


class LocalReductions:
    """The :class:`Reductions` of a backend on one device: every sum is the caller's own."""

    def tile_moments(self, state: Any, tiles: Any, local: Callable[[], tuple[Any, Any]]
                     ) -> tuple[Any, Any]:
        """``local()``: the moments of the tiles read on the state's device."""
        return local()

    def health_numbers(self, state: Any, axis: int, local: Callable[[], np.ndarray]
                       ) -> np.ndarray:
        """``local()``: the health numbers summed on the state's device."""
        return local()

    def k_check_numbers(self, state: Any, axis: int, window: tuple[int, int],
                        local: Callable[[], np.ndarray]) -> np.ndarray:
        """``local()``: the check's numbers summed on the state's device."""
        return local()

    def wall_shear_vectors(self, state: Any, walls: Any) -> np.ndarray | None:
        """None: the readout computes them on the state's device."""
        return None


#: The one :class:`LocalReductions` (it holds nothing), what single-device backends declare.
LOCAL_REDUCTIONS = LocalReductions()


class Backend(Protocol):
    """A compute backend: allocation, stepping and host read-back."""

    name: str
    #: Array module of the state (``numpy`` or ``cupy``).
    xp: Any
    #: Where its readouts' sums are made (:class:`Reductions`; one device:
    #: :data:`LOCAL_REDUCTIONS`).
    reductions: Reductions
    #: Whether checkpoints and fields are written as per-rank parts and pieces
    #: (:mod:`solver.checkpoint_parts`, :mod:`solver.vtk_pieces`; ``write_parts``): over two
    #: or more MPI ranks. One device: False.
    writes_parts: bool
    #: Whether a checkpoint of parts is read by the backend's ranks, each its own tiles'
    #: rows (``load_parts``), rather than assembled once and set. One device: False.
    reads_parts: bool
    #: Whether ``solver run`` keeps the whole voxel mask beside the tiling (one device: True;
    #: over two or more ranks rank 0 keeps the tiling alone).
    keeps_voxel_mask: bool
    #: A rank's two-phase stepper of its own, called ``(problem, n_boundary_tiles,
    #: n_owned_tiles)`` (:mod:`solver.distributed.stepper`; CuPy: tile-range launches), None
    #: where the backend has none (NumPy: the distributed package steps it through this
    #: interface; a distributed wrapper is no rank).
    phase_stepper: Callable[[Problem, int, int], Any] | None

    def prepare(self, problem: Problem) -> None:
        """Build, on the host, the tables :meth:`allocate` of ``problem`` reads, without device
        memory, so that a run's set-up can be made ahead (a rock study makes the next run's in
        a worker thread while the device steps the current one); :meth:`allocate` then only
        uploads them (and builds whatever was not prepared). Holds host memory until that
        allocation or until ``problem`` is dropped."""

    def allocate(self, problem: Problem) -> Any:
        """Allocate and initialise the state of ``problem`` (equilibrium at rest)."""

    def step(self, state: Any, n: int) -> float:
        """Advance ``state`` by ``n`` time steps; return the elapsed device time in seconds."""

    def populations(self, state: Any) -> np.ndarray:
        """Latest populations as a host float64 array (n_tiles, q, a**d)."""

    def device_populations(self, state: Any, tiles: Any = None) -> Any:
        """Latest populations as a backend array (n_tiles, q, a**d), XYZ in-tile order, decoded
        to the arithmetic precision; of ``tiles`` only (a slice or an index array) if given."""

    def node_index(self, state: Any, tile: np.ndarray, node: np.ndarray,
                   solid: np.ndarray) -> NodeIndex:
        """Where the populations of host (tile, XYZ in-tile node) pairs lie in ``state``
        (``solid``: nodes read as rest), for :meth:`node_populations`; built once per set."""

    def node_populations(self, state: Any, index: NodeIndex) -> Any:
        """Latest populations (q, n) of ``index``'s nodes as a backend array, decoded to the
        arithmetic precision, the same values as :meth:`device_populations` shows there, read
        straight from the stored layout (no tile is converted)."""

    def fluid_populations(self, state: Any, part: slice) -> Any:
        """Latest populations (q, k) of the fluid nodes ``part`` (tile order, XYZ within a
        tile), arithmetic precision, read as stored: only asked of a state whose readout is
        chunked (:meth:`readout_tiles` below the tile count), for its health check."""

    def readout_tiles(self, state: Any) -> int:
        """Tiles per chunk of a readout (fields, health checks, checkpoints): all of them where
        the state holds the tiled layout already, fewer where reading converts (fluid-compacted
        storage), so that a readout's temporaries stay bounded."""

    def state_bytes(self, problem: Problem) -> int:
        """Bytes of the resident state of a run of ``problem`` as :meth:`allocate` makes it
        (population copies and tables), known before anything is allocated."""

    def to_host(self, array: Any) -> np.ndarray:
        """Copy a backend array to a host NumPy array."""

    def set_populations(self, state: Any, f: np.ndarray, tiles: slice | None = None) -> None:
        """Overwrite the latest populations from a host or backend array (n_tiles, q, a**d),
        rounded to the storage; of the tiles ``tiles`` only (a slice, ``f`` of their count)
        when given: a start built a chunk at a time, never the whole state at once.

        Solid nodes of both copies get the rest equilibrium, whatever ``f`` holds there.
        """

    def stored_populations(self, state: Any) -> Any:
        """The latest populations exactly as stored: a backend array (maybe a view of the
        state) in the storage dtype and the state's own layout, which only
        :meth:`set_stored_populations` of the same state reads back. Copy it to keep it: a
        rollback copy of a run at its stored size, bit for bit (:mod:`solver.last_good`)."""

    def set_stored_populations(self, state: Any, stored: Any) -> None:
        """Overwrite the latest populations with a host or backend copy of what
        :meth:`stored_populations` gave, bit for bit."""

    def iolet_flux(self, state: Any) -> np.ndarray | None:
        """Net mass flux into the fluid per opening link in the last step (host float64,
        lattice units), None without driven openings."""

    def set_iolet_values(self, state: Any, values: np.ndarray) -> None:
        """Set the opening links' target values (m,: Ladd terms, densities; lattice units) the
        pass applies from the next step (a Windkessel outlet's pressure)."""

    def set_iolet_flux(self, state: Any, flux: np.ndarray) -> None:
        """Set what :meth:`iolet_flux` reads until the next step (a resumed or restored run
        reports the flows of the step it was saved at)."""

    def set_windkessel(self, state: Any, table: Any, values: np.ndarray) -> None:
        """Update ``table``'s Windkessel outlets (:class:`solver.windkessel.WindkesselTable`)
        in the openings' pass from the state ``values`` (4, n) on, on the backend."""

    def windkessel_state(self, state: Any) -> np.ndarray | None:
        """The Windkessel outlets' state (4, n) float64 now (host), None without any."""

    def windkessel_trace(self, state: Any) -> np.ndarray | None:
        """The outlets' (flow, pressure) per update slot (TRACE, 2, n) (host), None."""

    def set_step(self, state: Any, step: int) -> None:
        """Set the step counter that seeds the stochastic rounding of float16 storage
        (:mod:`solver.storage`); a checkpoint restores it so that a resumed run continues bit
        for bit."""

    def device_info(self) -> DeviceInfo:
        """What the backend runs on."""

    def memory_required(self, problem: Problem) -> int | None:
        """Bytes a run of ``problem`` needs on this backend's device at its peak (state,
        tables and the temporaries of a health check), known before anything is allocated;
        None where the backend has no estimate of its own (a distributed wrapper: its ranks
        check their own parts; :func:`solver.memory.assess_memory` judges the state's bytes)."""

    def free_memory(self) -> int | None:
        """Bytes a new allocation can use on this backend's device (None if unknown: a
        distributed wrapper, whose ranks each have their own)."""

    def memory_capacity(self) -> int | None:
        """Bytes of memory of this backend's device, all of it, not what is free now (what
        ``Problem.device_capacity`` holds for the plan, :func:`solver.backends.plan.plan_for`);
        None where it has none to give (NumPy: host memory; a distributed wrapper)."""

    def used_memory(self) -> int | None:
        """Device bytes this process's arrays hold now (CuPy: its memory pool in use); None
        where the backend does not count them (NumPy; a distributed wrapper)."""

    def nccl_status(self) -> tuple[bool, str] | None:
        """Whether NCCL can carry halos between this backend's device arrays, and its version
        or what is missing (:mod:`solver.distributed.transport`); None where the populations
        live in host memory (NumPy; a distributed wrapper)."""

    def release(self, state: Any) -> None:
        """Free the state's memory."""
