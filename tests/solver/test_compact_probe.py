"""Fluid-compacted tile storage and its CUDA propagation probe (issue 20), checked on the CPU.

* The NumPy mirror of the probe's popcount addressing (``CompactTiling.pull``) equals a plain
  pull on the voxel grid (periodic wrap per node, halfway bounce-back at solids and walls) on
  porous geometries with shifted tile grids, empty tiles and sizes not multiples of 4.
* The probe's CUDA text, run through the g++ emulation of :mod:`kernel_emulator` (blocks of 1
  and 2 tiles), gives the same array bit for bit, padding slots untouched; it compiles with
  nvcc for sm_80 and sm_90.
* The full compact step (BGK/TRT/MRT) through the emulator equals the NumPy backend.
* Memory per fluid node at eta_t about 0.5 is below the tiled storage's.
* ``KernelVariant(compact=pad)`` is that kernel and refuses what it lacks (every kernel's text
  stays byte-identical: ``test_kernel_hashes.py``); the edge conversion follows any layout.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

from solver.backends.cuda.compact import CompactTiling, sector_pad
from solver.backends.cuda.compact_source import probe_shared_bytes, probe_source, real_param_names
from solver.backends.cuda.tables import physics_args
from solver.tiling import Tiling

from .compact_emulator import (
    CASES,
    LAT,
    assert_pull_matches_mirror,
    case,
    compiler,
    dense_pull,
    emulated,
)
from .porous_cases import as_stored, make_problem, noisy_start, porous_solid, reference
from .test_kernel_compile import NVCC


@pytest.mark.parametrize("pad", [1, 8])
@pytest.mark.parametrize("name", list(CASES))
def test_numpy_mirror_equals_pull_on_the_grid(name: str, pad: int) -> None:
    solid, tiling, compact, f, periodic = case(name, pad)
    assert (tiling.tile_map < 0).any() and 0.2 < tiling.eta_t < 0.95  # empty and mixed tiles
    tiled = np.moveaxis(tiling.gather(np.moveaxis(f, 0, -1)), 2, 1)  # (n_tiles, q, 64)
    fc = compact.pack(tiled)
    assert fc.size == LAT.q * compact.n_slots and compact.n_slots % pad == 0
    got = tiling.scatter(np.moveaxis(compact.unpack(compact.pull(fc, LAT, periodic), LAT.q),
                                     1, 2))
    want = dense_pull(f, solid, periodic)
    fluid = ~solid
    np.testing.assert_array_equal(np.moveaxis(got, -1, 0)[:, fluid], want[:, fluid])
    assert not np.array_equal(want[:, fluid], f[:, fluid])  # the pull moved something


def test_pack_unpack_round_trip_and_bounds() -> None:
    _, tiling, compact, f, _ = case("closed box, best offset", 4)
    tiled = np.moveaxis(tiling.gather(np.moveaxis(f, 0, -1)), 2, 1)
    back = compact.unpack(compact.pack(tiled), LAT.q)
    fluid = ~tiling.solid
    np.testing.assert_array_equal(np.moveaxis(back, 1, 2)[fluid], np.moveaxis(tiled, 1, 2)[fluid])
    assert np.isnan(np.moveaxis(back, 1, 2)[~fluid]).all()
    with pytest.raises(ValueError, match="power of two"):
        CompactTiling(tiling, 3)
    with pytest.raises(ValueError, match="4\\^3"):
        CompactTiling(Tiling.build(np.zeros((16, 16), bool), 8, (0, 0)))


def test_memory_per_fluid_node_at_half_utilisation_is_below_tiled() -> None:
    solid = porous_solid((40, 40, 40), 3)
    solid[::2] |= np.random.default_rng(0).random(solid[::2].shape) < 0.4
    tiling = Tiling.build(solid, 4, (0, 0, 0))
    assert 0.35 < tiling.eta_t < 0.65
    for value_bytes in (4, 8):
        tiled = tiling.memory_bytes(LAT.q, value_bytes) / tiling.n_fluid
        for pad in (1, sector_pad(value_bytes)):
            compact = CompactTiling(tiling, pad).memory_bytes(LAT.q, value_bytes) / tiling.n_fluid
            assert compact < 0.8 * tiled, (value_bytes, pad, compact, tiled)


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("halo", [False, True], ids=["direct", "halo"])
@pytest.mark.parametrize("precision, pad, tpb, name", [
    ("float32", 1, 1, "periodic xyz, offset (1, 2, 3)"),
    ("float32", 8, 2, "walls in y, offset (3, 0, 1)"),
    ("float64", 4, 1, "closed box, best offset"),
])
def test_probe_kernel_text_equals_numpy_mirror(precision, pad, tpb, name, halo) -> None:
    _, tiling, compact, f, periodic = case(name, pad, seed=2)
    dtype = np.dtype(precision)
    tiled = np.moveaxis(tiling.gather(np.moveaxis(f, 0, -1)), 2, 1).astype(dtype)
    fin = compact.pack(tiled, fill=-7.0)
    fout = np.full_like(fin, -9.0)  # padding slots must stay as they are
    compact.check_offsets(LAT.q)
    ints = np.array(compact.int_args(periodic), dtype=np.int32)
    tables = [compact.masks.astype(np.uint64), compact.base.astype(np.int32),
              np.ascontiguousarray(tiling.tiles, dtype=np.int32),
              np.ascontiguousarray(tiling.tile_map.transpose().ravel(), dtype=np.int32)]
    assert probe_shared_bytes(tpb, halo) <= 4 * (1 << 16)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    blocks = -(-tiling.n_tiles // tpb)
    run = emulated(precision, pad, halo)
    run(ctypes.c_int(blocks), ctypes.c_int(64 * tpb), ptr(fin), ptr(fout),
        *(ptr(t) for t in tables), ptr(ints), ptr(np.zeros(1, dtype)))
    assert_pull_matches_mirror(compact, fin, fout, periodic)


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("precision, collision, fluid, pad, halo, tpb", [
    ("float64", "TRT", "quasi-compressible", 1, False, 1),
    ("float64", "BGK", "incompressible", 4, True, 2),
    ("float32", "MRT", "incompressible", 8, True, 1),
    ("float32", "BGK", "quasi-compressible", 8, False, 2),
])
def test_compact_step_equals_numpy_reference(precision, collision, fluid, pad, halo, tpb) -> None:
    """Three full steps (pull, bounce-back at solids and the y walls, collision with a body
    force) on compact storage equal the NumPy backend's on the tiled layout."""
    problem = make_problem("D3Q19", precision, collision, fluid, offset=(1, 2, 3))
    tiling, dtype = problem.tiling, np.dtype(precision)
    compact = CompactTiling(tiling, pad)
    f0 = noisy_start(problem)
    copies = [compact.pack(as_stored(problem, f0).astype(dtype)), None]
    copies[1] = np.zeros_like(copies[0])
    ints = np.array(compact.int_args(problem.periodic), dtype=np.int32)
    tables = [compact.masks.astype(np.uint64), compact.base.astype(np.int32),
              np.ascontiguousarray(tiling.tiles, dtype=np.int32),
              np.ascontiguousarray(tiling.tile_map.transpose().ravel(), dtype=np.int32)]
    reals = np.array(physics_args(problem), dtype=dtype)
    assert len(reals) == len(real_param_names("D3Q19", precision, collision,
                                              fluid == "incompressible"))
    run = emulated(precision, pad, halo, collision, fluid == "incompressible")
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    for step in range(3):
        src, dst = copies[step % 2], copies[1 - step % 2]
        run(ctypes.c_int(-(-tiling.n_tiles // tpb)), ctypes.c_int(64 * tpb), ptr(src), ptr(dst),
            *(ptr(t) for t in tables), ptr(ints), ptr(reals))
    got = compact.unpack(copies[1], LAT.q).astype(np.float64)
    ref = reference(problem, f0, 3)
    fluid_nodes = np.broadcast_to(~tiling.solid[:, None, :], ref.shape)
    tol = 1e-12 if precision == "float64" else 1e-5
    diff = np.abs(got - ref)[fluid_nodes].max()
    assert diff <= tol * np.abs(ref).max()
    assert np.abs(ref - as_stored(problem, f0))[fluid_nodes].max() > 1e3 * tol  # it moved


@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_probe_compiles_with_nvcc(arch: str, tmp_path: Path) -> None:
    source = tmp_path / "compact.cu"
    source.write_text("\n".join(
        [probe_source("D3Q19", p, pad, halo) for p in ("float32", "float64")
         for pad in (1, 4, 8) for halo in (False, True)]
        + [probe_source("D3Q19", p, 32 // np.dtype(p).itemsize, halo, coll, inc)
           for p in ("float32", "float64") for halo in (False, True)
           for coll in ("BGK", "TRT", "MRT") for inc in (True, False)]))
    out = subprocess.run([NVCC, "-cubin", f"-arch={arch}", "-o", str(tmp_path / "c.cubin"),
                          str(source)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]


def test_compact_kernel_variant_flag() -> None:
    """``KernelVariant(compact=pad)`` is the compact kernel (halo addressing): its name is the
    kernel's, probes collapse to one, and what it lacks is refused with what to do."""
    from dataclasses import replace

    from solver.backends.cuda.kernels import KernelVariant, kernel_source
    from solver.backends.cuda.kernels import real_param_names as variant_reals

    v = KernelVariant("D3Q19", "float32", "TRT", False, "paper", "full", compact=8)
    src = kernel_source(v)
    assert src == probe_source("D3Q19", "float32", 8, True, "TRT", False)
    assert f'extern "C" __global__ void {v.name}(' in src and v.name.endswith("_p8_h")
    assert variant_reals(v) == real_param_names("D3Q19", "float32", "TRT", False)
    probe = replace(v, mode="propagate")
    assert probe.canonical() == replace(probe, collision="BGK", incompressible=True,
                                        layout="xyz").canonical()
    assert variant_reals(probe) == [] and "propagate" in probe.name
    assert kernel_source(replace(v, compact=0)) != src  # the tiled kernel is untouched
    in_place = replace(v, streaming="aa_neighbour")  # AA pattern: no restrict, own names
    assert in_place.name.endswith("_aan") and "__restrict__ fin" not in kernel_source(in_place)
    assert replace(v, mode="swap").canonical().collision == "BGK"
    for bad, words in [({"boundary": "zou_he"}, "boundary code 'zou_he'"),
                       ({"lattice": "D2Q9", "tile_edge": 8}, "3D tiles of edge 4"),
                       ({"mode": "readwrite"}, "mode 'readwrite'")]:
        with pytest.raises(ValueError, match="compacted storage does not support") as err:
            kernel_source(replace(v, **bad))
        assert words in str(err.value) and "compact=0" in str(err.value)


def test_edge_index_converts_the_paper_layout() -> None:
    """The conversion indices follow the tiled copy's in-tile layout (paper layout permutes
    slots per direction): every fluid value lands once, solid ones never."""
    from solver.backends.cuda.tables import slot_table

    _, tiling, compact, f, _ = case("walls in y, offset (3, 0, 1)", 8)
    tiled = np.moveaxis(tiling.gather(np.moveaxis(f, 0, -1)), 2, 1)  # XYZ order
    slots = slot_table("D3Q19", "paper", 4)
    assert not (slots == np.arange(64)).all()
    laid = np.empty_like(tiled)
    laid[:, np.arange(LAT.q)[:, None], slots] = tiled  # as the device holds it
    c, t = compact.edge_index(LAT.q, slots)
    fc = np.full(LAT.q * compact.n_slots, -1.0)
    fc[c] = laid.ravel()[t]
    np.testing.assert_array_equal(fc, compact.pack(tiled, fill=-1.0))
    assert len(np.unique(c)) == len(c) == len(np.unique(t)) == LAT.q * tiling.n_fluid


def test_compact_real_params_are_the_tiled_kernels() -> None:
    """The compact step takes the tiled step's floating arguments (tables.physics_args)."""
    from solver.backends.cuda.kernels import KernelVariant
    from solver.backends.cuda.kernels import real_param_names as tiled

    for collision in ("BGK", "TRT", "MRT"):
        for precision in ("float32", "float64"):
            for inc in (True, False):
                assert real_param_names("D3Q19", precision, collision, inc) == tiled(
                    KernelVariant("D3Q19", precision, collision, inc))


def test_popcount_without_numpy_bitwise_count(monkeypatch) -> None:
    """The mirror's popcount also works on NumPy < 2.0 (the GPU machine's may be older)."""
    from solver.backends.cuda.compact import popcount

    x = np.array([0, 1, 2**63, 2**64 - 1, 0b1011 << 40], dtype=np.uint64).reshape(5, 1)
    want = np.array([0, 1, 1, 64, 3]).reshape(5, 1)
    np.testing.assert_array_equal(popcount(x), want)
    monkeypatch.delattr(np, "bitwise_count")
    np.testing.assert_array_equal(popcount(x), want)
