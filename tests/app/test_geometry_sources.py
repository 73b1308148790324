"""Geometry sources, previews, estimates and exports of the dashboard (no browser)."""

from __future__ import annotations

import csv
import dataclasses
import io

import numpy as np
import pytest
import pyvista as pv

from app.estimates import darcy_regime, estimate_flow, kozeny_carman, specific_surface
from app.exports import fields_vti, history_csv, slice_png
from app.geometry_sources import (
    GENERATORS,
    UploadOptions,
    config_for,
    load_sample,
    load_upload,
    make_preview,
    sample_names,
)
from app.views.geometry_panel import memory_verdict
from geometries import GeometryError, VoxelGeometry
from geometries.openings import face_openings
from solver.config import SimulationConfig
from solver.tiling import Tiling, tile_utilisation


@pytest.mark.parametrize("name", list(GENERATORS))
def test_every_generator_builds_with_its_defaults(name):
    geometry = GENERATORS[name]().build()
    assert geometry.ndim == 3 and 0 < geometry.porosity < 1


def test_preview_reports_tiling_before_allocation():
    geometry = GENERATORS["Random sphere pack"](size=24, diameter=8, porosity=0.55).build()
    preview = make_preview(geometry, SimulationConfig(precision="float64"))
    tiling = Tiling.build(geometry.solid, 4, "best")
    assert preview.n_tiles == tiling.n_tiles and preview.n_fluid == tiling.n_fluid
    assert preview.eta_t_origin == pytest.approx(tile_utilisation(geometry.solid, 4))
    assert preview.eta_t_best >= preview.eta_t_origin
    assert preview.memory_bytes == tiling.memory_bytes(19, 8)
    assert preview.mid_slice.shape == (24, 24)
    assert preview.porosity == pytest.approx(geometry.porosity)


def test_config_fits_the_geometry():
    config = SimulationConfig(lattice="D3Q27", body_force=(0.0, 3e-5, 4e-5))
    flat = VoxelGeometry(np.zeros((16, 8), dtype=bool), flow_axis=1)
    fitted = config_for(flat, config)
    assert fitted.lattice == "D2Q9" and fitted.body_force == (0.0, 5e-5, 0.0)
    fitted.check(2)
    cube = VoxelGeometry(np.zeros((8, 8, 8), dtype=bool), flow_axis=2)
    assert config_for(cube, fitted).lattice == "D3Q19"
    assert config_for(cube, config).lattice == "D3Q27"
    assert config_for(cube, config).body_force == (0.0, 0.0, 5e-5)


def test_upload_of_shipped_samples_from_bytes():
    for name in sample_names():
        path = __import__("geometries").samples.sample_path(name)
        options = UploadOptions(stl_inside="fluid", stl_resolution=48).options(name)
        geometry = load_upload(path.read_bytes(), name, options, max_bytes=10**8)
        assert geometry.ndim == 3 and 0 < geometry.porosity < 1
    assert load_sample(sample_names()[0]).ndim == 3


def test_upload_refuses_garbage_and_oversize():
    with pytest.raises(GeometryError, match="npy"):
        load_upload(b"not an array at all" * 10, "x.npy", {}, max_bytes=10**6)
    with pytest.raises(GeometryError, match="POROUS_LBM_MAX_UPLOAD_MB"):
        load_upload(b"\0" * 2000, "x.raw", {}, max_bytes=1000)


