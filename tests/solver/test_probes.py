"""Point probes and lines (issue 30): sampled on the device, written by the CLI as CSV in SI."""

from __future__ import annotations

import csv
import time

import numpy as np
import pytest
import yaml

from solver.case import CaseError, parse_case
from solver.config import SimulationConfig
from solver.probes import Line, Probe, ProbeSet, line_nodes, probe_set_from_specs, probe_specs
from solver.run import HeadlessRun
from solver.simulation import Simulation

H = 12  # fluid nodes across the channel


def _channel() -> np.ndarray:
    solid = np.zeros((6, H + 2), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    return solid


def test_probes_and_lines_read_the_same_values_as_the_fields():
    solid = np.zeros((8, 7, 6), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    sim = Simulation(solid, SimulationConfig(backend="numpy", body_force=(1e-5, 0, 0)))
    sim.step(30)
    probes = ProbeSet((Probe("mid", (3, 3, 2)), Probe("wall", (3, 0, 2))),
                      (Line("across", (4, 0, 1), (4, 6, 1)),))
    readings = sim.sample(probes)
    fields = sim.fields()
    assert readings.step == 30
    assert readings.probes["mid"]["ux"] == pytest.approx(fields["u"][0, 3, 3, 2], rel=1e-12)
    assert readings.probes["mid"]["pressure"] == pytest.approx((fields["rho"][3, 3, 2] - 1) / 3)
    assert np.isnan(readings.probes["wall"]["umag"])  # in the solid
    profile = readings.lines["across"]
    np.testing.assert_allclose(profile["ux"], fields["u"][0, 4, :, 1], rtol=1e-12)
    np.testing.assert_allclose(profile["s"], np.arange(7.0))
    sim.close()


def test_line_nodes_and_case_entries_round_trip():
    assert line_nodes(Line("d", (0, 0, 0), (4, 2, 0))).tolist() == [
        [0, 0, 0], [1, 0, 0], [2, 1, 0], [3, 2, 0], [4, 2, 0]]
    probes = probe_set_from_specs([{"name": "a", "at": [1, 2, 3]}],
                                  [{"name": "l", "from": [0, 0, 0], "to": [5, 0, 0]}])
    specs = probe_specs(probes)
    assert probe_set_from_specs(specs["probes"], specs["lines"]) == probes
    with pytest.raises(ValueError, match="voxel indices"):
        probe_set_from_specs([{"name": "a", "at": [1.5, 2, 3]}], None)
    with pytest.raises(ValueError, match="outside the domain"):
        probes.check((4, 4, 4))


def test_the_cli_writes_probe_time_series_and_line_profiles_in_si(tmp_path):
    np.save(tmp_path / "ch.npy", _channel())
    data = {
        "name": "ch", "geometry": {"file": "ch.npy", "options": {"voxel_size": 1e-5}},
        "config": {"lattice": "D2Q9", "collision": "TRT", "precision": "float64", "tau": 0.8,
                   "body_force": [1e-6, 0], "backend": "numpy"},
        "run": {"max_steps": 4000, "output_interval": 1000, "check_interval": 500,
                "convergence": 0, "viscosity": 1e-6, "density": 1000.0, "vti": False},
        "probes": [{"name": "centre", "at": [3, H // 2]}],
        "lines": [{"name": "across", "from": [2, 0], "to": [2, H + 1]}],
    }
    case = parse_case(yaml.safe_load(yaml.safe_dump(data)), tmp_path)
    run = HeadlessRun(case, tmp_path / "out")
    run.execute(progress=False)
    units = run.units
    with open(tmp_path / "out" / "probes.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [1000, 2000, 3000, 4000]
    assert float(rows[-1]["time_s"]) == pytest.approx(units.time_to_si(4000))
    # Plane Poiseuille (halfway bounce-back): u(y) = F y (H - y) / (2 nu), y from the wall.
    nu = (0.8 - 0.5) / 3
    centre = 1e-6 * (H / 2 - 0.5) * (H / 2 + 0.5) / (2 * nu) * units.dx / units.dt
    assert float(rows[-1]["centre_ux_m_s"]) == pytest.approx(centre, rel=0.02)
    with open(tmp_path / "out" / "lines.csv", newline="") as fh:
        lines = [r for r in csv.DictReader(fh) if r["step"] == "4000"]
    assert len(lines) == H + 2 and lines[0]["ux_m_s"] == ""  # the wall node: no value
    assert float(lines[-1]["s_m"]) == pytest.approx((H + 1) * 1e-5)
    profile = np.array([float(r["ux_m_s"]) for r in lines[1:-1]])
    y = np.arange(1, H + 1) - 0.5
    exact = 1e-6 * y * (H - y) / (2 * nu) * units.dx / units.dt
    np.testing.assert_allclose(profile, exact, rtol=0.02)
    bad = {**data, "probes": [{"name": "x", "at": [3]}]}
    with pytest.raises(CaseError, match="voxel indices"):
        parse_case(bad, tmp_path)


def test_the_runner_publishes_probe_readings_and_the_coarse_flow():
    from solver.runner import SimulationRunner

    solid = np.zeros((8, 7, 6), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    runner = SimulationRunner(solid, SimulationConfig(backend="numpy",
                                                      body_force=(1e-5, 0, 0)))
    try:
        runner.step(0)
        runner.set_probes(ProbeSet((Probe("mid", (3, 3, 2)),)))
        runner.set_flow3d("qcrit", interval=0.0)
        runner.step(10)
        snap = runner.wait_for(lambda s: s.step == 10 and s.probes is not None
                               and s.flow3d is not None and s.flow3d.step == 10, 60)
        assert snap.probes.probes["mid"]["ux"] > 0
        assert snap.flow3d.name == "qcrit" and snap.flow3d.velocity.shape == (3, 8, 7, 6)
        runner.set_probes(ProbeSet())
        runner.set_flow3d(None)
        runner.step(1)
        snap = runner.wait_for(lambda s: s.step == 11, 60)
        assert snap.probes is None and snap.flow3d is None
        # Probes outside a new, smaller geometry are skipped, not an error.
        runner.set_probes(ProbeSet((Probe("far", (7, 6, 5)),)))
        runner.load_geometry(solid[:4], None)
        snap = runner.wait_for(lambda s: s.shape == (4, 7, 6), 60)
        assert snap.error is None and snap.probes is None
    finally:
        runner.stop()


@pytest.mark.parametrize("health", [False, True])
def test_probes_gathered_with_the_cut_read_what_sampling_alone_reads(health):
    """A live view samples its probes in the cut's gather and transfer (one look per
    publish): the same probe values as Simulation.sample, the same planes as without."""
    solid = np.zeros((8, 7, 6), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    sim = Simulation(solid, SimulationConfig(backend="numpy", body_force=(1e-5, 0, 0)))
    sim.step(20)
    probes = ProbeSet((Probe("mid", (3, 3, 2)), Probe("wall", (3, 0, 2))),
                      (Line("across", (4, 0, 1), (4, 6, 1)),))
    alone = sim.sample(probes)
    plain = sim.view(2, 3, "umag", health=health)
    looked = sim.view(2, 3, "umag", health=health, probes=probes)
    np.testing.assert_array_equal(looked["plane"], plain["plane"])
    np.testing.assert_array_equal(looked["velocity"], plain["velocity"])
    got = looked["probes"]
    assert got.step == alone.step == 20
    for name, values in alone.probes.items():
        np.testing.assert_array_equal(list(got.probes[name].values()), list(values.values()))
    for key, profile in alone.lines["across"].items():
        np.testing.assert_array_equal(got.lines["across"][key], profile)
    assert np.isnan(got.probes["wall"]["ux"]) and got.probes["mid"]["ux"] > 0
    sim.close()


def test_a_reset_or_a_new_geometry_never_shows_the_old_runs_coarse_flow():
    """Issue 30 item 7: the snapshot kept the last coarse flow until the next was due (every
    scene refresh period, 10 s), so after a Reset or a new geometry of the same box the 3D
    view drew the old run's streamlines over the new one; the new run's flow is read at once."""
    from solver.runner import SimulationRunner

    solid = np.zeros((8, 7, 6), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    runner = SimulationRunner(solid, SimulationConfig(backend="numpy",
                                                      body_force=(1e-5, 0, 0)))
    try:
        runner.step(10)
        runner.set_flow3d("umag", interval=600.0)  # read now, then not for 10 minutes
        snap = runner.wait_for(lambda s: s.flow3d is not None, 60)
        assert snap.flow3d.step == 10
        runner.reset()
        snap = runner.wait_for(lambda s: s.step == 0 and s.status == "paused", 60)
        assert snap.flow3d is not None and snap.flow3d.step == 0  # the new run's, at rest
        runner.step(5)
        runner.wait_for(lambda s: s.step == 5, 60)
        other = solid.copy()
        other[3:5, 2:5, 2:4] = True  # another geometry in the same box
        runner.load_geometry(other, None)
        start_read = time.time()
        snap = runner.wait_for(lambda s: s.step == 0 and s.status == "paused", 60)
        assert snap.flow3d is not None and snap.flow3d.step == 0
        assert not snap.flow3d.fluid[3, 3, 2]  # the new geometry's solid
        # The flow at rest has no streamlines: the next one comes a second into the run, not
        # a whole period (here 10 minutes) later.
        runner.start()
        snap = runner.wait_for(lambda s: s.flow3d is not None and s.flow3d.step > 0, 30)
        assert snap.flow3d.read_at - start_read < 30
    finally:
        runner.stop()
