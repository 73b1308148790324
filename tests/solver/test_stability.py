"""Stability and memory checks: chord lengths, the Poiseuille speed estimate, refusals, warnings,
memory estimates against the real allocations, and divergence detection on populations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from solver.backends.numpy_backend import NumpyBackend
from solver.config import ConfigError, SimulationConfig
from solver.monitor import check_health
from solver.simulation import Simulation
from solver.stability import (
    CS,
    DivergenceError,
    MemoryRefused,
    assess,
    check_memory,
    check_stability,
    estimate_max_velocity,
    mean_chord_length,
    pore_size,
    pull_table_bytes,
)


def plates(nx: int, h: int, ndim: int = 2) -> np.ndarray:
    """Channel with one solid layer at y = 0 and y = h + 1 (h fluid nodes across)."""
    shape = (nx, h + 2) + ((3,) if ndim == 3 else ())
    solid = np.zeros(shape, dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    return solid


def brute_chord(solid: np.ndarray, axis: int, periodic: bool) -> float:
    """Mean run length by walking every line (bounded runs only)."""
    lines = np.moveaxis(solid, axis, -1).reshape(-1, solid.shape[axis])
    lengths = []
    for line in lines:
        if periodic and line.any():
            start = int(np.argmax(line))
            line = np.roll(line, -start)  # begin at a solid: no run crosses the seam
        elif periodic:
            continue  # all fluid: unbounded
        run = 0
        for s in line:
            if s:
                if run:
                    lengths.append(run)
                run = 0
            else:
                run += 1
        if run:
            lengths.append(run)
    return float(np.mean(lengths)) if lengths else math.inf


@pytest.mark.parametrize("periodic", [True, False])
def test_chord_length_matches_brute_force(periodic):
    rng = np.random.default_rng(3)
    solid = rng.random((9, 7, 5)) < 0.35
    for axis in range(3):
        assert mean_chord_length(solid, axis, periodic) == pytest.approx(
            brute_chord(solid, axis, periodic))


def test_pore_size_of_plates_is_the_gap_and_open_box_is_unbounded():
    assert pore_size(plates(8, 12), 0, (True, True)) == 12
    assert pore_size(plates(8, 12, ndim=3), 0, (True, True, True)) == 12  # z has no wall
    assert mean_chord_length(np.zeros((6, 6), bool), 0, True) == math.inf
    assert mean_chord_length(np.zeros((6, 6), bool), 0, False) == 6


def test_poiseuille_estimate_matches_a_simulated_channel():
    """u_max = F H^2/(8 nu) is what the solver reaches between half-way bounce-back walls."""
    h, force, tau = 12, 1e-6, 0.8
    config = SimulationConfig(lattice="D2Q9", tau=tau, body_force=(force, 0, 0),
                              precision="float64")
    sim = Simulation(plates(4, h), config, backend="numpy")
    sim.step(3000)
    u_max = np.nanmax(sim.fields()["u"][0])
    estimate = estimate_max_velocity(force, tau, pore_size(sim.solid, 0, (True, True)))
    assert u_max == pytest.approx(estimate, rel=0.01)
    sim.close()


def test_estimate_is_capped_by_free_acceleration():
    assert estimate_max_velocity(1e-4, 0.8, math.inf, steps=100) == pytest.approx(1e-2)
    assert estimate_max_velocity(1e-4, 0.8, math.inf) == math.inf


def test_high_mach_is_refused_with_a_fix_and_moderate_mach_warned():
    solid = plates(8, 30)
    nu = (0.8 - 0.5) / 3
    force_at = {ma: ma * CS * 8 * nu / 30**2 for ma in (0.05, 0.2, 0.5)}
    ok = SimulationConfig(lattice="D2Q9", tau=0.8, body_force=(force_at[0.05], 0, 0))
    assert check_stability(ok, solid) == []
    warn = SimulationConfig(lattice="D2Q9", tau=0.8, body_force=(force_at[0.2], 0, 0))
    report = assess(warn, solid)
    assert report.mach == pytest.approx(0.2) and not report.errors
    assert any("Mach" in w for w in report.warnings)
    bad = SimulationConfig(lattice="D2Q9", tau=0.8, body_force=(force_at[0.5], 0, 0))
    with pytest.raises(ConfigError, match="Reduce the body force below"):
        check_stability(bad, solid)
    # A short run cannot reach the Poiseuille speed: F t caps the estimate.
    assert check_stability(bad, solid, steps=10) == []


def test_tau_close_to_half_is_warned():
    config = SimulationConfig(lattice="D2Q9", tau=0.52)
    assert any("tau = 0.52" in w for w in check_stability(config, plates(4, 8)))


def test_memory_refusal_names_both_numbers():
    check_memory(100, 200)
    check_memory(100, None)
    with pytest.raises(MemoryRefused) as err:
        check_memory(3 * 2**30, 2**30, "numpy")
    assert str(3 * 2**30) in str(err.value) and str(2**30) in str(err.value)


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_memory_estimate_matches_allocations(precision):
    rng = np.random.default_rng(0)
    solid = rng.random((12, 10, 9)) < 0.3
    sim = Simulation(solid, SimulationConfig(precision=precision), backend="numpy")
    sim.allocate()
    table = sim.problem.pull_table
    real_table = sum(a.nbytes for a in (table.src, table.dst, table.bounce, table.tile,
                                        table.node))
    t = sim.tiling
    assert pull_table_bytes(t.n_fluid, 19, t.n_tiles, t.nodes_per_tile) == real_table
    assert sim.memory_bytes() >= sim.state.f.nbytes
    sim.close()


def test_numpy_backend_reports_free_host_memory():
    free = NumpyBackend(threads=1).free_memory()
    with open("/proc/meminfo") as fh:
        total = int(fh.readline().split()[1]) * 1024
    assert free is not None and 0 < free <= total


def _sim(force=(1e-5, 0, 0)):
    config = SimulationConfig(lattice="D2Q9", tau=0.8, body_force=force, precision="float64")
    sim = Simulation(plates(8, 6), config, backend="numpy")
    sim.step(50)
    return sim


def test_health_gives_superficial_mean_velocity():
    sim = _sim()
    health = sim.health()
    grid = sim.fields()["u"]
    fluid = ~sim.solid
    expected = np.array([grid[k][fluid].sum() for k in range(2)]) / sim.solid.size
    np.testing.assert_allclose(health["mean_velocity"], expected, rtol=1e-12)
    assert health["max_speed"] == pytest.approx(np.sqrt((grid[:, fluid] ** 2).sum(0)).max())
    check_health(health, 0.8, sim.problem.force)
    sim.close()


def test_check_health_detects_nan_and_overspeed():
    sim = _sim()
    f = sim.populations()
    health = sim.health()
    limit = 0.5 * health["max_speed"]
    with pytest.raises(DivergenceError, match="max \\|u\\|") as err:
        check_health(health, 0.501, sim.problem.force, u_limit=limit)
    assert "tau = 0.501 is too close to 0.5" in str(err.value)
    tile, node = np.argwhere(~sim.tiling.solid)[0]
    f[tile, 1, node] = np.nan
    sim.backend.set_populations(sim.state, f)
    with pytest.raises(DivergenceError, match="NaN or Inf.*body force"):
        check_health(sim.health(), 0.501, sim.problem.force)
    sim.close()


def test_lattice_of_another_dimension_is_refused_first():
    with pytest.raises(ConfigError, match="choose D3Q19 or D3Q27"):
        assess(SimulationConfig(lattice="D2Q9"), np.zeros((4, 4, 4), bool))


def test_a_diverged_run_through_openings_is_pointed_to_rr_and_a_finer_grid_not_a_larger_tau():
    """TRT through a tube at tau 0.51 diverges (issue 28); the message names RR and the finer
    grid of the lattice choice, never 'tau >= 0.6' (which would break the Mach limit there)."""
    from solver.monitor import RunMonitor

    from .test_cupy_iolets import voxel_tube

    geom = voxel_tube(radius=4.0, length=30.0, angle_deg=0.0)
    openings = {1: {"kind": "velocity", "value": 0.03, "profile": "poiseuille"},
                2: {"kind": "pressure", "value": 1.0}}
    finer = "a voxel size of 0.0001 m or less (400 voxels along the geometry's 40 mm, now 30)"

    def monitor(collision: str) -> tuple[Simulation, RunMonitor]:
        config = SimulationConfig(lattice="D3Q19", collision=collision, tau=0.51,
                                  precision="float64", tile_edge=4, openings=openings,
                                  ramp_steps=0)
        sim = Simulation(geom, config, backend="numpy")
        return sim, RunMonitor(sim.problem, 0.51, finer=finer)

    sim, trt = monitor("TRT")
    with np.errstate(all="ignore"):
        for _ in range(6):
            sim.step(100)
            reading = trt.observe(sim.time_step, sim.health())
            if not reading.healthy:
                break
    assert not reading.healthy  # measured: within 400 steps
    assert "Collide with RR" in reading.message and finer in reading.message
    assert "0.6" not in reading.message and "Raising tau" in reading.message
    # Already on RR (what 'auto' chooses there): only the grid is left to change.
    sim, rr = monitor("auto")
    sim.step(1)
    fast = rr.observe(1, {**sim.health(), "max_speed": 0.31})
    assert not fast.healthy and "Collide with" not in fast.message and finer in fast.message


def test_tau_near_half_through_openings_warns_of_the_collision_not_of_tau():
    solid = np.zeros((8, 6, 6), dtype=bool)
    trt = SimulationConfig(lattice="D3Q19", collision="TRT", tau=0.51)
    auto = SimulationConfig(lattice="D3Q19", collision="auto", tau=0.51)
    assert any("collide with RR" in w for w in check_stability(trt, solid, openings=True))
    assert not check_stability(auto, solid, openings=True)
    assert any("0.6-1.0" in w for w in check_stability(auto, solid))  # body-force runs


def test_the_cli_run_gives_its_monitor_the_grid_that_meets_the_mach_target(tmp_path):
    from solver.run import HeadlessRun
    from solver.validation.stenosis import _setup

    _, geometry, _, _, case = _setup("stenosis", 300, 6, "ci", "numpy")
    run = HeadlessRun(case, out=str(tmp_path / "out"), geometry=geometry)
    try:
        # tau at the floor misses the target here: the advice names the finer voxel size
        assert run.lattice_choice.mach > run.lattice_choice.mach_target
        assert "voxel size of" in run.monitor.finer
        assert run.monitor.finer == run.lattice_choice.finer
    finally:
        run.sim.close()


@pytest.mark.parametrize("block", [1, 7, 40, 1 << 22])
def test_chord_length_in_blocks_is_the_whole_images(monkeypatch, block):
    """The chord length summed over blocks of lines (bounded temporaries on a large image) is
    the whole image's, to the bit, for any block size."""
    import solver.stability as stability

    rng = np.random.default_rng(5)
    solid = rng.random((11, 6, 9)) < 0.4
    solid[:, :, 3] = False  # all-fluid lines: unbounded across a periodic axis
    monkeypatch.setattr(stability, "CHORD_BLOCK_VOXELS", block)
    for axis in range(3):
        for periodic in (True, False):
            assert mean_chord_length(solid, axis, periodic) == brute_chord(solid, axis, periodic)
