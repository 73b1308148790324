"""CPU doubles for the compact-storage tests: the compact kernels through the g++ emulator,
a fake CuPy on NumPy that launches them, and the small test cases."""

from __future__ import annotations

import ctypes
import hashlib
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from solver.backends.cuda.compact import CompactTiling
from solver.backends.cuda.compact_source import (
    DEFAULT_CODE,
    CompactCode,
    probe_name,
    probe_shared_bytes,
    probe_source,
    real_param_names,
)
from solver.lattice import get_lattice
from solver.tiling import Tiling

from .gxx_cache import compile_once
from .kernel_emulator import _SHIM, compiler
from .porous_cases import porous_solid

__all__ = ["LAT", "CASES", "case", "dense_pull", "emulated", "compile_compact", "emulator_launcher",
           "FakeCupy", "compiler"]

LAT = get_lattice("D3Q19")


def dense_pull(f: np.ndarray, solid: np.ndarray, periodic: tuple[bool, ...]) -> np.ndarray:
    """Reference pull on the voxel grid, f (q, nx, ny, nz): f_i(x) <- f_i(x - c_i), or
    f_opp(i)(x) where x - c_i is solid or outside a non-periodic face; solid nodes keep f."""
    out = f.copy()
    shape = np.array(solid.shape)
    fluid = np.argwhere(~solid)
    for i, c in enumerate(LAT.c):
        src = fluid - c
        for ax in range(3):
            if periodic[ax]:
                src[:, ax] %= shape[ax]
        inside = np.all((src >= 0) & (src < shape), axis=1)
        clipped = np.clip(src, 0, shape - 1)
        from_fluid = inside & ~solid[tuple(clipped.T)]
        pulled = f[i][tuple(clipped.T)]
        bounced = f[LAT.opposite[i]][tuple(fluid.T)]
        out[i][tuple(fluid.T)] = np.where(from_fluid, pulled, bounced)
    return out


CASES = {  # shape, tile offset, periodic axes
    "periodic xyz, offset (1, 2, 3)": ((26, 15, 11), (1, 2, 3), (True, True, True)),
    "walls in y, offset (3, 0, 1)": ((26, 15, 11), (3, 0, 1), (True, False, True)),
    "closed box, best offset": ((13, 18, 9), "best", (False, False, False)),
}


def case(name: str, pad: int, seed: int = 0):
    shape, offset, periodic = CASES[name]
    solid = porous_solid(shape, seed)
    tiling = Tiling.build(solid, 4, offset)
    rng = np.random.default_rng(seed + 1)
    f = rng.random((LAT.q, *shape))
    return solid, tiling, CompactTiling(tiling, pad), f, periodic



_LAUNCH = r"""
#define __popcll(x) __builtin_popcountll(x)
#define __popc(x) __builtin_popcount(x)
""", r"""
extern "C" void emu_compact(int grid, int block, const STORE* fin, STORE* fout,
    const unsigned long long* masks, const OFFSET* base, const int* tiles, const int* tile_map,
    const int* ia, const REAL* ra, unsigned int* seeds)
{
    blockDim.x = block;
    std::barrier<> bar(block), end(block);
    emu_block = &bar;
    emu_warps.clear();
    for (int w = 0; w < block / 32; ++w) emu_warps.emplace_back(new std::barrier<>(32));
    std::vector<std::thread> threads;
    for (int t = 0; t < block; ++t) {
        threads.emplace_back([&, t] {
            threadIdx.x = t;
            for (int b = 0; b < grid; ++b) {
                blockIdx.x = b;
                KERNEL(fin, fout, masks, base, tiles, tile_map, ia[0], ia[1], ia[2], ia[3],
                       ia[4], ia[5], ia[6], ia[7], ia[8], ia[9], ia[10] RARGS);
                end.arrive_and_wait();
            }
        });
    }
    for (auto& th : threads) th.join();
}
"""


def compile_compact(code: str, name: str, real: str, n_reals: int, half: bool = False,
                    wide: bool = False):
    """The emulated launch of compact kernel ``name`` in ``code``: (blocks, threads, fin, fout,
    masks, base, tiles, tile_map, ints, reals, seeds) with the 11 ints and ``n_reals`` reals
    packed; ``half``: float16 storage (binary16 bits; the kernel also takes ``seeds``, its
    step-counter pair); ``wide``: 64-bit value offsets (``base`` int64). Its ``smem``: the
    emulated shared memory (bytes), for :func:`emulator_launcher`'s bounds check."""
    rargs = "".join(f", ra[{k}]" for k in range(n_reals)) + (", seeds" if half else "")
    store = "unsigned short" if half else real
    offset = "long long" if wide else "int"
    src = (_SHIM + _LAUNCH[0] + code + f"\n#define REAL {real}\n#define STORE {store}\n"
           f"#define OFFSET {offset}\n"
           f"#define KERNEL {name}::{name}\n"
           f"#define RARGS {rargs}\n" + _LAUNCH[1] + "\n// built with -fsanitize=alignment\n")
    key = hashlib.sha1(src.encode()).hexdigest()[:16]
    lib = Path(tempfile.gettempdir()) / "lbm_kernel_emulator" / f"{name}_{key}.so"
    # The alignment sanitizer reports (on stderr) what a GPU refuses with "misaligned
    # address": x86 loads 8-byte pairs from 4-byte boundaries without complaint.
    compile_once(src, lib, ["-O1", "-std=c++20", "-shared", "-fPIC", "-pthread", "-w",
                            "-fsanitize=alignment"], compiler())
    handle = ctypes.CDLL(str(lib))
    run = handle.emu_compact
    run.smem = np.ctypeslib.as_array((ctypes.c_uint8 * (4 << 16)).in_dll(handle, "lbm_smem"))
    return run


