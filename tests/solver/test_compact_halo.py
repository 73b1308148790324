"""The compact kernels' halo codes (issue 20: the compact float32 step is bound by instruction
issue, most of it locating the halo; float64 by registers), checked on the CPU.

* Inner tiles (halo inside the domain) fill their halo by columns (``CompactCode.inner``),
  edge tiles keep the general wrap and face logic; the test cases hold both kinds of tile.
* Through the g++ emulator every code (default, inner; per-node and packed)
  equals the NumPy mirror of the pull bit for bit and the NumPy backend over full steps, two
  copies and in place, as :class:`CompactRun` steps them.
* The default code keeps the names (and so the timings' labels) of the kernels timed before;
  the backend runs the code ``plan.COMPACT_CODE`` names; nvcc compiles every code.
"""

from __future__ import annotations

import ctypes
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from solver.backends import plan
from solver.backends.cuda.compact import CompactTiling
from solver.backends.cuda.compact_source import (
    DEFAULT_CODE,
    CompactCode,
    packed_threads,
    probe_name,
    probe_source,
)
from solver.backends.cuda.kernels import KernelVariant, kernel_source
from solver.backends.cuda.tables import physics_args

from .compact_emulator import (
    CASES,
    LAT,
    FakeCupy,
    assert_pull_matches_mirror,
    case,
    compiler,
    emulated,
)
from .porous_cases import as_stored, make_problem, noisy_start, reference
from .test_kernel_compile import NVCC

INNER = CompactCode(inner=True)


def _inner_tiles(compact: CompactTiling) -> np.ndarray:
    """Which tiles the kernel's halo_inside() sends to fill_column (the same inequalities)."""
    t = compact.tiling
    tiles, size, off = t.tiles.astype(np.int64), np.array(t.shape), np.array(t.offset)
    return np.all((tiles * 4 - 1 >= off) & (tiles * 4 + 4 < size + off), axis=1)


def _tables(compact: CompactTiling) -> list[np.ndarray]:
    t = compact.tiling
    return [compact.masks.astype(np.uint64), compact.base.astype(np.int32),
            np.ascontiguousarray(t.tiles, dtype=np.int32),
            np.ascontiguousarray(t.tile_map.transpose().ravel(), dtype=np.int32)]


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


