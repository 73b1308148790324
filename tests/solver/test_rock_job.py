"""The k tensor measured part by part (what the app's "Measure k" button runs on the session's
runner)."""

from __future__ import annotations

import numpy as np
import pytest

from geometries import VoxelGeometry
from solver.config import SimulationConfig
from solver.rock import PermeabilitySettings, run_study
from solver.rock.job import TensorJob

pytestmark = pytest.mark.timeout(300)


def _layers() -> VoxelGeometry:
    """An open slab along x and y crossed along z by a narrow chimney (k_z << k_x = k_y)."""
    solid = np.ones((8, 8, 8), bool)
    solid[:, :, 2:6] = False
    solid[3:5, 3:5, :] = False
    return VoxelGeometry(solid, voxel_size=1e-6)


def _settings() -> PermeabilitySettings:
    return PermeabilitySettings(check_interval=100, sides="periodic")


def test_job_measures_x_y_z_in_turn_like_the_cli():
    geom, config = _layers(), SimulationConfig(precision="float64", backend="numpy")
    job = TensorJob(geom, config, _settings())
    assert [a.state for a in job.progress().axes] == ["waiting"] * 3
    job.start()
    seen = set()
    while job.running:  # rows change state one after the other
        seen.add(tuple(a.state for a in job.progress().axes))
        job.join(0.05)
    done = job.progress()
    assert not done.running and [a.state for a in done.axes] == ["converged"] * 3
    assert ("converged", "running", "waiting") in seen or ("running", "waiting", "waiting") in seen
    expected = run_study(geom, config, PermeabilitySettings(
        axes=["x", "y", "z"], check_interval=100, sides="periodic")).k("mirrored")
    assert done.k_mD == pytest.approx(expected, rel=1e-12)
    assert done.anisotropy == pytest.approx(max(expected.values()) / min(expected.values()))
    assert done.anisotropy > 2 and all(a.step >= 1000 for a in done.axes)


def test_axis_without_a_path_fails_alone_and_cancel_stops_the_rest():
    solid = np.ones((8, 8, 8), bool)
    solid[:, :, 2:6] = False  # an open slab: no path along z
    geom = VoxelGeometry(solid, voxel_size=1e-6)
    config = SimulationConfig(precision="float64", backend="numpy")
    job = TensorJob(geom, config, _settings())
    job.start()
    assert job.join(120)
    x, y, z = job.progress().axes
    assert x.state == y.state == "converged"
    assert z.state == "failed" and "No connected pore path" in z.message
    assert job.progress().anisotropy == pytest.approx(1.0, rel=0.02)
    slow = TensorJob(geom, config, PermeabilitySettings(check_interval=1, tolerance=1e-9,
                                                        sides="periodic"))
    slow.start()
    while slow.progress().axes[0].step < 3:
        slow.join(0.01)
    slow.cancel()
    assert slow.join(60)
    assert [a.state for a in slow.progress().axes] == ["cancelled"] * 3
    assert slow.progress().k_mD == {}


def _runner(backend: str):
    """A session's run: a porous box driven along x, started."""
    from solver.runner import SimulationRunner

    rng = np.random.default_rng(3)
    solid = rng.random((16, 16, 16)) < 0.2
    runner = SimulationRunner(solid, SimulationConfig(
        backend=backend, precision="float64" if backend == "numpy" else "float32",
        body_force=(1e-6, 0.0, 0.0)))
    runner.start()
    runner.wait_for(lambda s: s.step >= 3 and s.status == "running")
    return runner


def _steps(runner) -> int:
    return runner.submit(lambda sim: sim.time_step).result(timeout=30)


def test_job_runs_as_commands_on_the_session_runner_and_pauses_its_run():
    """One device thread per session: every part of the job runs on the runner's thread (no
    thread of its own), the run takes no step meanwhile, the job says so, and the run goes on
    afterwards (cancelled job included); a run the user had paused stays paused."""
    import threading

    geom, config = _layers(), SimulationConfig(precision="float64", backend="numpy")
    slow = PermeabilitySettings(check_interval=1, tolerance=1e-9, sides="periodic")
    runner = _runner("numpy")
    threads = threading.active_count()
    try:
        job = TensorJob(geom, config, slow, runner=runner)
        job.start()
        while job.progress().axes[0].step < 5:
            job.join(0.01)
        assert threading.active_count() == threads, "the job started a thread of its own"
        assert job.thread_name == runner._thread.name
        assert runner.snapshot().status == "paused" and job.progress().paused_run
        held = runner.snapshot().step
        job.cancel()
        assert job.join(60)
        assert [a.state for a in job.progress().axes] == ["cancelled"] * 3
        assert not job.progress().paused_run
        runner.wait_for(lambda s: s.status == "running" and s.step > held + 2)

        runner.pause()
        runner.wait_for(lambda s: s.status == "paused")
        job = TensorJob(geom, config, _settings(), runner=runner)
        job.start()
        assert job.join(120) and not job.progress().paused_run
        assert [a.state for a in job.progress().axes] == ["converged"] * 3
        assert job.thread_name == runner._thread.name
        held = _steps(runner)
        assert runner.snapshot().status == "paused" and _steps(runner) == held
    finally:
        runner.stop()


def test_job_on_a_stopped_runner_ends_with_its_rows_failed():
    geom, config = _layers(), SimulationConfig(precision="float64", backend="numpy")
    runner = _runner("numpy")
    runner.stop(10)
    job = TensorJob(geom, config, _settings(), runner=runner)
    job.start()
    assert job.join(30)
    assert all(a.state == "failed" for a in job.progress().axes)


@pytest.mark.gpu
def test_gpu_job_on_a_running_session_runner():
    """On the CuPy backend a job measures k as commands of a session's runner that replays
    CUDA graphs: k is the k of the job alone, and the run stays healthy and goes on."""
    geom = _layers()
    config = SimulationConfig(precision="float64", backend="cupy")
    alone = run_study(geom, config, PermeabilitySettings(
        axes=["x", "y", "z"], check_interval=100, sides="periodic")).k("mirrored")
    runner = _runner("cupy")
    try:
        job = TensorJob(geom, config, _settings(), runner=runner)
        job.start()
        assert job.join(240)
        done = job.progress()
        assert [a.state for a in done.axes] == ["converged"] * 3
        assert done.k_mD == pytest.approx(alone, rel=1e-9)
        before = _steps(runner)
        snap = runner.wait_for(lambda s: s.status == "running" and s.step > before + 16)
        assert snap.error is None
        assert runner.submit(lambda sim: sim.health()["finite"]).result(timeout=30)
    finally:
        runner.stop()
