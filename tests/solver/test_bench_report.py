"""The GPU suite's report targets on a hand-made result (no GPU needed)."""

from __future__ import annotations

from solver.benchmarking.report import targets


def _row(case: str, mflups: float, porosity=None, eta_t=1.0, **extra) -> dict:
    row = {"case": case, "porosity": porosity, "eta_t": eta_t, "kernel": "BGK incompressible",
           "precision": "float32", "layout": "xyz", "tiles_per_block": 2,
           "streaming": "two-copy", "tile_storage": "tiled", "mflups": mflups,
           "fraction_copy": 0.95}
    return row | extra


def test_rock_like_pack_is_judged_against_the_dense_box_and_compact_rows_are_not() -> None:
    """A rock-like case name broke the report (it parsed 'spheres N' only); compact rows have
    no eta_t x dense model (they follow the fluid) and must not enter that target."""
    rows = [_row("cavity3D 192^3", 18000.0),
            _row("rock-like 192^3 phi=0.2 d=22", 5400.0, porosity=0.2, eta_t=0.5),
            _row("rock-like 192^3 phi=0.2 d=22", 13000.0, porosity=0.2, eta_t=0.5,
                 layout="compact", tile_storage="compact")]
    (pack,) = [t for t in targets({"results": rows}) if t["target"].startswith("sphere packs")]
    assert pack["value"] == 0.6 and "xyz" in pack["target"]


def test_dense_targets_compare_tiled_kernels_only() -> None:
    """The compact run of an all-fluid box does the same work; the float16 ratio must divide
    tiled by tiled (it took the compact float32 row: 1.62 instead of 1.649 on the H100)."""
    rows = [_row("cavity3D 256^3", 18600.0),
            _row("cavity3D 256^3", 19000.0, layout="compact", tile_storage="compact"),
            _row("cavity3D 256^3", 31000.0, precision="float16")]
    by = {t["target"]: t for t in targets({"results": rows})}
    assert by["BGK dense 256^3 float16 storage: MFLUPS / float32 MFLUPS"]["value"] \
        == round(31000.0 / 18600.0, 3)
    assert "18600 MFLUPS" in by["BGK dense 256^3 float32: fraction of copy bandwidth"]["detail"]
