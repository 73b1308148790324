"""Which in-place streaming pattern can match two copies? A standalone probe (issue 20 item 4).

The in-place (AA) option of the solver runs at 0.76-0.87 of two-copy speed in float32 on the
H100. The AA pattern alternates a step that reads *and* writes neighbours' slots with one that
touches only the node's own: on the tiled 4^3 layout a warp's neighbour access spreads over the
sectors of up to four tiles, so the first step carries about twice the L2 traffic of a two-copy
step and the second about two thirds, and their mean time exceeds the two-copy step (the L2
column of ``benchmarks/kernel_tuning/README.md``). The esoteric pull (Lehmann 2022) moves the
same bytes but every step reads and writes half of its populations at the node and half at
neighbours, so every step carries the two-copy step's L2 traffic.

This probe measures that on the solver's memory layout, not in the solver: three small kernels
with one address scheme and one BGK collision (D3Q19, periodic box of n^3 nodes, every 4^3 tile
stored, value (tile * 19 + i) * 64 + node, node = x + 4 y + 16 z): two-copy pull, the AA pair,
and the esoteric-pull pair. Each pair of steps is checked against two pull steps (decoded to the
natural layout, NumPy's roll for the streamed layouts), then timed with CUDA events after a
warm-up next to the device-to-device copy bandwidth of the same process. Its verdict is the
ratio of each in-place pattern to the probe's own two-copy pull; the solver's kernels are timed
beside it (``ProbeBackend.probe``) so the probe's pull can be compared with the real one.

Usage, on the GPU machine from the repository root: ``python benchmarks/in_place/inplace_patterns.py
--out DIR`` (about 30 s on an H100); writes ``inplace-patterns-<gpu>-<date>-<commit>.json/.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: D3Q19 with opposite directions side by side: i odd, i + 1 = opp(i) (the esoteric pairs).
C = np.array([(0, 0, 0), (1, 0, 0), (-1, 0, 0), (0, 1, 0), (0, -1, 0), (0, 0, 1), (0, 0, -1),
              (1, 1, 0), (-1, -1, 0), (1, 0, 1), (-1, 0, -1), (0, 1, 1), (0, -1, -1),
              (1, -1, 0), (-1, 1, 0), (1, 0, -1), (-1, 0, 1), (0, 1, -1), (0, -1, 1)])
W = np.array([1 / 3] + [1 / 18] * 6 + [1 / 36] * 12)
Q = len(C)
PATTERNS = ("pull", "aa", "esoteric")

_SOURCE = r"""
typedef ${real} real;
constexpr int Q = 19;

// Offsets of the x, y and z parts of a node's value index at shifts -1, 0, +1 (periodic wrap):
// index(node + d) = ax[dx + 1] + ay[dy + 1] + az[dz + 1], plus i * 64 for direction i.
struct Axes { int ax[3], ay[3], az[3]; };

__device__ __forceinline__ int wrap(int v, int n) { return v < 0 ? v + n : (v >= n ? v - n : v); }

__device__ __forceinline__ Axes axes(int tile, int node, int n, int g)
{
    const int X = (tile % g) * 4 + (node & 3), Y = ((tile / g) % g) * 4 + ((node >> 2) & 3),
              Z = (tile / (g * g)) * 4 + (node >> 4);
    Axes a;
#pragma unroll
    for (int d = 0; d < 3; ++d) {
        const int x = wrap(X + d - 1, n), y = wrap(Y + d - 1, n), z = wrap(Z + d - 1, n);
        a.ax[d] = (x >> 2) * Q * 64 + (x & 3);
        a.ay[d] = (y >> 2) * g * Q * 64 + 4 * (y & 3);
        a.az[d] = (z >> 2) * g * g * Q * 64 + 16 * (z & 3);
    }
    return a;
}

__device__ __forceinline__ int at(const Axes& a, int dx, int dy, int dz, int i)
{
    return a.ax[dx + 1] + a.ay[dy + 1] + a.az[dz + 1] + i * 64;
}

