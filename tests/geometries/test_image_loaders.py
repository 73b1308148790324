"""TIFF stacks and VTK-readable images: axis order, point/cell data, spacing, safety checks."""

from __future__ import annotations

import io

import numpy as np
import pytest
import tifffile
from geometry_builders import (
    asymmetric_volume,
    image_data,
    mha_bytes,
    nrrd_bytes,
    tiff_bytes,
    vtk_bytes,
)

import geometries
from geometries import GeometryError


def test_tiff_stack_zyx_is_transposed_to_xyz():
    xyz = asymmetric_volume((5, 6, 7))
    geom = geometries.load(tiff_bytes(xyz.transpose(2, 1, 0)), filename="stack.tif")
    assert geom.shape == (5, 6, 7)
    np.testing.assert_array_equal(geom.solid, xyz != 0)


def test_single_tiff_page_is_a_2d_xy_geometry():
    xy = asymmetric_volume((5, 6, 1))[:, :, 0]
    geom = geometries.load(tiff_bytes(xy.T), format="tif")
    np.testing.assert_array_equal(geom.solid, xy != 0)


def test_rgb_tiff_is_refused():
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, np.zeros((6, 7, 3), np.uint8), photometric="rgb")
    with pytest.raises(GeometryError, match="colour samples.*single-channel"):
        geometries.load(buffer.getvalue(), format="tiff")


@pytest.mark.parametrize("suffix", [".vti", ".vtk"])
@pytest.mark.parametrize("cell", [False, True])
def test_vtk_image_round_trip(tmp_path, suffix, cell):
    xyz = asymmetric_volume((5, 6, 7))
    data = vtk_bytes(xyz, suffix, tmp_path, spacing=(0.5, 0.5, 0.5), cell=cell)
    geom = geometries.load(data, filename=f"upload{suffix}", unit=1e-3)
    np.testing.assert_array_equal(geom.solid, xyz != 0)
    assert geom.voxel_size == pytest.approx(0.5e-3)
    expected_origin = 0.0 if cell else -0.25e-3  # point data sits on voxel centres
    assert geom.origin == pytest.approx((expected_origin,) * 3)


def test_vti_is_recognised_without_a_name_and_from_a_path(tmp_path):
    xyz = asymmetric_volume((4, 5, 6))
    data = vtk_bytes(xyz, ".vti", tmp_path)
    np.testing.assert_array_equal(geometries.load(data).solid, xyz != 0)
    np.testing.assert_array_equal(geometries.load(tmp_path / "image.vti").solid, xyz != 0)


def test_array_name_selects_and_unknown_name_lists_choices(tmp_path):
    xyz = asymmetric_volume((4, 5, 6))
    grid = image_data(xyz)
    grid.point_data["other"] = np.zeros(xyz.size, np.uint8)
    grid.save(tmp_path / "two.vti")
    path = tmp_path / "two.vti"
    assert geometries.load(path, array_name="phase").n_fluid == np.count_nonzero(xyz == 0)
    with pytest.raises(GeometryError, match="no array 'nope'.*phase"):
        geometries.load(path, array_name="nope")


def test_anisotropic_spacing_is_refused_unless_overridden(tmp_path):
    data = vtk_bytes(asymmetric_volume(), ".vti", tmp_path, spacing=(1.0, 1.0, 2.0))
    with pytest.raises(GeometryError, match="cubic voxels.*voxel_size="):
        geometries.load(data, format="vti")
    assert geometries.load(data, format="vti", voxel_size=1e-6).voxel_size == 1e-6


def test_metaimage_with_local_data_loads():
    xyz = asymmetric_volume((4, 5, 6))
    geom = geometries.load(mha_bytes(xyz))  # sniffed from the header
    np.testing.assert_array_equal(geom.solid, xyz != 0)


def test_uploaded_headers_may_not_name_other_files(tmp_path):
    xyz = asymmetric_volume((4, 5, 6))
    with pytest.raises(GeometryError, match="separate data file"):
        geometries.load(mha_bytes(xyz, data_file="/etc/passwd"), filename="a.mhd")
    with pytest.raises(GeometryError, match="separate data file"):
        geometries.load(nrrd_bytes(np.zeros((10, 5, 6)), data_file="/etc/passwd"))
    # A trusted path may use a detached data file next to it.
    (tmp_path / "vol.raw").write_bytes(xyz.tobytes(order="F"))
    (tmp_path / "vol.mhd").write_bytes(mha_bytes(xyz, data_file="vol.raw"))
    np.testing.assert_array_equal(geometries.load(tmp_path / "vol.mhd").solid, xyz != 0)


def test_nrrd_with_attached_data_loads():
    xyz = asymmetric_volume((10, 5, 6))
    np.testing.assert_array_equal(geometries.load(nrrd_bytes(xyz)).solid, xyz != 0)


def test_nrrd_whose_first_axis_vtk_reads_as_components_is_refused():
    with pytest.raises(GeometryError, match="Save it as .mha"):
        geometries.load(nrrd_bytes(asymmetric_volume((4, 5, 6))))


def test_vtk_header_declaring_huge_image_is_refused_before_reading():
    data = b"# vtk DataFile Version 3.0\nx\nBINARY\nDATASET STRUCTURED_POINTS\nDIMENSIONS 5000 5000 5000\n"
    with pytest.raises(GeometryError, match="more than the limit"):
        geometries.load(data)


def test_legacy_vtk_of_a_mesh_is_refused():
    data = b"# vtk DataFile Version 3.0\nx\nASCII\nDATASET POLYDATA\nPOINTS 0 float\n"
    with pytest.raises(GeometryError, match="not an image"):
        geometries.load(data)
