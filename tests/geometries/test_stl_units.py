"""STL length units (B2): explicit m/mm/µm, the size-based guess, and its note for the user."""

from __future__ import annotations

import pytest
import trimesh

import geometries
from geometries import GeometryError
from geometries.units import guess_length_unit, length_unit

from .geometry_builders import stl_bytes


def aorta_box(scale: float = 1.0) -> bytes:
    """A closed 167 x 80 x 60 box standing in for a millimetre aorta export."""
    return stl_bytes(trimesh.creation.box(extents=(167.0 * scale, 80.0 * scale, 60.0 * scale)))


def test_a_millimetre_aorta_is_guessed_as_millimetres_and_says_so():
    geom = geometries.load(aorta_box(), filename="aorta.stl", resolution=96, inside="fluid")
    # Before the fix this was 167 m / 96 = 1.74 m (a "1.67e6 µm" voxel in the app).
    assert geom.voxel_size == pytest.approx(167e-3 / 96)
    assert geom.notes[0] == ("STL coordinates read as millimetres (guessed from a 167 x 80 x 60 "
                             "extent); change Units if wrong.")


@pytest.mark.parametrize(("unit", "metres"), [("m", 1.0), ("mm", 1e-3), ("µm", 1e-6),
                                              ("um", 1e-6), (1e-3, 1e-3)])
def test_an_explicit_unit_sets_the_voxel_size_and_is_not_called_a_guess(unit, metres):
    geom = geometries.load(aorta_box(), format="stl", resolution=96, unit=unit,
                           inside="fluid")
    assert geom.voxel_size == pytest.approx(167 / 96 * metres)
    assert geom.origin[0] == pytest.approx(-83.5 * metres, rel=1e-3)
    assert geom.notes == (), "a unit the user chose needs no comment"


def test_a_voxel_size_in_metres_is_honoured_in_every_unit():
    geom = geometries.load(aorta_box(), format="stl", voxel_size=2e-3, unit="mm",
                           inside="fluid")
    assert geom.voxel_size == pytest.approx(2e-3)
    assert geom.shape[0] == 84  # 167 mm / 2 mm, rounded up


@pytest.mark.parametrize(("extent", "symbol"), [
    ((0.167, 0.08, 0.06), "m"), ((1.0, 0.5, 0.5), "m"), ((1.5, 1, 1), "mm"),
    ((167, 80, 60), "mm"), ((1000, 10, 10), "mm"), ((3000, 3000, 2000), "µm")])
def test_the_guessing_rule(extent, symbol):
    unit = guess_length_unit(extent)
    assert unit.symbol == symbol and unit.guessed


@pytest.mark.parametrize("bad", ["furlong", -1.0, 0.0, float("nan"), True, None])
def test_bad_units_are_refused_with_the_choices(bad):
    with pytest.raises(GeometryError, match="unit"):
        length_unit(bad, (1.0, 1.0, 1.0))


def test_a_case_file_passes_the_unit_to_the_loader(tmp_path):
    from solver.case import load_case, load_geometry

    (tmp_path / "aorta.stl").write_bytes(aorta_box())
    (tmp_path / "case.yaml").write_text(
        "geometry:\n  file: aorta.stl\n  options: {unit: mm, resolution: 40, inside: fluid}\n")
    geom = load_geometry(load_case(tmp_path / "case.yaml").geometry)
    assert geom.voxel_size == pytest.approx(167e-3 / 40)