#define CX_ {0, 1, -1, 0, 0, 0, 0, 1, -1, 1, -1, 0, 0, 1, -1, 1, -1, 0, 0}
#define CY_ {0, 0, 0, 1, -1, 0, 0, 1, -1, 0, 0, 1, -1, -1, 1, 0, 0, 1, -1}
#define CZ_ {0, 0, 0, 0, 0, 1, -1, 0, 0, 1, -1, 1, -1, 0, 0, -1, 1, -1, 1}

__device__ __forceinline__ void collide(real* f, real omega)
{
    const int cx[Q] = CX_, cy[Q] = CY_, cz[Q] = CZ_;
    real rho = 0, jx = 0, jy = 0, jz = 0;
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        rho += f[i]; jx += cx[i] * f[i]; jy += cy[i] * f[i]; jz += cz[i] * f[i];
    }
    const real inv = real(1) / rho, ux = jx * inv, uy = jy * inv, uz = jz * inv;
    const real usq = real(1.5) * (ux * ux + uy * uy + uz * uz);
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        const real w = i == 0 ? real(1) / 3 : (i < 7 ? real(1) / 18 : real(1) / 36);
        const real cu = real(3) * (cx[i] * ux + cy[i] * uy + cz[i] * uz);
        const real feq = w * rho * (real(1) + cu + real(0.5) * cu * cu - usq);
        f[i] += omega * (feq - f[i]);
    }
}

#define SETUP \
    const int tile = blockIdx.x * (blockDim.x / 64) + threadIdx.x / 64, node = threadIdx.x % 64; \
    if (tile >= n_tiles) return; \
    const Axes a = axes(tile, node, n, g); \
    const int cx[Q] = CX_, cy[Q] = CY_, cz[Q] = CZ_; \
    real f[Q];

// Two copies: pull f_i from x - c_i, store at x.
extern "C" __global__ void pull(const real* __restrict__ fin, real* __restrict__ fout,
                                int n, int g, int n_tiles, real omega)
{
    SETUP
#pragma unroll
    for (int i = 0; i < Q; ++i) f[i] = fin[at(a, -cx[i], -cy[i], -cz[i], i)];
    collide(f, omega);
#pragma unroll
    for (int i = 0; i < Q; ++i) fout[at(a, 0, 0, 0, i)] = f[i];
}

// AA, natural -> streamed: pull as above, store f*_i where g_opp(i) came from (x + c_i, opp).
extern "C" __global__ void aa_neighbour(real* F, int n, int g, int n_tiles, real omega)
{
    SETUP
#pragma unroll
    for (int i = 0; i < Q; ++i) f[i] = F[at(a, -cx[i], -cy[i], -cz[i], i)];
    collide(f, omega);
#pragma unroll
    for (int i = 0; i < Q; ++i) {
        const int o = i == 0 ? 0 : (i & 1 ? i + 1 : i - 1);
        F[at(a, cx[i], cy[i], cz[i], o)] = f[i];
    }
}

// AA, streamed -> natural: everything at the node itself.
extern "C" __global__ void aa_local(real* F, int n, int g, int n_tiles, real omega)
{
    SETUP
#pragma unroll
    for (int i = 0; i < Q; ++i) f[i] = F[at(a, 0, 0, 0, i == 0 ? 0 : (i & 1 ? i + 1 : i - 1))];
    collide(f, omega);
#pragma unroll
    for (int i = 0; i < Q; ++i) F[at(a, 0, 0, 0, i)] = f[i];
}

