"""Openings in case files (solver.opening_specs): by id or by point, SI values, clear refusals,
and the headless run's history and summary in SI."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from solver.case import CaseError, parse_case
from solver.opening_specs import case_units, resolve_openings
from solver.run import HeadlessRun
from solver.values import ConfigError

from .test_iolets import tube

RUN = {"viscosity": 1e-6, "density": 1000.0, "max_steps": 200, "output_interval": 100,
       "checkpoint_interval": 0, "vti": False, "convergence": 0}
CONFIG = {"lattice": "D3Q19", "collision": "TRT", "tau": 0.8, "precision": "float64",
          "ramp_steps": 0}  # impulsive: the exact inflow from the first row


def case_with(openings, **run):
    return parse_case({"geometry": {"generator": "empty_channel"}, "config": CONFIG,
                       "run": {**RUN, **run}, "openings": openings})


@pytest.mark.parametrize("entry, message", [
    ({"kind": "pressure"}, "exactly one of `id`"),
    ({"id": 1, "at": [0, 0, 0], "kind": "pressure"}, "exactly one of `id`"),
    ({"id": 1, "kind": "inlet"}, "`kind` must be one of"),
    ({"id": 1, "kind": "velocity"}, "velocity opening needs exactly one of"),
    ({"id": 1, "kind": "outflow", "pressure": 0.0}, "outflow opening takes no"),
    ({"id": 1, "kind": "velocity", "flow_rate": "fast"}, "must be a number"),
    ({"id": 1, "kind": "pressure", "bar": 1}, "unknown keys"),
])
def test_bad_entries_are_refused_with_what_to_write(entry, message):
    with pytest.raises(CaseError, match=message):
        case_with([entry])


def test_entries_by_point_pick_the_nearest_opening_and_convert_si_values():
    geom = tube()
    outlet = next(o for o in geom.openings if o.id == 2)
    inlet = next(o for o in geom.openings if o.id == 1)
    case = case_with([{"at": list(outlet.centre), "kind": "pressure", "pressure": 1e-4},
                      {"id": 1, "kind": "velocity", "flow_rate": 1e-9, "profile": "poiseuille"}])
    units = case_units(case, geom.voxel_size)
    openings = resolve_openings(case.openings, geom, units)
    assert openings[2] == {"kind": "pressure", "value": pytest.approx(
        1.0 + 3 * 1e-4 * units.dt**2 / (1000.0 * units.dx**2))}
    assert openings[1]["value"] == pytest.approx(1e-9 / inlet.area * units.dt / units.dx)
    assert openings[1]["profile"] == "poiseuille"


def test_a_point_far_from_every_opening_is_refused_with_the_nearest_one():
    geom = tube()
    case = case_with([{"at": [1.0, 1.0, 1.0], "kind": "pressure"}])
    with pytest.raises(ConfigError, match=r"no opening near .* the nearest, opening \d"):
        resolve_openings(case.openings, geom, case_units(case, geom.voxel_size))


def test_a_pressure_beyond_the_weakly_compressible_range_is_refused():
    geom = tube()
    case = case_with([{"id": 2, "kind": "pressure", "pressure": 0.1}])
    with pytest.raises(ConfigError, match=r"0.1 Pa is a density change of \+300"):
        resolve_openings(case.openings, geom, case_units(case, geom.voxel_size))


def test_an_inflow_beyond_the_mach_limit_is_refused_in_si_units():
    geom = tube()
    case = case_with([{"id": 1, "kind": "velocity", "mean_speed": 0.1}])
    with pytest.raises(ConfigError, match=r"\{'mean_speed': 0.1\} \(SI\) is too fast.*Mach"):
        resolve_openings(case.openings, geom, case_units(case, geom.voxel_size))


def test_si_values_without_a_viscosity_are_refused():
    geom = tube()
    case = case_with([{"id": 1, "kind": "velocity", "mean_speed": 0.01}], viscosity=None)
    with pytest.raises(ConfigError, match="set run.viscosity"):
        resolve_openings(case.openings, geom, case_units(case, geom.voxel_size))


def test_headless_run_writes_flow_rates_pressures_and_balance_in_si(tmp_path):
    case = case_with([{"id": 1, "kind": "velocity", "flow_rate": 2e-9},
                      {"id": 2, "kind": "pressure", "pressure": 0.0}])
    run = HeadlessRun(case, out=tmp_path, geometry=tube(), backend="numpy")
    outcome = run.execute(progress=False)
    assert outcome.exit_code == 0
    with open(tmp_path / "history.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [100, 200]
    assert float(rows[-1]["q1_m3_s"]) == pytest.approx(2e-9, rel=1e-9)  # exact inflow
    assert float(rows[-1]["q2_m3_s"]) < 0  # leaving through the outlet
    assert float(rows[-1]["pressure_drop_Pa"]) > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["q1_m3_s"] == pytest.approx(2e-9, rel=1e-9)
    assert np.isfinite(summary["mass_balance"])


def test_vti_exports_of_a_vessel_carry_its_wall_shear_stress_in_pascal(tmp_path):
    import pyvista as pv

    case = case_with([{"id": 1, "kind": "velocity", "flow_rate": 2e-9},
                      {"id": 2, "kind": "pressure"}], vti=True, max_steps=100)
    run = HeadlessRun(case, out=tmp_path, geometry=tube(), backend="numpy")
    assert run.execute(progress=False).exit_code == 0
    grid = pv.read(tmp_path / "fields_00000100.vti")
    lattice = np.asarray(grid.cell_data["wall_shear_stress"])
    pascal = np.asarray(grid.cell_data["wall_shear_stress_Pa"])
    wall = np.isfinite(lattice)
    assert wall.sum() > 100 and (pascal[wall] > 0).all()
    np.testing.assert_allclose(pascal[wall], run.units.stress_to_si(lattice[wall]))


def test_a_vessel_run_resumes_from_its_checkpoint_bit_for_bit(tmp_path):
    openings = [{"id": 1, "kind": "velocity", "flow_rate": 2e-9, "profile": "poiseuille"},
                {"id": 2, "kind": "pressure", "pressure": 1e-4}]
    straight = HeadlessRun(case_with(openings), out=tmp_path / "a", geometry=tube(),
                           backend="numpy")
    straight.execute(progress=False)
    first = HeadlessRun(case_with(openings, max_steps=100), out=tmp_path / "b", geometry=tube(),
                        backend="numpy")
    first.execute(progress=False)
    resumed = HeadlessRun(case_with(openings), out=tmp_path / "c", geometry=tube(),
                          backend="numpy")
    resumed.resume(tmp_path / "b" / "checkpoint.npz")
    assert resumed.execute(progress=False).exit_code == 0
    a = np.load(tmp_path / "a" / "checkpoint.npz")
    c = np.load(tmp_path / "c" / "checkpoint.npz")
    key = next(k for k in a.files if "population" in k or k == "f")
    np.testing.assert_array_equal(a[key], c[key])
