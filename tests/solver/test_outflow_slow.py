"""The outflow opening in a slow flow, against mass conservation (the known weakness of the
zero-gradient rule, :mod:`solver.iolets`; the kind's caveat in :mod:`solver.opening_kinds`)."""

from __future__ import annotations

import numpy as np
import pytest

from solver.config import SimulationConfig
from solver.simulation import Simulation
from solver.vessel import mass_balance

from .test_iolets import TRT, tube

INLET = {"kind": "velocity", "value": 0.01, "profile": "poiseuille"}  # Re = U 2R / nu = 0.48


def straight_tube(outlet: str) -> Simulation:
    """A straight tube (R = 4, along z) driven by a Poiseuille inlet, 1000 steps (tau 1)."""
    config = SimulationConfig(**{**TRT, "tau": 1.0}, backend="numpy", precision="float64",
                              openings={1: INLET, 2: outlet})
    sim = Simulation(tube(4, 0.0), config)
    sim.step(1000)
    return sim


def test_a_pressure_outlet_passes_the_inflow_of_a_slow_tube_flow():
    """The control: steady Hagen-Poiseuille flow conserves mass, what enters leaves."""
    sim = straight_tube("pressure")
    assert abs(mass_balance(sim.opening_flows())) < 1e-3


@pytest.mark.xfail(strict=True, reason="zero-gradient outflow holds the pressure gradient near "
                   "zero at the outlet: in this tube it passes 32 % of the inflow and the mean "
                   "density climbs by 0.025 rho0 per 100 steps without bound (measured)")
def test_an_outflow_passes_the_inflow_of_a_slow_tube_flow():
    sim = straight_tube("outflow")
    assert abs(mass_balance(sim.opening_flows())) < 0.05
    assert abs(np.nanmean(sim.fields()["rho"]) - 1.0) < 0.01
