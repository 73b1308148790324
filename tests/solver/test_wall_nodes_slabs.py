"""Wall nodes built in slabs (solver.wall_shear.wall_nodes) equal the whole grid's bit for bit."""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pytest
from scipy import ndimage

from solver.config import SimulationConfig
from solver.problem import Problem
from solver.simulation import Simulation
from solver.wall_shear import WallNodes, wall_nodes

from .test_iolets import TRT, tube


def whole_grid_walls(problem: Any) -> WallNodes:
    """The wall nodes as built before slabs (whole-grid solid, Gaussian and np.gradient): the
    reference the slabs must reproduce exactly."""
    tiling, lat = problem.tiling, problem.lattice
    solid = tiling.scatter(tiling.solid[..., None], fill=True)[..., 0]
    shape = np.asarray(solid.shape)
    near = ndimage.binary_dilation(solid, np.ones((3,) * solid.ndim, dtype=bool)) & ~solid
    for opening in getattr(problem, "openings", ()):
        near[tuple(opening.nodes.T)] = False
    fluid = np.argwhere(near)
    c = lat.c.astype(np.int64)
    src = fluid[None, :, :] - c[:, None, :]
    outside = np.zeros(src.shape[:2], dtype=bool)
    for ax, periodic in enumerate(problem.periodic):
        if periodic:
            src[..., ax] %= shape[ax]
        else:
            outside |= (src[..., ax] < 0) | (src[..., ax] >= shape[ax])
    safe = np.where(outside[..., None], 0, src)
    hit = outside | solid[tuple(np.moveaxis(safe, -1, 0))]
    is_wall = hit.any(axis=0)
    voxels = fluid[is_wall]
    hit, safe = hit[:, is_wall], safe[:, is_wall]
    smooth = ndimage.gaussian_filter(solid.astype(np.float64), 1.0, mode="nearest")
    grad = np.stack(np.gradient(smooth), axis=-1)[tuple(voxels.T)]
    length = np.linalg.norm(grad, axis=1, keepdims=True)
    normals = -grad / np.where(length > 0, length, 1.0)
    own_tile, own_node = tiling.locate(voxels)
    src_tile, src_node = tiling.locate(safe)
    dirs = np.repeat(np.arange(lat.q)[:, None], len(voxels), axis=1)
    opp = np.asarray(lat.opposite)[:, None]
    return WallNodes(voxels, normals, np.where(hit, own_tile[None, :], src_tile),
                     np.where(hit, np.broadcast_to(opp, hit.shape), dirs),
                     np.where(hit, own_node[None, :], src_node))


def assert_identical(got: WallNodes, want: WallNodes) -> None:
    for name in ("voxels", "normals", "tile", "direction", "node"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert np.array_equal(a, b), name  # bit-identical, in the same order


def problem_of(solid: np.ndarray, **faces) -> Problem:
    lattice = "D2Q9" if solid.ndim == 2 else "D3Q19"
    return Problem.from_config(solid, SimulationConfig(lattice=lattice, tau=0.8, **faces))


WALLS = {f"{ax}_{end}": "wall" for ax in "xyz" for end in ("min", "max")}


def vessel_tube(n: int = 24) -> np.ndarray:
    """A curved tube through a box (solid outside it), walls on every face."""
    x, y, z = np.indices((n, n, n))
    cy, cz = n / 2 + 3 * np.sin(x / n * np.pi), n / 2
    return (y - cy) ** 2 + (z - cz) ** 2 > (n / 4) ** 2


def sphere_pack(n: int = 20, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    grid = np.indices((n, n, n)).transpose(1, 2, 3, 0)
    solid = np.zeros((n, n, n), dtype=bool)
    for centre in rng.uniform(0, n, (12, 3)):
        d = np.abs(grid - centre)
        d = np.minimum(d, n - d)  # periodic spheres
        solid |= (d**2).sum(-1) < 3.5**2
    return solid


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 1000])
def test_vessel_tube_slabs_are_bit_identical(rows):
    problem = problem_of(vessel_tube(), **WALLS)
    assert_identical(wall_nodes(problem, slab_rows=rows), whole_grid_walls(problem))


@pytest.mark.parametrize("rows", [1, 4, 6])
def test_sphere_pack_with_periodic_axes_is_bit_identical(rows):
    """Periodic x (the slab axis: sources wrap across its seam) and y, walls in z."""
    faces = {"z_min": "wall", "z_max": "wall"}
    problem = problem_of(sphere_pack(), **faces)
    assert problem.periodic[0] and problem.periodic[1] and not problem.periodic[2]
    walls = wall_nodes(problem, slab_rows=rows)
    assert_identical(walls, whole_grid_walls(problem))
    assert (walls.voxels[:, 0] == 0).any()  # wall nodes on the seam's rows are covered


@pytest.mark.parametrize("rows", [1, 5])
def test_2d_slabs_are_bit_identical(rows):
    y, x = np.indices((30, 22))
    solid = ((x - 11) ** 2 + (y - 14) ** 2 < 36) | (y < 2)
    problem = problem_of(solid, x_min="wall", x_max="wall")
    assert_identical(wall_nodes(problem, slab_rows=rows), whole_grid_walls(problem))


@pytest.mark.parametrize("rows", [2, 9])
def test_openings_planes_stay_excluded(rows):
    sim = Simulation(tube(4, 30.0), SimulationConfig(**TRT, openings={1: "pressure",
                                                                      2: "pressure"}))
    problem = sim.problem
    assert problem.openings
    assert_identical(wall_nodes(problem, slab_rows=rows), whole_grid_walls(problem))


@pytest.mark.parametrize("gap", [1, 2, 5, 6])
@pytest.mark.parametrize("rows", [3, 8])
def test_cuts_near_a_solid_feature(gap, rows):
    """A solid plate whose face lies ``gap`` voxels from a slab cut: inside the Gaussian's
    reach and just outside it, on either side."""
    n = 26
    solid = np.zeros((n, 12, 10), dtype=bool)
    solid[:, 0] = True
    cut = 2 * rows  # a slab boundary
    for row in (cut - gap, cut + gap - 1):  # the feature's face `gap` from the cut, each side
        if 0 <= row < n:
            solid[row, 4:8, 3:7] = True
    problem = problem_of(solid, x_min="wall", x_max="wall")
    assert_identical(wall_nodes(problem, slab_rows=rows), whole_grid_walls(problem))


def test_non_positive_slab_rows_is_refused():
    with pytest.raises(ValueError, match="slab_rows"):
        wall_nodes(problem_of(vessel_tube(12), **WALLS), slab_rows=0)


def peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_slab_peak_is_well_below_the_whole_grid_peak():
    """96³ vessel tube, 8-row slabs: measured 2026-11-28 a 15.4 MB peak (the 7.6 MB result,
    held twice while the slabs' parts are joined) against the whole grid's 69.4 MB (256³:
    benchmarks/vessel/README.md)."""
    problem = problem_of(vessel_tube(96), **WALLS)
    slabs = peak_bytes(lambda: wall_nodes(problem, slab_rows=8))
    whole = peak_bytes(lambda: whole_grid_walls(problem))
    assert slabs < 0.4 * whole, (slabs, whole)


@pytest.mark.parametrize("rows", [1, 4])
def test_slabs_without_tiles_are_skipped_exactly(rows):
    """Rows of solid alone (no tile in their layers) at both ends of the slab axis."""
    solid = vessel_tube()
    solid[:9] = solid[-5:] = True
    problem = problem_of(solid, **WALLS)
    assert_identical(wall_nodes(problem, slab_rows=rows), whole_grid_walls(problem))
