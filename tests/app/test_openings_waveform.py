"""Waveform inlets and RCR outlets in the openings table (issue 32 item 4): a built-in or
uploaded heartbeat scaled to the row's mean, the CSV refused with a clear message, RCR values
in SI written as the lattice Windkessel the runner couples, all kept in SI when τ changes."""

from __future__ import annotations

import numpy as np
import pytest

from app.case_export import openings_section
from app.openings import OpeningUnits, default_openings, driven_values, opening_groups
from app.views.openings_panel import OpeningsPanel
from geometries import samples
from solver.config import SimulationConfig
from solver.opening_specs import resolve_openings
from solver.units import UnitSystem
from solver.waveform import BUILTIN_WAVEFORMS, parse_waveform
from solver.windkessel import lattice_coupling, parse_windkessel, windkessel_to_lattice

pytestmark = pytest.mark.timeout(300)

UNITS = UnitSystem(dx=1e-4, dt=1e-3, density=1000.0)  # 1 lattice speed = 0.1 m/s
CSV = "t,flow_rate\n" + "".join(
    f"{t:.3f},{1e-8 * (1.0 + 0.5 * np.sin(2 * np.pi * t / 0.8)):.6e}\n"
    for t in np.linspace(0.0, 0.8, 17))  # the closing sample repeats the first


@pytest.fixture(scope="module")
def vessel():
    return samples.load_sample("vessel_bifurcation.stl")


def _panel(vessel, units=lambda config: UNITS, chooser=None):
    groups = opening_groups(vessel)
    config = SimulationConfig(**driven_values(default_openings(groups, 1.0), 3))
    panel = OpeningsPanel(lambda config, group: OpeningUnits(units(config),
                                                             config.initial_density),
                          chooser=chooser)
    panel.bind(groups, config, vessel)
    return panel, config


def test_a_builtin_waveform_pulses_about_the_rows_mean(vessel):
    panel, config = _panel(vessel)
    inlet = panel.rows[0]
    inlet.param.update(value=0.002, unit="m/s")
    inlet.waveform = "carotid-like"
    assert panel.message == ""
    wave = parse_waveform(config.openings[1]["waveform"])
    assert wave.period == pytest.approx(1000.0)  # 1 s of 1 ms steps
    assert wave.mean == pytest.approx(0.02) == config.openings[1]["value"]
    expected = [c * 0.02 for c in BUILTIN_WAVEFORMS["carotid-like"]]
    np.testing.assert_allclose(wave.coefficients, expected, rtol=1e-12)
    assert "~1000 steps" in inlet.lattice
    inlet.value = 0.001  # the mean rescales the whole cycle
    assert parse_waveform(config.openings[1]["waveform"]).peak() == pytest.approx(
        wave.peak() / 2)
    panel.refresh()
    assert inlet.waveform == "carotid-like" and inlet.value == pytest.approx(0.001)
    inlet.waveform = "steady"
    assert "waveform" not in config.openings[1]


def test_a_waveform_whose_peak_breaks_the_mach_limit_is_refused_in_si(vessel):
    panel, config = _panel(vessel)
    inlet = panel.rows[0]
    inlet.param.update(value=0.01, unit="m/s")  # steady: lattice 0.1, allowed
    before = dict(config.openings)
    inlet.waveform = "aortic-like"  # its peak is over 5 x the mean
    assert config.openings == before
    assert "Mach limit" in panel.message and "cycle's mean" in panel.message
    assert inlet.waveform == "steady"


def test_an_uploaded_csv_sets_the_shape_and_the_mean_flow_rate(vessel, tmp_path):
    units = UnitSystem(dx=vessel.voxel_size, dt=1e-3, density=1000.0)  # as a case's
    panel, config = _panel(vessel, lambda config: units)
    inlet = panel.rows[0]
    panel.upload_waveform(inlet, CSV.encode(), "pulse.csv")
    assert panel.message == ""
    assert (inlet.waveform, inlet.unit) == ("uploaded CSV", "mL/s")
    assert inlet.value == pytest.approx(0.01, rel=1e-3)  # mean 1e-8 m^3/s
    # The same lattice waveform as a case file naming the same CSV.
    (tmp_path / "pulse.csv").write_text(CSV)
    case = resolve_openings([{"id": 1, "kind": "velocity", "waveform": str(tmp_path /
                                                                            "pulse.csv")}],
                            vessel, units)
    ours, theirs = (parse_waveform(s["waveform"]) for s in (config.openings[1], case[1]))
    assert ours.period == pytest.approx(theirs.period) == pytest.approx(800.0)
    np.testing.assert_allclose(ours.coefficients, theirs.coefficients, rtol=2e-3,
                               atol=1e-6 * abs(theirs.mean))
    panel.refresh()  # read back from the config: still the uploaded shape
    assert inlet.waveform == "uploaded CSV"


