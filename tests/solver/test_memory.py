"""The backend answers memory questions: the NumPy estimate against the measured peak resident
set of real runs, one verdict for the app and the CLI, and refusal before allocating."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from solver.backends.numpy_backend import NumpyBackend
from solver.config import SimulationConfig
from solver.memory import REFUSE_SHARE, assess_memory, judge
from solver.problem import Problem
from solver.stability import MemoryRefused

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "memory"))

import numpy_memory_peak  # noqa: E402

pytestmark = pytest.mark.timeout(600)


@pytest.mark.parametrize("case", [(48, "box", "float64"), (64, "pack", "float64"),
                                  (64, "box", "float32")])
def test_numpy_estimate_is_within_10_percent_of_the_measured_peak(case):
    # Before: the estimate counted the state and the gather tables only, 1.8x below the peak.
    result = numpy_memory_peak.measure(*case)
    assert result["estimate"] == pytest.approx(result["measured"], rel=0.10), result


def test_one_verdict_for_app_and_cli():
    assert judge(10, None).level == "ok"
    assert judge(10, 100).level == "ok"
    assert judge(60, 100).level == "warning"
    refused = judge(95, 100, "GPU")
    assert refused.level == "refused" and "(95 bytes)" in refused.message
    assert "(100 bytes) free" in refused.message and "smaller" in refused.message
    with pytest.raises(MemoryRefused, match="GPU"):
        refused.check()
    problem = Problem.from_config(np.zeros((16, 16, 16), dtype=bool), SimulationConfig())
    verdict = assess_memory(problem, "numpy", reclaimable=123)
    backend = NumpyBackend()
    assert verdict.required == backend.memory_required(problem)
    assert verdict.free is None or verdict.free >= 123


CHILD = r"""
import resource, sys
sys.path.insert(0, {root!r})
from solver.backends.numpy_backend import NumpyBackend
NumpyBackend.free_memory = lambda self: {free}
from solver.__main__ import main
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()
def high_water():  # not ru_maxrss: Linux carries the parent's peak over fork and exec
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith("VmHWM:"))
import numpy, yaml, solver.run, solver.case, geometries, geometries.loaders, pyvista, scipy
import scipy.ndimage  # imports happen outside the measure
before = rss()
code = main(["run", {case!r}, "--output", {out!r}, "--quiet"])
print("RESULT", code, high_water() - before)
"""


def _refused_run(folder: Path, n: int) -> tuple[int, int, str, int]:
    """Run an n^3 box case in a fresh interpreter whose free memory is 80 % of what may be
    used; (exit code, peak RSS growth, stderr, required bytes)."""
    folder.mkdir()
    np.save(folder / "box.npy", np.zeros((n, n, n), dtype=bool))
    case = {"name": "big", "geometry": {"file": "box.npy"},
            "config": {"backend": "numpy", "body_force": [1e-6, 0, 0],
                       "y_min": "wall", "y_max": "wall"},
            "run": {"max_steps": 10}}
    (folder / "big.yaml").write_text(yaml.safe_dump(case))
    problem = Problem.from_config(np.zeros((n, n, n), dtype=bool),
                                  SimulationConfig(body_force=(1e-6, 0, 0), y_min="wall",
                                                   y_max="wall"))
    required = NumpyBackend().memory_required(problem)
    free = int(required / REFUSE_SHARE * 0.8)  # the case needs more than may be used
    code = CHILD.format(root=str(ROOT), free=free, case=str(folder / "big.yaml"),
                        out=str(folder / "out"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=folder)
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")][-1].split()
    assert f"({free} bytes) free" in done.stderr and not (folder / "out").exists()
    return int(line[1]), int(line[2]), done.stderr, required


def test_a_case_over_the_limit_is_refused_before_allocating(tmp_path):
    code, grown, err, required = _refused_run(tmp_path / "big", 144)  # needs ~1.8 GB
    assert code == 2 and "The case needs about" in err, err
    small_code, small_grown, _, _ = _refused_run(tmp_path / "small", 16)
    assert small_code == 2
    # What a refusal costs beyond a tiny case's (imports, loading): the mask (1 byte per
    # voxel) and not the state, tables and moments (~750 bytes per node) of the big case.
    extra = grown - small_grown
    assert extra < 0.05 * required, (grown, small_grown, required)
    print(json.dumps({"required": required, "rss_growth": grown, "tiny_case": small_grown}))


def test_runner_refuses_a_geometry_over_the_limit_and_keeps_its_run(monkeypatch):
    from solver.runner import SimulationRunner

    small = np.zeros((8, 8, 8), dtype=bool)
    config = SimulationConfig(backend="numpy", body_force=(1e-6, 0, 0))
    runner = SimulationRunner(small, config)
    try:
        runner.step(3)
        runner.wait_for(lambda s: s.step == 3, 60)
        limit = NumpyBackend().memory_required(Problem.from_config(small, config)) * 3
        monkeypatch.setattr(NumpyBackend, "free_memory", lambda self: limit)
        runner.load_geometry(np.zeros((48, 48, 48), dtype=bool))
        snap = runner.wait_for(lambda s: s.status == "error", 60)
        assert "The case needs about" in snap.error and "smaller" in snap.error
        assert snap.shape == (8, 8, 8) and snap.step == 3, "the running case was lost"
    finally:
        runner.stop()


GPU_PEAK = r"""
import json, sys
sys.path.insert(0, {root!r})
import numpy as np
import cupy as cp
from geometries import generators
from solver.backends import get_backend
from solver.config import SimulationConfig
from solver.simulation import Simulation

