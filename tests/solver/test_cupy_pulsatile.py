"""Pulsatile openings on the GPU (``pytest -m gpu``): a waveform inlet through CUDA-graph
replays, a Windkessel outlet's density set between steps, and the TAWSS/OSI sums left on the
device, all against the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest

from solver.config import SimulationConfig
from solver.cycles import CycleMonitor
from solver.simulation import Simulation

from .test_cupy_iolets import voxel_tube

pytestmark = pytest.mark.gpu

WAVE = {"period": 37.5, "fourier": [0.01, [0.006, 0.002], [0.0, -0.003]]}


def pair(precision: str, streaming: str) -> tuple[Simulation, Simulation]:
    openings = {1: {"kind": "velocity", "profile": "poiseuille", "waveform": WAVE},
                2: {"kind": "pressure"}}
    common = dict(lattice="D3Q19", collision="TRT", trt_magic=3 / 16, tau=0.8,
                  precision=precision, openings=openings, tile_edge=4, ramp_steps=10)
    cpu = Simulation(voxel_tube(), SimulationConfig(**common), backend="numpy")
    gpu = Simulation(voxel_tube(), SimulationConfig(**common, streaming=streaming),
                     backend="cupy")
    return cpu, gpu


@pytest.mark.parametrize("streaming", ["two-copy", "in-place"])
def test_cupy_waveform_inlet_and_outlet_density_equal_numpy(streaming):
    cpu, gpu = pair("float64", streaming)
    for k, n in enumerate((3, 16, 16, 1, 40)):  # graph replays pulse from the device counter
        cpu.step(n)
        gpu.step(n)
        flux_cpu = cpu.backend.iolet_flux(cpu.state)
        assert np.abs(gpu.backend.iolet_flux(gpu.state) - flux_cpu).max() <= 1e-12
        for sim in (cpu, gpu):  # a Windkessel's update between steps
            sim.set_opening_densities({2: 1.0 + 1e-4 * k})
    fluid = ~cpu.tiling.solid
    diff = np.abs(gpu.populations() - cpu.populations()).transpose(0, 2, 1)[fluid]
    assert diff.max() <= 1e-12
    assert gpu.opening_flows()[1].mean_density == pytest.approx(
        cpu.opening_flows()[1].mean_density, rel=1e-12)


def test_cupy_shear_indices_are_summed_on_the_device_and_equal_numpy():
    import cupy as cp

    cpu, gpu = pair("float64", "two-copy")
    results = []
    for sim in (cpu, gpu):
        monitor = CycleMonitor(37.5, warmup=1, samples=8)
        monitor.run(sim, 2)
        assert isinstance(monitor._sum_mag, cp.ndarray) == (sim is gpu)  # no host copies
        results.append(monitor.indices(to_host=sim.backend.to_host))
    np.testing.assert_allclose(results[1].tawss, results[0].tawss, rtol=1e-9)
    np.testing.assert_allclose(results[1].osi, results[0].osi, atol=1e-9)


@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_cupy_windkessel_outlet_updated_in_the_pass_equals_numpy(precision):
    """The RCR outlet updated on the device (three kernels in the CUDA graphs, no host work)
    follows the NumPy reference: the state bit for bit on the same flux in float64."""
    from solver.units import UnitSystem
    from solver.windkessel import Windkessel, WindkesselCoupling

    cpu, gpu = pair(precision, "two-copy")
    units = UnitSystem(dx=1e-3, dt=1e-4, density=1000.0)
    to_r, to_c = 1000.0 / 1e-7, 1e-11 / 1000.0
    model = Windkessel(2e-4 * to_r, 300.0 / 2.6e-3 * to_c, 2.6e-3 * to_r)
    couplings = [WindkesselCoupling({2: model}, units, every=3) for _ in (cpu, gpu)]
    for sim, coupling in zip((cpu, gpu), couplings, strict=True):
        coupling.start(sim)
    for n in (2, 16, 16, 1, 40):  # graph replays and plain launches, across update steps
        for sim in (cpu, gpu):
            sim.step(n)
        a, b = cpu.windkessel_state(), gpu.windkessel_state()
        tol = 1e-12 if precision == "float64" else 1e-5
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol * np.abs(a).max())
    assert len(couplings[1].history) == len(couplings[0].history) == 75 // 3
    fluid = ~cpu.tiling.solid
    diff = np.abs(gpu.populations() - cpu.populations()).transpose(0, 2, 1)[fluid]
    assert diff.max() <= (1e-12 if precision == "float64" else 1e-5)


def test_cupy_windkessel_state_resumes_from_a_checkpoint_bit_for_bit(tmp_path):
    """A GPU run with an RCR outlet saved mid interval and loaded into a new run goes on as
    the unbroken one (the state restored onto the device, the graphs captured again)."""
    from solver.units import UnitSystem
    from solver.windkessel import Windkessel, WindkesselCoupling

    units = UnitSystem(dx=1e-3, dt=1e-4, density=1000.0)
    model = Windkessel(2e-4 * 1e10, 300.0 / 2.6e-3 * 1e-14, 2.6e-3 * 1e10)
    _, gpu = pair("float64", "two-copy")
    WindkesselCoupling({2: model}, units, every=4).start(gpu)
    gpu.step(22)
    gpu.save(tmp_path / "wk.npz")
    resumed = Simulation.load(tmp_path / "wk.npz", voxel_tube(), backend="cupy")
    WindkesselCoupling({2: model}, units, every=4).start(resumed)
    for sim in (gpu, resumed):
        sim.step(30)
    np.testing.assert_array_equal(resumed.windkessel_state(), gpu.windkessel_state())
    np.testing.assert_array_equal(resumed.populations(), gpu.populations())
