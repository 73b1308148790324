"""The packed compact kernel (issue 20 item 2: float32 throughput): K tiles per block, one
thread per fluid node instead of one per tile node. Through the g++ emulator it must equal the
NumPy mirror of the pull bit for bit and the NumPy backend over three full steps; nvcc must
compile it. The GPU times it in benchmarks/compact/compact_probe.py ('packed' rows)."""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

from solver.backends.cuda.compact import CompactTiling
from solver.backends.cuda.compact_source import packed_threads, probe_shared_bytes, probe_source
from solver.backends.cuda.tables import physics_args

from .compact_emulator import LAT, assert_pull_matches_mirror, case, compiler, emulated
from .porous_cases import as_stored, make_problem, noisy_start, reference
from .test_kernel_compile import NVCC


def _tables(compact: CompactTiling) -> list[np.ndarray]:
    t = compact.tiling
    return [compact.masks.astype(np.uint64), compact.base.astype(np.int32),
            np.ascontiguousarray(t.tiles, dtype=np.int32),
            np.ascontiguousarray(t.tile_map.transpose().ravel(), dtype=np.int32)]


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("precision, pad, packed, name", [
    ("float32", 1, 4, "periodic xyz, offset (1, 2, 3)"),
    ("float32", 1, 8, "walls in y, offset (3, 0, 1)"),
    ("float64", 4, 2, "closed box, best offset"),
])
def test_packed_probe_equals_numpy_mirror(precision, pad, packed, name) -> None:
    _, tiling, compact, f, periodic = case(name, pad, seed=3)
    dtype = np.dtype(precision)
    tiled = np.moveaxis(tiling.gather(np.moveaxis(f, 0, -1)), 2, 1).astype(dtype)
    fin = compact.pack(tiled, fill=-7.0)
    fout = np.full_like(fin, -9.0)  # padding slots must stay as they are
    ints = np.array(compact.int_args(periodic), dtype=np.int32)
    assert probe_shared_bytes(1, True, packed) <= 48 * 1024  # no opt-in above 48 KB needed
    run = emulated(precision, pad, True, packed=packed)
    run(ctypes.c_int(-(-tiling.n_tiles // packed)), ctypes.c_int(packed_threads(packed)),
        _ptr(fin), _ptr(fout), *(_ptr(t) for t in _tables(compact)), _ptr(ints),
        _ptr(np.zeros(1, dtype)))
    assert_pull_matches_mirror(compact, fin, fout, periodic)


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("precision, collision, fluid, packed", [
    ("float32", "BGK", "incompressible", 4),
    ("float64", "TRT", "quasi-compressible", 8),
])
def test_packed_step_equals_numpy_reference(precision, collision, fluid, packed) -> None:
    problem = make_problem("D3Q19", precision, collision, fluid, offset=(1, 2, 3))
    tiling, dtype = problem.tiling, np.dtype(precision)
    compact = CompactTiling(tiling, 1)
    f0 = noisy_start(problem)
    copies = [compact.pack(as_stored(problem, f0).astype(dtype)), None]
    copies[1] = np.zeros_like(copies[0])
    ints = np.array(compact.int_args(problem.periodic), dtype=np.int32)
    reals = np.array(physics_args(problem), dtype=dtype)
    run = emulated(precision, 1, True, collision, fluid == "incompressible", packed)
    for step in range(3):
        src, dst = copies[step % 2], copies[1 - step % 2]
        run(ctypes.c_int(-(-tiling.n_tiles // packed)), ctypes.c_int(packed_threads(packed)),
            _ptr(src), _ptr(dst), *(_ptr(t) for t in _tables(compact)), _ptr(ints), _ptr(reals))
    got = compact.unpack(copies[1], LAT.q).astype(np.float64)
    ref = reference(problem, f0, 3)
    fluid_nodes = np.broadcast_to(~tiling.solid[:, None, :], ref.shape)
    tol = 1e-12 if precision == "float64" else 1e-5
    assert np.abs(got - ref)[fluid_nodes].max() <= tol * np.abs(ref).max()
    assert np.abs(ref - as_stored(problem, f0))[fluid_nodes].max() > 1e3 * tol  # it moved


def test_packed_needs_halo_addressing() -> None:
    with pytest.raises(ValueError, match="halo"):
        probe_source("D3Q19", "float32", 1, False, packed=4)


@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")
def test_packed_and_in_place_compile_with_nvcc(tmp_path: Path) -> None:
    source = tmp_path / "packed.cu"
    source.write_text("\n".join(
        [probe_source("D3Q19", p, 1, True, None, True, k) for p in ("float32", "float64")
         for k in (4, 8)]
        + [probe_source("D3Q19", p, 1, True, coll, inc, k) for p in ("float32", "float64")
           for coll in ("BGK", "TRT", "MRT") for inc in (True, False) for k in (4, 8)]
        # the in-place (AA) kernels and the swap decode, per-node and packed
        + [probe_source("D3Q19", p, 1, True, "TRT", True, k, s) for p in ("float32", "float64")
           for k in (0, 4) for s in ("aa_neighbour", "aa_local", "swap")]))
    out = subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-o", str(tmp_path / "c.cubin"),
                          str(source)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
