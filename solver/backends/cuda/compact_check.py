"""Health and Darcy sums of a run in one kernel (the rock runs' k check), compact or tiled.

A permeability run checks k every few hundred steps (:class:`solver.rock.check.KCheck`). Read
chunk by chunk through CuPy operations (gather, moments, masks, sums) a check of the 10.8 M
fluid nodes of a 300³ mirrored run took about 50 ms on an H100, and a cold process compiled a
few dozen CuPy kernels for it (issue 29). Here one launch reads the populations of every
fluid node in the compact copy (the edge tables' order) or in the tiled copy (every tile node, solid
ones skipped; the state's slot table), computes its density and velocity as
:func:`solver.fields.tile_moments` does (float64; Guo: ``u = (sum c f - F/2) / rho``, rho
replaced by 1 for the incompressible model) and adds, per block then atomically:

- ``bad``: the number of nodes whose density or velocity is not finite;
- the largest speed (a non-negative double compared by its bits);
- over the window's nodes (flag bit 0): sum of ``|u|``, of ``u_axis`` and of the Darcy momentum
  density (:func:`solver.observables.momentum_density`);
- over the first and last window layers (flag bits 1 and 2): the density sums;

nodes without flag bit 3 (solid tile nodes) are skipped.

Float16 storage is decoded as :meth:`solver.storage.Storage.decode` does (in the arithmetic
type, multiply then add, each rounded). A tiled run may also get the window's momentum density
summed per layer along the axis (each tile's first layer given: a distributed rank's plane
flux, :class:`solver.distributed.reductions.FusedNumbers`), tiled or compact; ``tiles`` reads
only the first tiles (a rank's owned ones; compact: their fluid nodes, the edge tables' first).

The sums add the nodes in another order than the chunked readout (the last bits of k may
differ). Lattice units. The lattice's velocities are compiled into the kernel (one module per
lattice and storage type).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

__all__ = ["check_source", "darcy_check", "moment_lines", "THREADS", "SUMS", "state_check",
           "tiled_slots"]

#: Threads per block.
THREADS = 256
#: The double sums of a check, in order.
SUMS = ("speed", "along", "darcy", "end_first", "end_last")

_TEMPLATE = r"""
typedef @STORE@ store_t;

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_max(double v) {
    for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}
// Value offset of compact node i: at holds int32 offsets, or int64 ones where wide (64-bit).
__device__ __forceinline__ long long offset_at(const int* at, int wide, long long i) {
    return wide ? reinterpret_cast<const long long*>(at)[i] : (long long)at[i];
}

// ``flux`` into the layer along ``axis`` of node i (its tile's first layer ``corner[t]`` plus
// the node's in-tile layer), clipped to [0, n_layers). Tiled: node i is tile i / N's node
// i % N; compact: the node's tiled index of direction 0 (t Q N + node) is ``where[i]`` (int64
// where ``where_wide``). Tiled, where a warp's lanes lie in one tile (nodes per tile a multiple
// of 32), the warp sums each in-tile layer first: one atomic add per in-tile layer and warp
// instead of one per node; compact (a warp may span tiles), the block sums per layer in shared
// memory. Every thread of the block calls it (block barriers).
__device__ __forceinline__ void add_layers(long long i, long long n, double flux, int axis,
                                           const int* corner, double* layers, int n_layers,
                                           int tiled, const int* where, int where_wide)
{
    const long long x = tiled ? i : (i < n ? offset_at(where, where_wide, i) : 0LL);
    const long long t = tiled ? i / @N@ : x / (@Q@LL * @N@);
    const int node = (int)(x % @N@), step = axis == 0 ? 1 : (axis == 1 ? @A@ : @A@ * @A@);
    const int c = (node / step) % @A@;
#if @WARP_TILE@
    if (tiled) {
        for (int k = 0; k < @A@; ++k) {
            const double s = warp_sum(c == k ? flux : 0.0);
            if ((threadIdx.x & 31) == 0 && i < n && s != 0.0) {
                const int layer = min(max(corner[t] + k, 0), n_layers - 1);
                atomicAdd(layers + layer, s);
            }
        }
        return;
    }
#endif
    const int layer = min(max((int)corner[t] + c, 0), n_layers - 1);
    if (tiled) {
        if (i < n && flux != 0.0) atomicAdd(layers + layer, flux);
        return;
    }
    // Compact: a block's nodes (a few tiles, a few layers) summed per layer in shared memory
    // first, the layers within 32 of its first node's (else straight to the device's).
    __shared__ double hist[32];
    __shared__ int first;
    if (threadIdx.x == 0) first = layer - 16;  // thread 0's node exists (i0 < n)
    for (int k = threadIdx.x; k < 32; k += blockDim.x) hist[k] = 0.0;
    __syncthreads();
    if (i < n && flux != 0.0) {
        const int d = layer - first;
        if (d >= 0 && d < 32) atomicAdd(hist + d, flux);
        else atomicAdd(layers + layer, flux);
    }
    __syncthreads();
    for (int k = threadIdx.x; k < 32; k += blockDim.x)
        if (hist[k] != 0.0) atomicAdd(layers + first + k, hist[k]);
    __syncthreads();
}

