"""benchmarks/in_place/inplace_patterns.py and benchmarks/l2_sectors/sector_model.py on the CPU.

The in-place probe checks its CUDA kernels on the GPU against two pull steps after decoding the
esoteric layout with NumPy; here that decoding is checked against a NumPy model of the kernels'
index rules (esoteric pull: the node's own slot and its neighbour's, exchanged each step), so a
wrong decode cannot pass the device check. The sector model counts sectors per warp instruction:
on an all-fluid box every store of a warp fills whole sectors, and the float16 advantage it
predicts lies between the bytes saved and none.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path[:0] = [str(BENCHMARKS / "in_place"), str(BENCHMARKS / "l2_sectors")]

import inplace_patterns as ip  # noqa: E402
import sector_model  # noqa: E402


def _roll(a: np.ndarray, c) -> np.ndarray:
    return np.roll(a, shift=tuple(int(v) for v in c), axis=(0, 1, 2))


def _collide(f: np.ndarray) -> np.ndarray:
    """The probe's BGK collision (tau 0.6) on a grid (Q, n, n, n)."""
    rho = f.sum(0)
    u = np.einsum("qd,q...->d...", ip.C, f) / rho
    cu = 3 * np.einsum("qd,d...->q...", ip.C, u)
    feq = ip.W[:, None, None, None] * rho * (1 + cu + 0.5 * cu**2 - 1.5 * (u**2).sum(0))
    return f + (1 / 0.6) * (feq - f)


def _pull(f: np.ndarray) -> np.ndarray:
    return _collide(np.stack([_roll(f[i], ip.C[i]) for i in range(ip.Q)]))


def _esoteric_step(layout: np.ndarray, odd: bool) -> np.ndarray:
    """One esoteric-pull step as the kernel indexes it: pair (i, o = i + 1); even steps load
    g_i from (x, o) and g_o from (x + c_i, i) and store f*_i there and f*_o at (x, o); odd
    steps exchange the two slots of each place."""
    g = np.empty_like(layout)
    g[0] = layout[0]
    for i in range(1, ip.Q, 2):
        near, far = (i, i + 1) if odd else (i + 1, i)
        g[i] = layout[near]
        g[i + 1] = _roll(layout[far], -ip.C[i])  # the value at x + c_i
    f = _collide(g)
    out = np.empty_like(layout)
    out[0] = f[0]
    for i in range(1, ip.Q, 2):
        near, far = (i, i + 1) if odd else (i + 1, i)
        out[far] = _roll(f[i], ip.C[i])  # node x writes the slot of x + c_i
        out[near] = f[i + 1]
    return out


def test_tiled_grid_round_trip() -> None:
    f = np.arange(ip.Q * 8**3, dtype=np.float64)
    assert np.array_equal(ip.from_grid(ip.to_grid(f, 8)), f)
    grid = ip.to_grid(f, 8)  # value (tile * Q + i) * 64 + node at x = 4 tx + lx, ...
    assert grid[3, 5, 2, 1] == ((1 + 2 * 0 + 4 * 0) * ip.Q + 3) * 64 + (1 + 4 * 2 + 16 * 1)


def test_esoteric_pull_steps_equal_two_pull_steps() -> None:
    natural = ip.to_grid(ip.initial(8, np.float64), 8)
    layout = ip.esoteric_encode(natural)
    expected = natural
    for _ in range(2):  # even + odd, twice
        layout = _esoteric_step(_esoteric_step(layout, False), True)
        expected = _pull(_pull(expected))
        assert np.array_equal(ip.esoteric_decode(layout), expected)


def test_a_wrong_esoteric_step_is_caught() -> None:
    """The decode is not the identity: skipping the exchange of odd steps changes the result."""
    natural = ip.to_grid(ip.initial(8, np.float64), 8)
    layout = _esoteric_step(_esoteric_step(ip.esoteric_encode(natural), False), False)
    assert not np.allclose(ip.esoteric_decode(layout), _pull(_pull(natural)))


def test_sector_model_on_an_all_fluid_box() -> None:
    rows = {r["precision"]: r for r in sector_model.model_case("box", np.zeros((16,) * 3, bool))}
    for r in rows.values():
        assert r["stores"] == 1.0  # a warp's 32 nodes of one direction: whole sectors
        assert 1.0 < r["loads"] < 3.0  # neighbours' faces share sectors partly
    assert rows["float32"]["l2_bound_speed_vs_float32"] == 1.0
    assert 1.0 < rows["float16"]["l2_bound_speed_vs_float32"] < 2.0
    assert 0.5 < rows["float64"]["l2_bound_speed_vs_float32"] < 1.0
    # 2-byte values share a sector with more neighbours: more sectors per byte than float32
    assert rows["float16"]["loads"] > rows["float32"]["loads"] > rows["float64"]["loads"]


@pytest.mark.parametrize("tiled", [False, True])
def test_sector_model_counts_porous_loads_above_the_dense_ones(tiled: bool) -> None:
    from solver.benchmarking.cases import sphere_pack

    solid = sphere_pack((32,) * 3, 0.3, 8.0, 1)
    porous = {r["precision"]: r for r in sector_model.model_case("pack", solid, tiled)}
    dense = {r["precision"]: r for r in sector_model.model_case("box", np.zeros((16,) * 3,
                                                                                  bool))}
    assert porous["float32"]["loads"] > dense["float32"]["loads"]
    assert porous["float32"]["stores"] > 1.0  # fluid lanes leave holes in the sectors
