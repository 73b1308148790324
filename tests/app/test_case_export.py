"""The dashboard's run saved as a case file, openings included, reruns headless with the same
openings (#18 item 4: case files take the same settings)."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from app.case_export import case_document, case_yaml
from app.geometry_sources import make_preview
from app.views.physics_panel import PhysicalSetup
from geometries import samples
from solver.case import load_geometry, parse_case
from solver.config import SimulationConfig
from solver.opening_specs import case_units, resolve_openings

pytestmark = pytest.mark.timeout(300)


def test_a_saved_vessel_case_gives_the_same_openings_headless(tmp_path):
    preview = make_preview(samples.load_sample("vessel_bifurcation.stl"),
                           SimulationConfig(tau=0.9))
    config = preview.config
    # Edited as in the table: a Poiseuille inlet, outlet 2 at +0.2 Pa, outlet 3 closed.
    setup = PhysicalSetup(viscosity=3.3e-6, density=1060.0)
    units = setup.units(config.tau, preview.geometry.voxel_size)
    openings = dict(config.openings)
    openings[1] = {"kind": "velocity", "value": 0.02, "profile": "poiseuille"}
    openings[2] = {"kind": "pressure", "value": 1.0 + units.pressure_to_lattice(0.2)}
    openings[3] = {"kind": "closed"}
    config.openings = openings
    document = case_document("vessel", {"sample": "vessel_bifurcation.stl"}, config, units,
                             setup.viscosity, setup.density)
    text = case_yaml(document)
    assert "openings:" in text and "mean_speed" in text and "pressure: 0.2" in text
    path = tmp_path / "vessel.yaml"
    path.write_text(text)
    case = parse_case(yaml.safe_load(path.read_text()), base=tmp_path, source=str(path))
    geometry = load_geometry(case.geometry)
    assert case.config.tau == pytest.approx(0.9) and case.config.x_min == "wall"
    rerun = resolve_openings(case.openings, geometry, case_units(case, geometry.voxel_size),
                             float(case.config.initial_density))
    assert set(rerun) == {1, 2, 3}
    assert rerun[1]["profile"] == "poiseuille"
    assert rerun[1]["value"] == pytest.approx(0.02, rel=1e-10)
    assert rerun[2]["value"] == pytest.approx(openings[2]["value"], rel=1e-10)
    assert rerun[3] == {"kind": "closed"}


def test_the_dashboard_saves_the_used_vessel_with_its_openings(tmp_path):
    """The sidebar's Case (.yaml): the session's geometry and openings, rerunnable headless."""
    from app.dashboard import Dashboard
    from geometries import generators

    pack = generators.random_sphere_pack((16,) * 3, porosity=0.6, diameter=6, seed=2)
    board = Dashboard(pack, SimulationConfig(backend="numpy"), refresh=False, autostart=False)
    try:
        panel = board.geometry_panel
        with pytest.raises(ValueError, match="Sample or Upload used"):
            panel.case_text()  # the start-up case was generated
        panel.source, panel.sample = "Sample", "vessel_bifurcation.stl"
        asyncio.run(panel._preview_clicked(None))
        panel.openings.rows[2].kind = "closed"  # edited in the table before Use
        panel._use_clicked(None)
        applied = board.controller.applied_config.openings
        assert applied[3] == {"kind": "closed"}
        path = tmp_path / "case.yaml"
        path.write_text(panel.case_text())
        case = parse_case(yaml.safe_load(path.read_text()), base=tmp_path, source=str(path))
        geometry = load_geometry(case.geometry)
        rerun = resolve_openings(case.openings, geometry,
                                 case_units(case, geometry.voxel_size),
                                 float(case.config.initial_density))
        assert rerun.keys() == applied.keys()
        for i, spec in applied.items():
            assert rerun[i]["kind"] == spec["kind"]
            assert rerun[i].get("value", 0) == pytest.approx(spec.get("value", 0), rel=1e-10)
    finally:
        board.close()
