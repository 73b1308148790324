"""benchmarks/moment_storage (issue 34): the NumPy reference of the regularized moment scheme
against closed forms and a channel flow, the probe kernel's CUDA text on the g++ emulator (and
through the probe's own device class on a fake CuPy) against that reference, the probe's
table, and the moment-storage sector count; the same check on the GPU (marked gpu)."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parents[2] / "benchmarks"
for p in (str(HERE / "l2_sectors"), str(HERE / "moment_storage")):
    if p not in sys.path:
        sys.path.insert(0, p)

import moment_kernel as mk  # noqa: E402
import sector_model  # noqa: E402
from moment_reference import (  # noqa: E402
    LAT,
    MomentGrid,
    collide,
    moments,
    populations,
    rest_moments,
    velocity,
)

from solver.backends.cuda.compact import CompactTiling  # noqa: E402
from solver.tiling import Tiling  # noqa: E402

from ..solver.compact_emulator import FakeCupy, compile_compact, compiler  # noqa: E402
from ..solver.porous_cases import porous_solid  # noqa: E402

FORCE = (2e-5, -1e-5, 5e-6)
#: walls in y (not periodic), tile offset (3, 0, 1): inner and face tiles, empty tiles
CASE = ((26, 15, 11), (3, 0, 1), (True, False, True))


def test_rebuilt_populations_carry_exactly_the_stored_moments() -> None:
    m = np.random.default_rng(0).normal(size=(10, 7)) * 1e-2
    f = populations(m)
    np.testing.assert_allclose(moments(f), m, atol=1e-16)
    np.testing.assert_allclose(f.sum(axis=0), 1 + m[0], atol=1e-15)  # rho
    np.testing.assert_allclose(LAT.c.T @ f, m[1:4], atol=1e-16)       # j


def test_collision_keeps_mass_adds_the_force_and_relaxes_to_equilibrium() -> None:
    m = np.random.default_rng(1).normal(size=(10, 5)) * 1e-2
    out = collide(m, 1.0, FORCE)
    np.testing.assert_array_equal(out[0], m[0])
    np.testing.assert_allclose(out[1:4], m[1:4] + np.array(FORCE)[:, None], atol=1e-18)
    u = m[1:4] + np.array(FORCE)[:, None] / 2
    np.testing.assert_allclose(out[4], u[0] ** 2 + 2 * u[0] * FORCE[0] / 2, atol=1e-18)
    np.testing.assert_allclose(collide(m, 1.0, (0, 0, 0))[7], u[0] * u[1] - 0 * u[0]
                               + (m[1] * m[2] - u[0] * u[1]), atol=1e-18)


def test_channel_flow_is_poiseuille_with_halfway_walls_and_mass_is_kept() -> None:
    h, tau = 9, 0.8
    solid = np.zeros((2, h + 2, 2), dtype=bool)
    solid[:, [0, -1], :] = True
    grid = MomentGrid(solid)
    force = (1e-6, 0.0, 0.0)
    m = rest_moments(grid.n_fluid)
    for _ in range(3000):
        m = grid.step(m, 1 / tau, force)
    ux = grid.to_grid(velocity(m, force))[0][0, 1:-1, 0]
    y = np.arange(h) + 0.5  # walls halfway between the solid and the first fluid node
    exact = force[0] / (2 * (tau - 0.5) / 3) * y * (h - y)
    assert np.abs(ux - exact).max() < 5e-3 * exact.max()
    assert abs(m[0].sum()) < 1e-13  # bounce-back walls keep the mass


def _emulated_steps(storage: str, layout: str, steps: int = 3):
    shape, offset, periodic = CASE
    solid = porous_solid(shape, 0)
    grid, tiling = MomentGrid(solid, periodic), Tiling.build(solid, 4, offset)
    compact = CompactTiling(tiling, 1)
    real = "double" if storage == "float64" else "float"
    run = compile_compact(mk.kernel_source(storage, layout=layout),
                          mk.kernel_name(storage, layout=layout), real, 4, storage == "float16")
    m = np.random.default_rng(2).normal(size=(10, grid.n_fluid)) * 1e-3
    fin = mk.pack(compact, grid, m, storage, layout)
    ref = mk.unpack(compact, grid, fin, storage, layout)
    fout = np.zeros_like(fin)
    tables = [compact.masks.astype(np.uint64), compact.base.astype(np.int32),
              np.ascontiguousarray(tiling.tiles, dtype=np.int32).ravel(),
              np.ascontiguousarray(tiling.tile_map.transpose(), dtype=np.int32).ravel(),
              np.array(compact.int_args(periodic), np.int32),
              np.array([*FORCE, 1 / 0.7], mk.arith_dtype(storage)), np.zeros(2, np.uint32)]
    ptr = [a.ctypes.data_as(ctypes.c_void_p) for a in tables]
    for _ in range(steps):
        run(ctypes.c_int(-(-tiling.n_tiles // 2)), ctypes.c_int(128),
            fin.ctypes.data_as(ctypes.c_void_p), fout.ctypes.data_as(ctypes.c_void_p), *ptr)
        fin, fout = fout, fin
        ref = grid.step(ref, 1 / 0.7, FORCE)
    got = mk.unpack(compact, grid, fin, storage, layout)
    return np.abs(got - ref).max() / np.abs(ref).max()


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("storage, layout, tolerance", [
    ("float64", "soa", 1e-12), ("float32", "soa", 1e-5), ("float64", "aos", 1e-12),
    ("float16", "aos", 5e-3)])
def test_probe_kernel_on_the_emulator_steps_as_the_reference(storage, layout,
                                                             tolerance) -> None:
    assert _emulated_steps(storage, layout) <= tolerance


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
def test_probe_device_check_passes_through_a_fake_cupy(monkeypatch) -> None:
    fake = FakeCupy()
    fake.zeros = np.zeros
    monkeypatch.setitem(sys.modules, "cupy", fake)
    import probe

    shape, _, periodic = CASE
    check = probe.device_check("float64", "aos", steps=2,
                               case=(porous_solid(shape, 1), periodic))
    assert check["ok"] and check["relative_difference"] < 1e-12
    assert fake.launches == 2


def test_probe_table_names_the_best_configuration_and_the_stop_rule() -> None:
    import probe

    def row(kernel, config, g):
        return dict(case="rock-like 192^3", kernel=kernel, config=config, fluid_g_per_s=g,
                    of_own_limit=g / 30, bytes_per_fluid_node=80, memory_per_fluid_node=84.0)

    result = {"meta": {"device": "GPU", "date": "d", "commit": "c", "copy_bandwidth": 3e12},
              "checks": [dict(storage="float32", relative_difference=2e-7, tolerance=1e-5,
                              ok=True)],
              "results": [row("compact BGK float32", "2 tiles/block", 15.0),
                          row("compact BGK float32", "2 tiles/block", 15.0),
                          row("moments aos float32", "1 tiles/block", 12.0),
                          row("moments aos float32", "2 tiles/block", 18.0),
                          row("moments aos float32", "2 tiles/block", 16.0)]}
    result["checks"][0]["layout"] = "aos"
    table = probe.summary(result)
    assert "| rock-like 192^3 | moments aos float32 | 2 tiles/block | 17.00 |" in table
    assert "best moment probe 1.13 x: FAILS" in table


def test_moment_sector_count_of_an_all_fluid_box() -> None:
    solid = np.zeros((16, 16, 16), dtype=bool)
    compact = CompactTiling(Tiling.build(solid, 4, (0, 0, 0)), 1)
    at0, _ = sector_model.halo_sources(compact, np.arange(compact.tiling.n_tiles), (True,) * 3)
    inner = np.array([(h % 6 - 1) in range(4) and (h // 6 % 6 - 1) in range(4)
                      and (h // 36 - 1) in range(4) for h in range(216)])
    assert (at0[:, inner] == 10 * compact.base[:, None] + np.arange(64)).all()
    assert (at0 >= 0).sum(axis=1).tolist() == [208] * compact.tiling.n_tiles  # corners out
    loads, stores = sector_model.moment_sector_multiples(compact, (True,) * 3, 4)
    reused = sector_model.moment_sector_multiples(compact, (True,) * 3, 4, block=4)[0]
    assert stores == 1.0  # a warp stores 32 consecutive values of one moment: 4 sectors
    assert loads >= 208 / 64  # without reuse every tile reads its whole halo
    assert 1.0 <= reused < loads  # a block of 4 tiles shares its halo; every value read once


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["soa", "aos"])
@pytest.mark.parametrize("storage", ["float64", "float32", "float16"])
def test_probe_kernel_on_the_gpu_steps_as_the_reference(storage, layout) -> None:
    import probe

    check = probe.device_check(storage, layout)
    assert check["ok"], check


def test_moment_table_lists_both_layouts_next_to_populations(tmp_path) -> None:
    rows = sector_model.moment_case("small", porous_solid((16, 12, 12), 3))
    assert [(r["precision"], r["layout"]) for r in rows] == [
        ("float16", "soa"), ("float16", "aos"), ("float32", "soa"), ("float32", "aos")]
    for r in rows:
        assert r["dram_bytes"] * 19 == r["population_dram_bytes"] * 10
        assert r["l2_bytes_reused_in_4_tiles"] <= r["l2_bytes"]
        assert r["l2_bytes"] >= r["dram_bytes"]  # at least the ideal sectors
    sector_model.write_moments(rows, tmp_path)
    table = next(tmp_path.glob("sector-model-moments-*.md")).read_text()
    assert table.count("\n| small |") == 4 and "| layout |" in table


def test_static_counts_occupancy_and_sass_classes() -> None:
    """The H100 occupancy of the timed block shapes (shared memory binds the moment probe,
    registers the compact kernel), the SASS classes split at barriers, and the float-weight
    variant replacing exactly the 19 double weight literals of the timed probe."""
    import static_counts as sc

    probe = sc.occupancy(40, 128, mk.shared_bytes(2, "float32", "aos"))
    assert (probe["warps_per_sm"], probe["bound_by"]) == (40, "shared")
    compact = sc.occupancy(40, 128, 4108)
    assert (compact["warps_per_sm"], compact["bound_by"]) == (48, "registers")
    sass = "\n".join(f"        /*{k:04x}*/  {op} ;" for k, op in enumerate(
        ["LDG.E", "STS", "BAR.SYNC", "LDS", "FFMA", "@P0 DMUL", "F2F.F64.F32", "STG.E"]))
    counted = sc.count(sass)
    assert counted["segments"] == [2, 6] and counted["doubles"] == 2
    assert counted["segment_classes"][1]["fp32"] == 1 and counted["shared load"] == 1
    source = sc.KERNELS["moments aos float32, float weights (not timed)"]()[0]
    assert "= (real)0.05555555555555555 *" in source
