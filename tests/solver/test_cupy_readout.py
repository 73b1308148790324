"""Chunked readout of compact runs on the GPU (``pytest -m gpu``, issue 20 item 1): the CuPy
backend's compact run read in chunks of a few tiles gives the bits of one whole conversion, and
a health check's pool peak stays within the state plus one chunk (the estimate's terms). The
CPU twin (emulated kernels, tracemalloc): test_compact_readout.py."""

from __future__ import annotations

import numpy as np
import pytest

from .porous_cases import porous_solid

pytestmark = pytest.mark.gpu


def _simulation(precision: str):
    from solver.config import SimulationConfig
    from solver.simulation import Simulation

    config = SimulationConfig(lattice="D3Q19", precision=precision, collision="TRT",
                              backend="cupy", body_force=(2e-5, -1e-5, 5e-6), tau=0.7,
                              x_min="wall", x_max="wall", y_min="wall", y_max="wall",
                              tile_storage="compact")
    sim = Simulation(porous_solid((40, 31, 29)), config)
    sim.step(5)
    return sim


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_chunked_readout_equals_the_whole_one_on_the_gpu(precision, tmp_path) -> None:
    from solver.backends.cuda.compact_run import CompactRun
    from solver.io import read_checkpoint

    sim = _simulation(precision)
    run = sim.state
    assert isinstance(run, CompactRun)
    n = sim.tiling.n_tiles
    run.readout_tiles = n
    whole = sim.populations()
    fields, health = sim.fields(), sim.health()
    view = sim.view(2, 14, "umag")
    shear = sim.wall_shear_stress()
    for tiles in (1, 7, 60):
        run.readout_tiles = tiles
        np.testing.assert_array_equal(sim.populations(), whole)
        saved = read_checkpoint(sim.save(tmp_path / f"c{tiles}.npz")).populations
        np.testing.assert_array_equal(saved, whole.astype(precision))
        for key in ("rho", "u"):
            np.testing.assert_array_equal(sim.fields()[key], fields[key])
        again = sim.view(2, 14, "umag")
        np.testing.assert_array_equal(again["plane"], view["plane"])
        np.testing.assert_array_equal(again["velocity"], view["velocity"])
        chunked = sim.health()
        assert chunked["max_speed"] == health["max_speed"]
        assert chunked["layer_density"] == health["layer_density"] is not None
        np.testing.assert_allclose(chunked["mean_velocity"], health["mean_velocity"],
                                   rtol=1e-12, atol=0)
        np.testing.assert_allclose(sim.wall_shear_stress(), shear, rtol=1e-12, atol=0)
    sim.close()


def test_a_health_check_peaks_at_the_state_plus_one_chunk() -> None:
    import cupy as cp

    from solver.backends.cuda.compact_readout import readout_tile_bytes

    sim = _simulation("float32")
    run, pool = sim.state, cp.get_default_memory_pool()
    tiles = 8
    run.readout_tiles = tiles
    sim.health()  # the fluid mask and layer tables, once per run
    cp.cuda.Device().synchronize()
    resident = pool.used_bytes()
    peak = [resident]

    def malloc(size: int):
        memory = pool.malloc(size)
        peak[0] = max(peak[0], pool.used_bytes())
        return memory

    cp.cuda.set_allocator(malloc)
    try:
        sim.health()
        cp.cuda.Device().synchronize()
    finally:
        cp.cuda.set_allocator(pool.malloc)
    n, q = sim.tiling.n_tiles, 19
    assert peak[0] - resident <= tiles * readout_tile_bytes(sim.problem) + (64 << 10)
    assert peak[0] - resident < n * q * 64 * 4 / 4  # far below one tiled copy
    sim.close()