@pytest.mark.parametrize("data, words", [
    (b"time,speed\n0,1\n1,2\n", "first row must be"),
    (b"t,mean_speed\n0,1\n0.1,x\n0.2,1\n0.3,1\n", "two numbers"),
    (b"t,mean_speed\n0,1\n", "at least 4 rows"),
    (b"\xff\xfe\x00binary", "UTF-8"),
    (b"t,mean_speed\n" + b"0.1,1\n" * 20000, "at most"),
    (b"t,mean_speed\n0,1\n0.25,-1\n0.5,1\n0.75,-1\n1,1\n", "mean mean_speed over the "),
    (b"t,mean_speed\n0,1\n0.25,3\n0.5,1\n0.75,2\n1,1\n", "Mach limit"),  # 1 m/s: too fast
])
def test_a_bad_csv_leaves_the_row_and_says_what_is_wrong(vessel, data, words):
    panel, config = _panel(vessel)
    before = dict(config.openings)
    panel.upload_waveform(panel.rows[0], data, "bad.csv")
    assert words in panel.message and config.openings == before
    assert panel.rows[0].waveform == "steady"
    panel.rows[0].waveform = "uploaded CSV"  # nothing uploaded yet
    assert "upload a waveform CSV first" in panel.message and config.openings == before


def test_rcr_values_in_si_become_the_lattice_windkessel_the_runner_couples(vessel):
    panel, config = _panel(vessel)
    outlet = panel.rows[1]
    outlet.value = 0.01  # Pa: the distal pressure
    assert panel.message == ""
    outlet.rp = 1e8
    assert "Rd" in panel.message and "C" in panel.message  # incomplete: refused
    assert "windkessel" not in config.openings[2]
    outlet.param.update(compliance=1e-9, rd=1e9)
    assert panel.message == "" and outlet.lattice.endswith("RCR")
    si = parse_windkessel({"Rp": 1e8, "C": 1e-9, "Rd": 1e9, "Pd": 0.01})
    assert parse_windkessel(config.openings[2]["windkessel"]) == pytest.approx(
        windkessel_to_lattice(si, UNITS))
    for oid in outlet.group.ids:
        assert config.openings[oid]["windkessel"] == config.openings[2]["windkessel"]
    coupling = lattice_coupling(config.openings, config.initial_density)
    assert coupling.models[2].time_constant == pytest.approx(1.0 / UNITS.dt)  # 1 s in steps
    panel.refresh()
    assert (outlet.rp, outlet.compliance, outlet.rd) == pytest.approx((1e8, 1e-9, 1e9))
    outlet.param.update(rp=None, compliance=None, rd=None)
    assert "windkessel" not in config.openings[2] and panel.message == ""


def test_a_new_tau_keeps_the_waveform_and_the_rcr_values_in_si(vessel):
    from app.openings import si_specs
    from solver.lattice_parameters import choose_lattice, demand_of_specs

    nu, rho = 3.3e-6, 1060.0

    def units_of(config):
        return UnitSystem.from_viscosity(vessel.voxel_size, nu, rho, config.tau)

    def chooser(config, groups, geometry, tau):
        units = OpeningUnits(units_of(config), config.initial_density)
        demand = demand_of_specs(si_specs(config.openings, groups, units), geometry, nu, rho)
        return choose_lattice(demand, tau=tau)

    panel, config = _panel(vessel, units_of, chooser)
    inlet, outlet = panel.rows[0], panel.rows[1]
    outlet.param.update(rp=1e8, compliance=1e-9, rd=1e9)
    inlet.param.update(value=0.05, unit="m/s", profile="poiseuille")
    steady_tau = config.tau
    inlet.waveform = "carotid-like"  # a higher peak: a shorter time step
    assert panel.message == "" and config.tau < steady_tau
    units = units_of(config)
    wave = parse_waveform(config.openings[1]["waveform"])
    assert units.time_to_si(wave.period) == pytest.approx(1.0)
    assert units.velocity_to_si(wave.mean) == pytest.approx(0.05)
    assert (outlet.rp, outlet.compliance, outlet.rd) == pytest.approx((1e8, 1e-9, 1e9))
    # The case export writes both in SI.
    section = {e["id"]: e for e in openings_section(config.openings, units, 1.0)}
    assert section[1]["waveform"]["period_s"] == pytest.approx(1.0)
    assert section[1]["waveform"]["fourier"][0][0] == pytest.approx(0.05)
    assert section[2]["windkessel"] == pytest.approx({"Rp": 1e8, "C": 1e-9, "Rd": 1e9,
                                                      "Pd": 0.0})
    # ... which a case file reads back to the same lattice values.
    from solver.opening_specs import parse_opening_specs

    back = resolve_openings(parse_opening_specs(list(section.values())), vessel, units)
    again = parse_waveform(back[1]["waveform"])
    assert again.period == pytest.approx(wave.period)
    np.testing.assert_allclose(again.coefficients, wave.coefficients, rtol=1e-9, atol=1e-15)


def test_a_case_files_waveform_entry_without_a_value_shows_its_mean(vessel):
    panel, config = _panel(vessel)
    coeffs = [[c.real * 0.02, c.imag * 0.02] for c in BUILTIN_WAVEFORMS["aortic-like"]]
    config.openings = {**config.openings, 1: {"kind": "velocity", "profile": "uniform",
                                              "waveform": {"period": 1000.0,
                                                           "fourier": coeffs}}}
    inlet = panel.rows[0]
    assert inlet.value == pytest.approx(0.002) and inlet.waveform == "aortic-like"
    assert inlet.lattice.startswith("u* 0.02 uniform ~1000 steps")
