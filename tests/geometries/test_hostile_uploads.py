"""Issue 16 items 1-3: hostile uploads and detached-data headers cost one failed load, never more.

Every input is a tiny generated file that, before the hardening, read a server file, killed the
process (bad_alloc abort, SIGSEGV, heap corruption), hung it or blew up its memory.
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import geometries
from geometries import GeometryError
from geometries.loaders.isolation import Limits, load_isolated

from . import hostile_inputs as hostile


def _refused(data: bytes, fmt: str, match: str) -> None:
    """Assert that loading ``data`` fails quickly with a GeometryError matching ``match``."""
    start = time.monotonic()
    with pytest.raises(GeometryError, match=match):
        geometries.load(data, format=fmt, max_voxels=20_000)
    assert time.monotonic() - start < 20


def test_upload_naming_a_server_file_behind_a_decoy_is_refused():
    _refused(hostile.passwd_mha(), "mha", "separate data file")


@pytest.mark.parametrize("line", ["ElementDataFile = /etc/passwd", "ElementDataFile = x.raw"])
def test_upload_may_never_name_a_file(line):
    _refused(hostile.mha(data_file=f"{line}\n"), "mha", "separate data file")


@pytest.mark.parametrize("name", ["/etc/passwd", "../secret.raw", "/proc/self/environ"])
def test_trusted_metaimage_data_file_stays_in_its_folder(tmp_path: Path, name):
    (tmp_path / "secret.raw").write_bytes(bytes(120))
    folder = tmp_path / "case"
    folder.mkdir()
    header = folder / "image.mhd"
    header.write_bytes(hostile.mha(data_file=f"ElementDataFile = {name}\n", body=b""))
    with pytest.raises(GeometryError, match="header's folder|outside"):
        geometries.load(header)


def test_trusted_metaimage_data_file_next_to_header_loads(tmp_path: Path):
    (tmp_path / "image.raw").write_bytes(bytes([0, 1] * 60))
    header = tmp_path / "image.mhd"
    header.write_bytes(hostile.mha(data_file="ElementDataFile = image.raw\n", body=b""))
    assert geometries.load(header).shape == (4, 5, 6)


@pytest.mark.parametrize("name", ["/etc/passwd", "../secret.raw", "/proc/self/environ"])
def test_trusted_nrrd_data_file_stays_in_its_folder(tmp_path: Path, name):
    (tmp_path / "secret.raw").write_bytes(bytes(120))
    folder = tmp_path / "case"
    folder.mkdir()
    header = folder / "image.nhdr"
    header.write_bytes(
        b"NRRD0004\ntype: uint8\ndimension: 3\nsizes: 4 5 6\nencoding: raw\n"
        + f"data file: {name}\n\n".encode()
    )
    with pytest.raises(GeometryError, match="header's folder|outside"):
        geometries.load(header)


@pytest.mark.parametrize(
    ("data", "fmt", "match"),
    [
        (hostile.vti(zlib_claim=2**40), "vti", "reader failed|memory"),
        (hostile.vti(components="100000000"), "vti", "components"),
        (hostile.mha(extra="ElementNumberOfChannels = 100000000\n"), "mha", "Channels"),
        (hostile.mha(compressed="True", extra="CompressedDataSize = 99999999999999\n"), "mha",
         "CompressedDataSize"),
        (hostile.mha(etype="MET_STRING"), "mha", "not a number type"),
        (hostile.mha(ndims="4294967296"), "mha", "NDims"),
    ],
    ids=["zlib-2^40", "components", "channels", "compressed-size", "met-string", "ndims-2^32"],
)
def test_server_killers_cost_one_failed_upload(data, fmt, match):
    assert len(data) < 1024
    _refused(data, fmt, match)


def test_a_mat_file_that_crashes_scipy_costs_one_failed_upload_each_time():
    """In-process loadmat died (SIGSEGV) on about one load in four of this file; 20 loads would
    have killed the server with probability 0.997. In the worker each one is a GeometryError."""
    data = hostile.crashing_mat()
    for _ in range(20):
        _refused(data, "mat", "reader failed|could not be read|not a readable")


def test_decoy_extent_in_an_xml_comment_does_not_bypass_the_size_check():
    decoy = '<!-- <ImageData WholeExtent="0 3 0 4 0 5"> -->\n'
    _refused(hostile.vti(whole="0 9999 0 9999 0 9999", prefix=decoy), "vti", "more than the limit")


def test_looping_tiff_page_chain_is_refused_at_once():
    data = hostile.looping_tiff()
    assert len(data) < 512
    _refused(data, "tiff", "loops")


@pytest.mark.parametrize(
    ("build", "fmt"), [(hostile.npz_bomb, "npz"), (hostile.gzip_nrrd_bomb, "nrrd")]
)
def test_decompression_bombs_stop_at_the_declared_size(build, fmt):
    data = build(64)  # inflates to 64 MiB
    tracemalloc.start()
    try:
        with pytest.raises(GeometryError, match="truncated or corrupted"):
            geometries.load(data, format=fmt)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20


def test_worker_time_limit_becomes_a_clear_message():
    data = hostile.vti()
    with pytest.raises(GeometryError, match="longer than"):
        load_isolated(data, "vti", {"max_voxels": 1000}, Limits(seconds=0.0))


def test_worker_memory_limit_turns_an_abort_into_a_clear_message():
    with pytest.raises(GeometryError, match="reader failed"):
        load_isolated(hostile.vti(zlib_claim=2**33), "vti", {"max_voxels": 1000},
                      Limits(memory_bytes=2**31))


def test_valid_uploads_still_load_through_the_worker():
    for data, fmt in ((hostile.vti(), "vti"), (hostile.mha(body=bytes([0, 1] * 60)), "mha")):
        geometry = geometries.load(data, format=fmt, name="ok")
        assert geometry.shape == (4, 5, 6) and geometry.name == "ok"
    solid = geometries.load(hostile.mha(body=bytes([0, 1] * 60)), format="mha").solid
    assert np.array_equal(solid.reshape(-1, order="F"), np.array([0, 1] * 60, dtype=bool))


def test_npz_mask_may_not_declare_wide_elements():
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, value in (("solid", np.zeros((4, 5, 6))), ("voxel_size", 1.0),
                            ("origin", [0.0, 0.0, 0.0]), ("flow_axis", 0), ("name", "x")):
            out = io.BytesIO()
            np.save(out, np.asarray(value))
            archive.writestr(f"{name}.npy", out.getvalue())
    _refused(buffer.getvalue(), "npz", "8-byte elements")


def test_a_script_main_process_survives_a_reader_abort(tmp_path):
    # `panel serve` runs the app from a script, not `python -m`: the worker's children then
    # re-run that script's imports (multiprocessing's rule), which must work and not recurse.
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    script = tmp_path / "serve_like.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(root)!r})\n"
        "import geometries\n"
        "from tests.geometries import hostile_inputs as hostile\n"
        "def main():\n"
        "    for data in (hostile.vti(zlib_claim=2**40), hostile.vti()):\n"
        "        try:\n"
        "            print('loaded', geometries.load(data, format='vti').shape)\n"
        "        except geometries.GeometryError as exc:\n"
        "            print('refused', str(exc)[:60])\n"
        "if __name__ == '__main__':\n"
        "    main()\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "refused The vti reader failed on this file (SIGABRT, usually a malfo",
        "loaded (4, 5, 6)",
    ]


def test_npz_with_a_huge_member_directory_is_refused_before_parsing_it():
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for k in range(200):
            archive.writestr(f"e{k}", b"")
    _refused(buffer.getvalue(), "npz", "lists 200 members")


def test_npz_directory_count_cannot_be_faked_small():
    import io
    import struct
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for k in range(2000):
            archive.writestr(f"entry-{k:05d}-" + "x" * 40, b"")
    data = bytearray(buffer.getvalue())
    end = data.rfind(b"PK\x05\x06")
    data[end + 8 : end + 12] = struct.pack("<HH", 7, 7)  # claims 7 members
    _refused(bytes(data), "npz", "members")


def test_ascii_nrrd_value_count_is_bounded():
    header = b"NRRD0004\ntype: uint8\ndimension: 3\nsizes: 256 256 256\nencoding: ascii\n\n"
    with pytest.raises(GeometryError, match="gzip"):
        geometries.load(header + b"0 " * 1000, format="nrrd")
