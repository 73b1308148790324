"""Issue 31 items 1-5 and 12: compressed-member bombs, native crashes on trusted paths, upload
copies left by killed workers, unbounded STL work, raw ValueErrors and whole reads of huge .npy.

Every input is built here and is tiny; limits are checked with small limit values.
"""

from __future__ import annotations

import io
import struct
import subprocess
import sys
import tempfile
import uuid
import zipfile
from pathlib import Path

import numpy as np
import pytest

import geometries
from geometries import GeometryError, VoxelGeometry

ROOT = Path(__file__).resolve().parents[2]


def string_vti(tag: str = "s") -> bytes:
    """A 4³ .vti whose only array has type="String": VTK 9 dies on it with SIGSEGV."""
    return (
        '<?xml version="1.0"?>\n<VTKFile type="ImageData" version="0.1" '
        'byte_order="LittleEndian">\n<ImageData WholeExtent="0 3 0 3 0 3" Origin="0 0 0" '
        f'Spacing="1 1 1">\n<Piece Extent="0 3 0 3 0 3"><PointData Scalars="{tag}">\n'
        f'<DataArray type="String" Name="{tag}" format="ascii">a b c d</DataArray>\n'
        "</PointData></Piece></ImageData></VTKFile>\n"
    ).encode()


def saved_geometry(compression: int) -> bytes:
    """A valid VoxelGeometry .npz whose members are rewritten with zip method ``compression``."""
    solid = np.zeros((4, 4, 4), dtype=bool)
    solid[0] = True
    buffer = io.BytesIO()
    VoxelGeometry(solid, voxel_size=1e-6).save(buffer)
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as src, \
            zipfile.ZipFile(out, "w", compression=compression) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return out.getvalue()


# --- item 1: bzip2 / LZMA members are inflated whole by zipfile: refused by method -----------


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_npz_members_compressed_with_unbounded_methods_are_refused(method):
    with pytest.raises(GeometryError, match="compression method"):
        geometries.load(saved_geometry(method), format="npz")


def test_npz_bzip2_bomb_is_refused_before_inflating():
    # 64 MiB of zeros as bzip2 is ~50 bytes of payload: inflating it whole is the bomb.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_BZIP2) as archive:
        archive.writestr("solid.npy", bytes(64 * 2**20))
    with pytest.raises(GeometryError, match="compression method 12"):
        geometries.load(buffer.getvalue(), format="npz")


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_npz_stored_and_deflate_still_load(method):
    assert geometries.load(saved_geometry(method), format="npz").shape == (4, 4, 4)


# --- item 2: trusted paths reach native readers only in the worker ----------------------------


