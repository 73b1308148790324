"""Fuzzing the loaders: random bytes, mutated and truncated valid files of every format.

Whatever the input, ``geometries.load`` may only raise GeometryError (warnings are allowed).
8 500 inputs in all; inputs are small so that the module runs in well under a minute.
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import geometries
from geometries import GeometryError, VoxelGeometry

from .geometry_builders import (
    asymmetric_volume,
    mha_bytes,
    npy_bytes,
    nrrd_bytes,
    sphere_mesh,
    stl_bytes,
    tiff_bytes,
    vtk_bytes,
)

# Small grids keep every example cheap; the limit also caps what a mutated header can claim.
_OPTIONS = {"max_voxels": 20_000}
_STL_OPTIONS = {"resolution": 12, **_OPTIONS}
_RAW_OPTIONS = {"shape": (4, 5, 6), **_OPTIONS}


def _valid_files() -> dict[str, bytes]:
    """One small valid file per format (built once, at import)."""
    xyz = asymmetric_volume((4, 5, 6))
    mesh = sphere_mesh(subdivisions=1)
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        VoxelGeometry(xyz.astype(bool), voxel_size=1e-6).save(tmp / "g.npz")
        return {
            "stl": stl_bytes(mesh),
            "stl-ascii": stl_bytes(mesh, ascii=True),
            "npy": npy_bytes(xyz),
            "npz": (tmp / "g.npz").read_bytes(),
            "raw": xyz.tobytes(order="F"),
            "tiff": tiff_bytes(xyz.T),
            "vti": vtk_bytes(xyz, ".vti", tmp),
            "vtk": vtk_bytes(xyz, ".vtk", tmp),
            "mha": mha_bytes(xyz),
            "nrrd": nrrd_bytes(xyz),
        }


VALID = _valid_files()
_FUZZ = dict(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _options(fmt: str) -> dict:
    """Loader options for fuzzing ``fmt`` (small grids)."""
    return {"stl": _STL_OPTIONS, "raw": _RAW_OPTIONS}.get(fmt.split("-")[0], _OPTIONS)


def _load_or_geometry_error(data: bytes, fmt: str | None) -> None:
    """Load ``data``; succeed or raise GeometryError, nothing else."""
    options = _options(fmt) if fmt else _OPTIONS
    hint = {"format": fmt.split("-")[0]} if fmt else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            geometries.load(data, **hint, **options)
        except GeometryError as exc:
            assert str(exc)


def _mutate(blob: bytes, ops: bytes) -> bytes:
    """Apply edits coded 4 bytes each (position: 2, value: 1, kind: 1) to ``blob``."""
    data = bytearray(blob)
    for k in range(0, len(ops) - 3, 4):
        pos = int.from_bytes(ops[k : k + 2], "little") % (len(data) + 1)
        value, kind = ops[k + 2], ops[k + 3] % 8
        if kind == 0:
            del data[pos:]  # truncation
        elif kind == 1:
            data[pos:pos] = bytes([value])  # insertion
        elif pos < len(data):
            data[pos] = value  # replacement (most edits)
    return bytes(data)


def mutated(fmt: str) -> st.SearchStrategy[bytes]:
    """A valid file of ``fmt`` with a few bytes replaced, inserted or cut off (one draw)."""
    return st.binary(min_size=4, max_size=32).map(lambda ops: _mutate(VALID[fmt], ops))


@settings(max_examples=3000, **_FUZZ)
@given(st.binary(max_size=600))
def test_random_bytes_without_a_name(data):
    _load_or_geometry_error(data, None)


# 600: the worker-process formats make each example ~40 ms; CI's 30 minutes are the budget (the
# loader fuzz benchmark, benchmarks/loader_fuzz, runs the long campaigns).
@settings(max_examples=600, **_FUZZ)
@given(st.sampled_from(sorted(VALID)), st.binary(max_size=400))
def test_random_bytes_with_a_format(fmt, data):
    _load_or_geometry_error(data, fmt)


@settings(max_examples=200, **_FUZZ)
@given(st.sampled_from(sorted(VALID)), st.data())
def test_truncated_files(fmt, data):
    blob = VALID[fmt]
    _load_or_geometry_error(blob[: data.draw(st.integers(0, len(blob) - 1))], fmt)


@settings(max_examples=400, **_FUZZ)
@given(st.sampled_from(sorted(VALID)).flatmap(mutated))
def test_mutated_files_without_a_name(data):
    _load_or_geometry_error(data, None)


def _mutation_test(fmt: str, examples: int):
    """Return a test feeding ``examples`` mutated ``fmt`` files to its loader."""

    @settings(max_examples=examples, **_FUZZ)
    @given(mutated(fmt))
    def test(data):
        _load_or_geometry_error(data, fmt)

    return test


# 3 560 mutated files; cheap formats get more of them (vti, vtk, mha and tiff uploads each
# start a worker process, ~30 ms, see geometries.loaders.isolation).
test_mutated_npy = _mutation_test("npy", 1000)
test_mutated_npz = _mutation_test("npz", 800)
test_mutated_raw = _mutation_test("raw", 500)
test_mutated_stl = _mutation_test("stl", 200)
test_mutated_stl_ascii = _mutation_test("stl-ascii", 150)
test_mutated_tiff = _mutation_test("tiff", 150)
test_mutated_vti = _mutation_test("vti", 120)
test_mutated_vtk = _mutation_test("vtk", 120)
test_mutated_mha = _mutation_test("mha", 120)
test_mutated_nrrd = _mutation_test("nrrd", 400)


def test_valid_files_all_load():
    for fmt, data in VALID.items():
        assert geometries.load(data, format=fmt.split("-")[0], **_options(fmt)).n_fluid > 0
    assert np.all(geometries.load(VALID["npy"]).solid == (asymmetric_volume((4, 5, 6)) != 0))
