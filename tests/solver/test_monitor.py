"""The one run monitor: the dashboard snapshot, the CLI summary, validation and
``Simulation.permeability()`` give the same k; one divergence threshold and message; the
steady-state test on k with its estimate of the steps still needed."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from solver.__main__ import main
from solver.config import SimulationConfig
from solver.monitor import (
    DIVERGENCE_SPEED,
    KConvergence,
    Reading,
    RunMonitor,
    divergence_message,
    k_verdict,
)
from solver.observables import Permeability
from solver.runner import SimulationRunner
from solver.simulation import Simulation
from solver.stability import DivergenceError

pytestmark = pytest.mark.timeout(300)

STEPS = 300


def pack() -> np.ndarray:
    """A small periodic porous box: two overlapping solid spheres in 12^3."""
    grid = np.indices((12, 12, 12)) - 5.5
    solid = (grid**2).sum(axis=0) < 16
    solid |= ((grid - np.array([3, -4, 2])[:, None, None, None]) ** 2).sum(axis=0) < 6
    return solid


def settings(model: str) -> dict:
    return dict(lattice="D3Q19", collision="TRT", precision="float64", tau=0.9,
                body_force=[2e-5, 0.0, 0.0], initial_density=1.2, fluid_model=model)


@pytest.mark.parametrize("model", ["incompressible", "quasi-compressible"])
def test_dashboard_cli_and_simulation_agree_on_k_at_initial_density_1_2(tmp_path, model):
    solid = pack()
    config = SimulationConfig(backend="numpy",
                              **{**settings(model), "body_force": (2e-5, 0.0, 0.0)})
    sim = Simulation(solid, config)
    sim.step(STEPS)
    k_sim = sim.permeability().lattice

    runner = SimulationRunner(solid, config)
    try:
        runner.step(STEPS)
        snap = runner.wait_for(lambda s: s.step == STEPS and s.permeability is not None, 120)
    finally:
        runner.stop()

    np.save(tmp_path / "pack.npy", solid)
    case = {"name": "pack", "geometry": {"file": "pack.npy"},
            "config": {**settings(model), "backend": "numpy"},
            "run": {"max_steps": STEPS, "output_interval": STEPS, "check_interval": 100,
                    "convergence": 0, "vti": False}}
    (tmp_path / "pack.yaml").write_text(yaml.safe_dump(case))
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "pack.yaml"), "--output", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())

    assert k_sim > 0
    assert snap.permeability == pytest.approx(k_sim, rel=1e-12, abs=0)
    assert summary["permeability"] == pytest.approx(k_sim, rel=1e-12, abs=0)


def test_one_threshold_and_one_message_for_every_way_of_running():
    sim = Simulation(np.zeros((4, 6, 4), dtype=bool),
                     SimulationConfig(backend="numpy", tau=0.52, body_force=(1e-3, 0, 0)))
    sim.step(1)
    fast = {**sim.health(), "max_speed": DIVERGENCE_SPEED * 1.01}
    monitor = RunMonitor(sim.problem, 0.52)
    reading = monitor.observe(1, fast)
    assert not reading.healthy
    assert reading.message == divergence_message(0.52, sim.problem.force, True,
                                                 fast["max_speed"])
    assert "tau = 0.52 is too close to 0.5" in reading.message and "body force" in reading.message
    with pytest.raises(DivergenceError) as err:
        monitor.check(1, fast)
    assert str(err.value) == reading.message
    assert monitor.observe(1, {**fast, "max_speed": DIVERGENCE_SPEED}).healthy


def test_divergence_message_blames_no_zero_force():
    text = divergence_message(0.8, np.zeros(3), False, math.inf)
    assert "NaN or Inf" in text and "body force" not in text


def test_residual_is_the_relative_change_per_step():
    problem = Simulation(pack(), SimulationConfig(backend="numpy", body_force=(1e-5, 0, 0))
                         ).problem
    monitor = RunMonitor(problem, 0.8)
    look = {"finite": True, "max_speed": 0.01, "layer_density": None}
    first = monitor.observe(100, {**look, "mean_velocity": [1.0, 0, 0],
                                  "mean_momentum": [1.0, 0, 0]})
    second = monitor.observe(300, {**look, "mean_velocity": [2.0, 0, 0],
                                   "mean_momentum": [2.0, 0, 0]})
    assert math.isinf(first.residual)
    assert second.residual == pytest.approx(0.5 / 200)


def test_k_convergence_flag_and_estimate_of_the_steps_still_needed():
    # k approaches 1 with a decay time of 2000 steps: the change per 1000 steps falls below
    # 0.1 % when exp(-t/2000) (1 - exp(-1/2)) < 1e-3, at t ~ 11 800 steps.
    decay, tol = 2000.0, 1e-3
    convergence = KConvergence(tol, 1000)
    estimates = {}
    for step in range(0, 20_001, 250):
        k = 1.0 - 0.5 * math.exp(-step / decay)
        change, converged, remaining = convergence.update(step, k)
        estimates[step] = (change, converged, remaining)
    first = min(s for s, (_, ok, _) in estimates.items() if ok)
    assert 11_000 <= first <= 12_500
    change, converged, remaining = estimates[4000]
    assert not converged and change > tol
    assert remaining == pytest.approx(first - 4000, rel=0.15)
    assert estimates[0][0] is None and not estimates[0][1]


def test_negative_unconverged_or_inertial_k_is_not_the_answer():
    def reading(k: float, change: float | None, converged: bool, u: float = 1e-4) -> Reading:
        return Reading(5000, True, 0.01, np.zeros(3), 1e-6, Permeability(k, 1e-5, u),
                       k_change=change, converged=converged, steps_to_converge=None,
                       viscosity=0.1)

    answer, label = k_verdict(reading(-0.3, 1e-5, True))
    assert not answer and "negative" in label and "Darcy's law applies" not in label
    answer, label = k_verdict(reading(0.3, 0.02, False))
    assert not answer and "not converged" in label and "2 %" in label
    answer, label = k_verdict(reading(0.3, 1e-4, True, u=1.0))
    assert not answer and "Darcy's law does not apply" in label
    answer, label = k_verdict(reading(0.3, 1e-4, True))
    assert answer and label.startswith("converged: k changes < 0.1 % per 1000 steps")


def test_sphere_pack_example_reports_k_in_m2_and_md_with_its_convergence(tmp_path):
    """B10: the shipped case promises SI results; a shortened run must give them."""
    from pathlib import Path

    case = yaml.safe_load((Path(__file__).parents[2] / "examples" / "sphere_pack_48.yaml")
                          .read_text())
    case["run"].update(max_steps=40, output_interval=20, check_interval=20,
                       checkpoint_interval=0, vti=False)
    case["config"]["backend"] = "numpy"
    (tmp_path / "case.yaml").write_text(yaml.safe_dump(case))
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "case.yaml"), "--output", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["voxel_size_m"] == 1e-5
    assert summary["permeability_m2"] == pytest.approx(summary["permeability"] * 1e-10,
                                                       rel=1e-12)
    assert summary["permeability_mD"] == pytest.approx(
        summary["permeability_m2"] / 9.869233e-16, rel=1e-12)
    assert summary["k_answer"] is False and summary["k_converged"] is False
    assert summary["k_label"].startswith("not converged yet")
    header = (out / "history.csv").read_text().splitlines()[0].split(",")
    assert {"k_change", "k_converged", "steps_to_converge"} <= set(header)


@pytest.mark.parametrize("model", ["incompressible", "quasi-compressible"])
def test_pressure_driven_k_from_the_device_look_equals_the_field_definition(model):
    """A non-periodic flow axis: the monitor's k (layer densities reduced on the device) is
    the same formula as Simulation.permeability() on host fields."""
    solid = np.zeros((24, 12), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    config = SimulationConfig(backend="numpy", lattice="D2Q9", precision="float64", tau=0.8,
                              x_min="pressure", x_max="pressure", x_min_value=1.002,
                              x_max_value=1.0, fluid_model=model)
    sim = Simulation(solid, config)
    sim.step(300)
    reading = RunMonitor(sim.problem, 0.8, axis=sim.flow_axis).observe(sim.time_step,
                                                                     sim.health())
    k = sim.permeability().lattice
    assert k > 0
    assert reading.permeability.lattice == pytest.approx(k, rel=1e-12, abs=0)


# ------------------------------------------- steady state of a flow through openings (#28)
def test_flow_convergence_waits_for_the_soft_start_and_a_window_of_small_changes():
    from solver.monitor import FlowConvergence
    from solver.vessel import OpeningFlow

    conv = FlowConvergence(tolerance=1e-3, window=100, start=200)

    def flows(t):  # an inflow held at 1, the outflow and the inlet pressure settling
        decay = np.exp(-t / 150.0)
        return (OpeningFlow(1, "velocity", 1.0, 1.01 + 0.01 * decay),
                OpeningFlow(2, "pressure", -1.0 + 0.5 * decay, 1.0))

    verdicts = {t: conv.update(t, flows(t)) for t in range(0, 3001, 50)}
    assert verdicts[150] == (None, False)  # inside the soft start
    assert verdicts[250] == (None, False)  # no window of history yet
    change, steady = verdicts[300]
    assert change > 0.1 and not steady
    first = min(t for t, (_, ok) in verdicts.items() if ok)
    # The inlet density's change per window relative to the drop (~0.01) is the slowest:
    # 0.948 exp(-t/150), below 1e-3 from t = 1028 (the outflow's 0.474 exp(-t/150) from 924).
    assert first == 1050
    assert "converged" in conv.label(*verdicts[first], first)
    assert "soft start" in conv.label(None, False, 100)


@pytest.fixture(scope="module")
def straight_tube():
    from solver.validation.vessels import tube_geometry

    return tube_geometry(4, 0.0)  # (10, 10, 30) voxels of 1 mm, openings 8 mm across


def _tube_problem(geometry, tau: float, openings: dict):
    """The problem of a run on ``geometry`` (nothing allocated)."""
    return Simulation(geometry, SimulationConfig(
        lattice="D3Q19", collision="TRT", tau=tau, precision="float64", backend="numpy",
        openings=openings)).problem


@pytest.mark.parametrize("tau, speed, settle", [
    (0.505, 0.001, "flow"),      # slow inflow, thin fluid: one flow-through is the shorter
    (0.505, 0.0005, "viscous"),  # slower still: the viscous time D^2/nu is the shorter
    (0.8, 0.001, "floor"),       # viscous fluid: both short, the least window holds
])
def test_the_steady_window_comes_from_the_flow_not_a_fixed_step_count(straight_tube, tau,
                                                                       speed, settle):
    """Issue 28: the window was 1000 steps on every grid; now 5 % of the smaller of one
    flow-through (box length / inlet mean speed) and one viscous time across the inlet,
    at least 1000 steps, the same in the dashboard's, the CLI's and validation's monitors."""
    from solver.monitor import FLOW_WINDOW_FRACTION, FLOW_WINDOW_MIN, steady_window

    problem = _tube_problem(straight_tube, tau, {
        1: {"kind": "velocity", "value": speed, "profile": "poiseuille"}, 2: "pressure"})
    inlet = next(o for o in straight_tube.openings if o.id == 1)
    nu = (tau - 0.5) / 3.0
    flow_through = math.ceil(30 / speed)  # the box's longest side, 30 voxels
    viscous = (inlet.diameter / straight_tube.voxel_size) ** 2 / nu
    expected = {"flow": round(FLOW_WINDOW_FRACTION * flow_through),
                "viscous": round(FLOW_WINDOW_FRACTION * viscous),
                "floor": FLOW_WINDOW_MIN}[settle]
    window = steady_window(problem)
    assert window.steps == expected
    assert (window.steps > FLOW_WINDOW_MIN) == (settle != "floor")
    assert {"flow": "flow-through", "viscous": "viscous time",
            "floor": "least window"}[settle] in window.basis
    monitor = RunMonitor(problem, tau)
    assert monitor.window == window and monitor.flows.window == window.steps
    given = RunMonitor(problem, tau, flow_window=500)  # a window given is kept
    assert given.flows.window == 500 and given.window.basis == "given"


