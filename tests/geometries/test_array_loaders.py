"""Plain-array loaders: .npy segmentation defaults, .npz geometries, .raw with offsets and order."""

from __future__ import annotations

import numpy as np
import pytest

import geometries
from geometries import GeometryError, VoxelGeometry

from .geometry_builders import asymmetric_volume, npy_bytes


def test_npy_bool_true_is_solid():
    solid = np.zeros((4, 5, 6), bool)
    solid[1, 2, 3] = True
    geom = geometries.load(npy_bytes(solid))
    np.testing.assert_array_equal(geom.solid, solid)


def test_npy_integer_labels_zero_is_pore_by_default():
    image = np.array([[0, 1], [2, 255]], dtype=np.uint8)
    geom = geometries.load(npy_bytes(image), filename="a.npy")
    np.testing.assert_array_equal(geom.solid, [[False, True], [True, True]])


def test_pore_value_picks_the_pore_labels():
    image = np.array([[0, 1], [2, 3]], dtype=np.int16)
    geom = geometries.load(npy_bytes(image), format="npy", pore_value=[1, 3])
    np.testing.assert_array_equal(geom.solid, [[True, False], [True, False]])


@pytest.mark.parametrize(
    ("pore_below", "expected"), [(True, [[0, 0], [1, 1]]), (False, [[1, 1], [0, 0]])]
)
def test_threshold_splits_grey_values(pore_below, expected):
    image = np.array([[0.1, 0.2], [0.8, 0.9]])
    geom = geometries.load(npy_bytes(image), format="npy", threshold=0.5, pore_below=pore_below)
    np.testing.assert_array_equal(geom.solid, np.array(expected, bool))


def test_grey_float_image_without_threshold_asks_for_one():
    with pytest.raises(GeometryError, match="threshold="):
        geometries.load(npy_bytes(np.linspace(0, 1, 16).reshape(4, 4)), format="npy")


def test_npy_object_array_is_refused_without_unpickling():
    import io

    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(GeometryError, match="never unpickled"):
        geometries.load(buffer.getvalue())


def test_npz_round_trip_through_load(tmp_path):
    geom = VoxelGeometry(asymmetric_volume().astype(bool), voxel_size=1e-6, flow_axis=1, name="n")
    geom.save(tmp_path / "g.npz")
    back = geometries.load((tmp_path / "g.npz").read_bytes())  # sniffed as a zip archive
    np.testing.assert_array_equal(back.solid, geom.solid)
    assert (back.voxel_size, back.flow_axis, back.name) == (1e-6, 1, "n")
    assert geometries.load(tmp_path / "g.npz", flow_axis=2).flow_axis == 2


def test_npz_keeps_its_openings_through_load(tmp_path):
    """A saved vessel's openings survived VoxelGeometry.load but were dropped by geometries.load."""
    from geometries.generators.tubes import stenosed_pipe

    vessel = stenosed_pipe(6.0)
    vessel.save(tmp_path / "vessel.npz")
    for back in (geometries.load(tmp_path / "vessel.npz"),
                 geometries.load((tmp_path / "vessel.npz").read_bytes())):
        assert [o.id for o in back.openings] == [o.id for o in vessel.openings]
        for mine, theirs in zip(back.openings, vessel.openings, strict=True):
            np.testing.assert_array_equal(mine.nodes, theirs.nodes)


def test_raw_round_trip_with_header_big_endian_x_fastest(tmp_path):
    volume = asymmetric_volume((5, 6, 7)).astype(np.uint16) * 300
    path = tmp_path / "v.raw"
    path.write_bytes(b"H" * 17 + volume.astype(">u2").tobytes(order="F"))
    geom = geometries.load(path, shape=(5, 6, 7), dtype="uint16", byte_order="big", header_bytes=17)
    np.testing.assert_array_equal(geom.solid, volume != 0)


def test_raw_order_c_means_last_axis_fastest():
    volume = asymmetric_volume((3, 4, 5))
    geom = geometries.load(volume.tobytes(order="C"), format="raw", shape=(3, 4, 5), order="C")
    np.testing.assert_array_equal(geom.solid, volume != 0)


def test_raw_without_shape_says_to_give_it():
    with pytest.raises(GeometryError, match=r"pass shape=\(nx, ny, nz\)"):
        geometries.load(b"\0" * 8, format="raw")


def test_raw_size_mismatch_reports_both_sizes():
    with pytest.raises(GeometryError, match="has 100 bytes.*needs 128.*header_bytes="):
        geometries.load(b"\0" * 100, format="raw", shape=(4, 4, 4), dtype="uint16")


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"shape": (4, 4), "byte_order": "middle"}, "byte_order must be"),
        ({"shape": (4, 4), "dtype": "complex64"}, "dtype must be bool, integer or float"),
        ({"shape": (4, 4), "dtype": "nonsense"}, "not a NumPy dtype"),
        ({"shape": (4, -4)}, "positive integers"),
        ({"shape": (4, 4), "order": "X"}, "order must be"),
        ({"shape": (4, 4), "header_bytes": -1}, "non-negative"),
        ({"shape": (4, 4), "pore_value": 0, "threshold": 1}, "not both"),
    ],
)
def test_raw_option_errors(options, fragment):
    with pytest.raises(GeometryError, match=fragment):
        geometries.load(b"\0" * 16, format="raw", **options)


def test_all_solid_image_has_no_fluid():
    with pytest.raises(GeometryError, match="no fluid.*segmentation"):
        geometries.load(npy_bytes(np.ones((3, 3), bool)))


def test_max_voxels_is_checked_before_reading():
    with pytest.raises(GeometryError, match="1,000,000 voxels.*limit of 1,000"):
        geometries.load(b"\0" * 10, format="raw", shape=(100, 100, 100), max_voxels=1000)
    with pytest.raises(GeometryError, match="more than the limit of 10"):
        geometries.load(npy_bytes(np.zeros((4, 4), bool)), max_voxels=10)
