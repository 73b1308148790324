"""SimulationRunner: commands, snapshots, divergence handling, error survival and shutdown."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from solver import last_good, pacing
from solver.backends.numpy_backend import NumpyBackend
from solver.config import ConfigError, SimulationConfig
from solver.monitor import DIVERGENCE_SPEED, History, Reading
from solver.observables import Permeability
from solver.runner import SimulationRunner, live_runners
from solver.simulation import Simulation
from solver.snapshot import SliceView

pytestmark = pytest.mark.timeout(120)


def plates(nx: int = 4, ny: int = 10, nz: int = 4) -> np.ndarray:
    """All-fluid box; walls come from the y faces of the configuration."""
    return np.zeros((nx, ny, nz), dtype=bool)


def porous(n: int = 16, seed: int = 1) -> np.ndarray:
    """A periodic box with a few random solid blobs (about 30 % solid)."""
    rng = np.random.default_rng(seed)
    grid = np.indices((n, n, n))
    solid = np.zeros((n, n, n), dtype=bool)
    for centre in rng.uniform(0, n, size=(6, 3)):
        d = np.abs(grid - centre[:, None, None, None])
        d = np.minimum(d, n - d)
        solid |= (d**2).sum(axis=0) < 12
    return solid


def config(**overrides) -> SimulationConfig:
    values = dict(backend="numpy", precision="float64", body_force=(1e-5, 0.0, 0.0))
    values.update(overrides)
    return SimulationConfig(**values)


@pytest.fixture
def make_runner():
    runners = []

    def make(geometry, cfg, **kwargs) -> SimulationRunner:
        runner = SimulationRunner(geometry, cfg, **kwargs)
        runners.append(runner)
        return runner

    yield make
    for runner in runners:
        runner.stop()


def test_stop_returns_within_one_second_and_frees_memory(make_runner):
    before = live_runners()
    runner = make_runner(porous(24), config())
    runner.start()
    runner.wait_for(lambda s: s.step >= 3)
    sim = runner.submit(lambda sim: sim).result(timeout=5)
    assert sim.state is not None
    assert live_runners() == before + 1
    start = time.perf_counter()
    assert runner.stop()
    assert time.perf_counter() - start < 1.0
    assert sim.state is None, "stop() must release the simulation's state"
    assert live_runners() == before
    assert runner.snapshot().status == "stopped"


def test_start_pause_step_reset(make_runner):
    runner = make_runner(porous(), config())
    runner.start()
    snap = runner.wait_for(lambda s: s.step >= 5)
    assert snap.status == "running" and snap.plane is not None
    runner.pause()
    paused = runner.wait_for(lambda s: s.status == "paused").step
    time.sleep(0.3)
    assert runner.snapshot().step == paused, "a paused runner must not step"
    runner.step(7)
    snap = runner.wait_for(lambda s: s.step == paused + 7)
    assert snap.status == "paused"
    run_id = snap.run_id
    runner.reset()
    snap = runner.wait_for(lambda s: s.run_id > run_id)
    assert snap.step == 0 and snap.status == "paused"
    assert len(snap.history["step"]) == 0


def test_a_burst_of_clicks_ends_in_the_last_state_without_one_rebuild_per_reset(make_runner,
                                                                               monkeypatch):
    runner = make_runner(porous(), config())
    runner.step(2)
    runner.wait_for(lambda s: s.step == 2)
    builds = []
    install = runner._install
    monkeypatch.setattr(runner, "_install", lambda *a: (builds.append(a), install(*a)))
    busy = threading.Event()
    runner.submit(lambda sim: busy.wait(10))  # the burst queues up behind this call
    for _ in range(10):
        runner.start()
        runner.step(3)
        runner.reset()
        runner.pause()
    runner.step(4)
    sent = runner.sent
    busy.set()
    snap = runner.wait_for(lambda s: s.applied == sent)
    assert (snap.status, snap.step) == ("paused", 4), "the state after the last Reset and Step"
    assert len(builds) == 1, f"the burst rebuilt {len(builds)} times; its last Reset is enough"


def test_snapshot_carries_the_requested_cut(make_runner):
    solid = porous(16)
    runner = make_runner(solid[:, :12, :8].copy(), config())
    runner.step(3)
    runner.set_view(SliceView("ux", axis=1, index=4))
    snap = runner.wait_for(lambda s: s.view.axis == 1 and s.view.quantity == "ux")
    assert snap.plane_axes == ("x", "z")
    assert snap.plane.shape == (16, 8) and snap.plane_velocity.shape == (2, 16, 8)
    expected = runner.submit(lambda sim: sim.slice(1, 4, "ux")).result(timeout=10)
    np.testing.assert_allclose(snap.plane, expected, equal_nan=True)
    assert np.isnan(snap.plane[solid[:, 4, :8]]).all(), "solids must be NaN in the slice"
    np.testing.assert_allclose(snap.plane_velocity[0], expected, equal_nan=True)


def test_set_config_keeps_the_flow_and_bad_config_keeps_the_run(make_runner):
    runner = make_runner(porous(), config())
    runner.step(20)
    runner.wait_for(lambda s: s.step == 20)
    runner.set_config(config(tau=1.1))
    snap = runner.wait_for(lambda s: s.config.get("tau") == 1.1)
    assert snap.step == 20, "an unchanged tiling keeps the populations and the step count"
    assert snap.max_speed > 0
    runner.set_config(config(lattice="D2Q9", body_force=(1e-5, 0.0, 0.0)))
    snap = runner.wait_for(lambda s: s.status == "error")
    assert "D2Q9" in snap.error and "choose" in snap.error
    runner.step(2)
    snap = runner.wait_for(lambda s: s.step == 22)
    assert snap.error is None and snap.config["tau"] == 1.1


def test_load_geometry_restarts_from_rest(make_runner):
    runner = make_runner(porous(16), config())
    runner.step(5)
    first = runner.wait_for(lambda s: s.step == 5)
    runner.load_geometry(porous(20, seed=3))
    snap = runner.wait_for(lambda s: s.shape == (20, 20, 20))
    assert snap.step == 0 and snap.run_id > first.run_id and snap.status == "paused"


def test_runaway_pauses_restores_and_explains(make_runner):
    # Free periodic fluid accelerates at F per step: |u| passes DIVERGENCE_SPEED after ~15 steps.
    cfg = config(tau=0.52, body_force=(0.02, 0.0, 0.0))
    runner = make_runner(plates(8, 8, 8), cfg, snapshot_interval=0.0)
    runner.start()
    snap = runner.wait_for(lambda s: s.status == "diverged", timeout=60)
    assert "tau = 0.52" in snap.error and "body force" in snap.error
    assert "last good state" in snap.error
    assert np.isfinite(snap.max_speed) and snap.max_speed <= DIVERGENCE_SPEED
    assert snap.step < 30
    time.sleep(0.3)
    assert runner.snapshot().step == snap.step, "a diverged run stays paused"


@pytest.mark.parametrize("room", [True, False], ids=["device copy", "host copy"])
def test_divergence_restores_the_last_checked_state_exactly(make_runner, monkeypatch, room):
    monkeypatch.setattr(pacing, "HEALTH_SHARE", 1.0)  # check the health at every publish
    monkeypatch.setattr(last_good, "REFRESH_S", 0.0)  # and keep a copy at every passed check
    monkeypatch.setattr(last_good, "MAX_SHARE", 1e9)  # however long the copy takes
    monkeypatch.setattr(NumpyBackend, "free_memory", lambda self: 1 << 50 if room else 0)
    cfg = config(tau=0.52, body_force=(0.02, 0.0, 0.0))
    runner = make_runner(plates(8, 8, 8), cfg, snapshot_interval=0.0)
    runner.step(10)  # a checked, healthy state (the free fluid runs away after ~15 steps)
    runner.wait_for(lambda s: s.step == 10)
    runner.start()
    snap = runner.wait_for(lambda s: s.status == "diverged", timeout=60)
    restored = runner.submit(lambda sim: sim.populations()).result(timeout=10)
    straight = Simulation(plates(8, 8, 8), cfg)
    straight.step(snap.step)
    assert snap.step >= 10, "the state checked at step 10 (or later) should have been kept"
    np.testing.assert_array_equal(restored, straight.populations())


def test_publishing_reads_no_whole_field_back(make_runner, monkeypatch):
    # A snapshot needs a slice and a few scalars: reading all fields or populations back to
    # the host (about 1 GB at 256 x 256 x 128) made publishing cost a quarter of the run.
    calls = {"fields": 0, "populations": 0}

    def counting(name: str):
        original = getattr(Simulation, name)

        def counted(self, *args, **kwargs):
            calls[name] += 1
            return original(self, *args, **kwargs)
        return counted

    for name in calls:
        monkeypatch.setattr(Simulation, name, counting(name))
    monkeypatch.setattr(NumpyBackend, "free_memory", lambda self: 1 << 50)
    runner = make_runner(porous(), config(), snapshot_interval=0.0)
    runner.start()
    first = runner.wait_for(lambda s: s.step > 0).seq
    runner.wait_for(lambda s: s.seq > first + 20 and len(s.history["step"]) >= 3)
    runner.set_view(SliceView("rho", axis=0, index=3))
    snap = runner.wait_for(lambda s: s.view.quantity == "rho" and s.seq > first + 25)
    runner.pause()
    runner.wait_for(lambda s: s.status == "paused")
    assert snap.plane.shape == (16, 16) and snap.max_speed > 0 and snap.permeability > 0
    assert calls == {"fields": 0, "populations": 0}


def test_errors_in_the_thread_do_not_kill_it(make_runner):
    runner = make_runner(porous(), config())
    future = runner.submit(lambda sim: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        future.result(timeout=10)
    with pytest.raises(TypeError, match="SliceView"):
        runner.set_view("umag")
    runner.step(-1)  # raises inside the thread
    snap = runner.wait_for(lambda s: s.status == "error")
    assert "non-negative" in snap.error
    assert runner.alive
    runner.step(2)
    assert runner.wait_for(lambda s: s.step == 2).status == "paused"


def test_bad_initial_geometry_reports_an_error(make_runner):
    runner = make_runner(np.ones((8, 8, 8), dtype=bool), config())
    snap = runner.wait_for(lambda s: s.status == "error")
    assert "no fluid" in snap.error
    runner.start()
    snap = runner.wait_for(lambda s: s.seq > 1 and "There is no simulation" in (s.error or ""))
    assert runner.alive


def test_permeability_of_plane_channel_matches_poiseuille(make_runner):
    # Halfway bounce-back walls at the y faces put the walls h = ny apart; TRT with magic 3/16
    # gives the exact parabola at the nodes, whose node average is F/nu (h^2/12 + 1/24): the
    # superficial mean velocity, hence k = h^2/12 + 1/24 (h^2/12 in the continuum).
    ny = 10
    cfg = config(tau=1.5, y_min="wall", y_max="wall", body_force=(1e-6, 0.0, 0.0))
    runner = make_runner(plates(4, ny, 4), cfg, snapshot_interval=0.0)
    runner.start()
    # The last health check past step 1500, not just the step: checks come at most every
    # cost / HEALTH_SHARE seconds, so on a busy machine the last one can lag the steps.
    snap = runner.wait_for(lambda s: len(s.history.get("step", ())) > 0
                           and s.history["step"][-1] >= 1500, timeout=100)
    runner.pause()
    assert snap.permeability == pytest.approx(ny**2 / 12 + 1 / 24, rel=1e-4)
    residual = snap.history["residual"]
    assert residual[-1] < 1e-3 * np.nanmax(residual), "the residual must fall as flow settles"
    assert snap.metrics["mflups"] > 0 and snap.steps_per_second > 0


def test_config_error_is_a_value_error_with_advice():
    with pytest.raises(ConfigError, match="tau > 0.5"):
        config(tau=0.5)


def test_history_keeps_the_monitors_readings_in_step_order():
    def reading(step: int, residual: float, k: float | None) -> Reading:
        return Reading(step, True, 0.0, np.zeros(3), residual,
                       None if k is None else Permeability(k, 1.0, 1.0))

    history = History()
    history.record(reading(10, float("inf"), 0.5), 1.0)
    history.record(reading(20, 0.05, None), 1.0)
    history.record(reading(20, 9.0, None), 1.0)  # not newer: ignored
    data = history.arrays()
    assert list(data["step"]) == [10, 20]
    assert np.isnan(data["residual"][0])
    assert data["residual"][1] == 0.05
    assert data["permeability"][0] == 0.5 and np.isnan(data["permeability"][1])


def test_slice_view_rejects_unknown_values():
    with pytest.raises(ValueError, match="quantity"):
        SliceView("speed")
    with pytest.raises(ValueError, match="axis"):
        SliceView("umag", axis=3)


def test_runner_thread_is_a_daemon(make_runner):
    runner = make_runner(porous(), config())
    runner.step(1)
    runner.wait_for(lambda s: s.step == 1)
    threads = [t for t in threading.enumerate() if t.name == runner._name]
    assert threads and threads[0].daemon


def test_idle_timeout_stops_an_unread_runner(make_runner):
    runner = make_runner(porous(), config(), idle_timeout=1.0)
    runner.start()
    runner.wait_for(lambda s: s.step > 0)
    for _ in range(6):  # a reader keeps it alive
        runner.touch()
        time.sleep(0.3)
    assert runner.alive
    deadline = time.monotonic() + 10
    while runner.alive and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not runner.alive and runner.snapshot().status == "stopped"


def test_idle_timeout_asks_the_reader_check_from_the_runner_thread(make_runner):
    present = threading.Event()
    present.set()
    runner = make_runner(porous(), config(), idle_timeout=1.0, reader=present.is_set)
    runner.start()
    runner.wait_for(lambda s: s.step > 0)
    time.sleep(2.0)  # nobody touches it, but the reader says a browser is there
    assert runner.alive
    present.clear()  # the browser left
    deadline = time.monotonic() + 10
    while runner.alive and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not runner.alive and runner.snapshot().status == "stopped"


def test_a_pulsatile_run_steps_through_its_windkessel_and_samples_cycles(make_runner):
    """The dashboard's runner builds the CLI's PulsatileDriver from the config: the outlet's
    lattice Windkessel sets its pressure exactly as a direct coupling does, and the snapshot
    carries the openings' flow over the last and the current heart cycle."""
    from solver.pulsatile import PulsatileDriver, cycle_monitor
    from solver.validation.vessels import tube_geometry
    from solver.windkessel import lattice_coupling

    tube = tube_geometry(4, 0.0, length=3)
    wave = {"period": 160.0, "fourier": [0.01, [0.004, 0.0]]}
    rcr = {"Rp": 0.001, "C": 2e4, "Rd": 0.01}  # lattice units: R_d C = 200 steps
    cfg = SimulationConfig(lattice="D3Q19", collision="TRT", tau=0.8, precision="float64",
                           backend="numpy", ramp_steps=40, openings={
                               1: {"kind": "velocity", "profile": "poiseuille",
                                   "waveform": wave},
                               2: {"kind": "pressure", "value": 1.0, "windkessel": rcr}})
    runner = make_runner(tube, cfg)
    runner.step(0)
    runner.wait_for(lambda s: s.status == "paused")
    runner.step(400)
    snap = runner.wait_for(lambda s: s.step == 400)
    view = snap.cycle
    assert view is not None and view.ids == (1, 2) and view.cycles == 2
    assert view.last.shape == (32, 2) and view.current.shape == (16, 2)
    reference = Simulation(tube, cfg)
    driver = PulsatileDriver(lattice_coupling(cfg.openings, 1.0, 10),
                             cycle_monitor(reference, 2, 32, 0.01))
    driver.start(reference)
    driver.step(reference, 400)
    np.testing.assert_allclose(view.last, driver.cycles.flows[-1], rtol=1e-10)
    rho = runner.submit(lambda sim: [f.mean_density for f in sim.opening_flows()]).result(5)
    expected = [f.mean_density for f in reference.opening_flows()]
    np.testing.assert_allclose(rho, expected, rtol=1e-12)
    assert abs(expected[1] - 1.0) > 1e-5  # the Windkessel raised the outlet's pressure
