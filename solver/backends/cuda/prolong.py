"""The coarse start of a permeability run prolongated in two kernels (:mod:`solver.rock.initial`).

:func:`solver.rock.initial.start_on_device` in CuPy operations (moments, index arithmetic,
gathers, the equilibrium, the conversion to the fine run's storage) compiled about 40 CuPy
kernels in a fresh process: 8.9 s of a cold 200³ tensor on an H100, for 0.1 s of work (issue
29). Here ``coarse_moments`` writes the density and velocity of every coarse fluid node (as
:func:`solver.fields.tile_moments`, in float64, stored in the run's value type) into dense
tile-node arrays and sums the density,
and ``prolong`` gives every fine fluid node the equilibrium (:func:`solver.collision.equilibrium`)
of the coarse node containing it (coordinates // 2; velocity times :data:`FACTOR` and the
start's rescale, :class:`solver.rock.initial.StartScale`; the mean
coarse density at rest where that node is solid or in an empty coarse tile), written straight
into the fine run's latest copy as stored (compact: the edge tables' addresses; tiled: the slot
table). Solid fine nodes keep the rest state of the fresh allocation, which is what
``set_populations`` gives them. Plain float32/float64 storage of 3D runs only. Lattice units.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from .compact_check import THREADS, moment_lines

__all__ = ["NodeAccess", "compact_access", "tiled_access", "prolong", "source", "FACTOR"]

#: Coarsening factor per axis (that of :mod:`solver.rock.initial`).
FACTOR = 2

_TEMPLATE = r"""
typedef @STORE@ store_t;
typedef @STORE@ moment_t;  // the coarse moments' type: that of the stored values
#define Q @Q@
#define N @N@

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

// tile * N + node of compact node i from its tiled index (tile * Q * N + node): int64 where
// bit 0 of wide is set, else int32.
__device__ __forceinline__ long long tile_node(const int* edge32, const long long* edge64,
                                               int wide, long long i) {
    const long long t = (wide & 1) ? edge64[i] : (long long)edge32[i];
    return t / (Q * N) * N + t % (Q * N);
}

// Value offset of compact node i: at holds int64 offsets where bit 1 of wide is set (64-bit
// offsets of a compact copy of 2^31 values or more), else int32.
__device__ __forceinline__ long long offset_at(const int* at, int wide, long long i) {
    return (wide & 2) ? reinterpret_cast<const long long*>(at)[i] : (long long)at[i];
}

// Density and velocity of every fluid node into tile-node arrays; the density sum into total.
extern "C" __global__ void coarse_moments(
    const store_t* f, const int* at, const int* block, const int* slots,
    const unsigned char* flags, const int* edge32, const long long* edge64, int wide,
    long long n, int tiled, double hfx, double hfy, double hfz, int incompressible,
    long long m, moment_t* rho_out, moment_t* u_out, double* total)
{
    __shared__ double part[32];
    double s = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        if (!(flags[i] & 8)) continue;
        const long long t = tiled ? i / N : 0, node = tiled ? i % N : 0;
        const long long base = tiled ? t * Q * N : offset_at(at, wide, i);
        const long long stride = tiled ? N : (long long)block[i];
        double rho = 0.0, jx = 0.0, jy = 0.0, jz = 0.0, v;
@MOMENTS@
        jx -= hfx; jy -= hfy; jz -= hfz;
        const long long k = tiled ? i : tile_node(edge32, edge64, wide, i);
        rho_out[k] = rho;
        u_out[k] = incompressible ? jx : jx / rho;
        u_out[m + k] = incompressible ? jy : jy / rho;
        u_out[2 * m + k] = incompressible ? jz : jz / rho;
        s += rho;
    }
    s = warp_sum(s);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) part[warp] = s;
    __syncthreads();
    if (warp == 0) {
        s = warp_sum(lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0);
        if (lane == 0) atomicAdd(total, s);
    }
}

