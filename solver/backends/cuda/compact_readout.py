"""Reading a fluid-compacted run in bounded chunks of tiles (issue 20 item 1).

A readout (fields, a health check, a checkpoint) needs the populations in the tiled XYZ layout
(tiles, q, 64) and their float64 moments. Converting all tiles at once would build one tiled
copy of the populations (q x value bytes per tile node) next to the compact state, so the peak
of a compact run would be about the tiled two-copy state that compaction halves. Here a
readout converts a range (or a list) of tiles at a time: :func:`readout_tiles` sizes the
chunks so their temporaries (:func:`readout_tile_bytes`) stay within :func:`readout_budget`,
about 1/8 of the resident state, within [:data:`READOUT_MIN_BYTES`,
:data:`READOUT_MAX_BYTES`]; the peak of a compact
run is then its state plus one chunk (:func:`compact_peak_bytes`, what
:func:`.footprint.device_bytes` reports). Values are converted one by one, so every chunking
gives the same bits as one whole conversion.
"""

from __future__ import annotations

import numpy as np

from ...problem import Problem
from ..base import NodeIndex, with_rest_nodes
from ..plan import plan_for
from .compact import CompactTiling, popcount

__all__ = ["READOUT_MAX_BYTES", "READOUT_MIN_BYTES", "readout_tile_bytes", "readout_budget",
           "readout_tiles", "compact_state_bytes", "compact_peak_bytes", "fluid_starts",
           "tiled_chunk", "write_chunk", "edge_bytes", "wide_edges", "state_bytes",
           "compact_node_index", "compact_node_populations", "fluid_populations"]

#: Largest budget of one readout chunk's temporaries, bytes.
READOUT_MAX_BYTES = 256 << 20
#: Smallest budget, bytes. Each chunk costs about 60 launches: with 8 MiB chunks a health check
#: of a 128^3 rock-like run took 161 ms and its wall shear 9.9 s on an H100 (tiled: 2 ms and
#: 0.9 s), while 64 MiB more at the peak matters to no run that fits a GPU.
READOUT_MIN_BYTES = 64 << 20


def wide_edges(compact: CompactTiling, q: int) -> bool:
    """Whether the tiled index of the edge conversion tables needs 64 bits."""
    return compact.tiling.n_tiles * q * 64 >= 2**31


def edge_bytes(compact: CompactTiling, q: int) -> int:
    """Device bytes per fluid node of the edge conversion tables (compact_run.edge_nodes):
    the compact index (an offset: int32, int64 where ``compact.wide``), the block length
    (int32) and the tiled index, int32 where it fits, else int64."""
    return compact.offset_dtype.itemsize + 4 + (8 if wide_edges(compact, q) else 4)


def compact_state_bytes(problem: Problem, compact: CompactTiling) -> int:
    """Resident device bytes of a compact run of ``problem``: its copies (one or two), tables
    and edge conversion tables, as :class:`~.compact_run.CompactRun` allocates them."""
    q = problem.lattice.q
    value = problem.storage_dtype.itemsize
    return int(compact.memory_bytes(q, value, problem.population_copies)
               + edge_bytes(compact, q) * problem.n_fluid)


def readout_tile_bytes(problem: Problem) -> int:
    """Device bytes one tile adds to a readout chunk, an upper bound: its tiled copy in the
    arithmetic precision, the float64 copy and moments of :func:`solver.fields.tile_moments`
    and their temporaries, the health check's masked copies, and the conversion's index
    arrays (32 bytes per node, and per direction two 8-byte indices and the gathered value)."""
    q, d, value = problem.lattice.q, problem.lattice.d, problem.dtype.itemsize
    per_node = (q * value + 8 * q + 8 * (1 + d) + (8 + 16 * d) + 8 * (2 + d) + 32
                + q * (16 + value))
    return int(64 * per_node)


