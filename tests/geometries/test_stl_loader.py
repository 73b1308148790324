"""STL loading: voxelised volume, ASCII = binary, inside= modes, open meshes, bad meshes."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import trimesh

import geometries
from geometries import GeometryError, GeometryWarning

from .geometry_builders import sphere_mesh, stl_bytes


def test_sphere_volume_and_voxel_size_match_the_mesh():
    geom = geometries.load(stl_bytes(sphere_mesh(radius=2.0)), filename="s.stl", resolution=64,
                           unit="m")
    assert geom.shape == (64, 64, 64)
    assert geom.voxel_size == pytest.approx(4.0 / 64)
    volume = np.count_nonzero(geom.solid) * geom.voxel_size**3
    assert volume == pytest.approx(4 / 3 * np.pi * 8, rel=0.03)
    assert geom.origin == pytest.approx((-2.0, -2.0, -2.0), abs=1e-3)
    assert set(np.unique(geom.labels)) == {0, 1}


def test_ascii_and_binary_give_the_same_mask():
    mesh = sphere_mesh(subdivisions=3)
    binary = geometries.load(stl_bytes(mesh), format="stl", resolution=40)
    ascii_ = geometries.load(stl_bytes(mesh, ascii=True), format="stl", resolution=40)
    np.testing.assert_array_equal(binary.solid, ascii_.solid)


def test_inside_fluid_is_the_complement():
    data = stl_bytes(sphere_mesh(subdivisions=3))
    solid = geometries.load(data, format="stl", resolution=32, inside="solid")
    lumen = geometries.load(data, format="stl", resolution=32, inside="fluid")
    np.testing.assert_array_equal(lumen.solid, ~solid.solid)
    assert lumen.labels is None


def test_padding_is_fluid_around_objects_and_solid_beside_vessels():
    data = stl_bytes(sphere_mesh(subdivisions=3))
    obj = geometries.load(data, format="stl", resolution=20, padding=3)
    assert obj.shape == (26, 26, 26)
    assert not obj.solid[:3].any() and not obj.solid[:, -3:].any()
    vessel = geometries.load(data, format="stl", resolution=20, padding=3, inside="fluid")
    assert vessel.shape == (20, 26, 26)  # no padding along the flow axis
    assert vessel.solid[:, :3].all() and vessel.solid[:, :, -3:].all()


def test_voxel_size_and_unit_set_the_grid_in_metres():
    data = stl_bytes(sphere_mesh(radius=5.0, subdivisions=3))  # a 10 mm sphere, in mm
    geom = geometries.load(data, format="stl", voxel_size=0.5e-3, unit=1e-3)
    assert geom.shape == (20, 20, 20)
    assert geom.voxel_size == pytest.approx(0.5e-3)


def test_separate_bodies_get_separate_labels():
    a = sphere_mesh(subdivisions=2)
    b = sphere_mesh(subdivisions=2)
    b.apply_translation((3.0, 0.0, 0.0))
    geom = geometries.load(stl_bytes(trimesh.util.concatenate([a, b])), format="stl")
    assert set(np.unique(geom.labels)) == {0, 1, 2}


def test_open_mesh_warns_and_is_still_filled():
    mesh = sphere_mesh(subdivisions=4)
    # Cut away a polar cap (a hole far too large for trimesh's hole filling).
    keep = mesh.triangles_center[:, 2] < 0.9
    holed = trimesh.Trimesh(mesh.vertices, mesh.faces[keep])
    assert not holed.is_watertight
    with pytest.warns(GeometryWarning, match="not watertight"):
        geom = geometries.load(stl_bytes(holed), format="stl", resolution=48, unit="m")
    assert any("not watertight (" in note for note in geom.notes), "the preview shows notes"
    h = geom.voxel_size
    assert np.count_nonzero(geom.solid) * h**3 == pytest.approx(4 / 3 * np.pi, rel=0.05)


def test_one_missing_triangle_is_repaired_without_warning():
    mesh = sphere_mesh(subdivisions=3)
    holed = trimesh.Trimesh(mesh.vertices, mesh.faces[1:])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        geom = geometries.load(stl_bytes(holed), format="stl", resolution=32)
    assert geom.porosity == pytest.approx(1 - np.pi / 6, abs=0.02)


def _binary_stl(triangles: np.ndarray) -> bytes:
    """Binary STL of raw float32 triangles (T, 3, 3), bypassing any mesh processing."""
    record = np.zeros(len(triangles), dtype=[("n", "<f4", 3), ("v", "<f4", (3, 3)), ("a", "<u2")])
    record["v"] = triangles
    return b"\0" * 80 + np.uint32(len(triangles)).tobytes() + record.tobytes()


def test_nan_triangles_are_refused_with_advice():
    tri = sphere_mesh(subdivisions=1).triangles.copy()
    tri[3, 1, 2] = np.nan
    with pytest.raises(GeometryError, match="NaN or infinite.*Repair the mesh"):
        geometries.load(_binary_stl(tri), format="stl")


def test_zero_area_triangles_are_refused():
    tri = np.zeros((4, 3, 3))
    tri[:, :, 0] = [0.0, 1.0, 2.0]  # collinear points
    with pytest.raises(GeometryError, match="zero area.*Export"):
        geometries.load(_binary_stl(tri), format="stl")


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"inside": "outside"}, "inside must be 'solid' or 'fluid'"),
        ({"resolution": 0}, "at least 1"),
        ({"resolution": 10, "voxel_size": 0.1}, "either resolution= or voxel_size="),
        ({"padding": -1}, "padding must be a non-negative"),
        ({"resolution": 1000, "max_voxels": 10**6}, "1,000,000.*coarser resolution"),
    ],
)
def test_bad_options_raise_clear_errors(options, fragment):
    with pytest.raises(GeometryError, match=fragment):
        geometries.load(stl_bytes(sphere_mesh(subdivisions=1)), format="stl", **options)


def test_flat_mesh_encloses_nothing():
    square = trimesh.Trimesh([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]], [[0, 1, 2], [0, 2, 3]])
    with pytest.raises(GeometryError, match="encloses no voxel"), warnings.catch_warnings():
        warnings.simplefilter("ignore", GeometryWarning)
        geometries.load(stl_bytes(square), format="stl")
