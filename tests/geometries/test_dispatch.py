"""The load() entry point: choosing a loader by format, extension or content; option checks."""

from __future__ import annotations

import numpy as np
import pytest
from geometry_builders import (
    asymmetric_volume,
    mha_bytes,
    npy_bytes,
    sphere_mesh,
    stl_bytes,
    tiff_bytes,
    vtk_bytes,
)

import geometries
from geometries import GeometryError
from geometries.loaders.sniff import sniff_format


def _samples(tmp_path) -> dict[str, bytes]:
    xyz = asymmetric_volume((4, 5, 6))
    mesh = sphere_mesh(subdivisions=1)
    path = tmp_path / "g.npz"
    geometries.VoxelGeometry(xyz.astype(bool)).save(path)
    return {
        "stl": stl_bytes(mesh),
        "stl-ascii": stl_bytes(mesh, ascii=True),
        "npy": npy_bytes(xyz),
        "npz": path.read_bytes(),
        "tiff": tiff_bytes(xyz.T),
        "vti": vtk_bytes(xyz, ".vti", tmp_path),
        "vtk": vtk_bytes(xyz, ".vtk", tmp_path),
        "mha": mha_bytes(xyz),
    }


def test_every_format_is_recognised_from_content(tmp_path):
    for fmt, data in _samples(tmp_path).items():
        assert sniff_format(data[:4096], len(data)) == fmt.split("-")[0], fmt


def test_unnamed_uploads_of_every_format_load(tmp_path):
    for fmt, data in _samples(tmp_path).items():
        assert geometries.load(data).n_fluid > 0, fmt


def test_filename_extension_wins_over_content_and_format_over_both():
    data = npy_bytes(np.eye(3, dtype=bool))
    with pytest.raises(GeometryError, match="STL"):
        geometries.load(data, filename="upload.STL")
    assert geometries.load(data, filename="upload.stl", format="npy").shape == (3, 3)


def test_path_extension_chooses_the_loader(tmp_path):
    path = tmp_path / "v.bin"
    path.write_bytes(bytes(range(8)))
    with pytest.raises(GeometryError, match="format='raw' and shape="):
        geometries.load(path)
    raw = tmp_path / "v.raw"
    raw.write_bytes(bytes([0, 1, 0, 0]))
    geom = geometries.load(raw, shape=(2, 2))
    assert geom.name == "v.raw" and geom.n_fluid == 3


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: geometries.load(b""), "empty"),
        (lambda: geometries.load(b"\x01\x02garbage"), "Could not recognise"),
        (lambda: geometries.load(b"x", format="gif"), "Unknown format 'gif'; choose one of"),
        (lambda: geometries.load(b"x", format="raw", shape=(1, 1), resolution=3),
         r"\['resolution'\] do not apply to raw files; valid options"),
        (lambda: geometries.load(12345), "path or bytes"),
        (lambda: geometries.load("/nonexistent/file.stl"), "No such file"),
    ],
)
def test_errors_say_what_to_do(call, fragment):
    with pytest.raises(GeometryError, match=fragment):
        call()


def test_truncated_files_raise_geometry_error(tmp_path):
    for fmt, data in _samples(tmp_path).items():
        cuts = [1, len(data) // 4, len(data) // 2]
        if fmt != "tiff":  # a TIFF ends in optional tags; cutting those loses no voxel
            cuts.append(len(data) - 13)
        for cut in cuts:
            with pytest.raises(GeometryError):
                geometries.load(data[:cut], format=fmt.split("-")[0])


def test_upload_name_is_only_used_for_its_extension(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "secret.npy").write_bytes(npy_bytes(np.ones((2, 2), bool)))
    geom = geometries.load(npy_bytes(np.eye(2, dtype=bool)), filename="secret.npy")
    np.testing.assert_array_equal(geom.solid, np.eye(2, dtype=bool))
