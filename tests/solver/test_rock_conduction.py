"""Formation factor of pore spaces (solver.rock.conduction) against analytic and published F."""

from __future__ import annotations

import numpy as np
import pytest

from solver.rock.conduction import formation_factor


def _maxwell(f: float) -> float:
    """F of insulating spheres at volume fraction f (Maxwell 1873, Treatise vol. 1 art. 314)."""
    return (2.0 + f) / (2.0 * (1.0 - f))


def _cells(centres, radius: float, edge: int, cells: int) -> np.ndarray:
    """``cells`` cubic unit cells of ``edge`` voxels along x, spheres at ``centres`` (in units
    of the edge) of ``radius`` voxels; True = grain."""
    i = np.arange(edge) + 0.5
    x, y, z = np.meshgrid(i, i, i, indexing="ij")
    solid = np.zeros((edge,) * 3, bool)
    for c in centres:
        cx, cy, cz = (edge * v for v in c)
        solid |= (x - cx) ** 2 + (y - cy) ** 2 + (z - cz) ** 2 < radius**2
    return np.tile(solid, (cells, 1, 1))


SC = [(0.5, 0.5, 0.5)]
BCC = [(0.5, 0.5, 0.5)] + [(a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)]


def test_straight_channels_give_one_over_porosity_on_every_axis():
    solid = np.ones((12, 10, 14), bool)
    solid[:, 2:6, 3:8] = False  # along x
    c = formation_factor(solid, 0)
    assert c.formation_factor == pytest.approx(1.0 / c.porosity, rel=1e-8)
    assert c.tortuosity == pytest.approx(1.0, rel=1e-8) and c.current_balance < 1e-6
    cube = np.ones((9, 9, 9), bool)
    cube[2:5, 2:5, :] = False  # along z
    assert formation_factor(cube, 2).formation_factor == pytest.approx(81 / 9, rel=1e-8)
    with pytest.raises(ValueError, match="No face-connected pore path"):
        formation_factor(cube, 0)


def _slab(slope: float, thickness: int, height: int = 64, length: int = 192) -> np.ndarray:
    """A slab channel rising ``slope`` voxels in z per voxel in x, ``thickness`` voxels high
    in z, periodic in z (True = grain)."""
    x = np.arange(length)[:, None, None] + 0.5
    z = np.arange(height)[None, None, :] + 0.5
    return ~(((z - slope * x) % height) < thickness)


@pytest.mark.parametrize("slope", [0.25, 0.5])
def test_tilted_slab_channel_approaches_one_over_porosity_cos_squared(slope):
    theta = np.arctan(slope)
    errors = []
    for thickness in (12, 24):
        c = formation_factor(_slab(slope, thickness), 0, sides="periodic")
        exact = 1.0 / (c.porosity * np.cos(theta) ** 2)
        errors.append(c.formation_factor / exact - 1.0)
    # The staircase walls of the voxel slab add a resistance that shrinks at least as fast as
    # 1 / thickness (measured: slope 1/4 +2.8 % at 16 voxels, +1.6 % at 24; slope 1/2 +5.8 %
    # at 12, +1.8 % at 24): F converges to the analytic value from above.
    assert 0 < errors[1] < 0.03
    assert errors[1] < 0.6 * errors[0]


@pytest.mark.parametrize("centres,radius", [(SC, 5.0), (BCC, 4.5)])
def test_sphere_arrays_match_the_published_insulating_sphere_values(centres, radius):
    """SC and BCC arrays of insulating spheres (sphere fraction 0.16-0.21). Maxwell's F is the
    lattice value within 0.1 % here: Rayleigh's correction is of order f^(10/3) for SC
    (Rayleigh 1892; McPhedran & McKenzie 1978) and smaller for BCC (McKenzie, McPhedran &
    Derrick 1978). The voxel spheres' staircase error is first order in the voxel size
    (+2.2 % at radius 8, +1.1 % at 16 for SC; +3.5 %, +1.7 % for BCC): two resolutions,
    extrapolated linearly to zero voxel size, agree with Maxwell within 1 %."""
    ratios = []
    for scale in (1, 2):
        solid = _cells(centres, scale * radius, scale * 16, 2)
        c = formation_factor(solid, 0)
        ratios.append(c.formation_factor / _maxwell(1.0 - c.porosity))
    extrapolated = 2 * ratios[1] - ratios[0]
    assert ratios[0] > ratios[1] > 1.0  # converging from above
    assert extrapolated == pytest.approx(1.0, abs=0.01)


def test_the_same_solve_runs_in_the_backend_array_module(backend_name):
    """NumPy and, on a GPU machine, CuPy give the same F (one code, ``xp``)."""
    from solver.backends import get_backend

    solid = _cells(SC, 5.0, 16, 2)
    reference = formation_factor(solid, 0)
    c = formation_factor(solid, 0, xp=get_backend(backend_name).xp)
    assert c.formation_factor == pytest.approx(reference.formation_factor, rel=1e-9)
    assert c.iterations == pytest.approx(reference.iterations, abs=2)


@pytest.mark.parametrize("axis,sides", [(0, "wall"), (2, "periodic")])
def test_reading_the_residual_once_per_block_stops_where_every_iteration_would(axis, sides,
                                                                               monkeypatch):
    """The host reads the residuals once per BLOCK iterations (issue 29): the solve stops at
    the same iteration with the same bits as a test after every iteration (BLOCK 1)."""
    from solver.rock import conduction

    solid = _cells(SC, 5.0, 16, 2)
    blocked = formation_factor(solid, axis, sides)
    monkeypatch.setattr(conduction, "BLOCK", 1)
    every = formation_factor(solid, axis, sides)
    assert blocked == every
    assert every.current_balance < 1e-6
    capped = formation_factor(solid, axis, sides, max_iterations=every.iterations - 3)
    monkeypatch.setattr(conduction, "BLOCK", 8)
    assert formation_factor(solid, axis, sides, max_iterations=every.iterations - 3) == capped
    assert capped.residual > 1e-8 and capped.iterations == every.iterations - 3
