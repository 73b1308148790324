"""Pore connectivity with the lattice's links; isolated and dead-end volumes; sample checks."""

from __future__ import annotations

import numpy as np
import pytest

from geometries import GeometryError, VoxelGeometry
from geometries.pores import (
    check_sample,
    connectivity,
    pore_labels,
    pore_report,
    pore_reports,
    sample_hints,
)
from geometries.preprocess import keep_connected
from solver.lattice import get_lattice

D3Q19 = get_lattice("D3Q19").c


def _edge_staircase(n: int = 8) -> VoxelGeometry:
    """Fluid voxels along x that touch only through edges: (i, i % 2 + 1, 1) for every i."""
    solid = np.ones((n, 4, 3), bool)
    for i in range(n):
        solid[i, 1 + i % 2, 1] = False
    return VoxelGeometry(solid, voxel_size=1e-5)


def test_connectivity_follows_the_velocity_set():
    assert connectivity(D3Q19, 3).sum() == 19  # 18 neighbours + the voxel itself
    assert connectivity(get_lattice("D3Q27").c, 3).sum() == 27
    assert connectivity(get_lattice("D2Q9").c, 2).sum() == 9
    assert connectivity(None, 3).sum() == 7
    with pytest.raises(GeometryError, match="velocity set of shape"):
        connectivity(np.zeros((5, 2), int), 3)


def test_edge_only_channel_percolates_with_d3q19_not_with_faces():
    geom = _edge_staircase()
    kept, dropped = keep_connected(geom, links=D3Q19)
    assert dropped == 0 and kept.n_fluid == geom.n_fluid
    with pytest.raises(GeometryError, match="No fluid path"):
        keep_connected(geom)  # faces only: the staircase is cut at every step
    assert check_sample(geom, links=D3Q19).percolating_voxels == geom.n_fluid
    with pytest.raises(GeometryError, match="No connected pore path.*along x"):
        check_sample(geom, links=None)


def test_edge_joined_pocket_is_kept_with_d3q19():
    solid = np.ones((6, 5, 5), bool)
    solid[:, 2, 2] = False  # straight channel along x
    solid[3, 3, 3] = False  # joined to it across an edge only
    geom = VoxelGeometry(solid)
    assert keep_connected(geom, links=D3Q19)[1] == 0
    assert keep_connected(geom)[1] == 1


def test_dead_end_and_isolated_volumes():
    solid = np.ones((10, 6, 6), bool)
    solid[:, 1, 1] = False            # through channel: 10 voxels
    solid[:4, 4, 4] = False           # blind hole from the inlet: 4 voxels (dead end)
    solid[4:7, 3, 1] = False          # sealed pocket, 3 voxels, 2 away from the channel
    geom = VoxelGeometry(solid, voxel_size=2e-6)
    report = pore_report(geom, axis=0, links=D3Q19)
    assert (report.percolating_voxels, report.dead_end_voxels, report.isolated_voxels) == (
        10, 4, 3)
    assert report.fraction(report.dead_end_voxels) == pytest.approx(4 / 17)
    assert report.volume_m3(report.isolated_voxels) == pytest.approx(3 * 8e-18)
    d = report.as_dict()
    assert d["dead_end_volume_m3"] == pytest.approx(4 * 8e-18)
    assert d["isolated_fraction"] == pytest.approx(3 / 17)
    assert "dead-end 23.5 %" in report.summary()
    # along y nothing percolates: the check refuses with the axis named
    with pytest.raises(GeometryError, match="along y"):
        check_sample(geom, axis=1, links=D3Q19)


def test_inverted_pore_label_is_hinted():
    rng = np.random.default_rng(1)
    rock = rng.random((12, 12, 12)) < 0.8  # solid 80 %: plausible rock
    assert sample_hints(VoxelGeometry(rock)) == []
    hints = sample_hints(VoxelGeometry(~rock))  # porosity 0.8: probably inverted
    assert any("pore label is inverted" in h for h in hints)


def test_pore_space_around_a_core_is_hinted():
    n = 16
    x, y = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    outside = (x - 7.5) ** 2 + (y - 7.5) ** 2 > 7.5**2
    solid = np.ones((n, n, n), bool)
    solid[outside] = False  # outside of a cylindrical core labelled pore
    solid[8, 8, :] = False
    hints = sample_hints(VoxelGeometry(solid))
    assert any("cylindrical core" in h for h in hints)


def test_pore_reports_label_once_and_agree_with_single_axis():
    pack = np.random.default_rng(3).random((10, 9, 8)) < 0.5
    geom = VoxelGeometry(pack, voxel_size=1e-6)
    many = pore_reports(geom, None, D3Q19)
    assert [r.axis for r in many] == [0, 1, 2]
    for r in many:
        assert r == pore_report(geom, r.axis, D3Q19)


def test_one_labelling_serves_every_axis_and_both_checks():
    """pore_labels made once and passed as ``components`` gives the reports and the connected
    samples of labelling each time (a 1000³ image's labelling is 4 GB and tens of seconds)."""
    pack = np.random.default_rng(5).random((10, 9, 8)) < 0.45
    geom = VoxelGeometry(pack, voxel_size=1e-6)
    labels = pore_labels(geom, D3Q19)
    for axis in range(3):
        assert pore_report(geom, axis, D3Q19, labels) == pore_report(geom, axis, D3Q19)
        try:
            alone = keep_connected(geom, axis, D3Q19)
        except GeometryError:
            with pytest.raises(GeometryError):
                keep_connected(geom, axis, D3Q19, labels)
            continue
        shared = keep_connected(geom, axis, D3Q19, labels)
        assert shared[1] == alone[1]
        np.testing.assert_array_equal(shared[0].solid, alone[0].solid)


@pytest.mark.parametrize("channels", [1, 2, 6])
def test_keep_connected_keeps_every_channel_joining_the_faces(channels):
    """Fluid of each of ``channels`` straight channels along x is kept, a dead end and an
    isolated pore are dropped: the same with few joining components (compared one by one)
    and with many (looked up in a table)."""
    solid = np.ones((10, 3 * channels + 4, 5), bool)
    for c in range(channels):
        solid[:, 1 + 3 * c, 2] = False  # joins both faces
    solid[:4, -2, 2] = False  # a dead end from the inlet
    solid[5:7, -2, 2] = False  # isolated
    geom = VoxelGeometry(solid, voxel_size=1e-5)
    kept, dropped = keep_connected(geom, 0, D3Q19)
    want = np.ones_like(solid)
    for c in range(channels):
        want[:, 1 + 3 * c, 2] = False
    np.testing.assert_array_equal(kept.solid, want)
    assert dropped == 6