def test_upload_options_follow_the_format():
    options = UploadOptions(raw_shape="4, 5, 6", raw_dtype="uint16", pore_value="1",
                            voxel_size_um=2.0)
    assert options.options("a.raw") == {"shape": (4, 5, 6), "dtype": "uint16",
                                        "pore_value": 1.0, "voxel_size": 2e-6}
    # B8: a voxel size replaces the resolution (the loader refuses both).
    assert options.options("a.stl") == {"voxel_size": 2e-6, "inside": "solid", "unit": "auto"}
    options.param.update(voxel_size_um=0.0, stl_unit="mm")
    assert options.options("a.stl") == {"resolution": 96, "inside": "solid", "unit": "mm"}
    with pytest.raises(GeometryError, match="nx, ny, nz"):
        UploadOptions(raw_shape="64").options("a.raw")
    assert UploadOptions(mat_variable=" vol ").options("ct.mat") == {"variable": "vol"}
    assert UploadOptions(mat_variable="vol").options("ct.tif") == {}
    with pytest.raises(GeometryError, match="not a number"):
        UploadOptions(pore_value="air").options("a.tif")
    data = np.zeros((4, 5, 6), dtype=np.uint16)
    data[0] = 7
    geometry = load_upload(data.tobytes(order="F"), "a.raw",
                           UploadOptions(raw_shape="4,5,6", raw_dtype="uint16").options("a.raw"),
                           max_bytes=10**6)
    assert geometry.shape == (4, 5, 6) and geometry.solid[0].all() and not geometry.solid[1:].any()


def test_memory_verdict_levels():
    assert memory_verdict(10, None, "x")[0] == "ok"
    assert memory_verdict(10, 100, "x")[0] == "ok"
    assert memory_verdict(60, 100, "x")[0] == "warning"
    level, text = memory_verdict(95, 100, "of GPU memory")
    assert level == "refused" and "smaller" in text


def test_specific_surface_and_kozeny_carman_agree_for_spheres():
    # A single solid cube of edge e in a box of n^3 has 6 e^2 faces.
    solid = np.zeros((20, 20, 20), dtype=bool)
    solid[5:11, 5:11, 5:11] = True
    assert specific_surface(solid) == pytest.approx(6 * 36 / 20**3)
    # With S = 6 (1 - eps) / d the surface form of Kozeny-Carman equals the diameter form.
    eps, d = 0.4, 10.0
    surface = 6 * (1 - eps) / d
    estimate = estimate_flow(eps, surface, force=1e-5, viscosity=0.1)
    assert estimate.permeability == pytest.approx(kozeny_carman(eps, d))
    assert estimate.grain_diameter == pytest.approx(d)
    assert estimate.darcy_velocity == pytest.approx(kozeny_carman(eps, d) * 1e-5 / 0.1)
    assert estimate_flow(1.0, 0.0, 1e-5, 0.1) is None
    assert "applies" in darcy_regime(0.5) and "not apply" in darcy_regime(50)


def test_exports_are_valid_files():
    solid = np.zeros((6, 5, 4), dtype=bool)
    solid[0] = True
    u = np.random.default_rng(0).normal(size=(3, 6, 5, 4))
    u[:, solid] = np.nan
    rho = np.where(solid, np.nan, 1.0)
    data = fields_vti({"rho": rho, "u": u}, solid, voxel_size=2e-6)
    path = io.BytesIO(data)
    assert data.startswith(b"<?xml") and b"ImageData" in data
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".vti") as handle:
        handle.write(path.getvalue())
        handle.flush()
        image = pv.read(handle.name)
    assert image.n_cells == solid.size
    assert image.spacing == pytest.approx((2e-6,) * 3)
    cell_u = image.cell_data["u"].reshape(4, 5, 6, 3)  # (z, y, x) order of the flat cells
    np.testing.assert_allclose(cell_u[1, 2, 3], u[:, 3, 2, 1])
    assert image.cell_data["solid"].sum() == solid.sum()

    png = slice_png(u[0, :, :, 1], ("x", "y"), "ux", title="test")
    assert png.startswith(b"\x89PNG") and len(png) > 2000

    text = history_csv({"step": np.array([1.0, 2.0]), "mflups": np.array([0.5, np.nan])},
                       ("step", "mflups"))
    rows = list(csv.reader(io.StringIO(text)))
    assert rows == [["step", "mflups"], ["1", "0.5"], ["2", ""]]


