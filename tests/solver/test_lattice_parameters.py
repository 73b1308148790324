"""SI in, lattice parameters out (solver.lattice_parameters): the narrowest section from the
voxels, tau and the time step under the Mach target, a given tau judged, the resolution that
would do, the one profile-aware Mach limit of an opening, and case files without tau."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from geometries import VoxelGeometry
from geometries.openings import face_openings
from solver.case import parse_case
from solver.lattice_parameters import (
    MACH_TARGET,
    TAU_MAX,
    TAU_MIN,
    FlowDemand,
    choose_lattice,
    demand_of_specs,
    narrowing,
    peak_speed,
)
from solver.opening_kinds import opening_conditions
from solver.units import SOUND_SPEED
from solver.values import MAX_MACH, ConfigError, mean_speed_limit
from solver.vessel_setup import case_lattice


def stenosed_tube(area_fraction: float, length: int = 48, radius: float = 7.0,
                  voxel: float = 1e-3) -> VoxelGeometry:
    """A straight tube along x (``radius`` voxels) with a cosine narrowing to ``area_fraction``
    of its area in the middle, open on both x faces."""
    x = np.arange(length) + 0.5
    throat = radius * math.sqrt(area_fraction)
    bump = 0.5 * (1 + np.cos(np.clip((x - length / 2) / (length / 4), -1, 1) * np.pi))
    local = radius - (radius - throat) * bump
    n = int(2 * radius + 4)
    y = np.arange(n) + 0.5 - n / 2
    r = np.hypot(y[:, None], y[None, :])
    fluid = r[None] <= local[:, None, None]
    geom = VoxelGeometry(~fluid, voxel_size=voxel, name="stenosis")
    return dataclasses.replace(geom, openings=face_openings(geom, axes=(0,)))


@pytest.mark.parametrize("area_fraction", [1.0, 0.5, 0.3])
@pytest.mark.parametrize("radius", [5.0, 10.0])
def test_narrowing_finds_the_stenosis_area_ratio_on_the_safe_side(area_fraction, radius):
    geom = stenosed_tube(area_fraction, length=int(7 * radius), radius=radius)
    found = narrowing(geom.solid, geom.openings, 1, [2], geom.voxel_size, geom.origin)
    areas = np.count_nonzero(~geom.solid, axis=(1, 2))  # the voxels' own cross-sections
    true = areas[0] / areas.min()
    assert true * 0.97 <= found.area_ratio <= true * 1.25


def test_narrowing_takes_the_widest_route_to_any_outlet():
    # Two outlets: the straight tube's far end and a second exit through the stenosis; the
    # flow can leave through the wide one, so the wide route sets A_min.
    wide = stenosed_tube(1.0)
    assert narrowing(wide.solid, wide.openings, 1, [2], 1e-3).area_ratio == pytest.approx(1.0)


def test_chosen_tau_puts_the_expected_peak_at_the_mach_target():
    # tau 0.557 (at 2e-4 m it would be 0.529, raised to AUTO_TAU: test_oblique_default.py)
    demand = FlowDemand(voxel_size=1e-4, viscosity=3.3e-6, density=1060.0, inlet_speed=0.02,
                        profile="poiseuille", area_ratio=2.5, length=0.05, n_fluid=10**6)
    choice = choose_lattice(demand)
    assert peak_speed(demand) == pytest.approx(0.02 * 2 * 2.5)
    assert TAU_MIN < choice.tau < TAU_MAX
    assert [w for w in choice.warnings if "collides with RR" not in w] == []  # Mach met
    assert choice.units.velocity_to_lattice(choice.peak) == pytest.approx(
        MACH_TARGET * SOUND_SPEED, rel=1e-12)
    assert choice.mach == pytest.approx(MACH_TARGET)
    assert choice.dt == pytest.approx((choice.tau - 0.5) / 3 * 1e-4**2 / 3.3e-6)
    # One flow-through: the longest side at the mean inflow speed, and its wall time.
    assert choice.steps_per_flow_through == math.ceil(0.05 / (0.02 * choice.dt))
    assert choice.wall_seconds == pytest.approx(
        choice.steps_per_flow_through * 1e6 / (choice.mflups * 1e6))
    text = choice.text()
    assert "chosen" in text and "time step" in text and "flow-through" in text


def test_slow_flows_keep_tau_at_most_one():
    demand = FlowDemand(voxel_size=1e-5, viscosity=1e-6, inlet_speed=1e-4)
    assert choose_lattice(demand).tau == TAU_MAX


def test_a_given_tau_is_honoured_and_warned_about_with_the_tau_that_would_do():
    demand = FlowDemand(voxel_size=6.24e-4, viscosity=3.3e-6, inlet_speed=0.02,
                        profile="poiseuille", area_ratio=1.0)
    choice = choose_lattice(demand, tau=0.55)
    assert choice.tau == 0.55 and choice.given
    assert choice.mach > MACH_TARGET
    assert "above the target" in choice.warnings[0] and "would meet it" in choice.warnings[0]


def test_no_stable_tau_at_this_resolution_says_which_resolution_would():
    # The aorta (coarctation), 0.02 m/s Poiseuille, narrowing ~2.5x, at 128 voxels
    # (at its 256, tau 0.509 meets the target since TAU_MIN is 0.505).
    assert choose_lattice(FlowDemand(voxel_size=6.24e-4, viscosity=3.3e-6, density=1060.0,
                                     inlet_speed=0.02, profile="poiseuille",
                                     area_ratio=2.46)).mach == pytest.approx(MACH_TARGET)
    aorta = FlowDemand(voxel_size=2 * 6.24e-4, viscosity=3.3e-6, density=1060.0,
                       inlet_speed=0.02, profile="poiseuille", area_ratio=2.46,
                       length=128 * 2 * 6.24e-4)
    choice = choose_lattice(aorta)
    assert choice.tau == TAU_MIN and MACH_TARGET < choice.mach < MAX_MACH
    assert "voxels along the geometry" in choice.warnings[0]
    assert choice.finer and choice.finer in choice.warnings[0]  # a divergence's advice
    # Four times faster: refused even at TAU_MIN, naming the voxel size that meets the target.
    fast = dataclasses.replace(aorta, inlet_speed=0.08)
    with pytest.raises(ConfigError, match="voxel size of") as info:
        choose_lattice(fast)
    needed = float(str(info.value).split("voxel size of ")[1].split(" m")[0])
    at_needed = choose_lattice(dataclasses.replace(fast, voxel_size=needed))
    assert at_needed.tau >= TAU_MIN - 1e-9 and at_needed.mach <= MACH_TARGET * 1.001


def test_a_choice_below_the_rr_threshold_says_so_and_which_voxel_size_gives_trt():
    """The default collision below tau 0.55 is RR, whose walls at an angle to the grid put a
    45-degree tube's pressure drop 34 % high at tau 0.53 (TRT 4 %): the choice says so, and
    names the voxel size at which the same flow gets tau 0.55 and TRT."""
    from solver.collisions import AUTO_TAU

    carotid = FlowDemand(voxel_size=2e-4, viscosity=3.3e-6, density=1060.0, inlet_speed=0.3,
                         profile="poiseuille", area_ratio=1.0, length=0.06)
    choice = choose_lattice(carotid)
    assert choice.tau < AUTO_TAU
    warning = [w for w in choice.warnings if "collides with RR" in w]
    assert len(warning) == 1 and "voxels along the geometry's 60 mm" in warning[0]
    needed = float(warning[0].split("A voxel size of ")[1].split(" m")[0])
    finer = choose_lattice(dataclasses.replace(carotid, voxel_size=needed))
    assert AUTO_TAU <= finer.tau < AUTO_TAU + 1e-3 and finer.mach == pytest.approx(MACH_TARGET)
    assert not [w for w in finer.warnings if "RR" in w]
    # A collision the user chose is not second-guessed; nor is tau 0.55 and above.
    assert not [w for w in choose_lattice(carotid, collision="TRT").warnings if "RR" in w]
    assert not choose_lattice(dataclasses.replace(carotid, inlet_speed=0.01)).warnings


def test_a_pulsatile_inflow_whose_sound_crossing_is_slow_says_what_gives_faster_sound():
    """The lattice's sound speed is the peak over its Mach number (0.4 m/s for a 0.04 m/s
    peak): a 64 mm tube's waves then took 15 % of a 1.07 s period, and the Womersley profile
    was 35 % off. The choice says so and which tau (or voxel size) brings it to 5 %."""
    from solver.lattice_parameters import SOUND_CROSSING

    slow = FlowDemand(voxel_size=6.25e-4, viscosity=3.3e-6, density=1060.0, inlet_speed=0.02,
                      profile="poiseuille", length=0.0638, period=1.07)
    choice = choose_lattice(slow)
    sound = [w for w in choice.warnings if "Pressure waves" in w]
    assert len(sound) == 1 and "15 % of the inflow's period" in sound[0], choice.warnings
    tau = float(sound[0].split("; tau ")[1].split(" ")[0])
    given = choose_lattice(slow, tau=tau)
    share = slow.length / (slow.voxel_size / given.dt * SOUND_SPEED) / slow.period
    assert 0.99 * SOUND_CROSSING < share <= SOUND_CROSSING
    assert not [w for w in given.warnings if "Pressure waves" in w]
    # Faster than tau 0.505 allows: finer voxels instead, which get there at tau 0.505.
    slower = dataclasses.replace(slow, period=0.2)
    advice = [w for w in choose_lattice(slower).warnings if "Pressure waves" in w][0]
    dx = float(advice.split("a voxel size of ")[1].split(" m")[0])
    at = choose_lattice(dataclasses.replace(slower, voxel_size=dx), tau=TAU_MIN)
    assert not [w for w in at.warnings if "Pressure waves" in w]
    # A steady inflow, or a fast one, is not warned about.
    assert not [w for w in choose_lattice(dataclasses.replace(slow, period=0.0)).warnings
                if "Pressure waves" in w]
    assert not [w for w in choose_lattice(dataclasses.replace(slow, inlet_speed=0.1)).warnings
                if "Pressure waves" in w]


def test_a_pressure_difference_is_bounded_by_bernoulli():
    demand = FlowDemand(voxel_size=2e-5, viscosity=1e-6, density=1000.0,
                        pressure_difference=50.0)
    assert peak_speed(demand) == pytest.approx(math.sqrt(2 * 50.0 / 1000.0))
    # (a chosen collision: 'auto' would take AUTO_TAU at Mach 0.18, test_oblique_default.py)
    assert choose_lattice(demand, collision="TRT").mach == pytest.approx(MACH_TARGET)


def test_demand_of_a_case_counts_the_inlet_and_the_narrowest_section():
    geom = stenosed_tube(0.4)
    inlet = next(o for o in geom.openings if o.id == 1)
    specs = [{"id": 1, "kind": "velocity", "flow_rate": 0.01 * inlet.area,
              "profile": "poiseuille"}, {"id": 2, "kind": "pressure", "pressure": 0.0}]
    demand = demand_of_specs(specs, geom, 1e-6, 1000.0)
    assert demand.inlet_speed == pytest.approx(0.01)
    assert 2.5 <= demand.area_ratio <= 2.5 * 1.25
    assert demand.length == pytest.approx(48e-3)
    assert demand.period == 0.0  # steady
    specs[0] = {"id": 1, "kind": "velocity", "profile": "poiseuille",
                "waveform": {"period_s": 0.8, "fourier": [0.01, [0.005, 0.0]]}}
    pulsatile = demand_of_specs(specs, geom, 1e-6, 1000.0)
    assert pulsatile.period == pytest.approx(0.8)
    assert pulsatile.inlet_speed == pytest.approx(0.015, rel=1e-3)  # the cycle's peak


# -------------------------------------------- the one Mach limit of an opening (case and app)
def test_case_files_and_the_dashboard_share_the_profile_aware_mach_limit():
    from app.openings import OpeningUnits, opening_groups
    from solver.units import UnitSystem

    limit = mean_speed_limit("poiseuille")
    assert limit == pytest.approx(MAX_MACH * SOUND_SPEED / 2)
    ok = {1: {"kind": "velocity", "value": 0.99 * limit, "profile": "poiseuille"}}
    opening_conditions(ok, 1.0)
    too_fast = {1: {"kind": "velocity", "value": 1.01 * limit, "profile": "poiseuille"}}
    with pytest.raises(ConfigError, match="peak"):
        opening_conditions(too_fast, 1.0)
    opening_conditions({1: {"kind": "velocity", "value": 1.01 * limit}}, 1.0)  # uniform: ok
    geom = stenosed_tube(1.0)
    group = opening_groups(geom)[0]
    units = OpeningUnits(UnitSystem(dx=1e-3, dt=1e-3, density=1000.0))
    speed = units.units.velocity_to_si(1.01 * limit)
    with pytest.raises(ConfigError, match="largest allowed"):
        units.spec("velocity", speed, "m/s", group, "poiseuille")
    assert units.spec("velocity", units.units.velocity_to_si(0.99 * limit), "m/s", group,
                      "poiseuille")["value"] == pytest.approx(0.99 * limit)


# ------------------------------------------------------------- case files: tau is optional
def test_a_case_without_tau_gets_the_chosen_one_and_with_tau_keeps_it():
    geom = stenosed_tube(0.5)
    entries = [{"id": 1, "kind": "velocity", "mean_speed": 0.005, "profile": "poiseuille"},
               {"id": 2, "kind": "pressure"}]
    run = {"viscosity": 1e-5, "density": 1000.0}
    free = parse_case({"geometry": {"generator": "empty_channel"}, "run": run,
                       "openings": entries, "config": {"precision": "float64"}})
    assert not free.tau_given
    choice = case_lattice(free, geom)
    assert not choice.given and choice.mach == pytest.approx(MACH_TARGET)
    fixed = parse_case({"geometry": {"generator": "empty_channel"}, "run": run,
                        "openings": entries, "config": {"tau": 0.9}})
    assert fixed.tau_given and case_lattice(fixed, geom).tau == 0.9
