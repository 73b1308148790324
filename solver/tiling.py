"""Uniform tiling of a voxel domain (Algorithm 1 of the tiled sparse LBM paper).

The domain of ``shape`` nodes is covered by cubic tiles of ``a**d`` nodes. The tile grid may be
shifted by an ``offset`` ``o`` (``0 <= o < a`` per axis): node ``x`` lies in tile ``(x + o) // a``
at in-tile position ``(x + o) % a``. Nodes of a tile that fall outside the domain count as solid.
Tiles holding only solid nodes are dropped; the rest are numbered in the order Algorithm 1 meets
them (x fastest), and ``tile_map`` maps tile-grid coordinates to that number (``-1`` = empty).

In-tile node order is XYZ (``n = x + a*y + a*a*z``) with x fastest, the layout the NumPy
reference and the plain GPU kernel use. Placement of the grid changes the tile utilisation
``eta_t`` (paper eq. 14); :func:`best_offset` searches all ``a**d`` placements for the highest.

The offset search and the gather of the tiles' solid masks take an array module ``xp`` (NumPy
by default; CuPy when the caller runs on a GPU, e.g. :func:`solver.rock.measure.prepare_axis`):
the same code on either, the tables coming back to the host. At 1000³ (the 2e9 voxels of a
mirrored rock box) the 64-offset search was most of a minute of host time.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Tiling", "CountedTiling", "best_offset", "tile_utilisation", "default_tile_edge"]


#: Grid values per slab of :meth:`Tiling.gather` on the host (its temporaries: a slab's).
GATHER_BLOCK_VALUES = 1 << 20


def default_tile_edge(ndim: int) -> int:
    """Default tile edge in nodes: 4 in 3D (64 nodes, two warps), 8 in 2D (64 nodes)."""
    return 4 if ndim == 3 else 8


def _host(array: Any) -> np.ndarray:
    """A NumPy array of ``array`` (a device array is copied to the host)."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


def _tile_occupancy(fluid: np.ndarray, a: int, offset: tuple[int, ...], xp: Any = np,
                    of_solid: bool = False) -> np.ndarray:
    """Boolean tile-grid array (of ``xp``): True where a tile holds at least one fluid node;
    ``of_solid``: ``fluid`` is the solid mask (its complement is reduced, no inverted copy)."""
    occupied = fluid
    for axis, o in enumerate(offset):
        occupied = _reduce_axis(occupied, axis, o, a, xp, invert=of_solid and axis == 0)
    return occupied


