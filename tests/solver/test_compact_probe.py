"""Fluid-compacted tile storage and its CUDA propagation probe (issue 20), checked on the CPU.

* The NumPy mirror of the probe's popcount addressing (``CompactTiling.pull``) equals a plain
  pull on the voxel grid (periodic wrap per node, halfway bounce-back at solids and walls) on
  porous geometries with shifted tile grids, empty tiles and sizes not multiples of 4.
* The probe's CUDA text, run through the g++ emulation of :mod:`kernel_emulator` (blocks of 1
  and 2 tiles), gives the same array bit for bit, padding slots untouched; it compiles with
  nvcc for sm_80 and sm_90.
* Memory per fluid node at eta_t about 0.5 is below the tiled storage's.
"""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from solver.backends.cuda.compact import (
    CompactTiling,
    probe_name,
    probe_shared_bytes,
    probe_source,
    real_param_names,
    sector_pad,
)
from solver.backends.cuda.tables import physics_args
from solver.lattice import get_lattice
from solver.tiling import Tiling

from .kernel_emulator import _SHIM, compiler
from .porous_cases import as_stored, make_problem, noisy_start, porous_solid, reference
from .test_kernel_compile import NVCC

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


def _case(name: str, pad: int, seed: int = 0):
    shape, offset, periodic = CASES[name]
    solid = porous_solid(shape, seed)
    tiling = Tiling.build(solid, 4, offset)
    rng = np.random.default_rng(seed + 1)
    f = rng.random((LAT.q, *shape))
    return solid, tiling, CompactTiling(tiling, pad), f, periodic


@pytest.mark.parametrize("pad", [1, 8])
@pytest.mark.parametrize("name", list(CASES))
def test_numpy_mirror_equals_pull_on_the_grid(name: str, pad: int) -> None:
    solid, tiling, compact, f, periodic = _case(name, pad)
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
    _, tiling, compact, f, _ = _case("closed box, best offset", 4)
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


