"""Pulsatile inlets (solver.waveform): the Womersley profile, waveforms from tables and case
files, the inlet's exact flow rate over the cycle, the CUDA text against NumPy, and Womersley flow
in a straight tube against the analytic solution."""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest

from solver.config import ConfigError, SimulationConfig
from solver.iolets import apply_iolets
from solver.simulation import Simulation
from solver.validation.vessels import tube_geometry
from solver.waveform import (
    fourier_of_table,
    parse_waveform,
    si_peak_speed,
    si_waveform,
    womersley_shape,
)

from .iolet_emulator import emulated_pass


@cache
def straight_tube(radius: float, length: float):
    """A straight tube along z open at both ends (voxel 1 mm)."""
    return tube_geometry(radius, 0.0, length=length)


def pulsatile(geometry, tau: float, period: float, fourier: list, ramp_steps: int = 0,
              profile: str = "poiseuille", precision: str = "float64") -> Simulation:
    wave = {"period": period, "fourier": fourier}
    return Simulation(geometry, SimulationConfig(
        lattice="D3Q19", collision="TRT", trt_magic=3 / 16, tau=tau, precision=precision,
        ramp_steps=ramp_steps,
        openings={1: {"kind": "velocity", "profile": profile, "waveform": wave},
                  2: {"kind": "pressure"}}))


# ------------------------------------------------------------------ the profile and the waveform
@pytest.mark.parametrize("alpha", [0.0, 1.0, 4.0, 10.0])
def test_womersley_profile_has_mean_one_over_the_disc_and_no_slip(alpha):
    r = np.linspace(0.0, 1.0, 20001)
    shape = womersley_shape(r, alpha)
    mean = 2.0 * np.trapezoid(shape * r, r)
    assert abs(mean - 1.0) < 1e-6
    assert abs(shape[-1]) < 1e-12


def test_womersley_profile_tends_to_poiseuille_and_to_a_lagging_plug():
    r = np.linspace(0.0, 1.0, 11)
    np.testing.assert_allclose(womersley_shape(r, 0.05).real, 2 * (1 - r**2), atol=1e-4)
    core = womersley_shape(np.array([0.0, 0.5]), 20.0)
    # High alpha: a flat core, in phase with the flow rate to within the boundary layer's share.
    assert abs(core[0] - core[1]) < 0.01 and abs(core[0] - 1.0) < 0.2


def test_fourier_of_a_sampled_table_recovers_its_coefficients():
    period = 0.8
    t = np.linspace(0.0, period, 200, endpoint=False)
    q = 5.0 + 2.0 * np.cos(2 * np.pi * t / period - 0.3) + 0.5 * np.sin(4 * np.pi * t / period)
    c = fourier_of_table(t, q, period, harmonics=3)
    assert c[0] == pytest.approx(5.0, abs=1e-3)
    assert c[1] == pytest.approx(2.0 * np.exp(-0.3j), abs=2e-3)
    assert c[2] == pytest.approx(-0.5j, abs=2e-3)
    assert abs(c[3]) < 1e-3


class _Units:
    dt = 1e-4

    @staticmethod
    def velocity_to_lattice(u: float) -> float:
        return u * 1e-4 / 1e-3


def test_case_file_waveform_from_csv_and_fourier_in_si(tmp_path):
    csv = tmp_path / "inflow.csv"
    t = np.linspace(0.0, 1.0, 101)
    rows = "\n".join(f"{a:.6f},{2e-6 + 1e-6 * math.cos(2 * math.pi * a):.9e}" for a in t)
    csv.write_text("t,flow_rate\n" + rows + "\n")
    area = 1e-5  # m^2: mean speed 0.2 m/s, amplitude 0.1 m/s
    spec = si_waveform(str(csv), area, _Units())
    wave = parse_waveform(spec)
    assert wave.period == pytest.approx(1.0 / 1e-4)
    assert wave.mean == pytest.approx(0.2 * 0.1, rel=1e-6)
    assert wave.coefficients[1] == pytest.approx(0.1 * 0.1, rel=1e-3)
    assert si_peak_speed(str(csv), area) == pytest.approx(0.3, rel=1e-3)
    direct = parse_waveform(si_waveform({"period_s": 1.0, "fourier": [0.2, [0.1, 0.0]]}, area,
                                        _Units()))
    assert direct.coefficients == pytest.approx(wave.coefficients[:2], rel=1e-3, abs=1e-9)


