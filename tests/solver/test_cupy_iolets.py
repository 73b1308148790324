"""Openings on the GPU (``pytest -m gpu``): the CuPy pass equals the NumPy reference.

A small oblique tube voxelised with NumPy only (no trimesh on the GPU machine) carries all three
driven kinds (velocity with a Poiseuille profile, pressure, outflow) in three runs; the CuPy
backend, two copies and in place (AA), is stepped through CUDA-graph replays and plain launches
next to the NumPy backend from the same start. float64: populations and per-link fluxes within
1e-12; float32: within 1e-5 relative.
"""

from __future__ import annotations

import numpy as np
import pytest

from geometries import VoxelGeometry
from geometries.generators import tilted_pipe
from solver.config import SimulationConfig
from solver.simulation import Simulation

pytestmark = pytest.mark.gpu


def voxel_tube(radius: float = 4.0, length: float = 22.0, angle_deg: float = 35.0
               ) -> VoxelGeometry:
    """A tube of ``radius`` voxels tilted in the xz-plane (and a little towards y), closed
    beyond its two end planes (:func:`geometries.generators.tilted_pipe`)."""
    a = np.radians(angle_deg)
    return tilted_pipe(radius, length, (np.sin(a), 0.2, np.cos(a)), name="oblique tube")


KINDS = {
    "velocity+pressure": {1: {"kind": "velocity", "value": 0.02, "profile": "poiseuille"},
                          2: {"kind": "pressure", "value": 0.995}},
    "pressure+pressure": {1: {"kind": "pressure", "value": 1.01}, 2: "pressure"},
    "velocity+outflow": {1: {"kind": "velocity", "value": 0.015}, 2: "outflow"},
}


def pair(openings: dict, precision: str, streaming: str, collision: str = "TRT",
         tau: float = 0.8, **extra) -> tuple[Simulation, Simulation]:
    geom = voxel_tube()
    common = dict(lattice="D3Q19", collision=collision, trt_magic=3 / 16, tau=tau,
                  precision=precision, openings=openings, tile_edge=4, **extra)
    cpu = Simulation(geom, SimulationConfig(**common), backend="numpy")
    gpu = Simulation(geom, SimulationConfig(**common, streaming=streaming), backend="cupy")
    return cpu, gpu


@pytest.mark.parametrize("streaming", ["two-copy", "in-place"])
@pytest.mark.parametrize("kinds", list(KINDS))
def test_cupy_pass_equals_numpy_in_float64(kinds, streaming):
    cpu, gpu = pair(KINDS[kinds], "float64", streaming)
    for n in (1, 16, 3, 32):  # odd counts, graph replays (16 steps) and plain launches
        cpu.step(n)
        gpu.step(n)
        fluid = ~cpu.tiling.solid
        diff = np.abs(gpu.populations() - cpu.populations()).transpose(0, 2, 1)[fluid]
        assert diff.max() <= 1e-12, f"after {cpu.time_step} steps"
        flux_cpu = cpu.backend.iolet_flux(cpu.state)
        flux_gpu = gpu.backend.iolet_flux(gpu.state)
        assert np.abs(flux_gpu - flux_cpu).max() <= 1e-12
    flows_cpu, flows_gpu = cpu.opening_flows(), gpu.opening_flows()
    for a, b in zip(flows_cpu, flows_gpu, strict=True):
        assert b.flow_rate == pytest.approx(a.flow_rate, rel=1e-10, abs=1e-13)
        assert b.mean_density == pytest.approx(a.mean_density, rel=1e-12)
    np.testing.assert_allclose(gpu.wall_shear_stress(), cpu.wall_shear_stress(), rtol=1e-9,
                               atol=1e-15, equal_nan=True)


@pytest.mark.parametrize("streaming", ["two-copy", "in-place"])
def test_cupy_pass_follows_numpy_in_float32(streaming):
    cpu, gpu = pair(KINDS["velocity+pressure"], "float32", streaming)
    cpu.step(64)
    gpu.step(64)
    fluid = ~cpu.tiling.solid
    a = cpu.populations().transpose(0, 2, 1)[fluid]
    b = gpu.populations().transpose(0, 2, 1)[fluid]
    assert np.abs(b - a).max() <= 1e-5 * np.abs(a).max()
    assert gpu.opening_flows()[0].flow_rate == pytest.approx(cpu.opening_flows()[0].flow_rate,
                                                             rel=1e-5)


@pytest.mark.parametrize("streaming", ["two-copy", "in-place"])
def test_cupy_soft_start_equals_numpy_through_graph_replays_and_a_resume(streaming):
    # A ramp of 24 steps ends inside the second graph replay; the device step counter, advanced
    # by the pass itself, must give NumPy's factor at every step, and set_step (resume,
    # rollback) must move it.
    cpu, gpu = pair(KINDS["velocity+pressure"], "float64", streaming, ramp_steps=24)
    for n in (3, 16, 16, 1):
        cpu.step(n)
        gpu.step(n)
        flux_cpu = cpu.backend.iolet_flux(cpu.state)
        assert np.abs(gpu.backend.iolet_flux(gpu.state) - flux_cpu).max() <= 1e-12
    for sim in (cpu, gpu):  # back into the ramp, as a restored checkpoint would be
        sim.backend.set_step(sim.state, 5)
        sim.step(1)
    assert np.abs(gpu.backend.iolet_flux(gpu.state) - cpu.backend.iolet_flux(cpu.state)
                  ).max() <= 1e-12


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("streaming", ["two-copy", "in-place"])
def test_cupy_rr_through_openings_equals_numpy_near_half_tau(precision, streaming):
    """'auto' at tau 0.51 through openings collides with RR (issue 28), on both backends."""
    cpu, gpu = pair(KINDS["velocity+pressure"], precision, streaming, collision="auto",
                    tau=0.51)
    assert cpu.problem.collision.name == gpu.problem.collision.name == "RR"
    cpu.step(48)
    gpu.step(48)
    fluid = ~cpu.tiling.solid
    a = cpu.populations().transpose(0, 2, 1)[fluid]
    b = gpu.populations().transpose(0, 2, 1)[fluid]
    tol = 1e-12 if precision == "float64" else 1e-5
    assert np.abs(b - a).max() <= tol * np.abs(a).max()
