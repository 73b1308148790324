"""The conduction solve of the formation factor (:mod:`solver.rock.conduction`) in four kernels.

The ``xp`` form of the Jacobi-preconditioned conjugate gradients launches about 30 CuPy
operations per iteration, each a pass over the pore vector (and, on a fresh machine, one NVRTC
compile per operation and dtype): 14.8 s for the three axes of a 300³ image on an H100 (issue
29). Here an iteration is four launches of one module, compiled once: the matrix-vector product
with the dot product ``p.q`` (``cg_matvec``), the update of x, r and z with ``r.r`` and ``r.z``
(``cg_update``), the scalars (``cg_scalars``, one thread: the convergence test, beta) and the
new direction (``cg_direction``). Dot products are summed per block and added atomically, so
their last bits depend on the order of the blocks. The test runs on the device: once the
residual is under the tolerance every later launch returns at once, so the host reads one flag
per :data:`BLOCK` iterations and the solve stops at the first iteration under the tolerance,
as the ``xp`` form does. Units: dimensionless potentials and conductances.
"""

from __future__ import annotations

from functools import cache

import numpy as np

__all__ = ["cg_solve", "BLOCK", "SOURCE", "KERNELS"]

#: Iterations queued between two reads of the convergence flag by the host.
BLOCK = 32
#: Threads per block (a multiple of 32, at most 1024: the block sums use 32 warp slots).
THREADS = 256

SOURCE = r"""
#define PQ 0
#define RZ 1
#define RZN 2
#define RR 3
#define BETA 4
#define NORM 5
#define DONE 0
#define ITER 1

__device__ __forceinline__ double block_sum(double v, double* shared) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? shared[lane] : 0.0;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    }
    return v;  // the block's sum in thread 0
}

__device__ __forceinline__ double apply(const double* p, const int* links,
                                        const double* diag, long long i, long long n,
                                        int dirs) {
    double q = diag[i] * p[i];
    for (int d = 0; d < dirs; ++d) q -= p[links[d * n + i]];
    return q;
}

// r = b - A x, z = inv r, p = z; r.z and r.r into RZN and RR.
extern "C" __global__ void cg_residual(const double* x, const int* links, const double* diag,
                                       const double* inv, const double* b, double* r,
                                       double* z, double* p, double* scal, long long n,
                                       int dirs) {
    __shared__ double sa[32], sb[32];
    double rz = 0.0, rr = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const double ri = b[i] - apply(x, links, diag, i, n, dirs);
        const double zi = inv[i] * ri;
        r[i] = ri; z[i] = zi; p[i] = zi;
        rz += ri * zi; rr += ri * ri;
    }
    rz = block_sum(rz, sa);
    rr = block_sum(rr, sb);
    if (threadIdx.x == 0) { atomicAdd(scal + RZN, rz); atomicAdd(scal + RR, rr); }
}

// q = A p; p.q into PQ.
extern "C" __global__ void cg_matvec(const double* p, const int* links, const double* diag,
                                     double* q, double* scal, const int* state, long long n,
                                     int dirs) {
    if (state[DONE]) return;  // the same for every thread of the launch
    __shared__ double sa[32];
    double pq = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const double qi = apply(p, links, diag, i, n, dirs);
        q[i] = qi;
        pq += p[i] * qi;
    }
    pq = block_sum(pq, sa);
    if (threadIdx.x == 0) atomicAdd(scal + PQ, pq);
}

// x += alpha p, r -= alpha q, z = inv r; r.r and r.z into RR and RZN.
extern "C" __global__ void cg_update(double* x, double* r, double* z, const double* p,
                                     const double* q, const double* inv, double* scal,
                                     const int* state, long long n) {
    if (state[DONE]) return;
    __shared__ double sa[32], sb[32];
    const double alpha = scal[RZ] / scal[PQ];
    double rr = 0.0, rz = 0.0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        x[i] += alpha * p[i];
        const double ri = r[i] - alpha * q[i];
        const double zi = inv[i] * ri;
        r[i] = ri; z[i] = zi;
        rr += ri * ri; rz += ri * zi;
    }
    rr = block_sum(rr, sa);
    rz = block_sum(rz, sb);
    if (threadIdx.x == 0) { atomicAdd(scal + RR, rr); atomicAdd(scal + RZN, rz); }
}

// One thread: count the iteration, test |r| < limit_norm, else beta and reset the sums.
extern "C" __global__ void cg_scalars(double* scal, int* state, double limit_norm,
                                      int max_iterations) {
    if (state[DONE]) return;
    state[ITER] += 1;
    scal[NORM] = sqrt(scal[RR]);
    if (scal[NORM] < limit_norm) { state[DONE] = 1; return; }
    if (state[ITER] >= max_iterations) { state[DONE] = 2; return; }
    scal[BETA] = scal[RZN] / scal[RZ];
    scal[RZ] = scal[RZN];
    scal[RZN] = 0.0; scal[RR] = 0.0; scal[PQ] = 0.0;
}

// p = z + beta p.
extern "C" __global__ void cg_direction(double* p, const double* z, const double* scal,
                                        const int* state, long long n) {
    if (state[DONE]) return;
    const double beta = scal[BETA];
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x)
        p[i] = z[i] + beta * p[i];
}
"""