n = 96
if {kind!r} == "box":
    solid, faces = np.zeros((n, n, n), dtype=bool), {{"y_min": "wall", "y_max": "wall"}}
else:
    solid = generators.random_sphere_pack((n,) * 3, porosity=0.45, diameter=12, seed=1).solid
    faces = {{}}
# The device probe's copy-bandwidth measurement (two 1 GiB buffers, once per process) is not
# part of a run, but the pool keeps its blocks: take it before measuring.
get_backend("cupy").device_info()
pool = cp.get_default_memory_pool()
pool.free_all_blocks()
before = pool.total_bytes()
sim = Simulation(solid, SimulationConfig(backend="cupy", precision={precision!r},
                                         body_force=(1e-6, 0, 0), **faces))
estimate = sim.backend.memory_required(sim.problem)
sim.step(2)
sim.health()
sim.view(2, n // 2, "umag", health=True)
cp.cuda.Device().synchronize()
print(json.dumps({{"estimate": int(estimate), "peak": int(pool.total_bytes() - before)}}))
"""


# Known and measured (H100, 2026-11-28): the compact pack's estimate is 195.6 MB against a 170.3
# MB pool peak (+15 %, on the safe side) since the readout's momentum became cheaper; its
# per-tile readout bound (compact_readout.readout_tile_bytes) is to be re-derived. Strict: a
# pass is reported, so the mark cannot outlive the fix.
COMPACT_OVER = pytest.mark.xfail(strict=True, reason="compact readout bound 15 % above the peak")


@pytest.mark.gpu
@pytest.mark.parametrize("kind,precision", [("box", "float32"),
                                            pytest.param("pack", "float64", marks=COMPACT_OVER)])
def test_cupy_estimate_is_within_10_percent_of_the_pool_peak(kind, precision):
    """On the GPU: CuPy's pool keeps what it once allocated, so after a step, a health check
    and a slice its total is the run's peak device allocation. In a fresh process: in the
    suite, blocks that earlier tests' runs still held came back during this run and were
    reused, so the pool did not grow at all."""
    code = GPU_PEAK.format(root=str(ROOT), kind=kind, precision=precision)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["estimate"] == pytest.approx(result["peak"], rel=0.10), result


def test_a_case_that_cannot_fit_even_perfectly_tiled_is_refused_before_tiling(
        tmp_path, monkeypatch, capsys):
    from solver.__main__ import main
    from solver.memory import precheck_memory
    from solver.tiling import Tiling

    n = 64
    np.save(tmp_path / "box.npy", np.zeros((n, n, n), dtype=bool))
    case = {"name": "big", "geometry": {"file": "box.npy"},
            "config": {"backend": "numpy", "body_force": [1e-6, 0, 0]},
            "run": {"max_steps": 10}}
    (tmp_path / "big.yaml").write_text(yaml.safe_dump(case))
    bound = precheck_memory(np.zeros((n, n, n), dtype=bool),
                            SimulationConfig(body_force=(1e-6, 0, 0)), "numpy").required
    monkeypatch.setattr(NumpyBackend, "free_memory", lambda self: bound // 2)

    def no_tiling(*args, **kwargs):
        raise AssertionError("the geometry was tiled before the memory verdict")

    monkeypatch.setattr(Tiling, "build", no_tiling)
    assert main(["run", str(tmp_path / "big.yaml"), "--output", str(tmp_path / "o"),
                 "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"({bound} bytes)" in err and f"({bound // 2} bytes) free" in err


@pytest.mark.parametrize("tile_storage", ["auto", "tiled", "compact"])
def test_the_gpu_precheck_plans_the_packed_bound(tile_storage):
    """The mask-only bound a run is prechecked with goes through the GPU footprint and its
    execution plan (found on the GPU: every CuPy run raised AttributeError 'ndim' before it
    was built, the plan now asking the tiling for its dimensions)."""
    from solver.backends.cuda.footprint import device_bytes
    from solver.memory import precheck_memory

    class GpuSized:
        name = "cupy"

        def memory_required(self, problem: Problem) -> int:
            return device_bytes(problem)

        def free_memory(self) -> int:
            return 80 * 2**30

        def memory_capacity(self) -> None:  # the plan without a capacity, as sized here
            return None

    solid = np.zeros((32, 32, 32), dtype=bool)
    solid[:8] = True
    config = SimulationConfig(backend="numpy", precision="float32", tile_storage=tile_storage)
    verdict = precheck_memory(solid, config, GpuSized())
    tiled = 2 * 19 * 4 * 24 * 32 * 32  # the fluid nodes' two float32 copies of D3Q19
    assert tiled * 0.5 < verdict.required < tiled * 3
