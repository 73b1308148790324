"""Cycle-resolved outputs (solver.cycles): TAWSS/OSI/RRT against their closed forms, and a
pulsatile NumPy tube run: periodic convergence, OSI of forward and of reversing flow."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest

from solver.config import SimulationConfig
from solver.cycles import CycleMonitor, shear_indices
from solver.simulation import Simulation
from solver.validation.vessels import tube_geometry


def test_indices_of_sampled_shear_match_their_closed_forms():
    samples = 64
    theta = 2 * math.pi * np.arange(samples) / samples
    a, b = np.array([1.0, 0.5, 0.0]), 1.0  # forward, half reversing, purely oscillating
    tau = np.zeros((samples, 3, 3))
    tau[:, :, 0] = a[None, :] + b * np.cos(theta)[:, None]
    tawss, osi, rrt = shear_indices(tau.sum(axis=0), np.abs(tau[:, :, 0]).sum(axis=0), samples)
    fine = np.linspace(0, 2 * math.pi, 200001)[:-1]
    mean_abs = np.array([np.abs(x + b * np.cos(fine)).mean() for x in a])
    np.testing.assert_allclose(tawss, mean_abs, rtol=2e-3)
    np.testing.assert_allclose(osi, 0.5 * (1 - a / mean_abs), atol=2e-3)
    assert osi[0] == pytest.approx(0.0, abs=1e-12) and osi[2] == pytest.approx(0.5, abs=1e-12)
    np.testing.assert_allclose(rrt[:2], 1 / ((1 - 2 * osi[:2]) * tawss[:2]), rtol=1e-12)
    assert rrt[2] > 1e12  # no net shear: residence without bound


@cache
def tube():
    return tube_geometry(4, 0.0, length=3)


def pulsing(c0: float, c1: float, period: float = 160.0) -> Simulation:
    wave = {"period": period, "fourier": [c0, [c1, 0.0]]}
    return Simulation(tube(), SimulationConfig(
        lattice="D3Q19", collision="TRT", trt_magic=3 / 16, tau=0.8, precision="float64",
        ramp_steps=40, openings={1: {"kind": "velocity", "profile": "poiseuille",
                                     "waveform": wave}, 2: {"kind": "pressure"}}))


@pytest.mark.parametrize("c0, c1, osi_range", [(0.01, 0.004, (0.0, 1e-3)),
                                               (0.0, 0.01, (0.45, 0.5))])
def test_a_pulsatile_tube_becomes_periodic_and_its_osi_tells_reversal(c0, c1, osi_range):
    """Forward pulsatile flow: no reversal, OSI ~ 0 at every wall node (measured <= 1.5e-5:
    the staircase's small cross components turn with the phase); a purely oscillating inflow:
    OSI near 1/2 (the wall shear reverses every half cycle)."""
    sim = pulsing(c0, c1)
    monitor = CycleMonitor(160.0, warmup=3, samples=16, tolerance=0.01)
    monitor.run(sim, 4)
    assert monitor.cycles == 4 and monitor.periodic, monitor.cycle_change()
    inlet, outlet = monitor.flows[-1][:, 0], monitor.flows[-1][:, 1]
    assert abs(outlet.mean() + inlet.mean()) <= 0.005 * np.abs(inlet).max()  # mass over a cycle
    result = monitor.indices()
    assert result.cycles == 1
    interior = np.abs(monitor.walls.voxels[:, 2] - tube().solid.shape[2] / 2) < 4
    osi = result.osi[interior]
    assert osi_range[0] <= osi.min() and osi.max() <= osi_range[1], (osi.min(), osi.max())
    assert np.all(result.tawss[interior] > 0)


def test_the_cli_samples_heart_cycles_stops_when_periodic_and_exports_the_indices(tmp_path,
                                                                                  capsys):
    import json

    import pyvista as pv

    from solver.__main__ import _report
    from solver.case import parse_case
    from solver.run import HeadlessRun

    case = parse_case({
        "geometry": {"generator": "empty_channel"},
        "config": {"lattice": "D3Q19", "collision": "TRT", "tau": 0.8, "precision": "float64",
                   "ramp_steps": 20},
        "run": {"viscosity": 1e-6, "density": 1000.0, "max_steps": 4000,
                "output_interval": 80, "check_interval": 80, "checkpoint_interval": 0,
                "vti": True, "convergence": 0, "warmup_cycles": 1, "cycle_samples": 8,
                "cycle_tolerance": 0.01},
        "openings": [{"id": 1, "kind": "velocity", "profile": "poiseuille",  # 80-step period
                      "waveform": {"period_s": 8.0, "fourier": [1e-4, [4e-5, 0.0]]}},
                     {"id": 2, "kind": "pressure", "pressure": 0.0}]})
    run = HeadlessRun(case, out=tmp_path, geometry=tube(), backend="numpy")
    outcome = run.execute(progress=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert outcome.exit_code == 0 and summary["status"] == "converged", summary["message"]
    assert summary["periodic"] and summary["steps"] < 4000 and summary["cycles"] >= 3
    assert summary["tawss_mean_Pa"] > 0 and summary["osi_max"] < 1e-3  # forward flow
    # The verdict printed is the cycles', not a steady state a heartbeat never reaches.
    _report(run, outcome)
    printed = capsys.readouterr().out
    assert "openings: pulsatile, periodic: the last two of" in printed, printed
    assert "not steady" not in printed and "mean TAWSS" in printed
    last = sorted(tmp_path.glob("fields_*.vti"))[-1]
    grid = pv.read(last)
    tawss = np.asarray(grid.point_data["tawss_Pa"] if "tawss_Pa" in grid.point_data
                       else grid.cell_data["tawss_Pa"])
    assert np.nanmax(tawss) > 0 and np.isfinite(tawss).sum() == len(run.cycles.walls.voxels)


def test_the_cycle_state_round_trips_before_the_first_sample_and_refuses_misfits():
    """A checkpoint written before the first sample keeps an empty state that a resume reads
    back; arrays of another sample count are refused with what does not fit."""
    fresh = CycleMonitor(64.0, warmup=1, samples=8)
    arrays = fresh.state_arrays()
    assert arrays["cycle_flows"].shape == (0, 8, 0) and "cycle_sum_vec" not in arrays
    other = CycleMonitor(64.0, warmup=1, samples=8)
    other.restore_arrays(arrays, sim=None)  # no sums: the run is not needed
    assert other.index == 0 and other.cycles == 0 and other.ids == ()
    with pytest.raises(ValueError, match="cycle_flows"):
        CycleMonitor(64.0, warmup=1, samples=16).restore_arrays(arrays, sim=None)
