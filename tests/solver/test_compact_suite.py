"""The GPU script's machinery on the CPU (issue 20): the compact suite's bookkeeping on a fake
backend, its device checks and CuPy plumbing on a fake CuPy that runs the kernels through the
g++ emulator, and :class:`CompactRun` (tiled layout in and out, compact steps) against the NumPy
backend."""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from solver.backends.cuda.tables import physics_args

from .compact_emulator import LAT, FakeCupy, case, compiler, emulated, emulator_launcher
from .porous_cases import as_stored, make_problem, noisy_start, porous_solid, reference


class _FakeBackend:
    """The CuPy backend's interface as the compact suite uses it, timing 10 us per launch."""

    xp = np

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


class _FakeRun:
    """CompactRun as the suite times it: 0.5e-5 s per step (in place, or float16 storage)."""

    made: list[tuple] = []

    def __init__(self, problem, pad=None, xp=None, launcher=None, tiles_per_block=2,
                 cuda=None, packed=0, code=None) -> None:
        assert problem.tile_storage == "compact"
        assert problem.streaming == "in-place" or problem.storage.encoded
        self.made.append((problem.storage_dtype.name, problem.streaming, packed))

    def step(self, n: int) -> float:
        return n * 0.5e-5

    def release(self) -> None:
        pass