// geo: [a, offset_f(3), upper_f(3), offset_c(3), upper_c(3), map_c(3)] (ints);
// tiles_f (T_f, 3), local (N, 3), map (map_c C order) int32; fluid_c per coarse tile node.
extern "C" __global__ void prolong(
    store_t* f, const int* at, const int* block, const int* slots,
    const unsigned char* flags, const int* edge32, const long long* edge64, int wide,
    long long n, int tiled, const int* geo, const int* tiles_f, const int* local,
    const int* tile_map, const unsigned char* fluid_c, const moment_t* rho_c,
    const moment_t* u_c, long long m,
    double mean_rho, const double* w, int incompressible, double u_scale, double rho_scale)
{
    const int a = geo[0];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        if (!(flags[i] & 8)) continue;
        // tile * N + node of the fine node
        const long long k = tiled ? i : tile_node(edge32, edge64, wide, i);
        const long long t = k / N, node = k % N;
        int cell[3];
        long long ct = 0;
        for (int d = 0; d < 3; ++d) {
            int x = tiles_f[3 * t + d] * a - geo[1 + d] + local[3 * node + d];
            x = min(max(x, 0), geo[4 + d]);
            int s = min(max(x / @FACTOR@, 0), geo[10 + d]) + geo[7 + d];
            cell[d] = s;
        }
        ct = ((long long)(cell[0] / a) * geo[14] + cell[1] / a) * geo[15] + cell[2] / a;
        const int tile_c = tile_map[ct];
        double rho = mean_rho, ux = 0.0, uy = 0.0, uz = 0.0;
        if (tile_c >= 0) {
            const long long c = (long long)tile_c * N + (cell[0] % a)
                + (long long)a * (cell[1] % a) + (long long)a * a * (cell[2] % a);
            if (fluid_c[c]) {
                // the start's rescale (solver.rock.initial.StartScale); x 1.0 is exact
                rho = rho_scale == 1.0 ? (double)rho_c[c]
                                       : mean_rho + rho_scale * ((double)rho_c[c] - mean_rho);
                ux = @FACTOR@.0 * u_c[c] * u_scale; uy = @FACTOR@.0 * u_c[m + c] * u_scale;
                uz = @FACTOR@.0 * u_c[2 * m + c] * u_scale;
            }
        }
        const double usq = ux * ux + uy * uy + uz * uz;
        const long long base = tiled ? t * Q * N : offset_at(at, wide, i);
        const long long stride = tiled ? N : (long long)block[i];
        double cu, poly;
@STORES@
    }
}
"""


@cache
def source(c: tuple[tuple[int, ...], ...], store: str, nodes: int) -> str:
    """The two kernels' source for the lattice velocities ``c`` ((q, 3) integers), the stored
    value type ('float' or 'double') and ``nodes`` per tile."""
    stores = []
    for i, (cx, cy, cz) in enumerate(c):
        terms = " + ".join(f"{v}.0 * {u}" for v, u in zip((cx, cy, cz), ("ux", "uy", "uz"),
                                                         strict=True) if v) or "0.0"
        index = f"base + {i}LL * stride + (tiled ? slots[{i} * N + node] : 0)"
        stores.append(f"        cu = {terms}; poly = 3.0 * cu + 4.5 * cu * cu - 1.5 * usq;\n"
                      f"        f[{index}] = (store_t)(incompressible ? w[{i}] * (rho + poly)"
                      f" : w[{i}] * rho * (1.0 + poly));")
    return (_TEMPLATE.replace("@STORE@", store).replace("@Q@", str(len(c)))
            .replace("@N@", str(nodes)).replace("@FACTOR@", str(FACTOR))
            .replace("@MOMENTS@", "\n".join(moment_lines(c, "N")))
            .replace("@STORES@", "\n".join(stores)))


@dataclass
class NodeAccess:
    """How a kernel reaches the fluid nodes of a run's latest copy: the array ``f`` as stored,
    the compact edge tables ``at``/``block``/``edge`` (the tiled index ``tile * q * N + node``,
    int64 when ``wide``; the value offsets ``at`` int64 when ``wide_offsets``, the storage's
    64-bit offsets) or the tiled ``slots`` (q, N) int32, ``flags`` per enumerated node
    (bit 3: fluid), ``n`` nodes, ``tiled``. Arrays of the run's module (CuPy, or NumPy in the
    CPU tests)."""

    f: Any
    at: Any
    block: Any
    slots: Any
    flags: Any
    edge: Any
    wide: bool
    n: int
    tiled: bool
    wide_offsets: bool = False

    def args(self) -> tuple:
        """The kernels' leading arguments (``wide``: bit 0 the tiled index, bit 1 the value
        offsets int64)."""
        return (self.f, self.at, self.block, self.slots, self.flags, self.edge, self.edge,
                np.int32(int(self.wide) | int(self.wide_offsets) << 1), np.int64(self.n),
                np.int32(self.tiled))


def compact_access(run, xp) -> NodeAccess:
    """A :class:`~.compact_run.CompactRun`'s fluid nodes (the edge tables' order)."""
    at, block, tiled = run.edge
    n = int(at.shape[0])
    return NodeAccess(run.latest(), at, block, at, xp.asarray(np.full(n, 8, np.uint8)),
                      tiled, tiled.dtype == np.int64, n, False, run.compact.wide)


def tiled_access(problem, latest, slots, xp) -> NodeAccess:
    """A tiled run's tile nodes: its natural copy ``latest`` (T, q, N) as stored and its slot
    table ``slots`` (q, N) int32."""
    solid = problem.tiling.solid.reshape(-1)
    # 8 where fluid in two passes over the tile nodes (a bool's byte is 0 or 1), not three:
    # 8.4e8 of them in a 1000³ image's fine run, at each of its prolongations.
    flags = xp.asarray(np.logical_not(solid).view(np.uint8) * np.uint8(8))
    one = xp.zeros(1, dtype=np.int32)
    return NodeAccess(latest, one, one, slots, flags, one, False, int(solid.size), True)


def _check_storage(problem) -> None:
    if problem.storage.encoded or problem.lattice.d != 3:
        raise ValueError("The fused prolongation writes plain float32/float64 storage of 3D "
                         "runs; use solver.rock.initial's array-module form.")


def _cupy_launch(code: str, name: str, blocks: int, threads: int, args: tuple) -> None:
    import cupy as cp

    _module(code, cp.cuda.Device().id).get_function(name)((blocks,), (threads,), args)


@cache
def _module(code: str, device: int):
    import cupy as cp

    return cp.RawModule(code=code, options=("-std=c++17",))


def _cupy_blocks() -> int:
    import cupy as cp

    return 8 * cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]


def prolong(fine_problem, fine: NodeAccess, coarse_problem, coarse: NodeAccess, xp,
            launch=None, max_blocks: int | None = None, threads: int = THREADS,
            scale: Any = None) -> None:
    """Write the equilibrium of ``coarse``'s flow, prolongated, into ``fine``'s fluid nodes
    (see the module doc); ``xp`` the runs' array module. ``launch(code, name, blocks,
    threads, args)``: a CuPy launch by default (an emulated one in the CPU tests).
    ``scale``: a :class:`solver.rock.initial.StartScale` (velocity and density-deviation
    factors; None: the plain prolongation)."""
    for p in (fine_problem, coarse_problem):
        _check_storage(p)
    launch = launch or _cupy_launch
    blocks = max_blocks or _cupy_blocks()
    ct, ft = coarse_problem.tiling, fine_problem.tiling
    c = tuple(tuple(int(v) for v in row) for row in fine_problem.lattice.c)
    store = "double" if fine_problem.storage_dtype == np.float64 else "float"
    if coarse_problem.storage_dtype != fine_problem.storage_dtype:
        raise ValueError("The coarse and the fine run must store the same value type.")
    code = source(c, store, ft.nodes_per_tile)
    m = ct.n_tiles * ct.nodes_per_tile
    # The moments in the stored type: 16 (float32) or 32 bytes per coarse tile node.
    moment = fine_problem.storage_dtype
    rho_c, u_c, total = xp.zeros(m, dtype=moment), xp.zeros(3 * m, dtype=moment), xp.zeros(1)
    half = 0.5 * np.asarray(coarse_problem.force, dtype=np.float64)
    launch(code, "coarse_moments", _grid(coarse.n, blocks, threads), threads,
           (*coarse.args(), *(np.float64(h) for h in half),
            np.int32(bool(coarse_problem.incompressible)), np.int64(m), rho_c, u_c, total))
    fluid_c = ~ct.solid.reshape(-1)
    count = int(np.count_nonzero(fluid_c))
    total_host = total.get() if hasattr(total, "get") else np.asarray(total)
    mean_rho = float(total_host[0]) / count if count else 1.0
    geo = np.concatenate([[ft.a], ft.offset, np.array(ft.shape) - 1, ct.offset,
                          np.array(ct.shape) - 1, ct.tile_map.shape]).astype(np.int32)
    if ct.a != ft.a:
        raise ValueError("The coarse and the fine tiling must have the same tile edge.")
    args = (*fine.args(), xp.asarray(geo), xp.asarray(ft.tiles.astype(np.int32).ravel()),
            xp.asarray(ft.local_coordinates().astype(np.int32).ravel()),
            xp.asarray(np.ascontiguousarray(ct.tile_map, dtype=np.int32).ravel()),
            xp.asarray(fluid_c.astype(np.uint8)), rho_c, u_c, np.int64(m),
            np.float64(mean_rho), xp.asarray(np.asarray(fine_problem.lattice.w, np.float64)),
            np.int32(bool(fine_problem.incompressible)),
            np.float64(1.0 if scale is None else scale.velocity),
            np.float64(1.0 if scale is None else scale.density))
    launch(code, "prolong", _grid(fine.n, blocks, threads), threads, args)


def _grid(n: int, blocks: int, threads: int) -> int:
    return int(max(1, min(-(-n // threads), blocks)))


def run_access(backend, state, xp) -> NodeAccess:
    """The :class:`NodeAccess` of a CuPy backend's state, compact or tiled (its natural copy:
    an in-place run is first decoded to phase 0)."""
    if getattr(state, "edge", None):
        return compact_access(state, xp)
    from .compact_check import tiled_slots

    return tiled_access(state.problem, state.latest(), tiled_slots(state.problem), xp)


def fused_applies(*problems) -> bool:
    """Whether :func:`prolong` can write these runs (plain 3D storage of one value type)."""
    return (all(not p.storage.encoded and p.lattice.d == 3 for p in problems)
            and len({p.storage_dtype for p in problems}) == 1
            and len({p.tiling.a for p in problems}) == 1)


def warm_up(lattice_c: np.ndarray, dtype: np.dtype, nodes: int = 64) -> None:
    """Compile (or load from CuPy's disk cache) the rock study's kernels for a lattice and a
    stored value type: the k check, the prolongation and the conduction solve; done while the
    host prepares the first run (no step is running, so nothing is being captured)."""
    import cupy as cp

    from .compact_check import _kernel, check_source
    from .conduction import _module as conduction_module

    c = tuple(tuple(int(v) for v in row) for row in lattice_c)
    store = "double" if np.dtype(dtype) == np.float64 else "float"
    device = cp.cuda.Device().id
    _kernel(check_source(c, store, nodes), device)
    module = _module(source(c, store, nodes), device)
    for name in ("coarse_moments", "prolong"):
        module.get_function(name)
    cg = conduction_module(device)
    for name in ("cg_residual", "cg_matvec", "cg_update", "cg_scalars", "cg_direction"):
        cg.get_function(name)
