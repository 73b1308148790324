"""MATLAB .mat uploads: v5 read with scipy.io (largest array or a named one), v7.3 explained."""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.io
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import geometries
from geometries import GeometryError


def mat_bytes(variables: dict, **kwargs) -> bytes:
    buffer = io.BytesIO()
    scipy.io.savemat(buffer, variables, **kwargs)
    return buffer.getvalue()


def rock(shape=(10, 12, 14)) -> np.ndarray:
    volume = np.ones(shape, dtype=np.uint8)
    volume[:, 3:6, 4:9] = 0  # a pore channel along x
    return volume


@pytest.mark.parametrize("compress", [False, True])
def test_the_largest_numeric_array_is_the_volume_and_a_note_says_so(compress):
    volume = rock()
    data = mat_bytes({"vol": volume, "spacing": np.array([[2.0, 2.0, 2.0]]),
                      "label": "sample A"}, do_compression=compress)
    geom = geometries.load(data, filename="rock.mat")
    assert geom.shape == (10, 12, 14)
    np.testing.assert_array_equal(geom.solid, volume != 0)
    assert "'vol' (10 x 12 x 14 uint8), the largest of 2 arrays (others: spacing)" in geom.notes[0]


def test_a_named_variable_and_a_pore_label_are_used():
    small, big = rock((6, 6, 6)), rock((10, 12, 14)) * 7
    data = mat_bytes({"seg": small, "grey": big})
    geom = geometries.load(data, filename="rock.mat", variable="seg")
    assert geom.shape == (6, 6, 6) and geom.notes == ()
    geom = geometries.load(data, filename="rock.mat", pore_value=7)
    assert geom.shape == (10, 12, 14) and geom.solid[:, 3:6, 4:9].all()


def test_the_format_is_recognised_without_a_name():
    assert geometries.load(mat_bytes({"vol": rock()})).shape == (10, 12, 14)


@pytest.mark.parametrize(("data", "fragment"), [
    (b"MATLAB 7.3 MAT-file, Platform: GLNXA64" + b"\0" * 600, "v7.3 \\(HDF5\\).*'-v7'"),
    (mat_bytes({"note": "only text"}), "no 2D or 3D numeric array"),
    (b"MATLAB 5.0 MAT-file" + b"\xff" * 200, "not a readable MATLAB .mat file"),
])
def test_unreadable_files_say_what_to_upload(data, fragment):
    with pytest.raises(GeometryError, match=fragment):
        geometries.load(data, filename="x.mat")


def test_a_missing_variable_lists_the_variables():
    with pytest.raises(GeometryError, match="no 2D/3D numeric variable 'vol'.*'seg'"):
        geometries.load(mat_bytes({"seg": rock()}), filename="x.mat", variable="vol")


def test_a_declared_size_above_the_limit_is_refused_before_reading():
    with pytest.raises(GeometryError, match="voxels"):
        geometries.load(mat_bytes({"vol": rock()}), filename="x.mat", max_voxels=100)


def test_an_unknown_format_is_explained_in_user_words():
    with pytest.raises(GeometryError, match=r"Use a file ending in one of .*\.mat"):
        geometries.load(b"\x01\x02garbage")


_VALID = {"plain": mat_bytes({"vol": rock((4, 5, 6))}),
          "zlib": mat_bytes({"vol": rock((4, 5, 6))}, do_compression=True)}


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(_VALID)), st.data())
def test_mutated_and_truncated_mat_files_load_or_raise_geometry_error(kind, data):
    blob = bytearray(_VALID[kind])
    for _ in range(data.draw(st.integers(1, 8))):
        blob[data.draw(st.integers(0, len(blob) - 1))] = data.draw(st.integers(0, 255))
    blob = bytes(blob[: data.draw(st.integers(1, len(blob)))])
    try:
        geometries.load(blob, filename="x.mat", max_voxels=10**6)
    except GeometryError:
        pass
