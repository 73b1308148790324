"""Staged compact kernels (``CompactCode(staged=True)``, issue 20), checked on the CPU.

A staged block copies its tiles' contiguous range of the compact array to shared memory with
16-byte vectors, pulls from there what lies in it and writes its outputs back as one range.
Through the g++ emulator (alignment sanitizer on) the staged probe equals the NumPy mirror bit
for bit and the staged steps equal the NumPy reference: per node and packed, float32, float64
and float16 storage, whatever 16-byte phase the two copies start at (the vector path and the
single-value path of the write-back both run); the staged code refuses what it cannot step.
"""

from __future__ import annotations

import ctypes
from dataclasses import replace

import numpy as np
import pytest

from solver.backends.cuda.compact import CompactTiling
from solver.backends.cuda.compact_source import (
    CompactCode,
    packed_threads,
    probe_name,
    probe_shared_bytes,
    probe_source,
)

from .compact_emulator import FakeCupy, assert_pull_matches_mirror, case, compiler, emulated
from .porous_cases import as_stored, make_problem, noisy_start, reference

STAGED = CompactCode(inner=True, staged=True)

needs_gxx = pytest.mark.skipif(compiler() is None, reason="g++ is not installed")


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def _tables(compact: CompactTiling) -> list[np.ndarray]:
    t = compact.tiling
    return [compact.masks.astype(np.uint64), compact.base.astype(np.int32),
            np.ascontiguousarray(t.tiles, dtype=np.int32),
            np.ascontiguousarray(t.tile_map.transpose().ravel(), dtype=np.int32)]


def _at_phase(values: np.ndarray, shift: int) -> np.ndarray:
    """A copy of ``values`` starting ``shift`` values after a 16-byte boundary."""
    room = np.zeros(values.size + 16, dtype=values.dtype)
    start = (-room.ctypes.data % 16) // values.itemsize + shift
    out = room[start:start + values.size]
    out[...] = values
    assert out.ctypes.data % 16 == shift * values.itemsize
    return out


@needs_gxx
@pytest.mark.parametrize("precision, tpb, packed, phases", [
    ("float32", 1, 0, (0, 0)),
    ("float32", 2, 0, (1, 3)),   # fout at another phase: single-value write-back
    ("float64", 2, 0, (1, 1)),
    ("float32", 1, 4, (2, 2)),
    ("float64", 1, 2, (0, 1)),
])
@pytest.mark.parametrize("name", ["periodic xyz, offset (1, 2, 3)", "closed box, best offset"])
def test_staged_probe_equals_numpy_mirror(precision, tpb, packed, phases, name, capfd) -> None:
    _, tiling, compact, f, periodic = case(name, 1, seed=5)
    dtype = np.dtype(precision)
    tiled = np.moveaxis(tiling.gather(np.moveaxis(f, 0, -1)), 2, 1).astype(dtype)
    fin = _at_phase(compact.pack(tiled), phases[0])
    fout = _at_phase(np.full_like(fin, -9.0), phases[1])
    ints = np.array(compact.int_args(periodic), dtype=np.int32)
    run = emulated(precision, 1, True, packed=packed, code=STAGED)
    k = packed or tpb
    run(ctypes.c_int(-(-tiling.n_tiles // k)),
        ctypes.c_int(packed_threads(packed) if packed else 64 * tpb), _ptr(fin), _ptr(fout),
        *(_ptr(t) for t in _tables(compact)), _ptr(ints), _ptr(np.zeros(1, dtype)))
    assert "misaligned" not in capfd.readouterr().err
    assert_pull_matches_mirror(compact, fin, fout, periodic)


@needs_gxx
@pytest.mark.parametrize("precision, collision, fluid, packed, storage", [
    ("float32", "BGK", "incompressible", 0, "auto"),
    ("float64", "TRT", "quasi-compressible", 0, "auto"),
    ("float32", "MRT", "incompressible", 4, "auto"),
    ("float32", "BGK", "incompressible", 4, "float16"),
    ("float32", "BGK", "incompressible", 0, "float16"),
])
def test_staged_run_steps_like_numpy(precision, collision, fluid, packed, storage) -> None:
    """19 steps of CompactRun (a captured graph of 16 and 3 plain launches) with bounce-back
    at solids and the y walls and a body force equal NumPy's; float16 storage holds the bits
    of the unstaged kernel (same rounding, same random bits)."""
    from solver.backends.cuda.compact_run import CompactRun

    problem = replace(make_problem("D3Q19", precision, collision, fluid, offset=(1, 2, 0),
                                   storage=storage), tile_storage="compact")
    fake = FakeCupy()
    runs = {}
    for code in (STAGED, CompactCode(inner=True)):
        run = CompactRun(problem, 1, xp=np, launcher=fake.launcher(), cuda=fake.cuda,
                         packed=packed, code=code)
        f0 = noisy_start(problem)
        run.set_populations(as_stored(problem, f0))
        run.step(16 + 3)
        runs[code.staged] = run
    assert runs[True].variant.name.endswith("_i_s")
    got = runs[True].populations()
    fluid_nodes = np.broadcast_to(~problem.tiling.solid[:, None, :], got.shape)
    if storage == "float16":
        np.testing.assert_array_equal(runs[True].latest(), runs[False].latest())
    else:
        ref = reference(problem, f0, 19)
        tol = 1e-12 if precision == "float64" else 2e-5
        scale = np.abs(ref).max()
        assert np.abs(got - ref)[fluid_nodes].max() <= tol * scale
        assert np.abs(ref - as_stored(problem, f0))[fluid_nodes].max() > 1e2 * tol * scale


def test_staged_code_names_sizes_and_refusals() -> None:
    assert STAGED.label == "inner staged"
    assert probe_name("D3Q19", "float32", 1, True, "BGK", code=STAGED).endswith("_h_i_s")
    plain = probe_shared_bytes(2, True)
    # one buffer of the block's 2 * 19 * 64 float32 values (plus a vector of phase) per node
    assert probe_shared_bytes(2, True, 0, STAGED, 19, 4) == plain + 16 + 4 * (2 * 19 * 64 + 4)
    # packed: an input and an output buffer
    assert probe_shared_bytes(1, True, 4, STAGED, 19, 2) \
        == probe_shared_bytes(1, True, 4) + 16 + 2 * 2 * (4 * 19 * 64 + 8)
    assert probe_shared_bytes(4, True, 0, STAGED, 19, 8) <= 48 * 1024  # no opt-in needed
    with pytest.raises(ValueError, match="two copies"):
        probe_source("D3Q19", "float32", 1, True, "BGK", streaming="aa_neighbour", code=STAGED)
    with pytest.raises(ValueError, match="pad 1"):
        probe_source("D3Q19", "float32", 8, True, "BGK", code=STAGED)
