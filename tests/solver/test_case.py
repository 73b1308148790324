"""Case files: parsing, validation messages that name the key and the fix, geometry recipes,
and the example cases shipped under examples/."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from solver.case import CaseError, GeometrySpec, load_case, load_geometry, parse_case
from solver.lattice import LATTICE_NAMES
from solver.stability import check_stability

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.[yj]*"))

GOOD = """
name: tiny
geometry:
  file: geom/solid.npy
  options: {voxel_size: 2.0e-6}
config:
  lattice: D2Q9
  tau: 0.9
  body_force: [1e-5, 0]     # YAML 1.1 reads 1e-5 as a string; 2 components in 2D
  y_min: wall
  y_max: wall
run:
  max_steps: 200
  output_interval: 50
  convergence: 0
"""


def write(tmp_path: Path, text: str, name: str = "case.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_good_case_is_parsed_with_coercions(tmp_path):
    case = load_case(write(tmp_path, GOOD))
    assert case.name == "tiny"
    assert case.config.lattice == "D2Q9" and case.config.tau == 0.9
    assert case.config.body_force == (1e-5, 0.0, 0.0)
    assert case.config.faces()["y_min"] == "wall"
    assert case.run.max_steps == 200 and case.run.convergence == 0
    assert case.geometry.source == "file"
    assert Path(case.geometry.target) == (tmp_path / "geom" / "solid.npy").resolve()
    assert case.geometry.options == {"voxel_size": 2e-6}


def test_json_case_and_defaults(tmp_path):
    data = {"geometry": {"generator": "channel", "parameters": {"shape": [8, 6]}}}
    case = load_case(write(tmp_path, json.dumps(data), "flow.json"))
    assert case.name == "flow"
    assert case.geometry.parameters == {"shape": (8, 6)}
    assert case.run.max_steps == 10000 and case.config.tau == 0.8


def test_invalid_yaml_says_where(tmp_path):
    with pytest.raises(CaseError, match="not valid YAML.*line"):
        load_case(write(tmp_path, "geometry: {sample: x\nconfig: [\n"))


def test_yaml_tags_are_not_executed(tmp_path):
    text = "geometry: !!python/object/apply:os.system ['echo hacked']\n"
    with pytest.raises(CaseError, match="not valid YAML"):
        load_case(write(tmp_path, text))


@pytest.mark.parametrize("section,key", [("config", "viscosity_lu"), ("run", "max_step"),
                                         ("geometry", "voxelsize")])
def test_unknown_key_lists_the_valid_ones(tmp_path, section, key):
    data = {"geometry": {"sample": "x"}, "config": {}, "run": {}}
    data[section][key] = 1
    with pytest.raises(CaseError) as err:
        parse_case(data, source="c.yaml")
    message = str(err.value)
    assert key in message and "valid keys" in message
    expected = {"config": "tau", "run": "max_steps", "geometry": "voxel_size"}[section]
    assert f"'{expected}'" in message


def test_unknown_top_level_key(tmp_path):
    with pytest.raises(CaseError, match="'solver'.*valid keys"):
        parse_case({"geometry": {"sample": "x"}, "solver": {}})


@pytest.mark.parametrize("section,key,value,fix", [
    ("config", "lattice", "D3Q15", f"use one of {list(LATTICE_NAMES)}"),
    ("config", "tau", 0.4, "use a number"),
    ("config", "tau", "fast", "use a number"),
    ("config", "body_force", [1, 2, 3, 4], "use a list of 3 numbers"),
    ("run", "max_steps", 0, "use an integer >= 1"),
    ("run", "u_limit", 2.0, "<= 1"),
    ("run", "vti", "maybe", "use true or false"),
])
def test_bad_value_names_key_and_fix(section, key, value, fix):
    data = {"geometry": {"sample": "x"}, section: {key: value}}
    with pytest.raises(CaseError) as err:
        parse_case(data, source="c.yaml")
    message = str(err.value)
    assert f"`{section}.{key}: {value!r}`" in message and fix in message


def test_cross_field_config_errors_are_reported():
    with pytest.raises(CaseError, match="x_min is 'wall' but x_max is 'periodic'"):
        parse_case({"geometry": {"sample": "x"}, "config": {"x_min": "wall"}})


@pytest.mark.parametrize("geometry,match", [
    ({}, "exactly one of"),
    ({"sample": "a", "file": "b"}, "exactly one of"),
    ({"generator": "channel", "options": {"x": 1}}, "a generator takes `geometry.parameters`"),
    ({"file": "a.npy", "parameters": {"x": 1}}, "use `geometry.options`"),
    ({"sample": "a", "voxel_size": "big"}, "voxel_size` must be a number"),
    # a micro-CT voxel of 5.345 µm typed in micrometres ran as 5.345 m per voxel, unsaid
    ({"sample": "a", "voxel_size": 5.345}, r"5\.345 m per voxel.*5\.345 µm is 5\.345e-06"),
    ({"sample": "a", "voxel_size": 2e-12}, "outside 1 nm to 1 m"),
    ({"sample": "a", "voxel_size": [5e-6, 5e-6, 1e-5]}, "one edge in metres: cubic voxels"),
])
def test_bad_geometry_sections(geometry, match):
    with pytest.raises(CaseError, match=match):
        parse_case({"geometry": geometry})


def test_load_geometry_from_npy_file_with_overrides(tmp_path):
    pytest.importorskip("geometries.generators")
    solid = np.zeros((6, 5), dtype=bool)
    solid[:, 0] = True
    np.save(tmp_path / "solid.npy", solid)
    spec = GeometrySpec("file", str(tmp_path / "solid.npy"), voxel_size=3e-6, origin=(1.0, 2.0))
    geometry = load_geometry(spec)
    np.testing.assert_array_equal(geometry.solid, solid)
    assert geometry.voxel_size == 3e-6 and tuple(geometry.origin) == (1.0, 2.0)


def test_voxel_size_override_keeps_the_openings_in_the_new_frame():
    """A case's voxel_size/origin override used to rebuild the geometry without its openings."""
    plain = load_geometry(GeometrySpec("sample", "vessel_bifurcation.stl"))
    spec = GeometrySpec("sample", "vessel_bifurcation.stl", voxel_size=2 * plain.voxel_size,
                        origin=(0.01, 0.0, 0.0))
    moved = load_geometry(spec)
    assert len(moved.openings) == len(plain.openings) == 3
    for a, b in zip(plain.openings, moved.openings, strict=True):
        np.testing.assert_array_equal(a.nodes, b.nodes)
        expected = np.asarray(moved.origin) + 2 * (np.asarray(a.centre) - plain.origin)
        np.testing.assert_allclose(b.centre, expected, rtol=1e-12)
        assert b.area == pytest.approx(4 * a.area) and b.diameter == pytest.approx(2 * a.diameter)


def test_generator_errors_list_the_choices():
    pytest.importorskip("geometries.generators")
    with pytest.raises(CaseError, match="choose one of .*'random_sphere_pack'"):
        load_geometry(GeometrySpec("generator", "sphere_pak"))
    with pytest.raises(CaseError, match="its parameters are .*porosity"):
        load_geometry(GeometrySpec("generator", "random_sphere_pack", {"size": 3}))
    with pytest.raises(CaseError, match="Unknown sample 'nope'; choose one of"):
        load_geometry(GeometrySpec("sample", "nope"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_cases_are_valid_and_stable(path):
    pytest.importorskip("geometries.generators")
    case = load_case(path)
    geometry = load_geometry(case.geometry)
    assert geometry.ndim == case.config.ndim
    assert geometry.n_fluid > 0
    check_stability(case.config, geometry.solid, steps=case.run.max_steps)


def test_examples_cover_every_sample_and_a_generator():
    samples = pytest.importorskip("geometries.samples")
    sources = [load_case(p).geometry for p in EXAMPLES]
    assert {s.target for s in sources if s.source == "sample"} == set(samples.list_samples())
    assert any(s.source == "generator" for s in sources)