_LAUNCH = r"""
#define __popcll(x) __builtin_popcountll(x)
""", r"""
extern "C" void emu_compact(int grid, int block, const REAL* fin, REAL* fout,
    const unsigned long long* masks, const int* base, const int* tiles, const int* tile_map,
    const int* ia, const REAL* ra)
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


def _emulated(precision: str, pad: int, halo: bool, collision: str | None = None,
              incompressible: bool = True):
    name = probe_name("D3Q19", precision, pad, halo, collision, incompressible)
    real = "double" if precision == "float64" else "float"
    n_reals = len(real_param_names("D3Q19", precision, collision, incompressible))
    rargs = "".join(f", ra[{k}]" for k in range(n_reals))
    src = (_SHIM + _LAUNCH[0] + probe_source("D3Q19", precision, pad, halo, collision,
                                             incompressible)
           + f"\n#define REAL {real}\n#define KERNEL {name}::{name}\n#define RARGS {rargs}\n"
           + _LAUNCH[1])
    key = hashlib.sha1(src.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "lbm_kernel_emulator"
    folder.mkdir(exist_ok=True)
    lib = folder / f"{name}_{key}.so"
    if not lib.exists():
        cpp = lib.with_suffix(".cpp")
        cpp.write_text(src)
        subprocess.run([compiler(), "-O1", "-std=c++20", "-shared", "-fPIC", "-pthread", "-w",
                        "-o", str(lib), str(cpp)], check=True, capture_output=True)
    return ctypes.CDLL(str(lib)).emu_compact


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("halo", [False, True], ids=["direct", "halo"])
@pytest.mark.parametrize("precision, pad, tpb, name", [
    ("float32", 1, 1, "periodic xyz, offset (1, 2, 3)"),
    ("float32", 8, 2, "walls in y, offset (3, 0, 1)"),
    ("float64", 4, 1, "closed box, best offset"),
])
def test_probe_kernel_text_equals_numpy_mirror(precision, pad, tpb, name, halo) -> None:
    _, tiling, compact, f, periodic = _case(name, pad, seed=2)
    dtype = np.dtype(precision)
    tiled = np.moveaxis(tiling.gather(np.moveaxis(f, 0, -1)), 2, 1).astype(dtype)
    fin = compact.pack(tiled, fill=-7.0)
    fout = np.full_like(fin, -9.0)  # padding slots must stay as they are
    compact.check_int32(LAT.q)
    ints = np.array(compact.int_args(periodic), dtype=np.int32)
    tables = [compact.masks.astype(np.uint64), compact.base.astype(np.int32),
              np.ascontiguousarray(tiling.tiles, dtype=np.int32),
              np.ascontiguousarray(tiling.tile_map.transpose().ravel(), dtype=np.int32)]
    assert probe_shared_bytes(tpb, halo) <= 4 * (1 << 16)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    blocks = -(-tiling.n_tiles // tpb)
    run = _emulated(precision, pad, halo)
    run(ctypes.c_int(blocks), ctypes.c_int(64 * tpb), ptr(fin), ptr(fout),
        *(ptr(t) for t in tables), ptr(ints), ptr(np.zeros(1, dtype)))
    want = compact.pull(fin, LAT, periodic)
    dst, _ = compact.pull_sources(LAT, periodic)
    written = np.zeros(fin.size, bool)
    written[dst.ravel()] = True
    np.testing.assert_array_equal(fout[written], want[written])
    assert (fout[~written] == -9.0).all()


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
    run = _emulated(precision, pad, halo, collision, fluid == "incompressible")
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


class _FakeBackend:
    """The CuPy backend's interface as the compact suite uses it, timing 10 us per launch."""

    def device_info(self) -> dict:
        return {"name": "Fake GPU", "copy_bandwidth": 3.0e12}

    def allocate(self, problem):
        return problem

    def reconfigure(self, state, **changes):
        assert set(changes) == {"layout"}
        return state

    def probe(self, state, mode: str, n: int, tpb: int) -> float:
        assert mode in ("propagate", "full") and tpb in (1, 2, 4)
        return n * 1e-5

    def release(self, state) -> None:
        pass


class _FakeProbe:
    def __init__(self, compact, periodic, precision, q=19, halo=False, step=None) -> None:
        assert compact.tiling.n_tiles and len(periodic) == 3 and q == 19
        self.use_graphs = True

    def time(self, n: int, tpb: int) -> float:
        return n * 0.5e-5

    def release(self) -> None:
        pass


