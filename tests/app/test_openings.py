"""Openings in SI: defaults, the table -> SimulationConfig.openings mapping, Mach refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.openings import (
    DEFAULT_INLET_SPEED,
    OpeningUnits,
    default_openings,
    driven_values,
    face_drive,
    opening_groups,
    value_units,
)
from app.views.openings_panel import OpeningsPanel
from geometries import VoxelGeometry, generators, samples
from solver.config import SimulationConfig
from solver.units import SOUND_SPEED, UnitSystem
from solver.values import MAX_MACH, ConfigError

pytestmark = pytest.mark.timeout(300)

#: dx = 0.1 mm, dt = 1 ms: 1 lattice speed = 0.1 m/s, 1 lattice density = 10/3 Pa... see below.
UNITS = UnitSystem(dx=1e-4, dt=1e-3, density=1000.0)


@pytest.fixture(scope="module")
def vessel() -> VoxelGeometry:
    return samples.load_sample("vessel_bifurcation.stl")


def test_vessel_groups_carry_ids_and_sizes_in_mm(vessel):
    groups = opening_groups(vessel)
    assert [g.ids for g in groups] == [(1,), (2,), (3,)]
    # Parent radius 1 mm, daughters 0.794 mm (the sample's README).
    assert groups[0].label == "1 (d 2 mm)"
    assert groups[1].label.startswith("2 (d 1.59 mm")
    h = vessel.voxel_size
    assert groups[0].area_nodes == pytest.approx(vessel.openings[0].area / h**2)
    # The centre in node coordinates is on the opening's plane, at its nodes' mean.
    nodes = vessel.openings[0].nodes.mean(axis=0)
    assert np.allclose(groups[0].centre_nodes[1:], nodes[1:], atol=1.0)


def test_defaults_largest_opening_inlet_others_outlets_at_zero_pa(vessel):
    groups = opening_groups(vessel)
    openings = default_openings(groups, initial_density=1.0)
    assert openings == {1: {"kind": "velocity", "value": DEFAULT_INLET_SPEED,
                            "profile": "uniform"},
                        2: {"kind": "pressure", "value": 1.0},
                        3: {"kind": "pressure", "value": 1.0}}
    values = driven_values(openings, 3)
    assert values["body_force"] == (0.0, 0.0, 0.0)
    assert {values[f] for f in ("x_min", "x_max", "y_min", "y_max", "z_min", "z_max")} == {
        "wall"}
    config = SimulationConfig(**values)
    config.check(3)  # a valid run of the solver's contract
    assert config.opening_conditions()[1].value == DEFAULT_INLET_SPEED


def test_si_values_map_to_lattice_units_and_back(vessel):
    group = opening_groups(vessel)[0]
    convert = OpeningUnits(UNITS, initial_density=1.0)
    # Mean speed: u* = u dt / dx.
    spec = convert.spec("velocity", 0.005, "m/s", group, "poiseuille")
    assert spec == {"kind": "velocity", "value": pytest.approx(0.05), "profile": "poiseuille"}
    # Flow rate: Q* = Q dt / dx^3 over the area in nodes^2 gives the mean speed.
    q = 0.05 * group.area_nodes * 1e-12 / 1e-3  # m^3/s of a lattice mean speed 0.05
    spec = convert.spec("velocity", q / 1e-9, "µL/s", group)
    assert spec["value"] == pytest.approx(0.05)
    assert convert.value(spec, "mL/s", group) == pytest.approx(q / 1e-6)
    # Pressure: rho = rho0 + 3 p dt^2 / (rho dx^2); 0 Pa is the reference density.
    spec = convert.spec("pressure", 0.1, "Pa", group)
    assert spec == {"kind": "pressure", "value": pytest.approx(1.0 + 3 * 0.1 * 1e-6 / 1e-5)}
    assert convert.value(spec, "Pa", group) == pytest.approx(0.1)
    assert convert.spec("closed", None, "", group) == {"kind": "closed"}


def test_the_dashboard_and_case_files_convert_si_values_by_the_kinds_own_rule(vessel,
                                                                              monkeypatch):
    """Issue 28 item 6: each opening kind carries its SI conversion; the openings table calls
    it (as case files do, solver.opening_specs) rather than converting by itself: a kind whose
    conversion is replaced converts differently in both, and both agree bit for bit."""
    from dataclasses import replace

    from solver import opening_kinds
    from solver.opening_specs import resolve_openings

    group = opening_groups(vessel)[0]
    assert group.ids == (1,)
    units = UnitSystem(dx=vessel.voxel_size, dt=1e-4, density=1000.0)  # the run's own grid
    q = 3.7e-10  # m^3/s
    case = resolve_openings([{"id": 1, "kind": "velocity", "flow_rate": q},
                             {"id": 2, "kind": "pressure", "pressure": 0.03}], vessel, units)
    table = OpeningUnits(units, initial_density=1.0)
    assert table.spec("velocity", q / 1e-9, "µL/s", group)["value"] == case[1]["value"]
    assert table.spec("pressure", 0.03, "Pa", group)["value"] == case[2]["value"]
    convert = OpeningUnits(UNITS, initial_density=1.0)
    for name in ("velocity", "pressure"):
        kind = opening_kinds.opening_kind(name)
        monkeypatch.setitem(opening_kinds.OPENING_KIND_REGISTRY, name, replace(
            kind, si_value=lambda entry, area, units, rho0, rule=kind.si_value:
            2.0 * rule(entry, area, units, rho0) - rho0 * (rule is opening_kinds._si_density)))
    assert convert.spec("velocity", 0.005, "m/s", group)["value"] == pytest.approx(0.1)
    density = convert.spec("pressure", 0.1, "Pa", group)["value"]
    assert density == pytest.approx(1.0 + 2 * 3 * 0.1 * 1e-6 / 1e-5)


@pytest.mark.parametrize("profile, peak", [("uniform", 1.0), ("poiseuille", 2.0)])
def test_speed_above_the_mach_limit_is_refused_with_the_largest_si_value(vessel, profile, peak):
    group = opening_groups(vessel)[0]
    convert = OpeningUnits(UNITS)
    largest = MAX_MACH * SOUND_SPEED / peak * 0.1  # m/s (1 lattice speed = 0.1 m/s)
    convert.spec("velocity", 0.99 * largest, "m/s", group, profile)  # accepted
    with pytest.raises(ConfigError) as err:
        convert.spec("velocity", 1.01 * largest, "m/s", group, profile)
    assert f"largest allowed value is {largest:.3g} m/s" in str(err.value)
    with pytest.raises(ConfigError, match="density change of -30000"):
        convert.spec("pressure", -1e3, "Pa", group)  # below the lattice's vacuum


def test_outlet_pressures_beyond_what_a_case_file_takes_are_refused(vessel):
    """The table took any pressure above the vacuum, a case file only a 10 % density change:
    a saved case then failed headless. 1 lattice density = c_s² ρ dx²/dt² = 3.33 Pa here."""
    group = opening_groups(vessel)[1]
    convert = OpeningUnits(UNITS)
    assert convert.spec("pressure", -0.33, "Pa", group)["value"] == pytest.approx(0.901)
    for pressure in (0.34, -0.34):
        with pytest.raises(ConfigError, match=r"beyond 10%.*at most ±0.333 Pa"):
            convert.spec("pressure", pressure, "Pa", group)


def test_face_drive_makes_the_two_faces_of_the_axis_inlet_and_outlet():
    geometry = generators.square_duct(12, 6)
    driven, groups = face_drive(geometry, 0)
    assert [g.name for g in groups] == ["x min face", "x max face"]
    assert {o.normal[0] for o in driven.openings} == {-1.0, 1.0}
    openings = default_openings(groups, 1.0, inlet=groups[0])
    assert {openings[i]["kind"] for i in groups[0].ids} == {"velocity"}
    assert {openings[i]["kind"] for i in groups[1].ids} == {"pressure"}
    with pytest.raises(ConfigError, match="y min face has no fluid"):
        face_drive(geometry, 1)


def _panel(vessel):
    groups = opening_groups(vessel)
    config = SimulationConfig(**driven_values(default_openings(groups, 1.0), 3))
    panel = OpeningsPanel(lambda config, group: OpeningUnits(UNITS, config.initial_density))
    panel.bind(groups, config)
    return panel, config


def test_rows_show_the_config_in_si_and_edits_write_lattice_units(vessel):
    panel, config = _panel(vessel)
    inlet, outlet = panel.rows[0], panel.rows[1]
    assert (inlet.kind, inlet.unit, inlet.value) == ("inlet velocity", "m/s",
                                                     pytest.approx(DEFAULT_INLET_SPEED * 0.1))
    assert (outlet.kind, outlet.value, outlet.unit) == ("outlet pressure", 0.0, "Pa")
    outlet.kind = "closed"
    assert config.openings[2] == {"kind": "closed"}
    assert outlet.lattice == "closed" and outlet.value is None
    inlet.value = 0.002
    assert config.openings[1]["value"] == pytest.approx(0.02)
    inlet.unit = "mL/s"  # the same condition shown as a flow rate
    assert config.openings[1]["value"] == pytest.approx(0.02)
    q = UNITS.flow_rate_to_si(0.02 * panel.rows[0].group.area_nodes) / 1e-6
    assert inlet.value == pytest.approx(q, rel=1e-3)
    outlet.kind = "outlet pressure"
    outlet.value = -0.25
    assert config.openings[2]["value"] == pytest.approx(1.0 - 3 * 0.25 * 1e-6 / 1e-5)


def test_a_refused_value_leaves_the_config_and_says_why_in_si(vessel):
    panel, config = _panel(vessel)
    before = dict(config.openings)
    panel.rows[0].value = 5.0  # m/s: lattice speed 50
    assert config.openings == before
    assert "Mach limit" in panel.message and "m/s" in panel.message
    assert panel.rows[0].value == pytest.approx(DEFAULT_INLET_SPEED * 0.1)  # shown as applied
    panel.rows[0].value = 0.0015
    assert panel.message == ""
    assert math.isclose(config.openings[1]["value"], 0.015)


def test_a_2d_channel_driven_through_its_x_faces_offers_speeds_only():
    geometry = VoxelGeometry(np.pad(np.zeros((12, 6), dtype=bool), ((0, 0), (1, 1)),
                                    constant_values=True), voxel_size=1e-4)
    driven, groups = face_drive(geometry, 0)
    assert groups[0].area_nodes == pytest.approx(6.0)  # a 2D opening's "area" is its length
    assert value_units("velocity", groups[0]) == ("m/s",)
    assert value_units("pressure", groups[0]) == ("Pa",)


def test_a_flow_rate_above_the_mach_limit_names_the_largest_flow_rate(vessel):
    group = opening_groups(vessel)[0]
    convert = OpeningUnits(UNITS)
    limit = MAX_MACH * SOUND_SPEED  # lattice mean speed
    largest = UNITS.flow_rate_to_si(limit * group.area_nodes) / 1e-6  # mL/s
    with pytest.raises(ConfigError) as err:
        convert.spec("velocity", 1.01 * largest, "mL/s", group)
    assert f"largest allowed value is {largest:.3g} mL/s" in str(err.value)


def test_an_outflow_row_warns_that_it_acts_like_a_wall_in_slow_flows(vessel):
    """#18 item 4: outflow passed 0.1 % of the flow in the vessel sample (solver/iolets.py);
    the table says so while a row is an outflow."""
    panel, config = _panel(vessel)
    assert not panel.note.visible
    panel.rows[2].kind = "outflow"
    assert config.openings[3] == {"kind": "outflow"}
    assert panel.note.visible and "Opening 3: an outflow" in panel.note.object
    assert "like a wall" in panel.note.object and "outlet pressure" in panel.note.object
    panel.rows[1].kind = "outflow"
    assert "Openings 2, 3" in panel.note.object
    config.openings = {**config.openings, 2: {"kind": "pressure", "value": 1.0},
                       3: {"kind": "closed"}}  # set elsewhere (a case, Apply settings)
    assert not panel.note.visible


# ------------------------------------------ lattice parameters from the SI values (#28 item 1)
def _chosen_panel(vessel):
    from app.openings import si_specs
    from solver.lattice_parameters import choose_lattice, demand_of_specs

    nu, rho = 3.3e-6, 1060.0

    def units_of(config):
        return UnitSystem.from_viscosity(vessel.voxel_size, nu, rho, config.tau)

    def chooser(config, groups, geometry, tau):
        units = OpeningUnits(units_of(config), config.initial_density)
        demand = demand_of_specs(si_specs(config.openings, groups, units), geometry, nu, rho)
        return choose_lattice(demand, tau=tau)

    groups = opening_groups(vessel)
    config = SimulationConfig(**driven_values(default_openings(groups, 1.0), 3))
    panel = OpeningsPanel(lambda config, group: OpeningUnits(units_of(config),
                                                             config.initial_density),
                          chooser=chooser)
    panel.bind(groups, config, vessel)
    return panel, config


def test_the_panel_chooses_tau_for_the_si_values_and_keeps_them(vessel):
    panel, config = _chosen_panel(vessel)
    inlet = panel.rows[0]
    inlet.param.update(value=0.05, unit="m/s", profile="poiseuille")
    assert inlet.value == pytest.approx(0.05)  # the SI value as entered survives the new tau
    tau = config.tau
    assert "(chosen)" in panel.choice and "time step" in panel.choice
    assert "flow-through" in panel.choice and "about" in panel.choice  # its cost
    # The chosen tau puts the expected peak (2 x the mean, x the narrowing) at the target, or
    # within AUTO_MACH where it takes AUTO_TAU (TRT) instead of a smaller tau (RR).
    from solver.collisions import AUTO_TAU
    from solver.lattice_parameters import AUTO_MACH

    u = config.openings[1]["value"]
    assert u * 2.0 <= (AUTO_MACH if tau == AUTO_TAU else 0.1) * SOUND_SPEED * 1.0001
    inlet.value = 0.02
    assert config.tau > tau  # slower: a longer time step is allowed
    # Far too fast for any stable tau on this grid: refused, saying which resolution would do.
    before = (config.tau, dict(config.openings))
    inlet.value = 50.0
    assert "voxel size of" in panel.message and "voxels along the geometry" in panel.message
    assert (config.tau, config.openings) == before and inlet.value == pytest.approx(0.02)
    # Off: the configured tau is kept and judged.
    panel.choose_tau = False
    config.tau = 0.9
    assert config.tau == 0.9 and "(given)" in panel.choice