@pytest.mark.parametrize("name", list(CASES))
def test_cases_hold_inner_and_edge_tiles(name: str) -> None:
    """Both halo paths run in the emulator tests below, on tiles with solid nodes."""
    _, tiling, compact, _, _ = case(name, 1)
    inner = _inner_tiles(compact)
    assert 0 < inner.sum() < tiling.n_tiles
    assert tiling.solid[inner].any() and (~tiling.solid[inner]).any()


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("code", [DEFAULT_CODE, INNER], ids=["default", "inner"])
@pytest.mark.parametrize("precision, pad, tpb, packed, name", [
    ("float32", 1, 1, 0, "periodic xyz, offset (1, 2, 3)"),
    ("float32", 8, 2, 0, "walls in y, offset (3, 0, 1)"),
    ("float64", 1, 1, 4, "closed box, best offset"),
    ("float32", 1, 1, 2, "periodic xyz, offset (1, 2, 3)"),
])
def test_probe_with_halo_code_equals_numpy_mirror(code, precision, pad, tpb, packed, name,
                                                  capfd) -> None:
    _, tiling, compact, f, periodic = case(name, pad, seed=4)
    dtype = np.dtype(precision)
    tiled = np.moveaxis(tiling.gather(np.moveaxis(f, 0, -1)), 2, 1).astype(dtype)
    fin = compact.pack(tiled, fill=-7.0)
    fout = np.full_like(fin, -9.0)  # padding slots must stay as they are
    ints = np.array(compact.int_args(periodic), dtype=np.int32)
    run = emulated(precision, pad, True, packed=packed, code=code)
    k = packed or tpb
    run(ctypes.c_int(-(-tiling.n_tiles // k)),
        ctypes.c_int(packed_threads(packed) if packed else 64 * tpb), _ptr(fin), _ptr(fout),
        *(_ptr(t) for t in _tables(compact)), _ptr(ints), _ptr(np.zeros(1, dtype)))
    # The emulator's sanitizer reports misaligned shared-memory loads (the H100 stopped so).
    assert "misaligned" not in capfd.readouterr().err
    assert_pull_matches_mirror(compact, fin, fout, periodic)


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("precision, collision, fluid, packed, code", [
    ("float32", "BGK", "incompressible", 0, INNER),
    ("float64", "TRT", "quasi-compressible", 0, DEFAULT_CODE),
    ("float32", "MRT", "incompressible", 4, INNER),
])
def test_step_with_halo_code_equals_numpy_reference(precision, collision, fluid, packed,
                                                    code) -> None:
    """Three full steps (bounce-back at solids and the y walls, body force)."""
    problem = make_problem("D3Q19", precision, collision, fluid, offset=(1, 2, 3))
    tiling, dtype = problem.tiling, np.dtype(precision)
    compact = CompactTiling(tiling, 1)
    assert _inner_tiles(compact).any()
    f0 = noisy_start(problem)
    copies = [compact.pack(as_stored(problem, f0).astype(dtype)), None]
    copies[1] = np.zeros_like(copies[0])
    ints = np.array(compact.int_args(problem.periodic), dtype=np.int32)
    reals = np.array(physics_args(problem), dtype=dtype)
    run = emulated(precision, 1, True, collision, fluid == "incompressible", packed, code=code)
    k = packed or 2
    for step in range(3):
        src, dst = copies[step % 2], copies[1 - step % 2]
        run(ctypes.c_int(-(-tiling.n_tiles // k)),
            ctypes.c_int(packed_threads(packed) if packed else 64 * k), _ptr(src), _ptr(dst),
            *(_ptr(t) for t in _tables(compact)), _ptr(ints), _ptr(reals))
    got = compact.unpack(copies[1], LAT.q).astype(np.float64)
    ref = reference(problem, f0, 3)
    fluid_nodes = np.broadcast_to(~tiling.solid[:, None, :], ref.shape)
    tol = 1e-12 if precision == "float64" else 1e-5
    assert np.abs(got - ref)[fluid_nodes].max() <= tol * np.abs(ref).max()
    assert np.abs(ref - as_stored(problem, f0))[fluid_nodes].max() > 1e3 * tol  # it moved


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("streaming", ["two-copy", "in-place"])
def test_compact_run_with_the_configured_code_steps_like_numpy(monkeypatch, streaming) -> None:
    """The backend's choice carries plan.COMPACT_CODE into CompactRun's kernels (the
    one-line switch after the GPU timings); two copies or in place (AA pattern, its swap
    decode included), 16 steps from a captured graph and 3 plain ones equal NumPy's."""
    from solver.backends.cuda.compact_run import CompactRun

    monkeypatch.setattr(plan, "COMPACT_CODE", DEFAULT_CODE)
    problem = replace(make_problem("D3Q19", "float32", "BGK", "incompressible",
                                   offset=(1, 2, 0)),
                      tile_storage="compact", streaming=streaming)
    choice = plan.plan_for(problem)
    assert choice.compact and choice.code == DEFAULT_CODE
    fake = FakeCupy()
    launcher = fake.launcher()

    run = CompactRun(problem, choice.pad, xp=np, launcher=launcher, cuda=fake.cuda,
                     packed=choice.packed, code=choice.code)
    assert all(v.code == DEFAULT_CODE and not v.name.endswith("_i") for v in run.variants)
    f0 = noisy_start(problem)
    run.set_populations(as_stored(problem, f0))
    run.step(16 + 3)
    ref = reference(problem, f0, 19)
    got = run.populations()
    fluid = np.broadcast_to(~problem.tiling.solid[:, None, :], ref.shape)
    assert np.abs(got - ref)[fluid].max() <= 2e-5 * np.abs(ref).max()


def test_default_code_keeps_kernel_names_and_refuses_what_it_cannot() -> None:
    assert plan.COMPACT_CODE == INNER  # the winner of the H100 timings (ch-0654955)
    assert probe_name("D3Q19", "float32", 1, True, "BGK") \
        == "lbm_compact_full_BGK_inc_D3Q19_f32_p1_h"
    assert probe_name("D3Q19", "float64", 1, True, "BGK", code=INNER) \
        == "lbm_compact_full_BGK_inc_D3Q19_f64_p1_h_i"
    assert INNER.label == "inner" and DEFAULT_CODE.label == ""
    v = KernelVariant("D3Q19", "float32", "BGK", True, "xyz", compact=1, code=INNER)
    assert v.name.endswith("_h_i") and "fill_column(n" in kernel_source(v)
    tiled = KernelVariant("D3Q19", "float32", "BGK", True, "xyz", code=INNER)
    assert tiled.canonical() == replace(tiled, code=DEFAULT_CODE).canonical()  # tiled: ignored
    with pytest.raises(ValueError, match="halo addressing"):
        probe_source("D3Q19", "float32", 1, False, code=INNER)
    with pytest.raises(TypeError):  # paired entries and register caps lost: removed
        CompactCode(inner=True, registers=48)


@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")
def test_halo_codes_compile(tmp_path: Path) -> None:
    """nvcc compiles every code (probe, steps, in place, packed)."""
    codes = (DEFAULT_CODE, INNER)
    source = tmp_path / "halo.cu"
    source.write_text("\n".join(
        [probe_source("D3Q19", p, 1, True, coll, True, k, s, code) for p in ("float32", "float64")
         for code in codes for coll in (None, "BGK", "MRT") for k in (0, 4)
         for s in ("pull",)]
        + [probe_source("D3Q19", "float32", 1, True, "TRT", True, k, s, INNER)
           for k in (0, 4) for s in ("aa_neighbour", "aa_local", "swap")]))
    out = subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-o", str(tmp_path / "c.cubin"),
                          str(source)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("code", [DEFAULT_CODE, INNER], ids=["default", "inner"])
def test_d3q27_probe_reads_the_halo_corners(code) -> None:
    """D3Q27 pulls across the tile's corners, which the inner fill skips for D3Q19 only: the
    D3Q27 probe through the emulator equals the NumPy mirror bit for bit."""
    from solver.lattice import get_lattice

    from .compact_emulator import compile_compact

    lat = get_lattice("D3Q27")
    _, tiling, compact, _, periodic = case("periodic xyz, offset (1, 2, 3)", 1, seed=5)
    fin = np.random.default_rng(5).random(lat.q * compact.n_slots)
    fout = np.full_like(fin, -9.0)
    ints = np.array(compact.int_args(periodic), dtype=np.int32)
    name = probe_name("D3Q27", "float64", 1, True, code=code)
    run = compile_compact(probe_source("D3Q27", "float64", 1, True, code=code), name, "double", 0)
    run(ctypes.c_int(tiling.n_tiles), ctypes.c_int(64), _ptr(fin), _ptr(fout),
        *(_ptr(t) for t in _tables(compact)), _ptr(ints), _ptr(np.zeros(1)))
    dst, _ = compact.pull_sources(lat, periodic)
    want = compact.pull(fin, lat, periodic)
    np.testing.assert_array_equal(fout[dst.ravel()], want[dst.ravel()])