def readout_budget(state_bytes: int) -> int:
    """Bytes one readout chunk may use: 1/8 of the resident state, within
    [:data:`READOUT_MIN_BYTES`, :data:`READOUT_MAX_BYTES`]."""
    return int(min(READOUT_MAX_BYTES, max(READOUT_MIN_BYTES, state_bytes // 8)))


def readout_tiles(problem: Problem, state_bytes: int) -> int:
    """Tiles per readout chunk of a compact run whose resident state is ``state_bytes``."""
    per_tile = readout_tile_bytes(problem)
    return int(min(problem.tiling.n_tiles, max(1, readout_budget(state_bytes) // per_tile)))


def state_bytes(problem: Problem) -> int:
    """Device bytes of the resident state of a run of ``problem`` on the CuPy backend: compact
    where its execution plan (:func:`~solver.backends.plan.plan_for`) stores fluid nodes only,
    else the tiled state (populations and tables)."""
    plan = plan_for(problem)
    if plan.compact:
        return compact_state_bytes(problem, CompactTiling(problem.tiling, plan.pad, plan.wide))
    return problem.tiled_state_bytes()


def compact_peak_bytes(problem: Problem, pad: int, wide: bool = False) -> int:
    """Device bytes of a compact run at its peak: the resident state and one readout chunk
    (``wide``: 64-bit value offsets, the plan's)."""
    state = compact_state_bytes(problem, CompactTiling(problem.tiling, pad, wide))
    return state + readout_tiles(problem, state) * readout_tile_bytes(problem)


def fluid_starts(compact: CompactTiling) -> np.ndarray:
    """Host int64 (n_tiles + 1): index of each tile's first fluid node in the edge tables
    (which list fluid nodes tile by tile), and the fluid count at the end."""
    out = np.zeros(compact.tiling.n_tiles + 1, dtype=np.int64)
    np.cumsum(compact.counts, out=out[1:])  # the storage's counts: no pass over tile nodes
    return out


def tiled_chunk(run, tiles, stored: bool = False):
    """The latest populations of ``run`` (a :class:`~.compact_run.CompactRun` in the natural
    layout) for ``tiles``, a slice of tile indices or an index array (host or ``xp``), as an
    ``xp`` array (len(tiles), q, 64) in the arithmetic precision (float16 storage: decoded as
    the tiled state decodes), or with ``stored`` as stored (binary16 bits); solid nodes at
    rest."""
    p, xp = run.problem, run.xp
    q, n_tiles = p.lattice.q, p.tiling.n_tiles
    at, block, tiled = run.edge
    if isinstance(tiles, slice):
        first, stop, _ = tiles.indices(n_tiles)
        stop = max(stop, first)
        k0, k1 = int(run.starts[first]), int(run.starts[stop])
        at, block = at[k0:k1], block[k0:k1]
        dest = tiled[k0:k1] - first * q * 64  # same in-tile offset, tiles counted from first
        count = stop - first
    else:
        host = np.asarray(getattr(xp, "asnumpy", np.asarray)(tiles), dtype=np.int64).ravel()
        begin, end = run.starts[host], run.starts[host + 1]
        sizes = end - begin
        # Fluid nodes of the listed tiles, tile by tile, and the position of their tile.
        k = np.repeat(begin - np.cumsum(sizes) + sizes, sizes) + np.arange(int(sizes.sum()))
        position = xp.asarray(np.repeat(np.arange(host.size, dtype=np.int64), sizes))
        k = xp.asarray(k)
        at, block = at[k], block[k]
        dest = position * (q * 64) + tiled[k] % (q * 64)
        count = host.size
    storage, dtype = p.storage, p.storage_dtype
    rest = storage.encode(p.rest_populations()[:, None])[:, 0]
    out = xp.empty((count, q, p.tiling.nodes_per_tile), dtype=dtype)
    out[...] = xp.asarray(np.asarray(rest).astype(dtype))[None, :, None]
    # Every direction of every fluid node in one gather and one scatter: a few small launches
    # per direction were most of a readout's time on the GPU (health check of a 192^3 rock-like
    # run: 79 ms compact against 4 ms tiled). Decoded as a whole (elementwise: the same bits).
    i = xp.arange(q, dtype=at.dtype)
    out.reshape(-1)[dest[:, None] + 64 * i] = run.f[run.current][at[:, None] + block[:, None] * i]
    return out if stored else storage.decode(out, xp)


def compact_node_index(compact: CompactTiling, q: int, tile: np.ndarray, node: np.ndarray,
                       solid: np.ndarray, xp=np) -> NodeIndex:
    """The :class:`~..base.NodeIndex` of host (tile, XYZ in-tile node) pairs in compact
    storage: direction 0 of a fluid node of rank r (fluid nodes before it in its tile's mask,
    a popcount) at ``q * base + r``, direction i ``i * padded`` further, as the kernels
    address it (``solid``: nodes read as rest, pointed at value 0)."""
    solid = np.asarray(solid, dtype=bool)
    tile = np.where(solid, 0, tile).astype(np.int64)
    bit = np.where(solid, 0, node).astype(np.uint64)
    below = compact.masks[tile] & ((np.uint64(1) << bit) - np.uint64(1))
    first = np.where(solid, 0, q * compact.base[tile] + popcount(below).astype(np.int64))
    step = np.where(solid, 0, compact.padded[tile])
    return NodeIndex(xp.asarray(first), xp.asarray(step), None, xp.asarray(solid))


def compact_node_populations(run, index: NodeIndex):
    """Latest populations (q, n) of ``index``'s nodes in ``run`` (natural layout), gathered
    straight from the compact copy (no tile converted) and decoded as :func:`tiled_chunk`
    decodes them: the same values; rest at solid nodes."""
    p, xp = run.problem, run.xp
    i = xp.arange(p.lattice.q, dtype=index.first.dtype)[:, None]
    stored = run.f[run.current][index.first[None, :] + index.step[None, :] * i]
    return with_rest_nodes(p, p.storage.decode(stored, xp), index.solid, xp)


def fluid_populations(run, part: slice):
    """Latest populations (q, k) of ``run``'s fluid nodes ``part`` (edge-table order: tile by
    tile, XYZ within a tile) in the natural layout, decoded as :func:`tiled_chunk` decodes."""
    at, block, _ = run.edge
    at, block = at[part], block[part]
    i = run.xp.arange(run.problem.lattice.q, dtype=at.dtype)[:, None]
    return run.problem.storage.decode(run.f[run.current][at[None, :] + block[None, :] * i],
                                      run.xp)


def write_chunk(run, first: int, f) -> None:
    """Store tiled XYZ populations ``f`` (tiles, q, 64; host or ``xp``) of the tiles from
    ``first`` on into the latest copy of ``run`` (natural layout), encoded as the tiled state
    encodes (float64 input that is exactly a stored value, a checkpoint's, stores as that
    value); solid nodes are not stored. Encoded as a whole (elementwise: the same bits as
    direction by direction), stored with one gather and one scatter."""
    q, xp = run.problem.lattice.q, run.xp
    k0, k1 = int(run.starts[first]), int(run.starts[first + len(f)])
    at, block, tiled = (a[k0:k1] for a in run.edge)
    local = tiled - first * q * 64  # direction 0's offset in the chunk: tile * q * 64 + node
    encoded = run.problem.storage.encode(xp.asarray(f), xp).reshape(-1)
    i = xp.arange(q, dtype=at.dtype)
    run.f[run.current][at[:, None] + block[:, None] * i] = encoded[local[:, None] + 64 * i]