// Esoteric pull, pairs (i, o = i + 1), i odd. Even step: g_i at (x, o), g_o at (x + c_i, i);
// f*_i to (x + c_i, i), f*_o to (x, o). Odd step: the slots of i and o exchanged. A thread
// writes exactly the slots it read.
template <bool ODD>
__device__ __forceinline__ void esoteric(real* F, int n, int g, int n_tiles, real omega)
{
    SETUP
    f[0] = F[at(a, 0, 0, 0, 0)];
#pragma unroll
    for (int i = 1; i < Q; i += 2) {
        f[i] = F[at(a, 0, 0, 0, ODD ? i : i + 1)];
        f[i + 1] = F[at(a, cx[i], cy[i], cz[i], ODD ? i + 1 : i)];
    }
    collide(f, omega);
    F[at(a, 0, 0, 0, 0)] = f[0];
#pragma unroll
    for (int i = 1; i < Q; i += 2) {
        F[at(a, cx[i], cy[i], cz[i], ODD ? i + 1 : i)] = f[i];
        F[at(a, 0, 0, 0, ODD ? i : i + 1)] = f[i + 1];
    }
}

extern "C" __global__ void esoteric_even(real* F, int n, int g, int n_tiles, real omega)
{
    esoteric<false>(F, n, g, n_tiles, omega);
}

// The memory system alone: every value read and written once, in place or into a second array.
extern "C" __global__ void scale(const real* fin, real* fout, long long count)
{
    for (long long k = blockIdx.x * (long long)blockDim.x + threadIdx.x; k < count;
         k += (long long)gridDim.x * blockDim.x)
        fout[k] = fin[k] * real(1.0000001);
}

extern "C" __global__ void esoteric_odd(real* F, int n, int g, int n_tiles, real omega)
{
    esoteric<true>(F, n, g, n_tiles, omega);
}
"""


def source(real: str) -> str:
    """CUDA source of the probe's kernels in arithmetic type ``real`` ('float' or 'double')."""
    return _SOURCE.replace("${real}", real)


def to_grid(f: np.ndarray, n: int) -> np.ndarray:
    """Tiled values (n_tiles * Q * 64,) as a grid (Q, n, n, n) indexed [i, x, y, z]."""
    g = n // 4
    t = f.reshape(g, g, g, Q, 4, 4, 4)  # tz, ty, tx, i, lz, ly, lx
    return t.transpose(3, 2, 6, 1, 5, 0, 4).reshape(Q, n, n, n)


