"""The views' fields, probes and coarse flow on the GPU agree with the NumPy reference (#30)."""

from __future__ import annotations

import numpy as np
import pytest

from solver.config import SimulationConfig
from solver.probes import Line, Probe, ProbeSet
from solver.simulation import Simulation

pytestmark = pytest.mark.gpu


def _run(backend: str, tile_storage: str = "auto") -> Simulation:
    solid = np.zeros((24, 20, 16), dtype=bool)
    solid[:, [0, -1], :] = True
    solid[8:12, 7:11, 5:10] = True
    config = SimulationConfig(backend=backend, precision="float64", body_force=(1e-5, 0, 0),
                              y_min="wall", y_max="wall", tau=0.8)
    if backend == "cupy":
        config.tile_storage = tile_storage
    sim = Simulation(solid, config)
    sim.step(50)
    return sim


@pytest.mark.parametrize("storage", ["tiled", "compact"])
def test_cuts_probes_and_coarse_flow_match_numpy(storage):
    cpu, gpu = _run("numpy"), _run("cupy", storage)
    try:
        for name in ("pressure", "vorticity", "qcrit", "wss"):
            np.testing.assert_allclose(gpu.slice(2, 7, name), cpu.slice(2, 7, name),
                                       rtol=1e-9, atol=1e-14, equal_nan=True, err_msg=name)
        probes = ProbeSet((Probe("a", (5, 9, 7)),), (Line("l", (5, 0, 7), (5, 19, 7)),))
        a, b = gpu.sample(probes), cpu.sample(probes)
        assert a.probes["a"]["ux"] == pytest.approx(b.probes["a"]["ux"], rel=1e-9)
        np.testing.assert_allclose(a.lines["l"]["umag"], b.lines["l"]["umag"], rtol=1e-9,
                                   equal_nan=True)
        ga, ca = gpu.coarse_flow("qcrit", max_edge=8), cpu.coarse_flow("qcrit", max_edge=8)
        np.testing.assert_allclose(ga.velocity, ca.velocity, rtol=1e-5, atol=1e-12)
        np.testing.assert_allclose(ga.scalar, ca.scalar, rtol=1e-4, atol=1e-12,
                                   equal_nan=True)
    finally:
        cpu.close()
        gpu.close()
