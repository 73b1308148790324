"""NumPy reference backend: fused pull stream-collide on the tiled layout.

The oracle for every other backend and the fallback without a GPU. One step gathers the streamed
populations of all fluid nodes through the precomputed pull table, collides them and scatters
the result into the other copy. Work is split into chunks of fluid nodes so that the
temporaries of the collision stay in cache, and chunks run on a thread pool (NumPy releases the
GIL inside its kernels), which matters on the small CPU machines this backend serves.

With float16 storage (:mod:`solver.storage`) the copies hold the shifted, scaled binary16
values: each chunk is decoded to float32 after the gather and encoded (rounded once,
stochastically, with the random bits of the state's step counter) before the scatter, exactly
what the GPU kernel does per load and store.

Boundary conditions (``solver.boundaries``) act on the gathered chunk before collision: Ladd's
moving-wall term on the bounced links that carry one, then the Zou-He reconstruction of the
velocity/pressure nodes. Both use per-chunk index lists built once at allocation.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..boundaries import ZouHeFace, ladd_links, zou_he, zou_he_faces
from ..face_kinds import face_kind
from ..fields import moments_bytes
from ..iolets import IoletAddresses, apply_iolets
from ..node_types import zou_he_type
from ..problem import Problem
from ..storage import collides_deviations, dither
from ..streaming import pull_table_bytes
from ..windkessel import DENSITY, TRACE, windkessel_update
from .base import (
    LOCAL_REDUCTIONS,
    DeviceInfo,
    NodeIndex,
    has_none,
    node_index,
    prepare_problem_tables,
    tiled_node_populations,
    with_rest_solids,
)

__all__ = ["NumpyBackend", "NumpyState"]

#: Fluid nodes per chunk: (q x chunk) float64 temporaries of ~0.6 MB stay in L2.
CHUNK_NODES = 4096
#: Host bytes per box voxel kept by the tiling and the problem (masks, tile map, node types),
#: measured: 29-32 at 48^3-96^3.
HOST_BYTES_PER_VOXEL = 30


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_headroom() -> int | None:
    try:
        with open("/sys/fs/cgroup/memory.max") as fh:
            limit = fh.read().strip()
        with open("/sys/fs/cgroup/memory.current") as fh:
            used = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(0, int(limit) - used)


@dataclass
class ChunkBoundary:
    """Boundary work of one chunk: Ladd links (direction, local node, value) and Zou-He nodes."""

    ladd: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    zou_he: list[tuple[ZouHeFace, np.ndarray | slice]] = field(default_factory=list)


@dataclass
class NumpyState:
    """Two copies of the populations and the tables that step them."""

    problem: Problem
    f: np.ndarray = field(repr=False)
    current: int = 0
    #: Step counter seeding the stochastic rounding of float16 storage (solver.storage).
    step: int = 0
    chunks: list[slice] = field(default_factory=list, repr=False)
    boundaries: list[ChunkBoundary] = field(default_factory=list, repr=False)
    #: Slot addresses of the opening links (:mod:`solver.iolets`), None without driven ones.
    iolets: IoletAddresses | None = field(default=None, repr=False)
    #: Net mass flux into the fluid per opening link in the last step (lattice units).
    iolet_flux: np.ndarray | None = field(default=None, repr=False)
    #: Windkessel outlets (:mod:`solver.windkessel`): (table, state (4, n), trace), or None.
    windkessel: tuple | None = field(default=None, repr=False)
    #: float16 storage collided as deviations (solver.storage.collides_deviations), decided
    #: once per allocation as the kernel's variant decides it.
    deviations: bool = False


def _set_windkessel_values(tables: Any, table: Any, values: np.ndarray) -> None:
    """The outlets' links' values: their densities (what the kernel ``wk_values`` writes)."""
    for o in range(table.n):
        tables.value[table.start[o]:table.stop[o]] = values[DENSITY, o]


def _chunk_boundaries(problem: Problem, chunks: list[slice]) -> list[ChunkBoundary]:
    """Split the run's Ladd links and Zou-He nodes by chunk (fluid nodes in pull-table order)."""
    table, tables = problem.pull_table, problem.boundary
    faces = zou_he_faces(tables, problem.lattice)
    links = None
    if tables.has_moving_walls:
        links = ladd_links(table, problem.tiling, problem.lattice, tables, problem.periodic)
    node_type = tables.node_type[table.tile, table.node]
    zou_nodes = []
    for zf in faces:
        zou_nodes.append(np.flatnonzero(node_type == zou_he_type(face_kind(zf.kind).node_type,
                                                                 zf.face)))
    out = []
    for chunk in chunks:
        cb = ChunkBoundary()
        if links is not None and links.node.size:
            lo, hi = np.searchsorted(links.node, [chunk.start, chunk.stop])
            if hi > lo:
                cb.ladd = (links.direction[lo:hi], links.node[lo:hi] - chunk.start,
                           links.value[lo:hi])
        for zf, nodes in zip(faces, zou_nodes, strict=True):
            lo, hi = np.searchsorted(nodes, [chunk.start, chunk.stop])
            if hi - lo == chunk.stop - chunk.start:
                cb.zou_he.append((zf, slice(None)))  # the whole chunk: no index copy
            elif hi > lo:
                cb.zou_he.append((zf, nodes[lo:hi] - chunk.start))
        out.append(cb)
    return out