def emulated(precision: str, pad: int, halo: bool, collision: str | None = None,
             incompressible: bool = True, packed: int = 0, streaming: str = "pull",
             code: CompactCode = DEFAULT_CODE, storage: str = "auto", wide: bool = False):
    """The emulated launch of one compact kernel (:func:`compile_compact`); ``wide``: the
    kernel with 64-bit value offsets."""
    if streaming == "swap":
        collision = None
    name = probe_name("D3Q19", precision, pad, halo, collision, incompressible, packed,
                      streaming, code, storage, wide)
    real = "double" if precision == "float64" else "float"
    n_reals = len(real_param_names("D3Q19", precision, collision, incompressible, storage))
    return compile_compact(probe_source("D3Q19", precision, pad, halo, collision,
                                        incompressible, packed, streaming, code, storage, wide),
                           name, real, n_reals, storage == "float16", wide)


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def emulator_launcher(variant, blocks, threads, shared, args) -> None:
    """CompactRun's launcher on the g++ emulator (host arrays); the kernel may write no shared
    memory past the ``shared`` bytes the launch gives it (a canary after them stays)."""
    k = variant.packed
    assert shared == probe_shared_bytes(threads // 64, True, k, variant.wide,
                                        variant.spec().count_bytes)
    fin, fout, masks, base, tiles, tile_map, *rest = args
    assert base.dtype == (np.int64 if variant.wide else np.int32)  # the kernel's offset_t
    seeds = rest.pop() if variant.half else np.zeros(2, np.uint32)  # the last argument
    ints = np.array(rest[:11], dtype=np.int32)
    reals = np.array(rest[11:] or [0.0], dtype=variant.precision)
    run = emulated(variant.precision, variant.compact, True,
                   None if variant.mode != "full" else variant.collision,
                   variant.incompressible, k, "swap" if variant.mode == "swap" else
                   variant.streaming, variant.code, variant.storage, variant.wide)
    run.smem[shared:] = 0xA5
    run(ctypes.c_int(blocks), ctypes.c_int(threads), _ptr(fin), _ptr(fout), _ptr(masks),
        _ptr(base), _ptr(tiles), _ptr(tile_map), _ptr(ints), _ptr(reals), _ptr(seeds))
    assert (run.smem[shared:] == 0xA5).all(), f"{variant.name} wrote past {shared} B of shared"


class FakeCupy:
    """The slice of CuPy that CompactProbe uses, on NumPy: RawModule kernels run through the
    g++ emulator, streams record CUDA-graph captures and replay them, events read a clock."""

    def __init__(self) -> None:
        fake = self
        self.capture: list | None = None
        self.launches = 0

        class Kernel:
            def __init__(self, code: str, name: str) -> None:
                self.code, self.name = code, name

            def __call__(self, grid, block, args, shared_mem=0) -> None:
                if fake.capture is not None:
                    fake.capture.append(lambda: self(grid, block, args, shared_mem))
                    return
                fin = args[0]
                real = "double" if fin.dtype == np.float64 else "float"
                n_reals = len(args) - 17
                reals = np.array(args[17:] or [0.0], dtype=fin.dtype)
                run = compile_compact(self.code, self.name, real, n_reals)
                run(ctypes.c_int(grid[0]), ctypes.c_int(block[0]), *(_ptr(a) for a in args[:6]),
                    _ptr(np.array(args[6:17], dtype=np.int32)), _ptr(reals),
                    _ptr(np.zeros(2, np.uint32)))
                fake.launches += 1

        class Module:
            def __init__(self, code: str, options=()) -> None:
                self.code = code

            def get_function(self, name: str) -> Kernel:
                return Kernel(self.code, name)

        class Graph:
            def __init__(self, calls) -> None:
                self.calls = calls

            def launch(self, stream=None) -> None:
                for call in self.calls:
                    call()

        class Stream:
            def __init__(self, non_blocking: bool = False) -> None:
                pass

            def __enter__(self):
                return self

            def __exit__(self, *exc) -> None:
                pass

            def synchronize(self) -> None:
                pass

            def begin_capture(self) -> None:
                fake.capture = []

            def end_capture(self) -> Graph:
                calls, fake.capture = fake.capture, None
                return Graph(calls)

        class Event:
            def record(self, stream=None) -> None:
                self.t = time.perf_counter()

            def synchronize(self) -> None:
                pass

        self.RawModule, self.full, self.asarray, self.asnumpy = Module, np.full, np.asarray, \
            np.asarray
        self.cuda = SimpleNamespace(
            Stream=Stream, Event=Event, get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
            Device=lambda: SimpleNamespace(synchronize=lambda: None),
            get_current_stream=lambda: Stream())
        self.get_default_memory_pool = lambda: SimpleNamespace(free_all_blocks=lambda: None)

    def launcher(self):
        """CompactRun's launcher through the emulator; a capture in progress records the
        launch (as a CUDA graph does) instead of running it."""
        def launch(*args) -> None:
            if self.capture is not None:
                self.capture.append(lambda: emulator_launcher(*args))
            else:
                emulator_launcher(*args)
        return launch


def assert_pull_matches_mirror(compact, fin: np.ndarray, fout: np.ndarray, periodic) -> None:
    """Every slot a compact pull writes holds the NumPy mirror's value; the others (padding,
    filled with -9) are left as they were."""
    want = compact.pull(fin, LAT, periodic)
    dst, _ = compact.pull_sources(LAT, periodic)
    written = np.zeros(fin.size, bool)
    written[dst.ravel()] = True
    np.testing.assert_array_equal(fout[written], want[written])
    assert (fout[~written] == -9.0).all()
