"""benchmarks/lbmpy/compare_lbmpy.py: boundary links, cases and report logic; physics where lbmpy
is.

The link lists must equal what pystencils' own builder returns (checked against a brute-force
builder here, and against pystencils itself where it is installed), or lbmpy's boundary
kernels would bounce the wrong links. Where lbmpy is installed (Python >= 3.12; not a project
dependency) its CPU kernels must reproduce the NumPy backend's lid-driven flow.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "lbmpy"))

import compare_lbmpy  # noqa: E402
from lbmpy_box import FLUID, LID, VARIANTS, WALL, boundary_links, cell_flags  # noqa: E402
from lbmpy_report import summary_rows, table  # noqa: E402

from solver.lattice import get_lattice  # noqa: E402

#: lbmpy's D3Q19 order (rest, N, S, W, E, T, B, then the diagonals).
STENCIL = np.array([(0, 0, 0), (0, 1, 0), (0, -1, 0), (-1, 0, 0), (1, 0, 0), (0, 0, 1),
                    (0, 0, -1), (-1, 1, 0), (1, 1, 0), (-1, -1, 0), (1, -1, 0), (0, 1, 1),
                    (0, -1, 1), (-1, 0, 1), (1, 0, 1), (0, 1, -1), (0, -1, -1), (-1, 0, -1),
                    (1, 0, -1)])


def _brute_force_links(flags, value):
    """pystencils' list builder, written out: fluid cells in (z, y, x) order, then directions."""
    out = []
    nx, ny, nz = flags.shape
    for z in range(1, nz - 1):
        for y in range(1, ny - 1):
            for x in range(1, nx - 1):
                if flags[x, y, z] != FLUID:
                    continue
                for d, (cx, cy, cz) in enumerate(STENCIL):
                    if (cx, cy, cz) != (0, 0, 0) and flags[x + cx, y + cy, z + cz] == value:
                        out.append((x, y, z, d))
    return np.array(out, dtype=np.int32).reshape(-1, 4)


@pytest.fixture
def pack_flags():
    rng = np.random.default_rng(5)
    return cell_flags(rng.random((7, 6, 5)) < 0.35, lid=(0.05, 0.0, 0.0))


def test_stencil_is_d3q19():
    assert sorted(map(tuple, STENCIL)) == sorted(map(tuple, get_lattice("D3Q19").c.tolist()))


@pytest.mark.parametrize("value", [WALL, LID])
def test_links_match_brute_force(pack_flags, value):
    links = boundary_links(pack_flags, STENCIL, value)
    assert len(links) > 0
    np.testing.assert_array_equal(links, _brute_force_links(pack_flags, value))


@pytest.mark.parametrize("value", [WALL, LID])
def test_links_match_pystencils(pack_flags, value):
    createindexlist = pytest.importorskip("pystencils.boundaries.createindexlist")
    bits = {FLUID: 1, WALL: 2, LID: 4}  # pystencils flags are bit masks
    flag_field = np.vectorize(bits.get)(pack_flags).astype(np.uint8)
    ref = createindexlist.create_boundary_index_list(flag_field, STENCIL, bits[value], 1, 1,
                                                     True, False)
    ours = boundary_links(pack_flags, STENCIL, value)
    for k, name in enumerate(("x", "y", "z", "dir")):
        np.testing.assert_array_equal(ours[:, k], ref[name])


def test_lid_wins_on_edges_and_solids_are_walls():
    solid = np.zeros((4, 4, 4), dtype=bool)
    solid[1, 2, 3] = True
    flags = cell_flags(solid, lid=(0.1, 0.0, 0.0))
    assert flags[1 + 1, 1 + 2, 1 + 3] == WALL
    assert np.all(flags[:, -1, :] == LID)  # the y_max ghost plane, its edges and corners
    assert flags[0, 0, 0] == WALL and flags[-1, 0, -1] == WALL
    assert np.count_nonzero(flags[1:-1, 1:-1, 1:-1] == FLUID) == 63


def test_cases_reuse_cavity3d_and_packs():
    cases = compare_lbmpy.bench_cases(16, 32, [0.8], 8.0)
    (cavity, lid), (pack, pack_lid) = cases
    assert lid == compare_lbmpy.LID and pack_lid is None
    assert not cavity.solid.any() and cavity.faces == "wall" and cavity.tile_offset == "origin"
    assert pack.faces == "wall" and pack.solid.shape == (32, 32, 32)
    assert abs((~pack.solid).mean() - 0.8) < 0.05
    config = compare_lbmpy.our_config(cavity, "float32", lid)
    assert config.y_max == "moving_wall" and config.x_min == "wall" and config.tau == 0.8


def _row(code, setting, sec, case="c", precision="float32"):
    row = {"case": case, "precision": precision, "code": code, "setting": setting,
           "seconds_per_step": sec, "porosity": None, "fluid_nodes": 1_000_000, "nodes": 2_000_000,
           "eta_t": 1.0, "bytes_per_node": 152}
    return compare_lbmpy._with_rates(row, copy=1e12)


def test_summary_takes_fastest_setting_of_each_code():
    rows = [_row("ours", "a", 2e-4), _row("ours", "b", 1e-4), _row("lbmpy", "x", 4e-4),
            _row("lbmpy", "y", 5e-4), _row("lbmpy kernel only", "x", 3e-4)]
    (s,) = summary_rows(rows)
    assert s["ours_setting"] == "b" and s["lbmpy_setting"] == "x"
    assert s["ours_mflups"] == 10000 and s["lbmpy_mflups"] == 2500
    assert s["ratio"] == 4.0 and s["lbmpy_kernel_only_mflups"] == pytest.approx(3333.3)
    assert s["ours_fraction_copy"] == pytest.approx(10000e6 * 152 / 1e12)
    lbmpy_row = rows[2]
    assert lbmpy_row["cell_mlups"] == 5000  # lbmpy updates every cell of its box
    assert "| c | float32 | 10000 |" in table({"summary": [s]})


def test_lbmpy_cpu_kernels_reproduce_numpy_backend():
    pytest.importorskip("lbmpy")
    rows = compare_lbmpy.physics_check(12, 60, ["float64"], "cpu")
    assert len(rows) == 2 + len(VARIANTS)  # every code variant on the last pack
    assert {r["variant"] for r in rows} == set(VARIANTS)
    for r in rows:
        assert r["max_speed"] > 1e-3, r  # the lid drives a real flow
        assert r["passed"], r