class NumpyBackend:
    """Vectorised CPU backend (float32 or float64 arithmetic; storage as the problem says)."""

    name = "numpy"
    xp = np
    reductions = LOCAL_REDUCTIONS
    writes_parts = reads_parts = False  # one device: one checkpoint file, one .vti
    keeps_voxel_mask = True
    #: None: :mod:`solver.distributed.stepper` steps a NumPy rank through this interface.
    phase_stepper = None

    def __init__(self, threads: int | None = None) -> None:
        self.threads = threads or min(4, os.cpu_count() or 1)
        self._pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None

    def prepare(self, problem: Problem) -> None:
        """Build ``problem``'s host tables ahead of :meth:`allocate` (:meth:`Backend.prepare`;
        the pull table stays with the allocation: it is the state's own)."""
        prepare_problem_tables(problem)

    def allocate(self, problem: Problem) -> NumpyState:
        """Initialise both copies at rest equilibrium and build the pull table.

        Steps write fluid nodes only: solid nodes keep the rest equilibrium (``base`` module).
        """
        # Broadcast the stored rest state into both copies: no float64 temporary of the whole
        # state (it set the memory peak of a run), the same values as encoding
        # initial_populations() node by node.
        t = problem.tiling
        f = np.empty((2, t.n_tiles, problem.lattice.q, t.nodes_per_tile),
                     dtype=problem.storage_dtype)
        f[...] = problem.storage.encode(problem.rest_populations()[:, None])
        table = problem.pull_table
        # Nodes of one type are contiguous (Zou-He faces last): chunks never mix types.
        types = problem.boundary.node_type[table.tile, table.node]
        edges = [0, *np.flatnonzero(np.diff(types)) + 1, table.n_fluid]
        chunks = [slice(s, min(s + CHUNK_NODES, hi))
                  for lo, hi in zip(edges[:-1], edges[1:], strict=True)
                  for s in range(lo, hi, CHUNK_NODES)]
        iolets = problem.iolets
        return NumpyState(problem=problem, f=f, chunks=chunks,
                          boundaries=_chunk_boundaries(problem, chunks),
                          iolets=None if iolets is None else iolets.addresses(
                              problem.lattice.q, t.nodes_per_tile),
                          iolet_flux=None if iolets is None else np.zeros(iolets.n_links),
                          deviations=problem.storage.encoded and collides_deviations(
                              True, problem.collision.name, problem.incompressible,
                              problem.boundary.needs_boundary_kernel))

    def step(self, state: NumpyState, n: int = 1) -> float:
        """Advance by ``n`` steps; return wall time in seconds."""
        start = time.perf_counter()
        for _ in range(n):
            src = state.f[state.current].reshape(-1)
            dst = state.f[1 - state.current].reshape(-1)
            if state.iolets is not None:  # the opening links' slots, before the step reads them
                p = state.problem
                state.iolet_flux = apply_iolets(src, state.iolets, p.iolets, p.storage,
                                                p.lattice, p.force, p.incompressible,
                                                state.step)
                if state.windkessel is not None:  # after the pass, as the kernels run
                    self._windkessel(state)
            work = list(zip([src] * len(state.chunks), [dst] * len(state.chunks), state.chunks,
                            state.boundaries, strict=True))
            if self._pool is None or len(work) == 1:
                for item in work:
                    self._chunk(state.problem, *item, state.step, state.deviations)
            else:
                list(self._pool.map(lambda item: self._chunk(state.problem, *item, state.step,
                                                             state.deviations), work))
            state.current = 1 - state.current
            state.step += 1
        return time.perf_counter() - start

    @staticmethod
    def _chunk(problem: Problem, src: np.ndarray, dst: np.ndarray, chunk: slice,
               bc: ChunkBoundary, step: int, deviations: bool) -> None:
        table, storage = problem.pull_table, problem.storage
        g = storage.decode(src[table.src[:, chunk]], deviations=deviations)
        if bc.ladd is not None:
            direction, node, value = bc.ladd
            g[direction, node] += value
        for zf, nodes in bc.zou_he:
            g[:, nodes] = zou_he(g[:, nodes], zf, problem.lattice, problem.force,
                                 problem.incompressible)
        out = problem.collision.collide(g, problem.lattice, problem.rates, problem.force,
                                        problem.incompressible)
        noise = None
        if storage.encoded and storage.rounding == "stochastic":  # bits as in the kernel
            node = table.tile[chunk].astype(np.int64) * problem.tiling.nodes_per_tile \
                + table.node[chunk]
            noise = dither(node, step, problem.lattice.q)
        dst[table.dst[:, chunk]] = storage.encode(out, dither=noise, deviations=deviations)

    def iolet_flux(self, state: NumpyState) -> np.ndarray | None:
        """Net mass flux into the fluid per opening link in the last step (host float64)."""
        return None if state.iolet_flux is None else state.iolet_flux.astype(np.float64)

    def populations(self, state: NumpyState) -> np.ndarray:
        """Latest populations, float64 (n_tiles, q, a**d), exactly as stored."""
        return state.problem.storage.exact(state.f[state.current])

    def device_populations(self, state: NumpyState, tiles=None) -> np.ndarray:
        """Latest populations in the arithmetic precision (a view unless stored as float16), of
        all tiles or of ``tiles`` (a slice or an index array)."""
        f = state.f[state.current]
        return state.problem.storage.decode(f if tiles is None else f[tiles])

    def node_index(self, state: NumpyState, tile: np.ndarray, node: np.ndarray,
                   solid: np.ndarray) -> NodeIndex:
        """Where host (tile, XYZ node) pairs lie in the tiled state (:mod:`.base`)."""
        return node_index(tile, node, solid)

    def node_populations(self, state: NumpyState, index: NodeIndex) -> np.ndarray:
        """Latest populations (q, n) of ``index``'s nodes, arithmetic precision."""
        return tiled_node_populations(state.problem, state.f[state.current], index)

    def readout_tiles(self, state: NumpyState) -> int:
        """Tiles per readout chunk: all (the state is tiled already; fields chunk themselves)."""
        return state.problem.tiling.n_tiles

    def state_bytes(self, problem: Problem) -> int:
        """Bytes of the resident population copies and tiling tables (Tiling.memory_bytes)."""
        return problem.tiled_state_bytes()

    def to_host(self, array: np.ndarray) -> np.ndarray:
        """Already on the host."""
        return np.asarray(array)

    def set_populations(self, state: NumpyState, f: np.ndarray,
                        tiles: slice | None = None) -> None:
        """Overwrite the latest populations (rounded to the storage, as every step stores), of
        ``tiles`` only when given; solid nodes of both copies at rest equilibrium."""
        problem, part = state.problem, slice(None) if tiles is None else tiles
        state.f[state.current][part] = with_rest_solids(problem, problem.storage.encode(f),
                                                        tiles=tiles)
        other = state.f[1 - state.current]
        other[part] = with_rest_solids(problem, other[part], tiles=tiles)

    def stored_populations(self, state: NumpyState) -> np.ndarray:
        """The latest copy as stored (a view; storage dtype, n_tiles, q, a**d)."""
        return state.f[state.current]

    def set_stored_populations(self, state: NumpyState, stored: np.ndarray) -> None:
        """Write a copy of :meth:`stored_populations` back bit for bit (its solid nodes hold the
        rest state, as the other copy's always do)."""
        np.copyto(state.f[state.current], stored, casting="no")

    def set_iolet_values(self, state: NumpyState, values: np.ndarray) -> None:
        """Set the opening links' target values (m,) the pass applies from the next step."""
        tables = state.problem.iolets
        if tables is None or np.shape(values) != tables.value.shape:
            raise ValueError(f"{np.shape(values)} opening-link values for a run with "
                             f"{0 if tables is None else tables.n_links}.")
        tables.value[...] = values

    @staticmethod
    def _windkessel(state: NumpyState) -> None:
        table, values, trace = state.windkessel
        if windkessel_update(table, values, state.iolet_flux, state.step + 1, trace):
            _set_windkessel_values(state.problem.iolets, table, values)

    def set_windkessel(self, state: NumpyState, table: Any, values: np.ndarray) -> None:
        """Update ``table``'s Windkessel outlets in the openings' pass from the state ``values``
        (4, n) on (:mod:`solver.windkessel`)."""
        if state.iolets is None:
            raise ValueError("This run has no openings' pass (driven openings) to couple a "
                             "Windkessel outlet to.")
        values = np.array(values, dtype=np.float64)
        state.windkessel = (table, values, np.zeros((TRACE, 2, table.n)))
        _set_windkessel_values(state.problem.iolets, table, values)

    def windkessel_state(self, state: NumpyState) -> np.ndarray | None:
        """The Windkessel outlets' state (4, n) float64 now, None without any."""
        return None if state.windkessel is None else state.windkessel[1].copy()

    def windkessel_trace(self, state: NumpyState) -> np.ndarray | None:
        """The outlets' (flow, pressure) per update slot (TRACE, 2, n), None without any."""
        return None if state.windkessel is None else state.windkessel[2].copy()

    def set_iolet_flux(self, state: NumpyState, flux: np.ndarray) -> None:
        """Set the per-link flux :meth:`iolet_flux` reads until the next step."""
        if state.iolet_flux is None or np.shape(flux) != state.iolet_flux.shape:
            raise ValueError(f"{np.shape(flux)} opening-link fluxes for a run with "
                             f"{0 if state.iolet_flux is None else state.iolet_flux.size}.")
        state.iolet_flux = np.array(flux, dtype=np.float64)  # holds float32 fluxes exactly

    def set_step(self, state: NumpyState, step: int) -> None:
        """Set the step counter that seeds float16 stochastic rounding (on resume)."""
        state.step = int(step)

    def device_info(self) -> DeviceInfo:
        """The host CPU."""
        return DeviceInfo(name=f"CPU ({os.cpu_count()} cores, NumPy)", memory=None,
                          peak_bandwidth=None)

    def free_memory(self) -> int | None:
        """Host memory a new allocation can use, bytes (None if the OS does not say).

        MemAvailable of /proc/meminfo (sysconf's free pages elsewhere), lowered to the headroom
        of a cgroup-v2 memory limit when the process runs in a container that has one.
        """
        known = [v for v in (_available_memory(), _cgroup_headroom()) if v is not None]
        return min(known) if known else None

    # Host memory: no device capacity for the plan, no pool counting the arrays, and halos
    # travel through MPI (no NCCL).
    memory_capacity = used_memory = nccl_status = has_none

    def memory_required(self, problem: Problem) -> int:
        """Host bytes a run of ``problem`` adds at its peak (a health check or slice).

        The tiling and problem (:data:`HOST_BYTES_PER_VOXEL` per box voxel), the gather
        tables (:func:`~solver.streaming.pull_table_bytes` and 16 bytes per tile node of
        boundary and coordinate tables), both population copies (this backend always keeps
        two), the moments of a check (:func:`solver.fields.moments_bytes`) and the threads'
        chunk temporaries. Within a few % of the measured peak resident set
        (``benchmarks/memory/numpy_memory_peak.py``).
        """
        t, q = problem.tiling, problem.lattice.q
        nodes = t.n_tiles * t.nodes_per_tile
        box = 1
        for n in t.shape:
            box *= int(n)
        tables = pull_table_bytes(t.n_fluid, q, t.n_tiles, t.nodes_per_tile) + 16 * nodes
        state = t.memory_bytes(q, problem.storage_dtype.itemsize, 2)
        chunks = self.threads * CHUNK_NODES * q * 8 * 8  # a few (q, chunk) float64 per thread
        return int(HOST_BYTES_PER_VOXEL * box + tables + state + moments_bytes(problem)
                   + chunks)

    def release(self, state: NumpyState) -> None:
        """Drop the arrays."""
        state.f = np.empty((2, 0, 0, 0), dtype=state.f.dtype)
