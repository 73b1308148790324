"""A vessel run resumed from a checkpoint, or rolled back to its last good state, reads the
openings' flows of the step it was saved at, at once (after a load they were 0 until the next
step: the last step's per-link flux was not part of the saved state)."""

from __future__ import annotations

import numpy as np
import pytest

from solver.config import SimulationConfig
from solver.last_good import LastGood
from solver.simulation import Simulation
from solver.vessel import mass_balance, pressure_drop

from .test_iolets import TRT, tube

OPENINGS = {1: {"kind": "velocity", "value": 0.02, "profile": "poiseuille"},
            2: {"kind": "pressure", "value": 0.999}}


@pytest.mark.parametrize("precision, storage", [("float64", "auto"), ("float32", "auto"),
                                                ("float32", "float16")])
def test_a_loaded_vessel_reports_the_flows_it_was_saved_with(tmp_path, backend_name, precision,
                                                            storage):
    config = SimulationConfig(**TRT, backend=backend_name, precision=precision, storage=storage,
                              openings=OPENINGS)
    sim = Simulation(tube(), config)
    sim.step(40)
    saved = sim.opening_flows()
    assert saved[0].flow_rate > 0 > saved[1].flow_rate, "a flow from inlet to outlet"
    sim.save(tmp_path / "vessel.npz")
    back = Simulation.load(tmp_path / "vessel.npz", tube(), backend=backend_name)
    assert back.time_step == 40
    assert back.opening_flows() == saved  # flow rates and mean densities, exactly
    assert mass_balance(back.opening_flows()) == mass_balance(saved)
    assert pressure_drop(back.opening_flows()) == pressure_drop(saved)
    sim.step(1)
    back.step(1)
    assert back.opening_flows() == sim.opening_flows()
    np.testing.assert_array_equal(back.populations(), sim.populations())
    for s in (sim, back):
        s.close()


@pytest.mark.parametrize("room", [True, False], ids=["device copy", "host copy"])
def test_a_rolled_back_vessel_reports_the_flows_of_the_kept_step(backend_name, room):
    sim = Simulation(tube(), SimulationConfig(**TRT, backend=backend_name, precision="float32",
                                              storage="float16", openings=OPENINGS))
    sim.backend.free_memory = lambda: 1 << 50 if room else 0
    sim.step(20)
    kept = sim.opening_flows()
    good = LastGood()
    good.keep(sim)
    sim.step(15)
    assert sim.opening_flows() != kept
    good.restore(sim)
    assert sim.opening_flows() == kept
    sim.close()