def test_bad_waveforms_are_refused_with_what_to_do(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("time,speed\n0,1\n1,2\n")
    with pytest.raises(ConfigError, match="t,flow_rate"):
        si_waveform(str(bad), 1.0, _Units())
    with pytest.raises(ConfigError, match="period_s"):
        si_waveform({"fourier": [1.0]}, 1.0, _Units())
    with pytest.raises(ConfigError, match="mean c0 must be real"):
        parse_waveform({"period": 100, "fourier": [[1.0, 1.0]]})
    with pytest.raises(ConfigError, match="Mach"):
        pulsatile(straight_tube(4, 3), 0.8, 200.0, [0.01, [0.2, 0.0]])


# ------------------------------------------------------------------ the inlet on the lattice
def test_waveform_inlet_flow_rate_follows_the_waveform_exactly_each_step():
    period = 50.0
    sim = pulsatile(straight_tube(4, 3), 0.8, period, [0.01, [0.008, 0.002], [0.0, -0.003]])
    area = next(o for o in sim.geometry.openings if o.id == 1).area / 1e-6
    wave = parse_waveform({"period": period, "fourier": [0.01, [0.008, 0.002], [0.0, -0.003]]})
    rates = []
    for _ in range(60):
        sim.step(1)
        rates.append(sim.opening_flows()[0].flow_rate)
    expected = wave.speed(np.arange(60)) * area  # the pass before step n uses phase n
    np.testing.assert_allclose(rates, expected, rtol=1e-11, atol=1e-14)
    assert sim.problem.iolets.harmonics == 2


@pytest.mark.parametrize("step", [0, 7, 123])
@pytest.mark.parametrize("ramp", [0, 40])
def test_cuda_kernel_text_pulses_like_the_numpy_pass(step, ramp):
    sim = pulsatile(straight_tube(4, 3), 0.8, 37.5, [0.01, [0.005, 0.001], [0.0, -0.002]],
                    ramp_steps=ramp)
    sim.step(3)  # a non-trivial state
    p, tables = sim.problem, sim.problem.iolets
    start = sim.state.f[sim.state.current].reshape(-1)
    ref = start.copy()
    flux = apply_iolets(ref, tables.addresses(p.lattice.q, p.tiling.nodes_per_tile), tables,
                        p.storage, p.lattice, p.force, p.incompressible, step)
    emu = start.copy()
    flux_emu = emulated_pass(p, emu, step=step)
    # cos/sin of libm and NumPy may differ by an ulp: round-off, not bitwise.
    np.testing.assert_allclose(emu, ref, rtol=0, atol=1e-16)
    np.testing.assert_allclose(flux_emu, flux, rtol=0, atol=1e-16)
    assert np.abs(tables.wave).max() > 0


def test_the_pass_evaluates_the_phases_once_per_step_and_reads_waveform_links_only():
    """The H100 vessel measured 3.3 % of a step while every link evaluated 2K double cos/sin
    and read the (2K, m) table, mostly zeros of the outlets' links: now the phases are computed
    by K threads once per step and only the waveform links' columns are stored."""
    from solver.backends.cuda.iolets import iolet_source, wave_columns

    sim = pulsatile(straight_tube(4, 3), 0.8, 37.5, [0.01, [0.005, 0.001], [0.0, -0.002]])
    tables = sim.problem.iolets
    col, wave = wave_columns(tables)
    inlet = tables.opening == tables.ids.index(1)
    assert (col[~inlet] == -1).all() and wave.shape == (4, int((col >= 0).sum()))
    np.testing.assert_array_equal(wave, tables.wave[:, col >= 0])
    assert not np.any(tables.wave[:, col < 0])  # nothing left out but zeros
    source = iolet_source("D3Q19", "float64", False, False, (0.0,) * 3, 1.0, tables.harmonics)
    values = source[source.index("iolet_values("):source.index("iolet_write(")]
    moments = source[:source.index("iolet_values(")]
    assert "cos(" not in values and "sin(" not in values
    assert "cos(" in moments and "sin(" in moments


# ------------------------------------------------------------------ Womersley flow in a tube
def test_womersley_flow_in_a_straight_tube_matches_the_analytic_profile():
    """alpha = 4, radius 6 voxels, TRT tau 0.53 (period 1414 steps: the sound crossing of the
    tube is 2 % of it), mean + first harmonic of equal size; one warm-up cycle, then 16 phases
    of the profile at mid-length against U0 Poiseuille + Re(U1 W(r) e^{i w t}). Measured: max
    error 6.9 % of the peak over all nodes (the wall ring: the voxel wall is not at the
    opening's equivalent radius), 4.3 % inside r < R - 1.5, rms 1.5 %; the section's harmonic
    within 2.5 % in amplitude and 0.5 deg in phase of the inlet's."""
    radius, alpha, tau, u0, u1 = 6.0, 4.0, 0.53, 0.01, 0.01
    g = straight_tube(radius, 3)
    nu = (tau - 0.5) / 3.0
    omega = alpha**2 * nu / radius**2
    period = 2 * math.pi / omega
    sim = pulsatile(g, tau, period, [u0, [u1, 0.0]], ramp_steps=int(period / 4))
    sim.step(int(period))
    z = g.solid.shape[2] // 2
    inlet = next(o for o in g.openings if o.id == 1)
    assert inlet.normal[2] < 0  # the inlet is the z_min end: flow along +z
    cx, cy = ((inlet.centre[a] - g.origin[a]) / g.voxel_size - 0.5 for a in (0, 1))
    reff = 0.5 * inlet.diameter / g.voxel_size
    x, y = np.meshgrid(*(np.arange(n) for n in g.solid.shape[:2]), indexing="ij")
    fluid = ~g.solid[:, :, z]
    rr = np.hypot(x - cx, y - cy)[fluid] / reff
    profiles, steps, start = [], [], sim.time_step
    for s in range(16):
        sim.step(start + int(round(s * period / 16)) - sim.time_step)
        profiles.append(sim.fields()["u"][2][:, :, z][fluid])
        steps.append(sim.time_step)
    profiles = np.array(profiles)
    theta = omega * np.array(steps)
    exact = np.array([u0 * np.maximum(2 * (1 - rr**2), 0) +
                      np.real(u1 * womersley_shape(rr, alpha) * np.exp(1j * t)) for t in theta])
    peak = np.abs(exact).max()
    err = np.abs(profiles - exact)
    assert err.max() < 0.08 * peak
    assert err[:, rr < 1 - 1.5 / reff].max() < 0.05 * peak
    assert np.sqrt((err**2).mean()) < 0.02 * peak
    fit = np.linalg.lstsq(np.stack([np.ones_like(theta), np.cos(theta), -np.sin(theta)], 1),
                          profiles.mean(axis=1), rcond=None)[0]
    c1 = complex(fit[1], fit[2])
    assert abs(abs(c1) / u1 - 1) < 0.04 and abs(math.degrees(np.angle(c1))) < 1.5