def from_grid(grid: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_grid`."""
    n = grid.shape[1]
    g = n // 4
    t = grid.reshape(Q, g, 4, g, 4, g, 4)  # i, tx, lx, ty, ly, tz, lz
    return np.ascontiguousarray(t.transpose(5, 3, 1, 0, 6, 4, 2)).ravel()


def _roll(a: np.ndarray, c) -> np.ndarray:
    """Value at x taken from x - c (periodic)."""
    return np.roll(a, shift=tuple(int(v) for v in c), axis=(0, 1, 2))


def esoteric_encode(natural: np.ndarray) -> np.ndarray:
    """The esoteric layout before an even step from natural post-collision values (grid):
    (y, i) holds f*_o(y), (y, o) holds f*_i(y - c_i)."""
    out = natural.copy()
    for i in range(1, Q, 2):
        out[i] = natural[i + 1]
        out[i + 1] = _roll(natural[i], C[i])
    return out


def esoteric_decode(layout: np.ndarray) -> np.ndarray:
    """Natural values (grid) from the esoteric layout after an odd step (inverse of encode)."""
    out = layout.copy()
    for i in range(1, Q, 2):
        out[i + 1] = layout[i]
        out[i] = _roll(layout[i + 1], -C[i])
    return out


def _event_seconds(cp, launch, steps: int) -> float:
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(steps):
        launch()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) / 1e3


def run_pattern(cp, module, pattern: str, f0, n: int, omega: float, threads: int = 128):
    """The device state of ``pattern`` from ``f0`` (natural layout; the esoteric pattern
    starts from its encoding) and the closure that launches one pair of steps, ``threads`` per
    block (64 per tile)."""
    g = n // 4
    n_tiles = g**3
    blocks = (n_tiles * 64 + threads - 1) // threads
    real = f0.dtype.type
    ints = (np.int32(n), np.int32(g), np.int32(n_tiles), real(omega))
    k = {name: module.get_function(name) for name in (
        "pull", "aa_neighbour", "aa_local", "esoteric_even", "esoteric_odd")}
    if pattern == "pull":
        a, b = cp.asarray(f0), cp.empty_like(cp.asarray(f0))
        state = [a, b]

        def launch():
            k["pull"]((blocks,), (threads,), (state[0], state[1], *ints))
            k["pull"]((blocks,), (threads,), (state[1], state[0], *ints))
        return state, launch
    if pattern == "aa":
        state = [cp.asarray(f0)]

        def launch():
            k["aa_neighbour"]((blocks,), (threads,), (state[0], *ints))
            k["aa_local"]((blocks,), (threads,), (state[0], *ints))
        return state, launch
    state = [cp.asarray(from_grid(esoteric_encode(to_grid(np.asarray(f0), n))))]

    def launch():
        k["esoteric_even"]((blocks,), (threads,), (state[0], *ints))
        k["esoteric_odd"]((blocks,), (threads,), (state[0], *ints))
    return state, launch


def natural(cp, pattern: str, state, n: int) -> np.ndarray:
    """The natural post-collision values of a pattern's state after an even number of steps."""
    f = cp.asnumpy(state[0])
    return from_grid(esoteric_decode(to_grid(f, n))) if pattern == "esoteric" else f


def initial(n: int, dtype, seed: int = 0) -> np.ndarray:
    """Rest populations with 1 % random density and a small random flow (natural layout)."""
    rng = np.random.default_rng(seed)
    rho = 1 + 0.01 * rng.standard_normal((n, n, n))
    u = 0.02 * rng.standard_normal((3, n, n, n))
    cu = np.einsum("qd,dxyz->qxyz", C, u)
    feq = W[:, None, None, None] * rho * (1 + 3 * cu + 4.5 * cu**2 - 1.5 * (u**2).sum(0))
    return from_grid(feq).astype(dtype)


def check(cp, module, n: int, dtype, omega: float) -> dict:
    """Max |difference| of each in-place pattern's natural values against two-copy pull after
    4 steps (must be round-off: the same arithmetic per node)."""
    f0 = initial(n, dtype)
    out = {}
    for pattern in PATTERNS:
        state, launch = run_pattern(cp, module, pattern, f0, n, omega)
        launch()
        launch()
        out[pattern] = natural(cp, pattern, state, n)
    return {p: float(np.abs(out[p] - out["pull"]).max()) for p in PATTERNS[1:]}


def time_patterns(cp, module, n: int, dtype, omega: float, pairs: int) -> dict:
    """Seconds per step of each pattern, the best over 64-256 threads per block (each the
    median of 3 runs of ``pairs`` step pairs)."""
    f0 = initial(n, dtype)
    out = {}
    for pattern in PATTERNS:
        for threads in (64, 128, 256):
            state, launch = run_pattern(cp, module, pattern, f0, n, omega, threads)
            for _ in range(3):
                launch()
            cp.cuda.Device().synchronize()
            sec = float(np.median([_event_seconds(cp, launch, pairs) / (2 * pairs)
                                   for _ in range(3)]))
            out[pattern] = min(out.get(pattern, np.inf), sec)
            del state
    return out


def stream_seconds(cp, module, dtype, nbytes: int = 1 << 30) -> dict:
    """Seconds to read and write ``nbytes`` once: into a second array, and in place."""
    count = nbytes // dtype.itemsize
    a = cp.ones(count, dtype=dtype)
    b = cp.empty_like(a)
    kernel = module.get_function("scale")
    blocks = 132 * 16
    out = {}
    for name, dst in (("two arrays", b), ("in place", a)):
        def launch(dst=dst):
            kernel((blocks,), (256,), (a, dst, np.int64(count)))
        launch()
        out[name] = min(_event_seconds(cp, launch, 20) / 20 for _ in range(3))
    return out


def solver_kernels(n: int, precision: str) -> dict:
    """Seconds per step of the solver's own BGK kernels on the same periodic box, two copies
    and in place, per tiles per block (1, 2, 4: 64-256 threads)."""
    from solver.benchmarking.cases import BenchCase
    from solver.benchmarking.gpu_suite import _problem
    from solver.benchmarking.probe_backend import ProbeBackend

    backend, out = ProbeBackend(), {}
    box = BenchCase(f"periodic box {n}^3", np.zeros((n,) * 3, dtype=bool), tile_offset="origin")
    for streaming in ("two-copy", "in-place"):
        problem = _problem(box, precision, streaming, "tiled")
        state = backend.allocate(problem)
        try:
            for tpb in (1, 2, 4):
                backend.probe(state, "full", 4, tpb)
                out[(streaming, tpb)] = min(backend.probe(state, "full", 100, tpb) / 100
                                            for _ in range(3))
        finally:
            backend.release(state)
    return out


def main() -> None:
    import cupy as cp

    from solver.benchmarking.results import run_meta, write_json_md

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--pairs", type=int, default=50)
    args = parser.parse_args()
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    from solver.backends.cuda.backend import CupyBackend

    copy = CupyBackend().device_info()["copy_bandwidth"]  # the solver's own measurement
    meta = run_meta(name, size=args.size, copy_bandwidth=copy)
    rows, omega = [], 1 / 0.6
    for precision, real in (("float32", "float"), ("float64", "double")):
        module = cp.RawModule(code=source(real), options=("-std=c++17",))
        dtype = np.dtype(precision)
        errors = check(cp, module, 32, dtype, omega)
        seconds = time_patterns(cp, module, args.size, dtype, omega, args.pairs)
        solver = solver_kernels(args.size, precision)
        stream = stream_seconds(cp, module, dtype)
        rows += [{"precision": precision, "kernel": f"stream {name}", "seconds_per_step": sec,
                  "mflups": 0.0, "of_copy": 2 * (1 << 30) / sec / copy,
                  "of_two_copy": stream["two arrays"] / sec} for name, sec in stream.items()]
        nodes, bytes_per_node = args.size**3, 2 * Q * dtype.itemsize
        for pattern, sec in seconds.items():
            rows.append({"precision": precision, "kernel": f"probe {pattern}",
                         "seconds_per_step": sec, "mflups": nodes / sec / 1e6,
                         "of_copy": nodes * bytes_per_node / sec / copy,
                         "of_two_copy": seconds["pull"] / sec,
                         "max_abs_diff_vs_pull": errors.get(pattern, 0.0)})
        two_copy = min(sec for (streaming, _), sec in solver.items() if streaming == "two-copy")
        for (streaming, tpb), sec in solver.items():
            rows.append({"precision": precision, "kernel": f"solver {streaming} {tpb} tiles/block",
                         "seconds_per_step": sec, "mflups": nodes / sec / 1e6,
                         "of_copy": nodes * bytes_per_node / sec / copy,
                         "of_two_copy": two_copy / sec})
        print(json.dumps(rows[-5:], indent=1), flush=True)
    stem = f"inplace-patterns-{name.lower().replace(' ', '-')}-{meta['date']}-{meta['commit']}"
    lines = [f"# In-place patterns on the tiled layout: {name}", "",
             f"Date {meta['date']}, commit {meta['commit']}, periodic {args.size}^3 box, D3Q19 "
             f"BGK; copy bandwidth {copy / 1e9:.0f} GB/s in the same run. `probe` rows: this "
             "script's kernels (one address scheme, best of 64-256 threads per block); "
             "`solver` rows: the solver's tiled kernels; `of two-copy`: against the fastest "
             "two-copy row of the same kind; `stream`: one elementwise pass over 1 GiB.",
             "", "| precision | kernel | MFLUPS | of copy | of two-copy | max diff vs pull |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['precision']} | {r['kernel']} | {r['mflups']:.0f} | {r['of_copy']:.3f} | "
              f"{r['of_two_copy']:.3f} | {r.get('max_abs_diff_vs_pull', '-')} |" for r in rows]
    write_json_md(args.out, stem, {"meta": meta, "rows": rows}, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