@cache
def _module(device: int):
    import cupy as cp

    return cp.RawModule(code=SOURCE, options=("-std=c++17",))


#: The kernels of the solve, in launch order.
KERNELS = ("cg_residual", "cg_matvec", "cg_update", "cg_scalars", "cg_direction")


def _cupy_launch(name: str, blocks: int, threads: int, args: tuple) -> None:
    """Launch kernel ``name`` of :data:`SOURCE` on the current device (compiled once per
    process; CuPy's disk cache keeps the binary for the next one)."""
    import cupy as cp

    _module(cp.cuda.Device().id).get_function(name)((blocks,), (threads,), args)


def _cupy_blocks() -> int:
    """Blocks of a grid-stride launch: 8 per multiprocessor of the current device."""
    import cupy as cp

    return 8 * cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["multiProcessorCount"]


def cg_solve(diagonal: np.ndarray, table: np.ndarray, b: np.ndarray, start: np.ndarray,
             tolerance: float, limit: int, xp=None, launch=None,
             max_blocks: int | None = None,
             threads: int = THREADS) -> tuple[np.ndarray, int, float]:
    """Jacobi-preconditioned CG of ``(diag - adjacency) x = b`` from ``start`` on the device
    (host arrays in: ``table`` (directions, n) neighbour indices, n = none); the iterate (host,
    float64), the iterations and the relative residual ``|r| / |b|``. Stops at the first
    iteration whose residual is under ``tolerance`` (0: the start itself) or at ``limit``.
    ``xp`` and ``launch(name, blocks, threads, args)``: CuPy and its launches by default (NumPy
    and an emulated launcher in the CPU tests, with ``max_blocks`` blocks of ``threads``)."""
    if xp is None:
        import cupy as xp
    launch = launch or _cupy_launch
    dirs, n = table.shape
    links = xp.asarray(np.ascontiguousarray(table, dtype=np.int32))
    diag = xp.asarray(np.asarray(diagonal, dtype=np.float64))
    inv = xp.asarray(1.0 / np.asarray(diagonal, dtype=np.float64))
    rhs = xp.asarray(np.asarray(b, dtype=np.float64))
    # Built on the host and uploaded: no CuPy operation, hence no NVRTC compile but the
    # module's. The trailing 0 of x and p: the value at the "no neighbour" index n.
    x = xp.asarray(np.append(np.asarray(start, dtype=np.float64), 0.0))
    p = xp.zeros(n + 1)
    r, z, q = xp.empty(n), xp.empty(n), xp.empty(n)
    scal = xp.zeros(8)
    state = xp.asarray(np.array([0, -1], dtype=np.int32))  # residual pass = iteration 0
    norm_b = float(np.sqrt(np.dot(b, b)))
    blocks = int(min(-(-n // threads), max_blocks or _cupy_blocks()))
    n_, dirs_ = np.int64(n), np.int32(dirs)
    limit_norm, cap = np.float64(tolerance * norm_b), np.int32(limit)
    launch("cg_residual", blocks, threads, (x, links, diag, inv, rhs, r, z, p, scal, n_, dirs_))
    launch("cg_scalars", 1, 1, (scal, state, limit_norm, cap))
    while not int(_host(state)[0]):
        for _ in range(BLOCK):
            launch("cg_matvec", blocks, threads, (p, links, diag, q, scal, state, n_, dirs_))
            launch("cg_update", blocks, threads, (x, r, z, p, q, inv, scal, state, n_))
            launch("cg_scalars", 1, 1, (scal, state, limit_norm, cap))
            launch("cg_direction", blocks, threads, (p, z, scal, state, n_))
    iterations = int(_host(state)[1])
    residual = float(_host(scal)[5]) / norm_b
    return _host(x)[:n], iterations, residual


def _host(a) -> np.ndarray:
    """A device (or NumPy) array on the host."""
    return a.get() if hasattr(a, "get") else np.asarray(a)
