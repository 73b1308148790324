"""A compact run's edge conversion tables made on its device, from the per-tile tables.

:class:`~.compact_run.CompactRun` converts at its edges through three tables of one entry per
fluid node (:func:`~.compact_run.edge_nodes`: the compact value index of direction 0, the
tile's direction block length and the tiled index of direction 0). For the 1000³ rock image's
mirrored box (4.0e8 fluid nodes, 64-bit offsets) they are 8 GB, made on the host and uploaded
at the allocation (its compact two-copy fine run on an H200, acb1c4a: ``tiling`` 29.1 s and
``allocation`` 5.3 s against 11.7 s and 0.9 s tiled in place; issue 29); on the CPU they were
0.20 of the 0.24 s of a 300³ image's compact host tables
(benchmarks/rock_time_to_answer/compact_setup.py). Here one kernel writes them on the device,
reading what the run uploads anyway (each tile's fluid mask word and base) and two small per-tile
arrays (block length, first entry): one thread a tile writes its fluid nodes' entries in XYZ
order, the values :func:`~.compact_run.edge_nodes` makes (tests/solver/test_compact_edges.py
compares them bit for bit under g++).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .compact import CompactTiling
from .compact_readout import wide_edges

__all__ = ["EDGE_THREADS", "device_edges", "edge_source"]

#: Threads per block of the edge kernel (one tile a thread, grid-stride).
EDGE_THREADS = 256
#: Most blocks of one launch (the rest of the tiles by the grid stride).
EDGE_BLOCKS = 4096

_SOURCE = r"""
typedef @AT@ at_t;
typedef @TILED@ tiled_t;
typedef @VALUE@ value_t;  // the bits of one stored value

// Tile t's fluid nodes (bit n of masks[t]: XYZ node n) are entries starts[t] ... of the
// tables; the one of rank r: compact index q base[t] + r, block length padded[t], tiled
// index (t q + 0) 64 + n. With ``fill``: its value of direction i in the copy f (at
// q base[t] + r + i padded[t]) set to rest[i].
extern "C" __global__ void compact_edges(
    const unsigned long long* masks, const at_t* base, const int* padded,
    const long long* starts, long long n_tiles, int q, at_t* at, int* block, tiled_t* tiled,
    value_t* f, const value_t* rest, int fill)
{
    const long long grid = (long long)gridDim.x * blockDim.x;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n_tiles;
         t += grid) {
        const unsigned long long m = masks[t];
        const long long first = starts[t], b = (long long)q * (long long)base[t];
        const long long tile = t * (long long)q * 64LL;
        const int p = padded[t];
        long long r = 0;
        for (int n = 0; n < 64; ++n) {
            if (!((m >> n) & 1ull)) continue;
            at[first + r] = (at_t)(b + r);
            block[first + r] = p;
            tiled[first + r] = (tiled_t)(tile + n);
            if (fill)
                for (int i = 0; i < q; ++i) f[b + r + (long long)i * p] = rest[i];
            ++r;
        }
    }
}
"""


@cache
def edge_source(at_type: str, tiled_type: str, value_type: str = "unsigned int") -> str:
    """The kernel's source for C types ``at_type`` (the compact index: 'int' or 'long long',
    the storage's offsets), ``tiled_type`` (the tiled index) and ``value_type`` (an unsigned
    integer of a stored value's size: the fill copies its bits)."""
    return (_SOURCE.replace("@AT@", at_type).replace("@TILED@", tiled_type)
            .replace("@VALUE@", value_type))


def _c_type(dtype: np.dtype) -> str:
    return {4: "int", 8: "long long"}[np.dtype(dtype).itemsize]


def _bits_type(dtype: np.dtype) -> str:
    return {2: "unsigned short", 4: "unsigned int",
            8: "unsigned long long"}[np.dtype(dtype).itemsize]


@cache
def _kernel(source: str, device: int):
    import cupy as cp

    return cp.RawModule(code=source).get_function("compact_edges")


def _cupy_launch(source: str, blocks: int, threads: int, args: tuple) -> None:
    import cupy as cp

    _kernel(source, cp.cuda.Device().id)((blocks,), (threads,), args)


def device_edges(compact: CompactTiling, q: int, starts: np.ndarray, masks, base, xp,
                 launch=None, max_blocks: int = EDGE_BLOCKS, fill: tuple | None = None
                 ) -> tuple:
    """The edge tables of ``compact`` (``q`` directions) as ``xp`` arrays, the values and
    dtypes of :func:`~.compact_run.edge_nodes`, written by one kernel launch from the run's
    device tables ``masks`` (uint64 a tile) and ``base`` (the storage's offset type) and the
    host ``starts`` (:func:`~.compact_readout.fluid_starts`). ``fill`` (``f``, ``rest``): the
    same launch also stores ``rest`` (q stored values) at every fluid node of the compact
    copy ``f``, the values :meth:`~.compact_run.CompactRun.fill_rest` stores (its thousand
    chunks of index arithmetic and scatters at 1000³ in one pass). ``launch(source, blocks,
    threads, args)``: CuPy by default (an emulated launcher on NumPy arrays in the CPU
    tests)."""
    n_tiles, n = compact.tiling.n_tiles, int(starts[-1])
    tiled_dtype = np.dtype(np.int64 if wide_edges(compact, q) else np.int32)
    at = xp.empty(n, dtype=compact.offset_dtype)
    block = xp.empty(n, dtype=np.int32)
    tiled = xp.empty(n, dtype=tiled_dtype)
    if n:
        f, rest = (at, at) if fill is None else fill  # unread without a fill
        source = edge_source(_c_type(compact.offset_dtype), _c_type(tiled_dtype),
                             _bits_type(f.dtype))
        blocks = int(max(1, min(-(-n_tiles // EDGE_THREADS), max_blocks)))
        (launch or _cupy_launch)(source, blocks, EDGE_THREADS, (
            masks, base, xp.asarray(compact.padded.astype(np.int32)),
            xp.asarray(np.asarray(starts, dtype=np.int64)), np.int64(n_tiles), np.int32(q),
            at, block, tiled, f, rest, np.int32(fill is not None)))
    return at, block, tiled