def _reduce_axis(arr: np.ndarray, axis: int, o: int, a: int, xp: Any, invert: bool = False
                 ) -> np.ndarray:
    """``arr`` (``invert``: its complement) shifted by ``o`` along ``axis``, zero-padded to
    whole tiles and reduced to one value per tile along it (any of its ``a`` nodes)."""
    # Zero padding by assignment and an OR of the a planes of each block: the same booleans as
    # np.pad and .any(), 2-3x faster (a 200³ image: 0.30 -> 0.09-0.14 s), and on CuPy only
    # element-wise kernels (its reductions compile CUB kernels, seconds in a fresh process).
    across = 1 if axis == 0 else 0  # columns along it are reduced independently
    if xp is np and arr.size > GATHER_BLOCK_VALUES and arr.shape[across] > 1:
        # On the host, a slab across the image at a time: the padded copy is a slab's, not
        # the image's (rank 0 searches the whole image's offsets).
        step = max(1, GATHER_BLOCK_VALUES * arr.shape[across] // arr.size)
        parts = [_reduce_axis(arr[(slice(None),) * across + (slice(k, k + step),)], axis, o,
                              a, xp, invert) for k in range(0, arr.shape[across], step)]
        return np.concatenate(parts, axis=across)
    n = arr.shape[axis]
    shape = list(arr.shape)
    shape[axis] = n + o + (-(n + o)) % a
    padded = xp.ones(shape, dtype=bool) if invert else xp.zeros(shape, dtype=bool)
    inner = [slice(None)] * arr.ndim
    inner[axis] = slice(o, o + n)
    padded[tuple(inner)] = arr
    if invert:  # in place: the complement of a solid mask without a whole inverted copy
        padded ^= True
    shape[axis : axis + 1] = [shape[axis] // a, a]
    blocks = padded.reshape(shape)
    pick: list = [slice(None)] * len(shape)
    pick[axis + 1] = 0
    occupied = blocks[tuple(pick)].copy()
    for k in range(1, a):
        pick[axis + 1] = k
        occupied |= blocks[tuple(pick)]
    return occupied


def _occupancy_all_offsets(fluid: np.ndarray, a: int, xp: Any = np, of_solid: bool = False
                           ) -> Iterator[tuple[tuple[int, ...], np.ndarray]]:
    """(offset, tile occupancy) of every offset in lexicographic order, reducing one axis at a
    time (about 3x the mask work); arrays of ``xp``, the module of ``fluid`` (``of_solid``: the
    solid mask, whose complement is reduced)."""
    # Depth first: one partial reduction per axis is alive at a time (1/a of the image's
    # bytes after the first axis), not all a**k of a level (the image's bytes per level).
    # A module function, not a closure: a recursive closure is a reference cycle that would
    # keep the image alive until the garbage collector runs.
    yield from _walk_offsets(fluid, (), a, xp, of_solid)


def _walk_offsets(arr: np.ndarray, key: tuple[int, ...], a: int, xp: Any,
                  of_solid: bool = False) -> Iterator:
    """(offset, occupancy) below the partial reduction ``arr`` of the offsets ``key``."""
    if len(key) == arr.ndim:
        yield key, arr
        return
    for o in range(a):
        yield from _walk_offsets(_reduce_axis(arr, len(key), o, a, xp, of_solid and not key),
                                 key + (o,), a, xp)


def _count(mask: np.ndarray) -> int:
    """True values of a boolean array of any array module, counted on the host (a CuPy
    reduction would compile CUB kernels in a fresh process; the tile grids are small)."""
    return int(np.count_nonzero(_host(mask)))


def tile_utilisation(solid: np.ndarray, a: int, offset: tuple[int, ...] | None = None) -> float:
    """Average tile utilisation eta_t (paper eq. 14) for one tile-grid placement."""
    fluid = ~np.asarray(solid, dtype=bool)
    offset = offset or (0,) * fluid.ndim
    n_tiles = int(_tile_occupancy(fluid, a, offset).sum())
    return float(fluid.sum()) / (n_tiles * a**fluid.ndim) if n_tiles else 0.0


def best_offset(solid: np.ndarray, a: int, xp: Any = np, n_fluid: int | None = None
                ) -> tuple[tuple[int, ...], dict[tuple[int, ...], float]]:
    """Tile-grid offset with the highest eta_t, and eta_t of every one of the ``a**d`` offsets;
    searched with the array module ``xp`` (``solid`` may already be one of its arrays;
    ``n_fluid``: its fluid nodes, when counted already).

    Ties keep the smallest offset in lexicographic order, so the result is deterministic.
    """
    solid = xp.asarray(solid, dtype=bool)  # its complement is reduced: no inverted copy
    n_fluid = solid.size - _count(solid) if n_fluid is None else int(n_fluid)
    per_offset = {}
    for off, occ in _occupancy_all_offsets(solid, a, xp, of_solid=True):  # sorted
        n_tiles = _count(occ)
        per_offset[off] = n_fluid / (n_tiles * a**solid.ndim) if n_tiles else 0.0
    best = max(per_offset, key=lambda k: (per_offset[k], [-x for x in k]))
    return best, per_offset


@dataclass
class Tiling:
    """Tiles of ``a**d`` nodes covering a domain; only tiles with fluid are kept.

    Attributes
    ----------
    shape : domain size in nodes, (nx, ny[, nz]).
    a : tile edge in nodes.
    offset : tile-grid shift in nodes per axis, each in ``[0, a)``.
    tile_map : int32 array over the tile grid, index into ``tiles`` or -1 for an empty tile.
    tiles : int32 array (n_tiles, d), tile-grid coordinates of the non-empty tiles.
    solid : bool array (n_tiles, a**d), per-tile solid mask in XYZ node order (outside = solid).
    searched : eta_t of every offset tried by ``offset='best'`` (empty for a given offset).
    """

    shape: tuple[int, ...]
    a: int
    offset: tuple[int, ...]
    tile_map: np.ndarray = field(repr=False)
    tiles: np.ndarray = field(repr=False)
    solid: np.ndarray = field(repr=False)
    searched: dict = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls, solid: np.ndarray, a: int | None = None, offset: tuple[int, ...] | str = "best",
        xp: Any = np,
    ) -> Tiling:
        """Tile a solid mask (True = solid, axes (x, y[, z])); ``offset='best'`` searches.
        ``xp``: the array module the search and the gather run on (the tables are NumPy's)."""
        solid = np.asarray(solid, dtype=bool)
        on_device = solid if xp is np else xp.asarray(solid)
        if solid.ndim not in (2, 3):
            raise ValueError(f"Geometry must be 2D or 3D, got an array of shape {solid.shape}.")
        a = a or default_tile_edge(solid.ndim)
        if a < 1:
            raise ValueError(f"Tile edge must be a positive number of nodes, got {a}.")
        if isinstance(offset, str):
            if offset != "best":
                raise ValueError(f"offset must be 'best' or a tuple of ints, got {offset!r}.")
            offset, searched = best_offset(on_device, a, xp,
                                           n_fluid=solid.size - np.count_nonzero(solid))
        else:
            searched = {}
        offset = tuple(int(o) for o in offset)
        if len(offset) != solid.ndim or any(not 0 <= o < a for o in offset):
            raise ValueError(f"offset {offset} must have {solid.ndim} entries in [0, {a}).")
        occupancy = _host(_tile_occupancy(on_device, a, offset, xp, of_solid=True))
        # Algorithm 1 visits tiles with x fastest; argwhere on the transposed grid does the same.
        tiles = np.argwhere(occupancy.transpose()[...])[:, ::-1].astype(np.int32)  # no int64 kept
        tile_map = np.full(occupancy.shape, -1, dtype=np.int32)
        tile_map[tuple(tiles.T)] = np.arange(len(tiles), dtype=np.int32)
        tiling = cls(tuple(solid.shape), a, offset, tile_map, tiles, np.empty(0, bool))
        tiling.solid = _host(tiling.gather(on_device, fill=True, xp=xp))
        tiling.searched = searched
        return tiling

    @property
    def eta_t_origin(self) -> float:
        """eta_t of the tile grid at offset 0 (the placement before any offset search)."""
        origin = (0,) * len(self.shape)
        if origin in self.searched:
            return float(self.searched[origin])
        if tuple(self.offset) == origin:
            return float(self.eta_t)
        return tile_utilisation(self.scatter(self.solid[..., None], fill=True)[..., 0],
                                self.a)

    @property
    def ndim(self) -> int:
        """Number of spatial dimensions."""
        return len(self.shape)

    @property
    def nodes_per_tile(self) -> int:
        """Nodes per tile, ``a**d``."""
        return self.a**self.ndim

    @property
    def n_tiles(self) -> int:
        """Number of non-empty tiles."""
        return len(self.tiles)

    @property
    def n_fluid(self) -> int:
        """Number of non-solid nodes in the domain."""
        # A count, no inverted copy, made once per solid mask: the plan asks for it several
        # times per run (three counts of the 8.4e8 tile nodes of a 1000³ rock image's mirrored
        # box took 0.39 s of each run's allocation on an H200 host).
        counted = self.__dict__.get("_fluid_count")
        if counted is None or counted[0] is not self.solid:
            counted = (self.solid, int(self.solid.size - np.count_nonzero(self.solid)))
            self.__dict__["_fluid_count"] = counted
        return counted[1]

    @property
    def eta_t(self) -> float:
        """Average tile utilisation, fluid nodes over nodes in non-empty tiles (paper eq. 14)."""
        return self.n_fluid / (self.n_tiles * self.nodes_per_tile) if self.n_tiles else 0.0

    def mixed_group_fraction(self, group: int) -> float:
        """Of the runs of ``group`` consecutive nodes (XYZ order, aligned within tiles) that hold
        a fluid node, the fraction that also hold a solid node; 0 without fluid nodes.

        With ``group`` = the nodes per 32-byte memory sector, this is how many of the sectors
        a GPU step writes are written only in part (see kernels' sector fill).
        """
        if self.nodes_per_tile % group:
            raise ValueError(f"A tile of {self.nodes_per_tile} nodes does not split into runs "
                             f"of {group}.")
        runs = np.ascontiguousarray(self.solid).reshape(self.n_tiles, -1, group)
        if group in (1, 2, 4, 8):
            # A run's bools read as one unsigned word (a bool is one byte, 0 or 1): all solid
            # is every byte 1, all fluid 0. The same counts as all/any over the run, about 18x
            # faster (2.7 s for 6.4e7 nodes on the 2-core CPU; 8.4e8 at 1000³).
            words = runs.view(np.dtype(f"u{group}"))[..., 0]
            holds_fluid = words != int.from_bytes(b"\x01" * group, "little")
            holds_both = holds_fluid & (words != 0)
        else:
            holds_fluid = ~runs.all(axis=2)
            holds_both = holds_fluid & runs.any(axis=2)
        n = int(holds_fluid.sum())
        return int(holds_both.sum()) / n if n else 0.0

    def local_coordinates(self) -> np.ndarray:
        """In-tile coordinates of every node in XYZ order, int array (a**d, d)."""
        grids = np.meshgrid(*[np.arange(self.a)] * self.ndim, indexing="ij")
        return np.stack([g.transpose().ravel() for g in grids], axis=1)

    def node_coordinates(self) -> np.ndarray:
        """Domain coordinates of every tile node, int64 array (n_tiles, a**d, d); may be outside."""
        corner = self.tiles.astype(np.int64) * self.a - np.array(self.offset)
        return corner[:, None, :] + self.local_coordinates()[None, :, :]

    def inside(self) -> np.ndarray:
        """Bool array (n_tiles, a**d): node lies inside the domain (not tile padding)."""
        coords = self.node_coordinates()
        return np.all((coords >= 0) & (coords < np.array(self.shape)), axis=-1)

    def gather(self, grid: np.ndarray, fill=np.nan, xp: Any = np) -> np.ndarray:
        """Values of a domain array at every tile node, shape (n_tiles, a**d, ...); an array of
        ``xp`` (``grid`` may already be one)."""
        grid = xp.asarray(grid)
        layers = self.tile_map.shape[0]
        per_layer = self.a * int(np.prod(grid.shape[1:]))  # grid values in one tile layer
        step = max(1, GATHER_BLOCK_VALUES // max(1, per_layer))
        if xp is not np or step >= layers:
            return self._gather_layers(grid, fill, 0, layers, self.tiles, xp)
        # On the host, a slab of tile layers at a time: the padded copy and the picked tiles'
        # temporaries are a slab's, not the image's (rank 0 tiles the whole image).
        out = np.empty((self.n_tiles, self.nodes_per_tile, *grid.shape[self.ndim:]),
                       dtype=grid.dtype)
        for first in range(0, layers, step):
            end = min(layers, first + step)
            rows = np.flatnonzero((self.tiles[:, 0] >= first) & (self.tiles[:, 0] < end))
            if rows.size:
                out[rows] = self._gather_layers(grid, fill, first, end, self.tiles[rows], xp)
        return out

    def _gather_layers(self, grid: Any, fill: Any, first: int, end: int, tiles: np.ndarray,
                       xp: Any) -> Any:
        """:meth:`gather` of ``tiles`` (tile coordinates, all in the tile layers ``first`` to
        ``end`` along axis 0)."""
        # The grid's part padded to whole tiles and viewed as (tile grid, in-tile z, y, x)
        # blocks: one copy of the picked tiles, no per-node coordinate arrays (which made
        # building a 400³ tiling take seconds).
        d, a = self.ndim, self.a
        lo, hi = first * a - self.offset[0], end * a - self.offset[0]  # grid x of the layers
        part = grid[max(lo, 0):min(hi, self.shape[0])]
        pads = [(max(0, -lo), hi - min(hi, self.shape[0]))]
        pads += [(o, (-(n + o)) % a) for n, o in zip(self.shape[1:], self.offset[1:],
                                                     strict=True)]
        extra = grid.shape[d:]
        padded = xp.pad(part, pads + [(0, 0)] * len(extra),
                        constant_values=np.asarray(fill, dtype=grid.dtype)[()])
        blocks = padded.reshape([k for n in padded.shape[:d] for k in (n // a, a)] + list(extra))
        order = [2 * i for i in range(d)] + [2 * i + 1 for i in reversed(range(d))]
        blocks = blocks.transpose(order + list(range(2 * d, 2 * d + len(extra))))
        picked = tuple(xp.asarray(t) for t in (tiles - np.array([first] + [0] * (d - 1))).T)
        return blocks[picked].reshape(len(tiles), a**d, *extra)

    def mask(self) -> np.ndarray:
        """The solid mask (True = solid, shape ``shape``) the tiles were built from: the
        tiles' masks placed back, nodes of empty tiles solid; bool."""
        return self.scatter(self.solid, fill=True)

    def scatter(self, values: np.ndarray, fill=np.nan) -> np.ndarray:
        """Domain array from per-tile-node values (n_tiles, a**d, ...); empty tiles get ``fill``."""
        # The inverse of gather: the grid padded to whole tiles, viewed as (tile grid, in-tile
        # z, y, x) blocks and written through the view; no per-node coordinate arrays (three
        # int64 a tile node, twice: most of rank 0's memory for a .vti over MPI ranks).
        values = np.asarray(values)
        d, a = self.ndim, self.a
        extra = list(values.shape[2:])
        grid = list(self.tile_map.shape)
        padded = np.full([t * a for t in grid] + extra, fill, dtype=values.dtype)
        blocks = padded.reshape([k for t in grid for k in (t, a)] + extra)
        order = [2 * i for i in range(d)] + [2 * i + 1 for i in reversed(range(d))]
        blocks = blocks.transpose(order + list(range(2 * d, 2 * d + len(extra))))
        blocks[tuple(self.tiles.T)] = values.reshape(self.n_tiles, *(a,) * d, *extra)
        inner = tuple(slice(o, o + n) for n, o in zip(self.shape, self.offset, strict=True))
        if all(t * a == n for t, n in zip(grid, self.shape, strict=True)):
            return padded  # offset 0 and whole tiles: nothing to cut
        return np.ascontiguousarray(padded[inner])

    def slab_cells(self, axis: int, first: int, end: int) -> tuple[int, int]:
        """Grid cells ``[lo, hi)`` along ``axis`` that the tile layers ``[first, end)`` cover."""
        a, off, n = self.a, self.offset[axis], self.shape[axis]
        return max(0, first * a - off), max(0, min(n, end * a - off))

    def scatter_slab(self, values: np.ndarray, tiles: np.ndarray, axis: int, first: int,
                     end: int, fill=np.nan) -> np.ndarray:
        """The grid's cells in the tile layers ``[first, end)`` along ``axis``
        (:meth:`slab_cells`) from the per-tile-node values (n, a**d, ...) of the tiles at tile
        coordinates ``tiles`` (n, d), all in those layers; other cells get ``fill``. The
        slab's part of :meth:`scatter` without the whole grid (a rank's ``.vti`` piece)."""
        values = np.asarray(values)
        d, a = self.ndim, self.a
        extra = list(values.shape[2:])
        grid = list(self.tile_map.shape)
        grid[axis] = end - first
        padded = np.full([t * a for t in grid] + extra, fill, dtype=values.dtype)
        blocks = padded.reshape([k for t in grid for k in (t, a)] + extra)
        order = [2 * i for i in range(d)] + [2 * i + 1 for i in reversed(range(d))]
        blocks = blocks.transpose(order + list(range(2 * d, 2 * d + len(extra))))
        at = np.array(tiles, dtype=np.int64).reshape(-1, d)
        at[:, axis] -= first
        blocks[tuple(at.T)] = values.reshape(len(at), *(a,) * d, *extra)
        lo, hi = self.slab_cells(axis, first, end)
        inner = [slice(o, o + n) for n, o in zip(self.shape, self.offset, strict=True)]
        base = first * a - self.offset[axis]  # grid cell of the padded slab's first layer
        inner[axis] = slice(lo - base, hi - base)
        return np.ascontiguousarray(padded[tuple(inner)])

    def locate(self, coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tile index (-1 if empty) and in-tile XYZ index of domain nodes, coords (..., d)."""
        shifted = coords + np.array(self.offset)
        tile = self.tile_map[tuple(np.moveaxis(shifted // self.a, -1, 0))]
        local = shifted % self.a
        weights = self.a ** np.arange(self.ndim)
        return tile, (local * weights).sum(axis=-1)

    def memory_bytes(self, q: int, value_bytes: int, copies: int = 2) -> int:
        """Device memory of the tiled state in bytes: f copies, node types, tile map and list,
        and per tile-map cell the fluid mask of its tile (8 bytes per 64 nodes of a tile)."""
        per_tile = self.nodes_per_tile * (copies * q * value_bytes + 1)
        masks = 8 * -(-self.nodes_per_tile // 64) * self.tile_map.size
        return int(self.n_tiles * per_tile + self.tile_map.nbytes + masks + self.tiles.nbytes)

    def offsets(self) -> list[tuple[int, ...]]:
        """All ``a**d`` admissible tile-grid offsets."""
        return list(itertools.product(range(self.a), repeat=self.ndim))


@dataclass(frozen=True)
class CountedTiling:
    """What the memory estimators and the plan read of a tiling, from counts, for a box too
    large to tile where only its sizes matter: the box, its fluid nodes and tiles (tile map and
    tile list as zero-stride arrays: their shapes and bytes, no memory)."""

    shape: tuple[int, int, int]
    n_fluid: int
    n_tiles: int
    a: int = 4
    offset: tuple[int, int, int] = (0, 0, 0)

    ndim = 3
    memory_bytes = Tiling.memory_bytes

    @property
    def nodes_per_tile(self) -> int:
        """Nodes per tile, a³."""
        return self.a ** 3

    @property
    def eta_t(self) -> float:
        """Fluid share of the tiled nodes."""
        return self.n_fluid / (self.n_tiles * self.nodes_per_tile)

    @property
    def tile_map(self) -> np.ndarray:
        """The tile grid (int32), zero-stride."""
        return np.broadcast_to(np.int32(0), tuple(-(-s // self.a) for s in self.shape))

    @property
    def tiles(self) -> np.ndarray:
        """The tile list (n_tiles, 3) int32, zero-stride."""
        return np.broadcast_to(np.int32(0), (self.n_tiles, 3))