def test_a_pressure_driven_steady_window_uses_bernoulli_speed(straight_tube):
    from solver.monitor import FLOW_WINDOW_FRACTION, steady_window

    problem = _tube_problem(straight_tube, 0.505, {
        1: {"kind": "pressure", "value": 1.0001}, 2: {"kind": "pressure", "value": 1.0}})
    speed = math.sqrt(2.0 / 3.0 * 1e-4)  # u = sqrt(2 dp / rho), dp = c_s^2 drho
    expected = FLOW_WINDOW_FRACTION * math.ceil(30 / speed)
    assert f"flow-through is {expected:,.0f} steps" in steady_window(problem).basis


@pytest.mark.timeout(300)
def test_a_vessel_run_without_tau_stops_when_its_openings_converge(tmp_path, capsys):
    import json

    import trimesh
    import yaml

    from solver.__main__ import main

    mesh = trimesh.creation.cylinder(radius=4.0, height=24.0, sections=64)
    keep = np.abs(mesh.face_normals[:, 2]) < 0.9  # open at both ends (mm)
    trimesh.Trimesh(mesh.vertices, mesh.faces[keep]).export(tmp_path / "tube.stl")
    case = {"name": "tube", "geometry": {"file": "tube.stl", "options": {
                "inside": "fluid", "unit": 1e-3, "voxel_size": 1e-3, "openings": "loops"}},
            "config": {"lattice": "D3Q19", "collision": "TRT", "precision": "float64"},
            "run": {"viscosity": 1e-6, "density": 1000.0, "max_steps": 20000,
                    "output_interval": 1000, "check_interval": 100, "checkpoint_interval": 0,
                    "vti": False},
            "openings": [{"id": 1, "kind": "velocity", "mean_speed": 1e-4,
                          "profile": "poiseuille"},
                         {"id": 2, "kind": "pressure", "pressure": 0.0}]}
    (tmp_path / "tube.yaml").write_text(yaml.safe_dump(case))
    code = main(["run", str(tmp_path / "tube.yaml"), "--output", str(tmp_path / "out"),
                 "--backend", "numpy", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    # The choice and its cost before the run: no tau in the case, so one was chosen.
    assert "lattice: tau 1 (chosen)" in out and "flow-through" in out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "converged" and summary["steady"] is True
    assert "steady state of the openings" in summary["message"]
    assert "openings: converged" in out and "pressure drop" in out
    assert summary["steps"] < 20000 and abs(summary["mass_balance"]) < 1e-3
    assert summary["flow_change"] < 1e-3
    # The window it was judged over, and why (here the least one: a short, viscous flow).
    assert summary["steady_window"] == 1000 and "least window" in summary["steady_window_basis"]


@pytest.mark.timeout(200)
def test_the_dashboard_runner_stops_and_says_converged_when_the_openings_are_steady():
    import time

    from solver.runner import SimulationRunner
    from solver.validation.vessels import tube_geometry

    config = SimulationConfig(lattice="D3Q19", collision="TRT", tau=1.0, precision="float64",
                              backend="numpy", ramp_steps=100,
                              openings={1: {"kind": "velocity", "value": 0.01,
                                            "profile": "poiseuille"}, 2: "pressure"})
    runner = SimulationRunner(tube_geometry(4, 0.0), config)
    try:
        runner.start()
        snap = runner.wait_for(lambda s: s.status == "converged", timeout=150)
        time.sleep(0.5)
        later = runner.snapshot()  # stopped: no more steps after the verdict
    finally:
        runner.stop()
    assert snap.steady and "converged: the openings' flow rates" in snap.steady_label
    assert "converged" in snap.message and f"Step {snap.step}" in snap.message
    assert 1100 <= snap.step < 5000  # after the soft start and one window of 1000 steps
    assert later.step == snap.step
