"""The REV curve (solver.rock.rev): nested centred sub-volumes of a duct, k against analytic."""

from __future__ import annotations

import numpy as np
import pytest

from geometries import VoxelGeometry
from solver.config import SimulationConfig
from solver.rock import PermeabilitySettings, run_study
from solver.rock.rev import sub_volume

#: Square-duct k / a² (superficial; as tests/solver/test_rock_permeability.py).
SQUARE_DUCT = 0.0351443


def test_sub_volumes_are_centred_nested_and_hold_the_fraction():
    sample = VoxelGeometry(np.zeros((40, 40, 40), bool))
    shapes = [sub_volume(sample, f).shape for f in (1 / 8, 1 / 4, 1 / 2, 1.0)]
    assert shapes == [(20, 20, 20), (26, 26, 26), (32, 32, 32), (40, 40, 40)]


def test_rev_points_state_the_volume_fraction_each_sub_volume_holds():
    """A 20³ sample's "1/4" sub-volume is 12³, 0.216 of it: the curve said 0.25."""
    from solver.rock.rev import rev_curve

    sample = VoxelGeometry(np.zeros((20, 20, 20), bool))
    points = rev_curve(sample, 0, "wall", np, lambda sub: (1.0, None, 0.0, True))
    assert [p.shape for p in points] == [(10,) * 3, (12,) * 3, (16,) * 3, (20,) * 3]
    assert [p.fraction for p in points] == pytest.approx([0.125, 0.216, 0.512, 1.0])


def test_rev_curve_of_a_duct_follows_the_duct_formula():
    duct = VoxelGeometry(np.zeros((16, 16, 16), bool), voxel_size=1e-5)  # sealed sides
    settings = PermeabilitySettings(axes=["x"], check_interval=100, rev=True,
                                    accelerate=False)
    study = run_study(duct, SimulationConfig(precision="float64", tau=1.0), settings)
    points = study.rev["points"]
    assert [p.shape for p in points] == [(8, 8, 8), (10, 10, 10), (12, 12, 12), (16, 16, 16)]
    for p in points:
        assert p.porosity == 1.0 and p.formation_factor == pytest.approx(1.0, rel=1e-8)
        assert p.k_lattice == pytest.approx(SQUARE_DUCT * p.shape[1] ** 2, rel=0.03)
    assert points[1].change_k == pytest.approx(points[1].k_lattice / points[0].k_lattice - 1)
    assert points[-1].k_lattice == study.results[0].k_lattice  # the whole run, not rerun
    summary = study.as_dict()
    assert summary["rev"]["axis"] == "x" and len(summary["rev"]["points"]) == 4
    assert any(line.startswith("REV along x") for line in study.lines())
    assert "rev" in summary["phases_s"]
