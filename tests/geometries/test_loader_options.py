"""The options each loader declares for a person reading a file (geometries/loaders/options.py)."""

from __future__ import annotations

import inspect

import pytest

from geometries import GeometryError
from geometries.loaders import FORMATS, LOADER_OPTIONS, format_of, loader_options


def test_every_format_declares_options_its_loader_takes():
    assert set(LOADER_OPTIONS) == set(FORMATS)
    for fmt, declared in LOADER_OPTIONS.items():
        keywords = inspect.signature(FORMATS[fmt]).parameters
        for option in declared:
            assert option.keyword in keywords, f"{fmt} loader takes no {option.keyword}="
            if option.choices is not None:
                assert option.default in option.choices


def test_declared_options_become_loader_keywords():
    stl = LOADER_OPTIONS["stl"]
    assert loader_options(stl, {}) == {"unit": "auto", "resolution": 96, "inside": "solid"}
    # openings only for a fluid lumen; a voxel size (µm shown, m passed) replaces the resolution
    assert loader_options(stl, {"stl_inside": "fluid", "voxel_size_um": 5.0}) == {
        "unit": "auto", "inside": "fluid", "openings": "auto", "voxel_size": pytest.approx(5e-6)}
    raw = LOADER_OPTIONS["raw"]
    assert loader_options(raw, {"raw_shape": "4 x 5 x 6", "threshold": " 0.5 "}) == {
        "shape": (4, 5, 6), "dtype": "uint8", "threshold": 0.5}
    with pytest.raises(GeometryError, match="nx, ny, nz"):
        loader_options(raw, {})
    with pytest.raises(GeometryError, match="not a number"):
        loader_options(LOADER_OPTIONS["tiff"], {"threshold": "grey"})
    assert format_of("CT.TIF") == "tiff" and format_of("notes.txt") is None
