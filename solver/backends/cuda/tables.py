"""Host-side data of the tiled GPU kernel: in-tile layouts, tables, arguments, launch shape.

Everything here is plain NumPy so that the CuPy backend, the CPU emulation of the kernel used by
the tests and the compile checks share one definition of what the kernel is given.

In-tile layouts (paper eq. 11-13, section 3.2), chosen per direction by its (x, y) velocity
part: ``(0, *)`` XYZ, ``(+-1, 0)`` and ``(-1, +-1)`` YXZ, ``(1, +-1)`` zigzagNE. For D3Q19 this
is exactly the paper's assignment (XYZ: O N S T B NT NB ST SB; YXZ: E W ET EB NW SW WT WB;
zigzagNE: NE SE), and D3Q27 extends it by the same rule. The layouts are defined for 4^3 tiles;
every other tile (the 8^2 tiles of 2D, 3D tiles of another edge) uses XYZ for all directions: in
2D a row of 8 values already fills whole 32-byte sectors in float64, so there is little to gain.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from ...config import GPU_LAYOUTS
from ...lattice import get_lattice
from ...problem import Problem
from .boundary import boundary_kind, boundary_values, wall_groups
from .collisions import cuda_collision

__all__ = [
    "LAYOUTS", "effective_layout", "direction_layouts", "slot_table", "check_tile_shape",
    "SOURCE32_LIMIT", "needs_wide_sources", "shared_bytes", "device_tables", "TablesAhead",
    "fluid_masks",
    "mask_map", "kernel_storage", "halo_masks", "geometry_args", "physics_args",
    "launch_shape", "c_literal",
]

#: Layout settings (``SimulationConfig.gpu_layout``).
LAYOUTS = GPU_LAYOUTS


def c_literal(x: float, real: str) -> str:
    """C literal of x in the kernel's precision (no silent promotion of float to double)."""
    if real == "float":
        return f"{float(np.float32(x))!r}f"
    return repr(float(x))


def effective_layout(lattice: str, layout: str, a: int) -> str:
    """Layout actually used: 'paper' only for 3D tiles of edge 4, else 'xyz'."""
    if layout not in LAYOUTS:
        raise ValueError(f"Unknown GPU layout {layout!r}; use one of {LAYOUTS}.")
    return "paper" if layout == "paper" and get_lattice(lattice).d == 3 and a == 4 else "xyz"


def natural_order(layout: str) -> bool:
    """Whether the effective ``layout`` stores every direction's block in XYZ node order."""
    return layout == "xyz"


def direction_layouts(lattice: str, layout: str, a: int) -> tuple[str, ...]:
    """Per direction 'xyz', 'yxz' or 'zigzag' (the section 3.2 rule of the module doc)."""
    lat = get_lattice(lattice)
    if natural_order(effective_layout(lattice, layout, a)):
        return ("xyz",) * lat.q
    out = []
    for cx, cy, *_ in lat.c.tolist():
        out.append("xyz" if cx == 0 else "zigzag" if cx == 1 and cy != 0 else "yxz")
    return tuple(out)