extern "C" __global__ void darcy_check(
    const store_t* f, const int* at, const int* block, const int* slots,
    const unsigned char* flags, long long n, int tiled, int wide, double hfx, double hfy,
    double hfz,
    int axis, int incompressible, double* sums, unsigned long long* bits,
    const int* corner, double* layers, int n_layers, const int* where, int where_wide)
{
    __shared__ double part[6][32];
    __shared__ unsigned int bad_block;
    if (threadIdx.x == 0) bad_block = 0u;
    __syncthreads();
    double s_speed = 0.0, s_along = 0.0, s_darcy = 0.0, s_first = 0.0, s_last = 0.0;
    double v_max = 0.0;
    unsigned int bad = 0u;
    // The loop runs alike in every lane of a warp (the layers' warp sums need all of them):
    // a node's work is the do-while(0) below, left early by break.
    const long long grid = (long long)gridDim.x * blockDim.x;
    for (long long i0 = blockIdx.x * (long long)blockDim.x; i0 < n; i0 += grid) {
        const long long i = i0 + threadIdx.x;
        double flux = 0.0;  // the node's momentum density along the axis (window nodes)
        do {
        if (i >= n) break;
        const unsigned char flag = flags[i];
        if (!(flag & 8)) break;
        // Compact: direction k at base + k stride; tiled (T, q, N): tile t, node slot per k.
        const long long t = tiled ? i / @N@ : 0, node = tiled ? i % @N@ : 0;
        const long long base = tiled ? t * @Q@LL * @N@ : offset_at(at, wide, i);
        const long long stride = tiled ? @N@ : (long long)block[i];
        double rho = 0.0, jx = 0.0, jy = 0.0, jz = 0.0, v;
@MOMENTS@
        jx -= hfx; jy -= hfy; jz -= hfz;
        const double ux = incompressible ? jx : jx / rho;
        const double uy = incompressible ? jy : jy / rho;
        const double uz = incompressible ? jz : jz / rho;
        if (!(isfinite(rho) && isfinite(ux) && isfinite(uy) && isfinite(uz))) { ++bad; break; }
        const double speed = sqrt(ux * ux + uy * uy + uz * uz);
        v_max = fmax(v_max, speed);
        const double along = axis == 0 ? ux : (axis == 1 ? uy : uz);
        if (flag & 1) {
            flux = incompressible ? along : rho * along;
            s_speed += speed; s_along += along; s_darcy += flux;
        }
        if (flag & 2) s_first += rho;
        if (flag & 4) s_last += rho;
        } while (0);
        if (n_layers > 0)
            add_layers(i, n, flux, axis, corner, layers, n_layers, tiled, where, where_wide);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    double values[6] = {warp_sum(s_speed), warp_sum(s_along), warp_sum(s_darcy),
                        warp_sum(s_first), warp_sum(s_last), warp_max(v_max)};
    if (bad) atomicAdd(&bad_block, bad);
    if (lane == 0)
        for (int k = 0; k < 6; ++k) part[k][warp] = values[k];
    __syncthreads();
    if (warp == 0) {
        for (int k = 0; k < 6; ++k) {
            double v = lane < warps ? part[k][lane] : 0.0;
            values[k] = k < 5 ? warp_sum(v) : warp_max(v);
        }
        if (lane == 0) {
            for (int k = 0; k < 5; ++k) atomicAdd(sums + k, values[k]);
            atomicMax(bits + 1, (unsigned long long)__double_as_longlong(values[5]));
            if (bad_block) atomicAdd(bits, (unsigned long long)bad_block);
        }
    }
}
"""


def moment_lines(c: tuple[tuple[int, ...], ...], nodes: str,
                 decode: Decode | None = None) -> list[str]:
    """CUDA lines adding each direction's value ``v`` (read at ``base + i stride``, plus the
    slot of ``node`` when ``tiled``; ``nodes`` per tile, a number or a macro) into ``rho`` and
    ``jx, jy, jz`` for the lattice velocities ``c``, in direction order; float16 storage
    (``decode``) decoded as :meth:`solver.storage.Storage.decode` does."""
    lines = []
    for i, (cx, cy, cz) in enumerate(c):
        terms = [f"jx += {cx}.0 * v;" if cx else "", f"jy += {cy}.0 * v;" if cy else "",
                 f"jz += {cz}.0 * v;" if cz else ""]
        index = f"base + {i}LL * stride + (tiled ? slots[{i} * {nodes} + node] : 0)"
        value = f"f[{index}]" if decode is None else decode.value(f"f[{index}]", i)
        lines.append(f"        v = (double){value}; rho += v; "
                     + " ".join(t for t in terms if t))
    return lines


@dataclass(frozen=True)
class Decode:
    """Float16 storage's decoding in the arithmetic type ``real`` ('float' or 'double'):
    ``stored * inv + shift[i]`` (:meth:`solver.storage.Storage.decode`, two roundings)."""

    real: str
    inv: float
    shift: tuple[float, ...]

    @classmethod
    def of(cls, storage) -> Decode | None:
        """The decoding of ``storage`` (a :class:`solver.storage.Storage`); None when plain."""
        if not storage.encoded:
            return None
        real = "double" if storage.real == np.float64 else "float"
        inv = float(storage.real.type(1.0 / storage.scale))
        return cls(real, inv, tuple(float(v) for v in storage.shift))

    def literal(self, x: float) -> str:
        """``x`` as an exact C literal of the real type (hexadecimal)."""
        return x.hex() + ("f" if self.real == "float" else "")

    def value(self, stored: str, i: int) -> str:
        """The expression decoding the stored value ``stored`` of direction ``i``."""
        # __fmul_rn/__fadd_rn: rounded twice, never contracted into one FMA.
        mul, add = ("__fmul_rn", "__fadd_rn") if self.real == "float" else ("__dmul_rn",
                                                                            "__dadd_rn")
        return (f"{add}({mul}(({self.real})chk_h2f({stored}), {self.literal(self.inv)}), "
                f"{self.literal(self.shift[i])})")


_HALF = r"""
#ifdef LBM_HOST_HALF
static inline float chk_h2f(unsigned short h) { return (float)std::bit_cast<_Float16>(h); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
#else
__device__ __forceinline__ float chk_h2f(unsigned short h)
{ float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
#endif
"""


@cache
def check_source(c: tuple[tuple[int, ...], ...], store: str, nodes: int = 64,
                 decode: Decode | None = None) -> str:
    """The kernel's source for the lattice velocities ``c`` ((q, 3) integers), the stored
    value type ``store`` ('float' or 'double'; 'unsigned short' with ``decode``: float16
    storage) and ``nodes`` per tile: the moment sums unrolled per direction."""
    lines = moment_lines(c, str(nodes), decode)
    a = round(nodes ** (1 / 3))
    return ((_HALF if decode is not None else "")
            + _TEMPLATE.replace("@STORE@", store).replace("@MOMENTS@", "\n".join(lines))
            .replace("@WARP_TILE@", str(int(nodes % 32 == 0)))
            .replace("@N@", str(nodes)).replace("@A@", str(a)).replace("@Q@", str(len(c))))


@cache
def _kernel(source: str, device: int):
    import cupy as cp

    return cp.RawModule(code=source, options=("-std=c++17",)).get_function("darcy_check")


def _cupy_launch(source: str, blocks: int, threads: int, args: tuple) -> None:
    import cupy as cp

    _kernel(source, cp.cuda.Device().id)((blocks,), (threads,), args)


def _cupy_blocks() -> int:
    import cupy as cp

    return 8 * cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]


def darcy_check(state, flags, axis: int, latest=None, slots=None, launch=None,
                max_blocks: int | None = None, threads: int = THREADS, tiles: int | None = None,
                corner=None, n_layers: int = 0):
    """Host float64 array ``[bad, max_speed, *SUMS]`` of the latest populations of ``state``:
    a compact run (:class:`~.compact_run.CompactRun`: ``flags`` per fluid node in the edge
    tables' order) or a tiled one (``latest``: its natural copy (T, q, N) and ``slots`` its
    slot table (q, N) int32, both device arrays; ``flags`` per tile node); ``tiles``: only the
    first so many tiles, e.g. a rank's owned ones (compact: the fluid nodes of those tiles, a
    prefix of the edge tables, ``flags`` of those); float32/64 storage, or float16 decoded as
    :meth:`solver.storage.Storage.decode` does. ``flags`` (uint8): bit 0 window, bits 1 and 2
    its first and last layer, bit 3 fluid. A compact run's value offsets are read as its
    storage holds them (int64 where its offsets are wide, ``state.compact.wide``).

    With ``corner`` (int32 per tile read: the global layer along ``axis`` of its first
    in-tile layer, on the device) and ``n_layers``: also the window nodes' momentum density
    summed per layer (clipped to ``[0, n_layers)``), returned as a second host float64 array
    (compact: each node's tile and in-tile layer from its tiled index in the edge tables).

    ``launch(source, blocks, threads, args)``: a CuPy launch by default (an emulated launcher,
    ``max_blocks`` of ``threads``, in the CPU tests, on NumPy arrays)."""
    p = state.problem
    if p.lattice.d != 3:
        raise ValueError("darcy_check reads 3D runs; use the chunked readout (solver.rock.check).")
    tiled = latest is not None
    wide, where = False, None
    if tiled:
        count = latest.shape[0] if tiles is None else int(tiles)
        f, n, at, block = latest, count * int(latest.shape[2]), slots, slots
        xp = _module_of(latest)
    else:
        at, block, where = state.edge
        wide = state.compact.wide
        # The edge tables list the fluid nodes tile by tile: the first tiles' are a prefix.
        n = int(at.shape[0]) if tiles is None else int(state.starts[int(tiles)])
        xp, slots = state.xp, at  # slots unused: any int array
        f = state.latest()  # waits for the queued steps
    decode = Decode.of(p.storage)
    store = ("unsigned short" if decode is not None
             else "double" if p.storage_dtype == np.float64 else "float")
    source = check_source(tuple(tuple(int(v) for v in row) for row in p.lattice.c), store,
                          p.tiling.nodes_per_tile, decode)
    launch = launch or _cupy_launch
    sums, bits = xp.zeros(len(SUMS)), xp.zeros(2, dtype=np.uint64)
    layers = xp.zeros(max(1, n_layers))
    corner = xp.zeros(1, dtype=np.int32) if corner is None else corner
    where = at if where is None else where  # unread where tiled: any int array
    half = 0.5 * np.asarray(p.force, dtype=np.float64)
    blocks = int(max(1, min(-(-n // threads), max_blocks or _cupy_blocks())))
    launch(source, blocks, threads,
           (f, at, block, slots, flags, np.int64(n), np.int32(tiled), np.int32(wide),
            np.float64(half[0]),
            np.float64(half[1]), np.float64(half[2]), np.int32(axis),
            np.int32(bool(p.incompressible)), sums, bits, corner, layers, np.int32(n_layers),
            where, np.int32(where.dtype == np.int64)))
    host_bits = bits.get() if hasattr(bits, "get") else np.asarray(bits)
    host_sums = sums.get() if hasattr(sums, "get") else np.asarray(sums)
    speed = np.frombuffer(np.uint64(host_bits[1]).tobytes(), dtype=np.float64)[0]
    numbers = np.concatenate([[float(host_bits[0]), speed], host_sums])
    if n_layers <= 0:
        return numbers
    return numbers, np.asarray(layers.get() if hasattr(layers, "get") else layers,
                               dtype=np.float64)


def _module_of(array):
    """NumPy or CuPy, whichever ``array`` belongs to."""
    if isinstance(array, np.ndarray):
        return np
    import cupy

    return cupy


def tiled_slots(problem):
    """The tiled state's slot table (q, N) as int32 on the device, built on the host."""
    import cupy as cp

    from .tables import slot_table

    table = slot_table(problem.lattice.name, problem.layout, problem.tiling.a)
    return cp.asarray(table.astype(np.int32))


def state_check(backend, state, flags, slots, axis: int) -> np.ndarray:
    """:func:`darcy_check` of a CuPy backend's state, compact or tiled (``slots``:
    :func:`tiled_slots` of a tiled one); the steps are done (a step synchronizes)."""
    if getattr(state, "edge", None):
        return darcy_check(state, flags, axis)
    return darcy_check(state, flags, axis, latest=state.latest(), slots=slots)
