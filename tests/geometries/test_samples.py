"""Bundled samples: listed, validated by name, documented, loadable, reproducible."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import trimesh

from geometries import GeometryError, samples
from geometries.samples import make_samples


def test_every_sample_is_listed_documented_and_small():
    names = samples.list_samples()
    readme = (samples.sample_path(names[0]).parent / "README.md").read_text()
    assert names == ["sphere_pack_48.tif", "stenosed_vessel.stl", "vessel_bifurcation.stl"]
    assert sum(samples.sample_path(n).stat().st_size for n in names) < 2 * 1024**2
    for name in names:
        assert f"`{name}`" in readme


def test_sample_names_are_validated_never_used_as_paths():
    with pytest.raises(GeometryError, match="Unknown sample.*choose one of"):
        samples.sample_path("../../pyproject.toml")


def test_vessel_sample_lumen_volume():
    geom = samples.load_sample("stenosed_vessel.stl")
    assert geom.flow_axis == 0 and geom.labels is None
    mesh = trimesh.load_mesh(samples.sample_path("stenosed_vessel.stl"))
    fluid_volume = geom.n_fluid * (geom.voxel_size * 1e3) ** 3
    assert fluid_volume == pytest.approx(mesh.volume, rel=0.03)
    # The ends of the lumen reach the inlet and outlet faces.
    assert not geom.solid[0].all() and not geom.solid[-1].all()


def test_bifurcation_sample_has_one_inlet_and_two_outlets():
    path = samples.sample_path("vessel_bifurcation.stl")
    assert path.stat().st_size < 200 * 1024
    assert not trimesh.load_mesh(path).is_watertight  # open at its three ends
    geom = samples.load_sample("vessel_bifurcation.stl")
    assert len(geom.openings) == 3 and {o.source for o in geom.openings} == {"stl-loop"}
    inlet, *outlets = geom.openings  # numbered by decreasing area: the parent vessel first
    assert inlet.normal == pytest.approx((-1.0, 0.0, 0.0), abs=1e-6)
    assert inlet.diameter == pytest.approx(2e-3, rel=0.03)
    assert inlet.centre == pytest.approx((0.0, 0.0, 0.0), abs=1e-6)
    # Daughters of Murray's radius leave at ±35° in the xy-plane, 6 mm from the junction.
    a = np.radians(35.0)
    for opening, sign in zip(sorted(outlets, key=lambda o: -o.normal[1]), (1, -1), strict=True):
        assert opening.normal == pytest.approx((np.cos(a), sign * np.sin(a), 0.0), abs=1e-3)
        assert opening.diameter == pytest.approx(2e-3 / 2 ** (1 / 3), rel=0.03)
        expected = 1e-3 * np.array([6 + 6 * np.cos(a), sign * 6 * np.sin(a), 0.0])
        assert np.linalg.norm(np.asarray(opening.centre) - expected) < geom.voxel_size
    for opening in geom.openings:
        assert opening.n_nodes > 0.9 * opening.area / geom.voxel_size**2
        assert not geom.solid[tuple(opening.nodes.T)].any()
    # The lumen is one connected region (face connectivity).
    components, count = ndi.label(~geom.solid)
    assert count == 1


def test_pack_sample_matches_its_generator():
    geom = samples.load_sample("sphere_pack_48.tif")
    np.testing.assert_array_equal(geom.solid, make_samples.make_sphere_pack().astype(bool))
    assert geom.voxel_size is None and geom.porosity == pytest.approx(0.45, abs=0.01)


def test_regenerated_samples_are_byte_identical(tmp_path):
    make_samples.main(tmp_path)
    for name in samples.list_samples():
        assert (tmp_path / name).read_bytes() == samples.sample_path(name).read_bytes(), name
