"""solver.vessel_setup: the Python API gives the case-file path's configuration bit for bit, and
refuses bad SI input with what to do."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml

from solver.case import load_geometry, parse_case
from solver.lattice_parameters import choose_lattice, demand_of_specs
from solver.opening_specs import resolve_openings
from solver.run import HeadlessRun
from solver.values import ConfigError
from solver.vessel_setup import vessel_setup

from .test_iolets import tube

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "vessel_bifurcation.yaml"


@pytest.fixture(scope="module")
def bifurcation():
    data = yaml.safe_load(EXAMPLE.read_text())
    case = parse_case(data, EXAMPLE.parent)
    return data, load_geometry(case.geometry)


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for oid in a:
        assert a[oid].keys() == b[oid].keys()
        for key, value in a[oid].items():
            assert np.array_equal(np.asarray(value), np.asarray(b[oid][key])), (oid, key)


@pytest.mark.parametrize("given_tau", [True, False])
def test_api_equals_case_file_bit_for_bit(bifurcation, tmp_path, given_tau):
    data, geometry = bifurcation
    data = {**data, "config": dict(data["config"])}
    if not given_tau:  # tau left to the shared choice
        del data["config"]["tau"]
    case = parse_case(data, EXAMPLE.parent)
    run = HeadlessRun(case, tmp_path, geometry=geometry, backend="numpy")
    config, report = vessel_setup(geometry, data["openings"], viscosity=data["run"]["viscosity"],
                                  density=data["run"]["density"],
                                  tau=data["config"].get("tau"), backend="numpy")
    assert config.tau == run.case.config.tau and report.tau == run.lattice_choice.tau
    assert report.dt == run.units.dt and report.mach == run.lattice_choice.mach
    _same(config.openings, run.case.config.openings)
    # ... and what the functions underneath give when composed by hand (the notebook's old way).
    specs = [{**e} for e in data["openings"]]
    choice = choose_lattice(demand_of_specs(specs, geometry, 3.3e-6, 1060.0),
                            tau=data["config"].get("tau"))
    assert choice.tau == config.tau and choice.dt == report.dt
    _same(resolve_openings(specs, geometry, choice.units), config.openings)
    assert (report.tau == 0.9) is given_tau and report.steps_per_flow_through > 0
    assert "tau" in report.text() and "Mach" in report.text()


def _tube():
    geometry = tube(4, 0.0)  # 1 mm voxels, openings 1 and 2 at its ends
    return geometry, [{"id": 1, "kind": "velocity", "mean_speed": 0.01, "profile": "poiseuille"},
                      {"id": 2, "kind": "pressure", "pressure": 0.0}]


def test_report_states_the_choice_and_the_advice():
    geometry, openings = _tube()
    config, report = vessel_setup(geometry, openings, viscosity=1e-6, mach_target=0.1)
    assert config.tau == report.tau and 0.505 <= report.tau <= 1.0
    assert report.mach == pytest.approx(0.1, rel=1e-9) or report.tau == 1.0
    assert set(config.openings) == {o["id"] for o in openings}
    # Too fast for this grid at the target: tau 0.505, a warning naming the finer voxel size.
    _, fast = vessel_setup(geometry, openings, viscosity=1e-6, mach_target=0.001)
    assert fast.tau == 0.505 and fast.mach > 0.001
    assert "voxel size" in fast.warnings[0] and fast.finer in fast.text()


@pytest.mark.parametrize(("change", "message"), [
    ({"viscosity": -1e-6}, "viscosity must be a positive number in m^2/s, got -1e-06"),
    ({"density": 0.0}, "density must be a positive number in kg/m^3"),
    ({"voxel_size": "a"}, "voxel_size must be a positive number in metres"),
    ({"openings": [{"id": 99, "kind": "velocity", "mean_speed": 0.01}]},
     "the geometry has no opening 99"),
    ({"openings": [{"id": 1, "kind": "inflow", "mean_speed": 0.01}]}, "`kind` must be one of"),
    ({"openings": [{"id": 1, "kind": "pressure", "pressure": 0.0},
                   {"id": 2, "kind": "pressure", "pressure": 0.0}]}, "nothing drives the flow"),
    ({"openings": [{"id": 1, "kind": "velocity", "mean_speed": 50.0}]}, "too fast for this grid"),
])
def test_bad_input_is_refused_in_si(change, message):
    geometry, openings = _tube()
    kwargs = {"openings": openings, "viscosity": 1e-6, **change}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("^", r"\^")):
        vessel_setup(geometry, **kwargs)


def test_voxel_size_places_a_geometry_without_one():
    geometry, openings = _tube()
    bare = dataclasses.replace(geometry.in_frame(1.0), voxel_size=None)  # voxels only
    with pytest.raises(ConfigError, match="voxel_size="):
        vessel_setup(bare, openings, viscosity=1e-6)
    placed, report = vessel_setup(bare, openings, viscosity=1e-6, voxel_size=1e-3)
    config, same = vessel_setup(geometry, openings, viscosity=1e-6)
    assert report.tau == pytest.approx(same.tau, rel=1e-12)
    assert report.dt == pytest.approx(same.dt, rel=1e-12)
    assert placed.openings[1]["value"] == pytest.approx(config.openings[1]["value"], rel=1e-12)
