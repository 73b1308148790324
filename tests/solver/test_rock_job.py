"""The k tensor measured in a background thread (what the app's "Measure k" button runs)."""

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


def test_job_pauses_the_run_while_it_measures_and_starts_it_again():
    """The GPU-sharing protocol on the CPU: the run takes no step while the job measures, the
    job says so, and the run goes on afterwards (cancelled job included); a run the user had
    paused stays paused, and without pause_runner (the CPU default) the run is left alone."""
    geom, config = _layers(), SimulationConfig(precision="float64", backend="numpy")
    slow = PermeabilitySettings(check_interval=1, tolerance=1e-9, sides="periodic")
    runner = _runner("numpy")
    try:
        job = TensorJob(geom, config, slow, runner=runner, pause_runner=True)
        job.start()
        while job.progress().axes[0].step < 5:
            job.join(0.01)
        assert runner.snapshot().status == "paused" and job.progress().paused_run
        held = _steps(runner)
        job.join(0.5)
        assert _steps(runner) == held, "the run stepped while the job held the device"
        job.cancel()
        assert job.join(60)
        assert not job.progress().paused_run
        runner.wait_for(lambda s: s.status == "running" and s.step > held + 2)

        runner.pause()
        runner.wait_for(lambda s: s.status == "paused")
        job = TensorJob(geom, config, _settings(), runner=runner, pause_runner=True)
        job.start()
        assert job.join(120) and not job.progress().paused_run
        held = _steps(runner)
        assert runner.snapshot().status == "paused" and _steps(runner) == held

        runner.start()
        job = TensorJob(geom, config, slow, runner=runner)  # NumPy: the default leaves it
        job.start()
        while job.progress().axes[0].step < 5:
            job.join(0.01)
        before = _steps(runner)
        runner.wait_for(lambda s: s.step > before + 2)
        assert not job.progress().paused_run
        job.cancel()
        assert job.join(60)
    finally:
        runner.stop()


@pytest.mark.gpu
@pytest.mark.parametrize("pause", [True, False])
def test_gpu_job_beside_a_running_session_run(pause):
    """On the CuPy backend a job measures k next to a session's run that replays CUDA graphs:
    paused (the default on a GPU) or, as when the user starts it again meanwhile, running
    beside it (the device's CAPTURE_LOCK keeps captures and pool frees apart). k is the k of
    the job alone, and the run stays healthy and goes on."""
    geom = _layers()
    config = SimulationConfig(precision="float64", backend="cupy")
    alone = run_study(geom, config, PermeabilitySettings(
        axes=["x", "y", "z"], check_interval=100, sides="periodic")).k("mirrored")
    runner = _runner("cupy")
    try:
        job = TensorJob(geom, config, _settings(), runner=runner,
                        pause_runner=None if pause else False)
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
