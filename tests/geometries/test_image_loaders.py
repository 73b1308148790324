"""TIFF stacks and VTK-readable images: axis order, point/cell data, spacing, safety checks."""

from __future__ import annotations

import gzip
import io

import numpy as np
import pytest
import tifffile

import geometries
from geometries import GeometryError

from .geometry_builders import (
    asymmetric_volume,
    image_data,
    mha_bytes,
    nrrd_bytes,
    tiff_bytes,
    vtk_bytes,
)


def test_tiff_stack_zyx_is_transposed_to_xyz():
    xyz = asymmetric_volume((5, 6, 7))
    geom = geometries.load(tiff_bytes(xyz.transpose(2, 1, 0)), filename="stack.tif")
    assert geom.shape == (5, 6, 7)
    np.testing.assert_array_equal(geom.solid, xyz != 0)


def test_single_tiff_page_is_a_2d_xy_geometry():
    xy = asymmetric_volume((5, 6, 1))[:, :, 0]
    geom = geometries.load(tiff_bytes(xy.T), format="tif")
    np.testing.assert_array_equal(geom.solid, xy != 0)


def _imagej(zyx: np.ndarray, xy_um: float, z_um: float, unit: str = "um") -> bytes:
    """A Fiji-style calibrated TIFF stack: pixels per unit in the resolution tags, the slice
    spacing and the unit in the ImageJ description."""
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, zyx, imagej=True, resolution=(1 / xy_um, 1 / xy_um),
                     metadata={"spacing": z_um, "unit": unit, "axes": "ZYX"})
    return buffer.getvalue()


def test_imagej_calibrated_tiff_gives_the_voxel_size_in_metres():
    """A Fiji TIFF at 5.345 µm loaded without a voxel size: it had none (k in voxel² only)."""
    zyx = (asymmetric_volume((5, 6, 7)).transpose(2, 1, 0) != 0).astype(np.uint8)
    geom = geometries.load(_imagej(zyx, 5.345, 5.345), filename="berea.tif")
    assert geom.voxel_size == pytest.approx(5.345e-6, rel=1e-6)
    assert geometries.load(_imagej(zyx, 2.0, 2.0, "mm"), format="tif").voxel_size == \
        pytest.approx(2e-3)
    assert geometries.load(_imagej(zyx, 5.0, 5.0, "pixel"), format="tif").voxel_size is None
    assert geometries.load(tiff_bytes(zyx), format="tif").voxel_size is None
    given = geometries.load(_imagej(zyx, 5.345, 5.345), format="tif", voxel_size=1e-6)
    assert given.voxel_size == 1e-6  # the user's voxel size wins


def test_anisotropic_imagej_calibration_is_refused_with_the_way_out():
    zyx = np.zeros((4, 5, 6), np.uint8)
    with pytest.raises(GeometryError, match="not the same along every axis.*voxel_size"):
        geometries.load(_imagej(zyx, 5.0, 10.0), format="tif")
    assert geometries.load(_imagej(zyx, 5.0, 10.0), format="tif",
                           voxel_size=5e-6).voxel_size == 5e-6


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


@pytest.mark.parametrize("encoding", ["raw", "gzip", "ascii"])
def test_nrrd_encodings_load_first_axis_fastest(encoding):
    xyz = asymmetric_volume((4, 5, 6))  # a first axis ≤ 9 is data here, not vector components
    data = nrrd_bytes(xyz)
    if encoding != "raw":
        header, body = data.split(b"\n\n", 1)
        body = gzip.compress(body) if encoding == "gzip" else b" ".join(b"%d" % v for v in body)
        data = header.replace(b"encoding: raw", b"encoding: " + encoding.encode()) + b"\n\n" + body
    np.testing.assert_array_equal(geometries.load(data).solid, xyz != 0)


def test_nrrd_detached_header_from_a_trusted_path(tmp_path):
    xyz = asymmetric_volume((4, 5, 6))
    (tmp_path / "vol.raw").write_bytes(xyz.tobytes(order="F"))
    (tmp_path / "vol.nhdr").write_bytes(nrrd_bytes(xyz, data_file="vol.raw"))
    np.testing.assert_array_equal(geometries.load(tmp_path / "vol.nhdr").solid, xyz != 0)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        ((b"sizes: 4 5 6", b"sizes: 4 5"), "one size each"),
        ((b"type: uint8", b"type: block"), "not supported"),
        ((b"encoding: raw", b"encoding: hex"), "not supported"),
        ((b"spacings: 1 1 1", b"spacings: 1 1 2"), "cubic voxels"),
        ((b"encoding: raw\n\n", b"encoding: raw\n"), "blank line"),
    ],
)
def test_nrrd_header_errors(edit, fragment):
    data = nrrd_bytes(asymmetric_volume((4, 5, 6))).replace(*edit)
    with pytest.raises(GeometryError, match=fragment):
        geometries.load(data, format="nrrd")


def test_vtk_header_declaring_huge_image_is_refused_before_reading():
    data = (
        b"# vtk DataFile Version 3.0\nx\nBINARY\n"
        b"DATASET STRUCTURED_POINTS\nDIMENSIONS 5000 5000 5000\n"
    )
    with pytest.raises(GeometryError, match="more than the limit"):
        geometries.load(data)


def test_legacy_vtk_of_a_mesh_is_refused():
    data = b"# vtk DataFile Version 3.0\nx\nASCII\nDATASET POLYDATA\nPOINTS 0 float\n"
    with pytest.raises(GeometryError, match="not an image"):
        geometries.load(data)


def test_nrrd_cut_inside_its_header_is_truncated():
    with pytest.raises(GeometryError, match="truncated"):
        geometries.load(nrrd_bytes(asymmetric_volume((4, 5, 6)))[:40])
