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
    to_host = sim.backend.to_host
    monkeypatch.setattr(sim.backend, "to_host", lambda array: host_reads.append(1) or
                        to_host(array))
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


def float16_simulation(backend_name: str, streaming: str = "two-copy") -> Simulation:
    """A float16-storage run with a stored deviation below float32's spacing (2^-30 rho0 on
    w_1 rho0): a copy through float32 populations loses it."""
    rng = np.random.default_rng(5)
    solid = rng.random((10, 9, 8)) < 0.3
    sim = Simulation(solid, SimulationConfig(
        backend=backend_name, precision="float32", storage="float16", collision="BGK",
        tau=0.7, body_force=(1e-4, 0.0, 0.0), streaming=streaming, tile_storage="tiled"))
    sim.step(4)
    return sim


def stored_bits(sim: Simulation) -> np.ndarray:
    """The latest stored binary16 values, as uint16 bits on the host."""
    stored = sim.backend.stored_populations(sim.state)
    return sim.backend.to_host(stored).view(np.uint16).copy()


@pytest.mark.parametrize("streaming", ["two-copy", "in-place"])
@pytest.mark.parametrize("room", [True, False], ids=["device copy", "host copy"])
def test_float16_restore_is_the_kept_stored_state_and_continues_bit_for_bit(
        backend_name, room, streaming, monkeypatch):
    sim = float16_simulation(backend_name, streaming)
    twin = float16_simulation(backend_name, streaming)
    tiny = np.float16(2.0**-16)  # h / S = 2^-30: an eighth of the float32 spacing of w_1
    shift = np.float32(sim.problem.storage.shift[1])
    assert shift + np.float32(2.0**-30) == shift, "the planted deviation must be below float32"
    fluid = np.argwhere(~sim.tiling.solid)[0]
    for s in (sim, twin):  # set through the exact float64 path, which stores it as it is
        f = s.populations()
        f[fluid[0], 1, fluid[1]] = float(shift) + 2.0**-30
        s.backend.set_populations(s.state, f)
    monkeypatch.setattr(sim.backend, "free_memory", lambda: 1 << 50 if room else 0)
    good = LastGood()
    good.keep(sim)
    kept = stored_bits(sim)
    assert good.on_device is room
    assert good._f.nbytes == kept.nbytes, "the copy holds the stored bytes, no wider"
    sim.step(6)
    assert not np.array_equal(stored_bits(sim), kept)
    assert good.restore(sim) == 4
    np.testing.assert_array_equal(stored_bits(sim), kept)
    assert tiny in sim.backend.to_host(sim.backend.stored_populations(sim.state))
    sim.step(9)  # the restored run continues exactly as one that never diverged
    twin.step(9)
    np.testing.assert_array_equal(stored_bits(sim), stored_bits(twin))
    for s in (sim, twin):
        s.close()


@pytest.mark.gpu
@pytest.mark.parametrize("streaming", ["two-copy", "in-place"])
def test_compact_storage_keeps_its_fluid_slots_and_restores_them_bit_for_bit(streaming):
    rng = np.random.default_rng(3)
    solid = rng.random((20, 18, 16)) < 0.6
    config = dict(backend="cupy", precision="float32", collision="BGK", tau=0.7,
                  body_force=(1e-4, 0.0, 0.0), streaming=streaming, tile_storage="compact")
    sim, twin = (Simulation(solid, SimulationConfig(**config)) for _ in range(2))
    for s in (sim, twin):
        s.step(3)
    assert hasattr(sim.state, "memory_bytes"), "not a compact run"
    good = LastGood()
    good.keep(sim)
    assert good.on_device
    tiled_bytes = sim.tiling.n_tiles * 19 * sim.tiling.nodes_per_tile * 4
    assert good._f.nbytes < tiled_bytes, "the fluid slots only"
    kept = sim.populations()
    sim.step(5)
    good.restore(sim)
    np.testing.assert_array_equal(sim.populations(), kept)
    sim.step(7)
    twin.step(7)
    np.testing.assert_array_equal(sim.populations(), twin.populations())
    for s in (sim, twin):
        s.close()
