"""Ray-parity voxeliser: exact on grid-aligned boxes, accurate on curved and non-convex shapes."""

from __future__ import annotations

import numpy as np
import pytest
import trimesh

from geometries.voxelize import voxelize_triangles


def _voxel_triangles(mesh: trimesh.Trimesh, n: int) -> tuple[np.ndarray, float]:
    """Triangles in voxel units for an n-voxel grid over the mesh bounds, and the voxel edge."""
    lo, hi = mesh.bounds
    h = (hi - lo).max() / n
    return (mesh.triangles - lo) / h - 0.5, h


def test_box_with_vertices_on_ray_positions_is_exact():
    # Faces, edges and vertices sit exactly on voxel centres, so every ray of the box hits an
    # edge or a vertex; ties may go either way, but the result must be one full 10×6×8 box.
    box = trimesh.creation.box(extents=(10, 6, 8))
    tri = box.triangles + np.array([5.0, 3.0, 4.0]) + 1.0
    mask = voxelize_triangles(tri, (12, 8, 10))
    idx = np.argwhere(mask)
    lo, hi = idx.min(axis=0), idx.max(axis=0) + 1
    assert tuple(hi - lo) == (10, 6, 8)
    assert mask.sum() == 10 * 6 * 8


@pytest.mark.parametrize("n", [32, 64])
def test_sphere_volume_matches_analytic(n):
    sphere = trimesh.creation.icosphere(subdivisions=5)
    tri, h = _voxel_triangles(sphere, n)
    volume = voxelize_triangles(tri, (n, n, n)).sum() * h**3
    assert volume == pytest.approx(4 / 3 * np.pi, rel=0.02)


def test_torus_has_hole_and_right_volume():
    torus = trimesh.creation.torus(major_radius=1.0, minor_radius=0.3)
    tri, h = _voxel_triangles(torus, 80)
    shape = (80, 80, int(np.ceil(0.6 / h)))
    mask = voxelize_triangles(tri, shape)
    assert mask.sum() * h**3 == pytest.approx(torus.volume, rel=0.03)
    assert not mask[40, 40].any()  # the hole in the middle stays empty


def test_three_direction_vote_equals_single_scan_on_watertight_mesh():
    mesh = trimesh.creation.capsule(height=1.0, radius=0.4)
    tri, _ = _voxel_triangles(mesh, 40)
    shape = tuple(int(np.ceil(e)) for e in (mesh.extents / (mesh.extents.max() / 40)))
    np.testing.assert_array_equal(
        voxelize_triangles(tri, shape), voxelize_triangles(tri, shape, directions=3)
    )


def test_triangles_outside_the_grid_are_clipped():
    sphere = trimesh.creation.icosphere(subdivisions=3)
    tri, _ = _voxel_triangles(sphere, 20)
    mask = voxelize_triangles(tri - 10.0, (20, 20, 20))  # centre moved to the grid corner
    assert mask[0, 0, 0] and not mask[19, 19, 19]
    assert 0 < mask.sum() < 20**3 / 4
