"""LastGood: the copy of a healthy state that a diverged run is restored from, and its schedule."""

from __future__ import annotations

import numpy as np
import pytest

from solver import last_good
from solver.config import SimulationConfig
from solver.last_good import LastGood
from solver.simulation import Simulation


def simulation(backend_name: str) -> Simulation:
    rng = np.random.default_rng(3)
    solid = rng.random((10, 9, 8)) < 0.3
    sim = Simulation(solid, SimulationConfig(backend=backend_name, precision="float32",
                                             tau=0.7, body_force=(1e-4, 0.0, 0.0)))
    sim.allocate()
    return sim


@pytest.mark.parametrize("room", [True, False], ids=["device copy", "host copy"])
def test_restore_gives_back_the_kept_populations_bit_for_bit(backend_name, room, monkeypatch):
    sim = simulation(backend_name)
    sim.step(5)
    host_reads = []
    read = sim.backend.populations
    monkeypatch.setattr(sim.backend, "free_memory", lambda: 1 << 50 if room else 0)
    monkeypatch.setattr(sim.backend, "populations", lambda state: host_reads.append(1) or
                        read(state))
    good = LastGood()
    good.keep(sim)
    assert good.on_device is room and good.step == 5
    assert len(host_reads) == (0 if room else 1), "a device copy must not read the state back"
    expected = read(sim.state)
    sim.step(7)
    assert not np.array_equal(read(sim.state), expected)
    assert good.restore(sim) == 5 and sim.time_step == 5
    np.testing.assert_array_equal(read(sim.state), expected)
    sim.step(7)  # the copy survives a restore: a second divergence restores it again
    good.restore(sim)
    np.testing.assert_array_equal(read(sim.state), expected)


def test_device_copy_is_independent_of_the_state_and_reused():
    sim = simulation("numpy")  # NumPy: the "device" is the host and xp is numpy
    sim.backend.free_memory = lambda: 1 << 50
    good = LastGood()
    good.keep(sim)
    copy = good._f
    assert copy.dtype == np.float32, "the copy keeps the state's precision"
    assert not np.shares_memory(copy, sim.backend.device_populations(sim.state))
    sim.step(3)
    good.keep(sim)
    assert good._f is copy, "a refresh copies into the same buffer"
    np.testing.assert_array_equal(copy, sim.backend.device_populations(sim.state))


def test_refresh_waits_for_its_schedule(monkeypatch):
    sim = simulation("numpy")
    good = LastGood()
    good.keep(sim)
    sim.step(2)
    assert good.refresh(sim) == 0.0 and good.step == 0, "refreshed sooner than REFRESH_S"
    monkeypatch.setattr(last_good, "REFRESH_S", 0.0)
    monkeypatch.setattr(last_good, "MAX_SHARE", 1e9)  # and no limit from its own cost
    good.refresh(sim)
    assert good.step == 2
    good.clear()
    with pytest.raises(RuntimeError, match="nothing to restore"):
        good.restore(sim)