def test_an_stl_voxel_size_from_the_ui_loads(tmp_path):
    """B8: 'Give either resolution= or voxel_size=, not both' for every UI voxel size."""
    import trimesh

    from tests.geometries.geometry_builders import stl_bytes

    data = stl_bytes(trimesh.creation.box(extents=(167.0, 80.0, 60.0)))
    options = UploadOptions(stl_inside="fluid", voxel_size_um=4000.0)
    geometry = load_upload(data, "aorta.stl", options.options("aorta.stl"), max_bytes=10**8)
    assert geometry.voxel_size == pytest.approx(4e-3)
    assert geometry.shape == (42, 20, 15)
    assert "millimetres (guessed from a 167 x 80 x 60 extent)" in geometry.notes[0]


def test_a_preview_refuses_voxels_of_metres_with_unit_advice():
    """B2: a millimetre STL read as metres gave 1.67e6 µm voxels that failed only on 'Use'."""
    geometry = VoxelGeometry(np.zeros((8, 8, 8), dtype=bool), voxel_size=1.67)
    with pytest.raises(GeometryError, match="1.67 m wide.*Change STL units"):
        make_preview(geometry, SimulationConfig())


def test_random_bytes_read_as_raw_are_flagged_not_ready():
    """#17: random bytes as .raw (porosity 0.004, nothing connected) were accepted as Ready."""
    data = np.random.default_rng(1).integers(0, 256, 32**3, dtype=np.uint8).tobytes()
    options = UploadOptions(raw_shape="32,32,32").options("noise.raw")
    preview = make_preview(load_upload(data, "noise.raw", options, 10**6), SimulationConfig())
    assert preview.doubtful
    assert "porosity is 0.00" in preview.notes[0] and "implausibly low" in preview.notes[0]
    assert "no fluid path connects the two x ends" in preview.notes[1]


def test_a_connected_pore_space_raises_no_doubt():
    solid = np.ones((12, 10, 10), dtype=bool)
    solid[:, 4:7, 4:7] = False
    preview = make_preview(VoxelGeometry(solid), SimulationConfig())
    assert not preview.doubtful and preview.notes == ()
    solid[6] = True  # a wall across the channel
    preview = make_preview(VoxelGeometry(solid), SimulationConfig())
    assert preview.doubtful and "no fluid path" in preview.notes[0]


def test_the_vessel_sample_driven_by_its_openings_raises_no_doubt():
    """Seen in the browser: the vessel sample, driven by its openings, was flagged "no fluid
    path connects the two x ends ... the flow will be zero" (its x max end is solid) while it
    flows from opening 1 to 2 and 3."""
    preview = make_preview(load_sample("vessel_bifurcation.stl"), SimulationConfig())
    assert preview.groups and not preview.doubtful, preview.notes


def test_openings_with_no_fluid_path_between_them_are_doubted():
    solid = np.ones((12, 10, 10), dtype=bool)
    solid[:, 4:7, 4:7] = False
    solid[6] = True  # a wall across the channel
    for drive in ("x faces: inlet x min, outlet x max", "openings of the geometry"):
        geometry = VoxelGeometry(solid, voxel_size=1e-4)
        if drive.startswith("openings"):  # the two face patches as the geometry's own
            geometry = dataclasses.replace(geometry, openings=face_openings(geometry, axes=(0,)))
        preview = make_preview(geometry, SimulationConfig(), drive)
        assert preview.doubtful and "no fluid path connects two of its open openings" in (
            preview.notes[0]), (drive, preview.notes)
    solid[6] = False
    geometry = VoxelGeometry(solid, voxel_size=1e-4)
    geometry = dataclasses.replace(geometry, openings=face_openings(geometry, axes=(0,)))
    preview = make_preview(geometry, SimulationConfig(), "openings of the geometry")
    assert not preview.doubtful, preview.notes