def test_suite_control_flow_and_table_without_a_gpu(monkeypatch, tmp_path: Path) -> None:
    """The GPU script's bookkeeping on a fake device: every case, kernel and padding gets a
    row, rates follow the timings, a failing case is reported and the rest still run."""
    import importlib.util

    from solver.benchmarking import compact_suite

    monkeypatch.setattr(compact_suite, "CompactProbe", _FakeProbe)
    monkeypatch.setattr(compact_suite, "check_on_device", lambda: [
        {"precision": "float32", "pad": 1, "max_abs_diff": 0.0, "ok": True}])
    monkeypatch.setattr(compact_suite, "check_step_on_device", lambda: [
        {"precision": "float64", "pad": 4, "halo": True, "kernel": "BGK step vs NumPy",
         "max_abs_diff": 1e-15, "ok": True}])
    monkeypatch.setattr(compact_suite, "git_commit", lambda: "abc1234")
    suite = compact_suite.CompactSuite(porosities=(0.5,), pack_size=24, diameter=8.0,
                                       dense_size=16, rock_diameter=5.0, min_seconds=0.0,
                                       repeats=1)
    seen = []
    result = compact_suite.run_compact_suite(_FakeBackend(), suite, progress=seen.append)
    assert len(seen) == 6 and not result["errors"]
    kernels = {(r["case"], r["precision"], r["kernel"]) for r in result["results"]}
    assert len(kernels) == 3 * 2 * 10  # cases x precisions x (2 tiled + 2 x 2 x 2 compact)
    for r in result["results"]:
        per_step = 1e-5 if r["kernel"].startswith("tiled") else 0.5e-5
        assert r["fluid_g_per_s"] == pytest.approx(r["fluid_nodes"] / per_step / 1e9)
        limit = 3.0e12 / (2 * 19 * (4 if r["precision"] == "float32" else 8)) / 1e9
        assert r["limit_g_per_s"] == pytest.approx(limit)
    spec = importlib.util.spec_from_file_location(
        "compact_probe_script", Path(__file__).parents[2] / "benchmarks" / "compact_probe.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    text = script.markdown(result)
    assert "probe float32 pad 1: ok" in text and "NumPy float64 pad 4 halo: ok" in text
    assert ("| tiled | compact exact | compact sector-padded | compact exact halo | "
            "compact sector-padded halo |") in text and "## Full step, BGK" in text
    assert {r["pad"] for r in result["results"] if "pad" in r} == {1, 4, 8}
    assert "- compact BGK, float64: best variant" in text and "Errors" not in text
    assert text.count("| periodic box 16^3 | 1.000 | float32 |") == 2

    monkeypatch.setattr(compact_suite, "CompactProbe", None)  # every compact timing fails
    broken = compact_suite.run_compact_suite(_FakeBackend(), suite)
    assert len(broken["errors"]) == 6 and "Errors:" in script.markdown(broken)
    assert {r["kernel"] for r in broken["results"]} == {"tiled BGK", "tiled propagation"}



class _EmulatedProbe:
    """CompactProbe's interface on the g++ emulator: host arrays, the same kernel text."""

    def __init__(self, compact, periodic, precision, q=19, halo=False, step=None) -> None:
        self.compact, self.precision, self.halo = compact, precision, halo
        self.kind = (step.collision.name, step.incompressible) if step else (None, True)
        self.reals = np.array(physics_args(step) if step else [0.0], dtype=precision)
        self.ints = np.array(compact.int_args(periodic), dtype=np.int32)
        t = compact.tiling
        self.tables = [compact.masks.astype(np.uint64), compact.base.astype(np.int32),
                       np.ascontiguousarray(t.tiles, dtype=np.int32),
                       np.ascontiguousarray(t.tile_map.transpose().ravel(), dtype=np.int32)]
        self.f = [np.full(q * compact.n_slots, 0.05, precision) for _ in range(2)]
        self.stream = SimpleNamespace(synchronize=lambda: None)

    def launch(self, tpb: int) -> None:
        run = _emulated(self.precision, self.compact.pad, self.halo, *self.kind)
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        run(ctypes.c_int(-(-self.compact.tiling.n_tiles // tpb)), ctypes.c_int(64 * tpb),
            ptr(self.f[0]), ptr(self.f[1]), *(ptr(t) for t in self.tables), ptr(self.ints),
            ptr(self.reals))

    def release(self) -> None:
        pass


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
def test_device_checks_pass_on_the_emulated_kernels(monkeypatch) -> None:
    """The GPU script's own checks (probe against the mirror, BGK step against the NumPy
    backend) run on the emulator instead of CuPy: they pass, and a wrong kernel fails them."""
    import sys

    from solver.benchmarking import compact_suite

    fake_cupy = SimpleNamespace(asarray=np.asarray, asnumpy=np.asarray,
                                cuda=SimpleNamespace(Device=lambda: SimpleNamespace(
                                    synchronize=lambda: None)))
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy)
    monkeypatch.setattr(compact_suite, "CompactProbe", _EmulatedProbe)
    checks = compact_suite.check_on_device(size=20) + compact_suite.check_step_on_device(16)
    assert len(checks) == 8 + 4 and all(c["ok"] for c in checks), checks

    class _Unmoved(_EmulatedProbe):
        def launch(self, tpb: int) -> None:
            self.f[1][...] = self.f[0]

    monkeypatch.setattr(compact_suite, "CompactProbe", _Unmoved)
    checks = compact_suite.check_on_device(size=20) + compact_suite.check_step_on_device(16)
    assert not any(c["ok"] for c in checks)


#: sha256 of every tiled variant's name and source (all streamings), as on main before the
#: compact flag existed (6fd52a2..1ea5ad0): adding compact storage must leave them byte-identical.
#: A deliberate change of the tiled kernels updates this value in the same commit.
TILED_SOURCES_SHA256 = "1be274350f1bd121ce88aef9e04c1d49ec6e7f95f48200442511dc055977987c"


def test_tiled_kernel_sources_are_byte_identical() -> None:
    import hashlib

    from solver.backends.cuda.kernels import all_variants, kernel_source
    from solver.backends.cuda.streaming import KERNEL_STREAMING

    variants = sorted(all_variants(streaming=KERNEL_STREAMING), key=lambda v: v.name)
    text = "\n".join(v.name + kernel_source(v) for v in variants)
    assert len(variants) == 1110 and not any(v.compact for v in variants)
    assert hashlib.sha256(text.encode()).hexdigest() == TILED_SOURCES_SHA256


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
    for bad, words in [({"boundary": "zou_he"}, "boundary code 'zou_he'"),
                       ({"streaming": "aa_neighbour"}, "only two-copy"),
                       ({"storage": "float16"}, "storage 'float16'"),
                       ({"lattice": "D2Q9", "tile_edge": 8}, "3D, edge 4"),
                       ({"mode": "readwrite"}, "mode 'readwrite'")]:
        with pytest.raises(ValueError, match="compacted storage does not support") as err:
            kernel_source(replace(v, **bad))
        assert words in str(err.value) and "compact=0" in str(err.value)


def test_edge_index_converts_the_paper_layout() -> None:
    """The conversion indices follow the tiled copy's in-tile layout (paper layout permutes
    slots per direction): every fluid value lands once, solid ones never."""
    from solver.backends.cuda.tables import slot_table

    _, tiling, compact, f, _ = _case("walls in y, offset (3, 0, 1)", 8)
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


def _emulator_launcher(variant, blocks, threads, shared, args) -> None:
    """CompactRun's launcher on the g++ emulator (host arrays)."""
    assert shared == probe_shared_bytes(threads // 64, True)
    fin, fout, masks, base, tiles, tile_map, *rest = args
    ints = np.array(rest[:11], dtype=np.int32)
    reals = np.array(rest[11:] or [0.0], dtype=fin.dtype)
    run = _emulated(variant.precision, variant.compact, True,
                    None if variant.mode == "propagate" else variant.collision,
                    variant.incompressible)
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    run(ctypes.c_int(blocks), ctypes.c_int(threads), ptr(fin), ptr(fout), ptr(masks),
        ptr(base), ptr(tiles), ptr(tile_map), ptr(ints), ptr(reals))


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("precision, collision, fluid", [
    ("float64", "TRT", "quasi-compressible"), ("float32", "BGK", "incompressible")])
def test_compact_run_steps_like_the_numpy_backend(precision, collision, fluid) -> None:
    """Populations in and out in the tiled layout, steps on compact storage: the same as the
    NumPy backend, solid nodes at rest; memory below the tiled copies'."""
    from solver.backends.cuda.compact_run import CompactRun

    problem = make_problem("D3Q19", precision, collision, fluid, offset=(3, 0, 1))
    run = CompactRun(problem, xp=np, launcher=_emulator_launcher)
    assert run.variant.compact == 32 // np.dtype(precision).itemsize
    np.testing.assert_array_equal(run.populations(), problem.initial_populations()
                                  .astype(precision).astype(np.float64))
    f0 = noisy_start(problem)
    run.set_populations(as_stored(problem, f0))
    run.step(4)
    ref = reference(problem, f0, 4)
    got = run.populations()
    solid = np.broadcast_to(problem.tiling.solid[:, None, :], ref.shape)
    tol = 1e-12 if precision == "float64" else 1e-5
    assert np.abs(got - ref)[~solid].max() <= tol * np.abs(ref).max()
    rest = problem.initial_populations().astype(precision).astype(np.float64)
    np.testing.assert_array_equal(got[solid], rest[solid])
    assert run.memory_bytes() < problem.tiling.memory_bytes(19, np.dtype(precision).itemsize)


def test_compact_run_refuses_what_the_kernel_lacks() -> None:
    from solver.backends.cuda.compact_run import CompactRun
    from solver.config import SimulationConfig
    from solver.problem import Problem

    solid = porous_solid((12, 12, 12))
    for options, words in [({"streaming": "in-place"}, "only two-copy"),
                           ({"storage": "float16", "precision": "float32"}, "storage"),
                           ({"x_min": "velocity", "x_min_value": 0.01, "x_max": "pressure",
                             "x_max_value": 1.0}, "boundary code")]:
        problem = Problem.from_config(solid, SimulationConfig(lattice="D3Q19", **options))
        with pytest.raises(ValueError, match=words):
            CompactRun(problem, xp=np, launcher=_emulator_launcher)


class _FakeCupy:
    """The slice of CuPy that CompactProbe uses, on NumPy: RawModule kernels run through the
    g++ emulator, streams record CUDA-graph captures and replay them, events read a clock."""

    def __init__(self) -> None:
        import time

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
                rargs = "".join(f", ra[{k}]" for k in range(n_reals))
                run = _compile(self.code, self.name, real, rargs)
                ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
                run(ctypes.c_int(grid[0]), ctypes.c_int(block[0]), *(ptr(a) for a in args[:6]),
                    ptr(np.array(args[6:17], dtype=np.int32)), ptr(reals))
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
            Device=lambda: SimpleNamespace(synchronize=lambda: None))
        self.get_default_memory_pool = lambda: SimpleNamespace(free_all_blocks=lambda: None)


def _compile(code: str, name: str, real: str, rargs: str):
    src = (_SHIM + _LAUNCH[0] + code + f"\n#define REAL {real}\n#define KERNEL {name}::{name}\n"
           f"#define RARGS {rargs}\n" + _LAUNCH[1])
    key = hashlib.sha1(src.encode()).hexdigest()[:16]
    lib = Path(tempfile.gettempdir()) / "lbm_kernel_emulator" / f"{name}_{key}.so"
    if not lib.exists():
        lib.parent.mkdir(exist_ok=True)
        lib.with_suffix(".cpp").write_text(src)
        subprocess.run([compiler(), "-O1", "-std=c++20", "-shared", "-fPIC", "-pthread", "-w",
                        "-o", str(lib), str(lib.with_suffix(".cpp"))], check=True,
                       capture_output=True)
    return ctypes.CDLL(str(lib)).emu_compact


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
def test_compact_probe_cupy_plumbing_on_a_fake_cupy(monkeypatch) -> None:
    """CompactProbe as the GPU script drives it (module, launches, graph capture and replay,
    events), with CuPy replaced by NumPy and the emulator: n timed launches are n pulls."""
    import sys

    from solver.benchmarking.compact_suite import CompactProbe

    fake = _FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    _, tiling, compact, f, periodic = _case("periodic xyz, offset (1, 2, 3)", 8)
    probe = CompactProbe(compact, periodic, "float64", halo=True)
    start = np.random.default_rng(3).random(probe.f[0].size)
    probe.f[0][...] = start
    seconds = probe.time(3, 2) + probe.time(16, 2)  # plain launches, then one graph replay
    assert seconds > 0 and fake.launches == 3 + 2 + 16  # warm-up, before capture, replay
    want = start
    for _ in range(3 + 2 + 16):  # the capture recorded 16 launches but ran none
        want = compact.pull(want, LAT, periodic)
    dst, _ = compact.pull_sources(LAT, periodic)  # padding slots are never written
    np.testing.assert_array_equal(probe.f[probe.current][dst], want[dst])
    probe.release()
    from solver.benchmarking import compact_suite  # the script's device checks, same plumbing

    checks = compact_suite.check_on_device(size=20) + compact_suite.check_step_on_device(16)
    assert len(checks) == 12 and all(c["ok"] for c in checks), checks
