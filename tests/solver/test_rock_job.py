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