def _slot(kind: str, n: np.ndarray, a: int) -> np.ndarray:
    """NumPy twin of the CUDA ``slot_*`` functions: slot of XYZ node index n in a data block."""
    if kind == "xyz":
        return n
    x, y = n % a, (n // a) % a
    if kind == "yxz":
        return n - x - a * y + y + a * x
    z = n >> 4
    return 2 * (x + 3 * y + ((x + 1) & 4) * (3 - y)) + (z & 1) + 16 * (z & 2)


def slot_table(lattice: str, layout: str, a: int) -> np.ndarray:
    """Slot of every XYZ node per direction, int64 (q, a**d); each row is a permutation."""
    n = np.arange(a ** get_lattice(lattice).d)
    return np.stack([_slot(k, n, a) for k in direction_layouts(lattice, layout, a)])


def check_tile_shape(lattice: str, a: int, tiles_per_block: int) -> None:
    """Raise ValueError unless tiles of edge ``a`` fit the kernel's warp and block mapping."""
    d = get_lattice(lattice).d
    npt = a**d
    if npt % 32:
        edges = "4 or 8" if d == 3 else "8 or 16"
        raise ValueError(f"The CuPy kernel needs tiles of a multiple of 32 nodes (whole warps); "
                         f"tile_edge={a} gives {npt} in {d}D. Use tile_edge {edges}, or "
                         "backend='numpy'.")
    if tiles_per_block not in (1, 2, 4) or npt * tiles_per_block > 1024:
        raise ValueError(f"tiles_per_block={tiles_per_block} with {npt} nodes per tile is not "
                         "possible (1, 2 or 4 tiles, at most 1024 threads per block); use "
                         "tiles_per_block=1 or a smaller tile_edge.")


#: Population values per copy up to which the kernel's halo sources are 32-bit element offsets.
SOURCE32_LIMIT = 2**31


def needs_wide_sources(problem: Problem) -> bool:
    """Whether the kernel's halo sources need 64 bits: a source is the element offset of a node
    in a copy, and with the offsets of the node's own slots it must stay below 2^31."""
    tiling = problem.tiling
    return (tiling.n_tiles + 1) * problem.lattice.q * tiling.nodes_per_tile > SOURCE32_LIMIT


def kernel_storage(problem: Problem) -> str:
    """The kernels' storage option of ``problem`` (``KernelVariant.storage``): 'float16' for
    float16 storage, else 'auto' (the arithmetic type)."""
    return "float16" if problem.storage.encoded else "auto"


def halo_masks(storage: str) -> bool:
    """Whether kernels of ``storage`` ('auto' or 'float16') test the halo's fluid nodes with
    the fluid masks (8 bytes per neighbour tile and warp, few instructions) rather than the
    node types (one byte per halo node). Timed on an H100 (benchmarks/kernel_tuning/README.md, issue
    20 fourth round): masks win 3.5-4.8 % with float16 storage, which is bound by instruction
    issue, and lose 1.6-2.4 % on the dense box in float32/float64, bound by L2 bytes."""
    return storage == "float16"


def shared_bytes(lattice: str, a: int, tiles_per_block: int, mode: str = "full",
                 source_bytes: int = 4, masks: bool = False) -> int:
    """Dynamic shared memory of one block: halo sources (``source_bytes`` each) per tile and,
    per warp, the tile neighbourhood's tile indices (4 bytes each) and, with ``masks``
    (:func:`halo_masks`), fluid masks (8 bytes per 64 nodes of a tile)."""
    if mode == "readwrite":
        return 0
    d = get_lattice(lattice).d
    warps = tiles_per_block * a**d // 32
    mask_bytes = 8 * -(-a**d // 64) if masks else 0
    return source_bytes * tiles_per_block * (a + 2) ** d + (mask_bytes + 4) * warps * 3**d


def device_tables(problem: Problem, boundary: str | None = None) -> dict[str, np.ndarray]:
    """Arrays the kernel reads, in kernel-argument order.

    ``types``: node type per node (uint8, :class:`~solver.node_types.NodeType`, 0 = solid);
    ``tiles``, ``tile_map``: tile coordinates and the flat tile map; ``fluid_masks``: per cell
    of the flat tile map, :func:`fluid_masks` of the tile there (0 where there is none; the
    halo fill reads 8 bytes per neighbour tile instead of one byte per halo node, by cell, so
    beside the tile map's load, not after it); ``wall_group``, uint8 per
    node (:func:`~solver.backends.cuda.boundary.wall_groups`), for kernels with ``boundary``
    'moving', and ``bc``, arithmetic precision
    (:func:`~solver.backends.cuda.boundary.boundary_values`), for 'zou_he' and 'moving';
    one-element placeholders otherwise. ``boundary`` defaults to what the problem needs.
    """
    tiling = problem.tiling
    if boundary is None:
        boundary = boundary_kind(problem)
    if tiling.n_tiles * tiling.nodes_per_tile >= 2**31:
        raise ValueError(f"{tiling.n_tiles} tiles exceed the kernel's 32-bit node ids; split "
                         "the geometry or use a coarser voxel size.")
    wall_group, bc = np.zeros(1, np.uint8), np.zeros(1, problem.dtype)
    if boundary == "none":  # FLUID = 1, SOLID = 0, without building the per-node tables
        types = np.logical_not(tiling.solid).view(np.uint8)  # a bool's byte: no second copy
    else:
        types = problem.boundary.node_type
        bc = boundary_values(problem).astype(problem.dtype)
        if boundary == "moving":
            wall_group = wall_groups(problem)
    types = np.ascontiguousarray(types, dtype=np.uint8)
    # x fastest, the order the kernel flattens tile-grid coordinates in.
    tile_map = np.ascontiguousarray(tiling.tile_map.transpose(), dtype=np.int32).ravel()
    return {
        "types": types.ravel(),
        "tiles": np.ascontiguousarray(tiling.tiles, dtype=np.int32).ravel(),
        "tile_map": tile_map,
        "fluid_masks": mask_map(fluid_masks(types.reshape(tiling.n_tiles, -1)), tile_map),
        "wall_group": wall_group,
        "bc": bc,
    }


class TablesAhead:
    """Host tables of problems made ahead of their allocation, per problem and kind (a tiled
    run's :func:`device_tables` by boundary code, a compact run's
    :func:`~.compact_run.compact_host`): :meth:`put` holds them (a rock study makes them in the
    worker thread that prepares the next run while the device steps the current one: 2.0 s of
    each 1000³ fine run's allocation on an H200 host), :meth:`take` hands them to the
    allocation once, after which only the device holds them. A problem dropped before its
    allocation takes its tables with it (weak reference), so host memory never outlives the
    sample it was made for."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[weakref.ref, Any, Any]] = {}
        self._lock = threading.Lock()  # put in the worker thread, take in the stepping one

    def put(self, problem: Problem, kind: Any, tables: Any) -> None:
        """Hold ``tables`` of ``problem`` for an allocation of ``kind`` (the last put)."""
        key = id(problem)
        ref = weakref.ref(problem, lambda _, key=key: self._drop(key))
        with self._lock:
            self._held[key] = (ref, kind, tables)

    def take(self, problem: Problem, kind: Any) -> Any:
        """The held tables of ``problem`` for an allocation of ``kind`` (no longer held here
        after this call); None when none were made ahead (or for another kind)."""
        with self._lock:
            entry = self._held.pop(id(problem), None)
        if entry is None or entry[0]() is not problem or entry[1] != kind:
            return None
        return entry[2]

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def _drop(self, key: int) -> None:
        with self._lock:
            entry = self._held.get(key)
            if entry is not None and entry[0]() is None:
                del self._held[key]


def fluid_masks(types: np.ndarray) -> np.ndarray:
    """Per tile, which nodes are not solid: (n_tiles, ceil(npt / 64)) uint64, node n of a
    tile at bit n % 64 of its word n // 64, from node types (n_tiles, npt) in XYZ order."""
    n_tiles, npt = types.shape
    words = -(-npt // 64)
    if npt == 64 * words:  # whole words (4³ tiles): no padded copy of the tile nodes
        packed = np.packbits(types != 0, axis=1, bitorder="little")
    else:
        bits = np.zeros((n_tiles, 64 * words), dtype=bool)
        bits[:, :npt] = types != 0
        packed = np.packbits(bits, axis=1, bitorder="little")
    return np.ascontiguousarray(packed).view("<u8").astype(np.uint64)


def mask_map(masks: np.ndarray, tile_map: np.ndarray) -> np.ndarray:
    """Per cell of the flat ``tile_map``, the fluid-mask words of its tile (``masks``
    (n_tiles, words), as :func:`fluid_masks` gives them), zero in cells without a tile; flat."""
    out = np.zeros((tile_map.size, masks.shape[1]), dtype=np.uint64)
    has = tile_map >= 0
    out[has] = masks[tile_map[has]]
    return out.ravel()


def geometry_args(problem: Problem, tiles: tuple[int, int] | None = None) -> list[np.int32]:
    """Integer kernel arguments: the tile range stepped (first, end; default all tiles), tile
    grid, domain size, tile offset, periodic mask."""
    tiling = problem.tiling
    first, end = tiles if tiles is not None else (0, tiling.n_tiles)
    if not 0 <= first <= end <= tiling.n_tiles:
        raise ValueError(f"Tile range [{first}, {end}) is not inside [0, {tiling.n_tiles}).")

    def pad(values, fill):
        return [np.int32(v) for v in tuple(values) + (fill,) * (3 - len(values))]

    mask = sum(1 << ax for ax, p in enumerate(problem.periodic) if p)
    return ([np.int32(first), np.int32(end)] + pad(tiling.tile_map.shape, 1)
            + pad(tiling.shape, 1) + pad(tiling.offset, 0) + [np.int32(mask)])


def physics_args(problem: Problem) -> list:
    """Floating kernel arguments (arithmetic precision), folded in double as solver.collision does.

    In :func:`~solver.backends.cuda.kernels.real_param_names` order: the force (fx, fy, fz); the
    rest equilibrium w_k rho0 per weight class k = |c|^2 (0..3), which solid nodes hold
    (:meth:`~solver.problem.Problem.rest_populations`); then the collision constants. BGK/TRT:
    :func:`~solver.backends.cuda.collisions.closed_form_constants`. Rounding each product once,
    as the NumPy reference does, keeps the float32 kernel's mass drift at the reference's level; the
    forcing being constants of a run spares the kernel two multiplies per direction and node.
    MRT: A_k, B_k, C_k per relaxed moment row (:func:`solver.backends.cuda.mrt.mrt_params`).
    With float16 storage, last: the shift ``w_k rho0`` per weight class k, the scale S, 1/S and
    -1.5/S (:mod:`solver.storage`, :data:`.storage.STORAGE_PARAMS`).
    """
    lat = problem.lattice
    force = list(problem.force) + [0.0] * (3 - len(problem.force))
    rest = [0.0] * 4
    for k, value in zip(lat.weight_class, problem.rest_populations().tolist(), strict=True):
        rest[k] = value
    storage = problem.storage
    tail = [*storage.class_shifts(lat), storage.scale, 1.0 / storage.scale,
            -1.5 / storage.scale] if storage.encoded else []
    constants = cuda_collision(problem.collision.name).constants(problem)
    return [problem.dtype.type(v) for v in force + rest + constants + tail]


def launch_shape(problem: Problem, tiles_per_block: int, mode: str = "full",
                 n_tiles: int | None = None, wide: bool | None = None) -> tuple[int, int, int]:
    """Blocks, threads per block and dynamic shared bytes for one launch over ``n_tiles``
    tiles (default all) of a kernel with 64-bit halo sources or not (``wide``; default: as
    the problem needs)."""
    lattice, a = problem.lattice.name, problem.tiling.a
    check_tile_shape(lattice, a, tiles_per_block)
    n = problem.tiling.n_tiles if n_tiles is None else n_tiles
    blocks = -(-n // tiles_per_block)
    return blocks, tiles_per_block * a**problem.lattice.d, shared_bytes(
        lattice, a, tiles_per_block, mode,
        8 if (needs_wide_sources(problem) if wide is None else wide) else 4,
        halo_masks(kernel_storage(problem)))