class _FakeProbe:
    def __init__(self, compact, periodic, precision, q=19, halo=False, step=None,
                 packed=0, code=None, *, xp) -> None:
        assert compact.tiling.n_tiles and len(periodic) == 3 and q == 19 and halo
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
    monkeypatch.setattr(compact_suite, "CompactRun", _FakeRun)
    monkeypatch.setattr(compact_suite, "check_on_device", lambda xp: [
        {"precision": "float32", "pad": 1, "max_abs_diff": 0.0, "ok": True}])
    monkeypatch.setattr(compact_suite, "check_step_on_device", lambda xp: [
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
    # cases x precisions x (2 tiled + propagation: 3 per node, 2 packed + BGK: 5 per node
    # (a register cap each), 2 packed + BGK in place: 2 codes)
    assert len(kernels) == 3 * 2 * (2 + 4 + 5 + 2)
    for r in result["results"]:
        per_step = 1e-5 if r["kernel"].startswith("tiled") else 0.5e-5
        assert r["fluid_g_per_s"] == pytest.approx(r["fluid_nodes"] / per_step / 1e9)
        limit = 3.0e12 / (2 * 19 * (4 if r["precision"] == "float32" else 8)) / 1e9
        assert r["limit_g_per_s"] == pytest.approx(limit)
    spec = importlib.util.spec_from_file_location(
        "compact_probe_script",
        Path(__file__).parents[2] / "benchmarks" / "compact" / "compact_probe.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    text = script.markdown(result)
    assert "probe float32 pad 1: ok" in text and "NumPy float64 pad 4 halo: ok" in text
    assert ("| tiled | compact exact halo | compact sector-padded halo | "
            "compact exact halo packed 4 | "
            "compact exact halo inner packed 4 | padded") in text  # propagation
    assert ("| tiled | compact exact halo | compact sector-padded halo | "
            "compact exact halo inner | "
            "compact exact halo packed 4 | compact exact halo inner packed 4 | "
            "compact exact halo in place | compact exact halo inner in place | "
            "padded") in text  # BGK
    assert "## Full step, BGK" in text
    assert {r["pad"] for r in result["results"] if "pad" in r} == {1, 4, 8}
    assert "- compact BGK, float64: best variant" in text and "Errors" not in text
    assert text.count("| periodic box 16^3 | 1.000 | float32 |") == 2

    monkeypatch.setattr(compact_suite, "CompactProbe", None)  # every compact timing fails
    broken = compact_suite.run_compact_suite(_FakeBackend(), suite)
    assert len(broken["errors"]) == 6 and "Errors:" in script.markdown(broken)
    assert {r["kernel"] for r in broken["results"]} == {"tiled BGK", "tiled propagation"}



def test_float16_is_timed_as_runs_step_it(monkeypatch) -> None:
    """Precision label 'float16' (float16 storage): the tiled kernels, then the compact
    kernels of FLOAT16_RUNS (per node and packed) and in place through CompactRun, against
    the float16 fluid-only limit (2 bytes a value); the probe is not used."""
    from solver.benchmarking import compact_suite

    monkeypatch.setattr(compact_suite, "CompactProbe", None)  # would fail the case
    monkeypatch.setattr(compact_suite, "CompactRun", _FakeRun)
    monkeypatch.setattr(compact_suite, "check_on_device", lambda xp: [])
    monkeypatch.setattr(compact_suite, "check_step_on_device", lambda xp: [])
    _FakeRun.made = []
    suite = compact_suite.CompactSuite(porosities=(0.5,), pack_size=24, diameter=8.0,
                                       dense_size=0, rock_diameter=0, precisions=("float16",),
                                       min_seconds=0.0, repeats=1)
    result = compact_suite.run_compact_suite(_FakeBackend(), suite)
    assert not result["errors"], result["errors"]
    kernels = [r["kernel"] for r in result["results"]]
    assert kernels == ["tiled propagation", "tiled BGK", "compact BGK exact halo inner",
                       "compact BGK exact halo inner packed 4",
                       "compact BGK exact halo inner packed 8", "compact BGK exact halo in place",
                       "compact BGK exact halo inner in place"]
    assert {m for m in _FakeRun.made if m[1] == "two-copy"} == {
        ("float16", "two-copy", k) for k in (0, 4, 8)}
    for r in result["results"]:
        assert r["precision"] == "float16"
        assert r["limit_g_per_s"] == pytest.approx(3.0e12 / (2 * 19 * 2) / 1e9)


class _EmulatedProbe:
    """CompactProbe's interface on the g++ emulator: host arrays, the same kernel text."""

    def __init__(self, compact, periodic, precision, q=19, halo=False, step=None,
                 packed=0, code=None, *, xp) -> None:
        self.compact, self.precision, self.halo, self.packed = compact, precision, halo, packed
        self.code = code
        self.kind = (step.collision.name, step.incompressible) if step else (None, True)
        self.reals = np.array(physics_args(step) if step else [0.0], dtype=precision)
        self.ints = np.array(compact.int_args(periodic), dtype=np.int32)
        t = compact.tiling
        self.tables = [compact.masks.astype(np.uint64), compact.base.astype(np.int32),
                       np.ascontiguousarray(t.tiles, dtype=np.int32),
                       np.ascontiguousarray(t.tile_map.transpose().ravel(), dtype=np.int32)]
        self.f = [np.full(q * compact.n_slots, 0.05, precision) for _ in range(2)]
        self.stream = SimpleNamespace(synchronize=lambda: None)

    def upload(self, values, copy: int) -> None:
        self.f[copy][...] = values

    def download(self, copy: int):
        return self.f[copy].copy()

    def launch(self, tpb: int) -> None:
        run = emulated(self.precision, self.compact.pad, self.halo, *self.kind, self.packed,
                       code=self.code)
        ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
        k = self.packed or tpb
        run(ctypes.c_int(-(-self.compact.tiling.n_tiles // k)),
            ctypes.c_int(32 * k if self.packed else 64 * tpb),
            ptr(self.f[0]), ptr(self.f[1]), *(ptr(t) for t in self.tables), ptr(self.ints),
            ptr(self.reals))

    def release(self) -> None:
        pass


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
def test_device_checks_pass_on_the_emulated_kernels(monkeypatch) -> None:
    """The GPU script's own checks (probe against the mirror, BGK step against the NumPy
    backend) run on the emulator instead of CuPy: they pass, and a wrong kernel fails them."""
    from solver.benchmarking import compact_suite

    fake_cupy = SimpleNamespace(asarray=np.asarray, asnumpy=np.asarray,
                                cuda=SimpleNamespace(Device=lambda: SimpleNamespace(
                                    synchronize=lambda: None)))
    monkeypatch.setattr(compact_suite, "CompactProbe", _EmulatedProbe)
    checks = (compact_suite.check_on_device(fake_cupy, size=20)
              + compact_suite.check_step_on_device(fake_cupy, 16))
    assert len(checks) == 8 + 10 and all(c["ok"] for c in checks), checks
    assert {c["packed"] for c in checks} == {0, 4}
    assert {c["code"] for c in checks} == {"", "inner"}

    class _Unmoved(_EmulatedProbe):
        def launch(self, tpb: int) -> None:
            self.f[1][...] = self.f[0]

    monkeypatch.setattr(compact_suite, "CompactProbe", _Unmoved)
    checks = (compact_suite.check_on_device(fake_cupy, size=20)
              + compact_suite.check_step_on_device(fake_cupy, 16))
    assert not any(c["ok"] for c in checks)



@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("precision, collision, fluid", [
    ("float64", "TRT", "quasi-compressible"), ("float32", "BGK", "incompressible")])
def test_compact_run_steps_like_the_numpy_backend(precision, collision, fluid) -> None:
    """Populations in and out in the tiled layout, steps on compact storage: the same as the
    NumPy backend, solid nodes at rest; memory below the tiled copies'."""
    from solver.backends.cuda.compact_run import CompactRun

    problem = make_problem("D3Q19", precision, collision, fluid, offset=(3, 0, 1))
    run = CompactRun(problem, xp=np, launcher=emulator_launcher)
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
    for options, words in [({"x_min": "velocity", "x_min_value": 0.01, "x_max": "pressure",
                             "x_max_value": 1.0}, "boundary code")]:
        problem = Problem.from_config(solid, SimulationConfig(lattice="D3Q19", **options))
        with pytest.raises(ValueError, match=words):
            CompactRun(problem, xp=np, launcher=emulator_launcher)



@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
def test_compact_probe_cupy_plumbing_on_a_fake_cupy(monkeypatch) -> None:
    """CompactProbe as the GPU script drives it (module, launches, graph capture and replay,
    events), with CuPy replaced by NumPy and the emulator: n timed launches are n pulls."""
    from solver.benchmarking.compact_probe import CompactProbe

    fake = FakeCupy()
    _, tiling, compact, f, periodic = case("periodic xyz, offset (1, 2, 3)", 8)
    probe = CompactProbe(compact, periodic, "float64", halo=True, xp=fake)
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

    checks = (compact_suite.check_on_device(fake, size=20)
              + compact_suite.check_step_on_device(fake, 16))
    assert len(checks) == 18 and all(c["ok"] for c in checks), checks


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
def test_whole_suite_on_a_fake_cupy(monkeypatch) -> None:
    """run_compact_suite end to end with the real CompactProbe (fake CuPy, emulated kernels)
    and a fake tiled backend: checks pass, every compact kernel is timed, no errors."""
    from solver.benchmarking import compact_suite

    fake = FakeCupy()
    launcher = fake.launcher()

    real_run = compact_suite.CompactRun
    monkeypatch.setattr(compact_suite, "CompactRun", lambda problem, pad, **kw: real_run(
        problem, pad, xp=np, launcher=launcher, cuda=fake.cuda, **kw))
    small = compact_suite.check_on_device, compact_suite.check_step_on_device
    monkeypatch.setattr(compact_suite, "check_on_device", lambda xp: small[0](xp, size=16))
    monkeypatch.setattr(compact_suite, "check_step_on_device", lambda xp: small[1](xp, 16))
    suite = compact_suite.CompactSuite(porosities=(0.5,), pack_size=16, diameter=6.0,
                                       dense_size=8, rock_diameter=0, precisions=("float32",),
                                       tiles_per_block=(2,), layouts=("xyz",), min_seconds=0.0,
                                       repeats=1)
    backend = _FakeBackend()
    backend.xp = fake  # the real CompactProbe gets CuPy from the backend
    result = compact_suite.run_compact_suite(backend, suite)
    assert not result["errors"], result["errors"]
    assert result["checks"] and all(c["ok"] for c in result["checks"])
    compact_rows = [r for r in result["results"] if r["kernel"].startswith("compact")]
    assert len(compact_rows) == 2 * 11 and all(r["seconds_per_step"] > 0 for r in compact_rows)
    assert {r["pad"] for r in compact_rows} == {1, 8}
