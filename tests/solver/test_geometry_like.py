"""GeometryLike: what the solver reads from a geometry, one adapter for plain masks."""

from types import SimpleNamespace

import numpy as np

from geometries import VoxelGeometry
from solver.problem import GeometryLike, as_geometry


def test_voxel_geometry_is_geometry_like_and_passes_through() -> None:
    g = VoxelGeometry(np.zeros((4, 5, 6), bool), voxel_size=2e-6, flow_axis=2, name="box")
    assert isinstance(g, GeometryLike)
    assert as_geometry(g) is g


def test_plain_mask_gets_no_size_axis_labels_or_name() -> None:
    mask = np.zeros((4, 5), bool)
    g = as_geometry(mask)
    assert isinstance(g, GeometryLike) and g.solid is mask
    assert (g.voxel_size, g.origin, g.flow_axis, g.labels, g.name) == (None, (), None, None, "")


def test_partial_stand_in_keeps_what_it_has() -> None:
    mask = np.zeros((4, 5), bool)
    g = as_geometry(SimpleNamespace(solid=mask, voxel_size=1e-5, flow_axis=1))
    assert g.solid is mask and g.voxel_size == 1e-5 and g.flow_axis == 1
    assert g.labels is None and g.origin == () and g.name == ""