def test_a_crashing_vti_path_is_a_geometry_error_not_a_dead_process(tmp_path):
    path = tmp_path / "damaged.vti"
    path.write_bytes(string_vti())
    script = (
        "import sys, geometries\n"
        "try:\n    geometries.load(sys.argv[1])\n"
        "except geometries.GeometryError as exc:\n    print('refused:', exc); sys.exit(7)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 7, (done.returncode, done.stderr[-500:])
    assert "reader failed" in done.stdout and "SIGSEGV" in done.stdout


def test_cli_with_a_crashing_vti_exits_2_with_a_message(tmp_path):
    from tests.solver.test_run_cli import channel_case, cli

    case = channel_case(tmp_path)
    (tmp_path / "tiny.vti").write_bytes(string_vti())
    case.write_text(case.read_text().replace("tiny.npy", "tiny.vti"))
    done = cli("run", str(case), "--output", str(tmp_path / "o"), "--quiet", cwd=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    assert "reader failed" in done.stderr and "Traceback" not in done.stderr


def test_trusted_paths_still_load_through_the_worker(tmp_path):
    from . import hostile_inputs as hostile

    (tmp_path / "a.vti").write_bytes(hostile.vti())
    assert geometries.load(tmp_path / "a.vti", name="ok").shape == (4, 5, 6)


# --- item 3: a killed worker's upload copy is removed ------------------------------------------


def test_a_crashed_worker_leaves_no_upload_copy():
    tag = "t" + uuid.uuid4().hex
    with pytest.raises(GeometryError, match="reader failed"):
        geometries.load(string_vti(tag), format="vti")
    leftovers = [p for p in Path(tempfile.gettempdir()).glob("geometry-*/upload.vti")
                 if tag.encode() in p.read_bytes()]
    assert leftovers == []


# --- item 4: STL work is bounded by the worker's time limit -----------------------------------


def spanning_stl(n: int) -> bytes:
    """A binary STL of ``n`` thin triangles each spanning the whole unit box (worst case)."""
    rng = np.random.default_rng(0)
    out = [b"\0" * 80, struct.pack("<I", n)]
    for _ in range(n):
        a = rng.random(3) * 0.01
        tri = np.array([a, a + [1, 0.99, 0], a + [0, 1, 0.99]], dtype="<f4")
        out.append(struct.pack("<3f", 0, 0, 0) + tri.tobytes() + b"\0\0")
    return b"".join(out)


def test_stl_voxelising_stops_at_the_time_limit(monkeypatch):
    monkeypatch.setenv("POROUS_LBM_LOADER_SECONDS", "0.5")
    with pytest.raises(GeometryError, match="longer than"):
        geometries.load(spanning_stl(3000), format="stl", resolution=160)


def test_the_loader_time_limit_must_be_a_positive_number(monkeypatch):
    monkeypatch.setenv("POROUS_LBM_LOADER_SECONDS", "-1")
    with pytest.raises(GeometryError, match="POROUS_LBM_LOADER_SECONDS"):
        geometries.load(spanning_stl(2), format="stl")


# --- item 5: malformed .npy dims and .npz metadata are GeometryErrors, not raw ValueErrors ---


def npy_with_header(header: str, body: bytes) -> bytes:
    """A version-1.0 .npy of a hand-written header dict (padded as numpy pads it)."""
    text = header + " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode() + body


@pytest.mark.parametrize("shape", ["(-2, -3)", "(-1, 0)", "(4, -4, -1)"])
def test_negative_npy_dims_are_a_geometry_error(shape):
    data = npy_with_header(f"{{'descr': '|u1', 'fortran_order': False, 'shape': {shape}, }}",
                           bytes(16))
    with pytest.raises(GeometryError, match="negative size") as caught:
        geometries.load(data, format="npy")
    assert type(caught.value) is GeometryError


@pytest.mark.parametrize("field", ["voxel_size", "origin", "flow_axis"])
def test_npz_metadata_of_the_wrong_type_is_a_geometry_error(field):
    arrays = {"solid": np.zeros((4, 4, 4), dtype=bool), "voxel_size": np.float64(1e-6),
              "origin": np.zeros(3), "flow_axis": np.int64(0), "name": np.str_("x")}
    arrays[field] = np.array(["abc"] * (3 if field == "origin" else 1))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    with pytest.raises(GeometryError, match="malformed metadata"):
        geometries.load(buffer.getvalue(), format="npz")


# --- item 12: a huge .npy path is refused from its header; generators check the box first --


def test_a_huge_npy_path_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "huge.npy"
    path.write_bytes(npy_with_header(
        "{'descr': '|u1', 'fortran_order': False, 'shape': (1500, 1500, 1500), }", bytes(64)))
    read = []
    monkeypatch.setattr(Path, "read_bytes", lambda self: read.append(self) or b"")
    with pytest.raises(GeometryError, match="more than the limit"):
        geometries.load(path)
    assert read == []


@pytest.mark.parametrize(("name", "kwargs"), [
    ("random_sphere_pack", {"shape": (2000, 2000, 2000), "porosity": 0.5, "diameter": 8}),
    ("channel", {"shape": (1500, 1500, 1500)}),
    ("square_duct", {"length": 4000, "width": 2000}),
    ("circular_pipe", {"length": 4000, "diameter": 2000}),
    ("lid_cavity", {"n": 1500, "ndim": 3}),
    ("sphere_array", {"kind": "sc", "cells": (100, 100, 100), "cell": 20,
                      "solid_fraction": 0.3}),
])
def test_generators_refuse_huge_boxes_before_building(name, kwargs, monkeypatch):
    import tracemalloc

    from geometries import generators
    from geometries.generators import checks

    # The verdict prices the box against free memory: pretend 8 GiB are free, as on a laptop.
    monkeypatch.setattr(checks, "available_memory", lambda: 8 * 2**30)

    tracemalloc.start()
    try:
        with pytest.raises(GeometryError, match="a generator builds"):
            getattr(generators, name)(**kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**20


def test_free_memory_is_read_from_the_machine():
    from geometries.generators import checks

    with open("/proc/meminfo", encoding="ascii") as fh:
        total = int(next(line for line in fh if line.startswith("MemTotal:")).split()[1]) * 1024
    assert 0 < checks.available_memory() <= total


def test_generator_limit_follows_free_memory(monkeypatch):
    """A 1000³ rock image is built on a machine with the memory for it (the GPU benchmark of
    issue 29), refused where the memory is not there, each decided before allocating."""
    from geometries.generators import checks

    monkeypatch.setattr(checks, "available_memory", lambda: 128 * 2**30)
    assert checks.check_size((1000, 1000, 1000)) == (1000, 1000, 1000)
    monkeypatch.setattr(checks, "available_memory", lambda: 2 * 2**30)
    with pytest.raises(GeometryError, match=r"needs about 3\.7 GiB, more than the 2\.0 GiB"):
        checks.check_size((1000, 1000, 1000))
