"""The preview builds the run's Problem once and the runner reuses its tiling: one offset
search per geometry; the preview's memory verdict is the solver's (issue 15 item 3)."""

from __future__ import annotations

import pytest

from app.dashboard import Dashboard
from app.geometry_sources import make_preview
from geometries import generators
from solver.config import SimulationConfig
from solver.memory import assess_memory
from solver.tiling import Tiling

pytestmark = pytest.mark.timeout(300)


def test_one_offset_search_from_preview_to_run(monkeypatch):
    board = Dashboard(generators.random_sphere_pack((12,) * 3, porosity=0.6, diameter=6,
                                                    seed=1),
                      SimulationConfig(backend="numpy", body_force=(2e-5, 0, 0)),
                      refresh=False)
    try:
        c = board.controller
        c.runner.wait_for(lambda s: s.shape == (12, 12, 12), 60)
        calls = []
        build = Tiling.build.__func__

        def counting(cls, *args, **kwargs):
            calls.append(args[0].shape)
            return build(cls, *args, **kwargs)

        monkeypatch.setattr(Tiling, "build", classmethod(counting))
        geometry = generators.random_sphere_pack((20,) * 3, porosity=0.6, diameter=8, seed=4)
        preview = make_preview(geometry, c.config)
        c.use_geometry(preview, autostart=False)
        snap = c.runner.wait_for(lambda s: s.shape == (20, 20, 20) and s.status == "paused",
                                 60)
        assert calls == [(20, 20, 20)], "the runner tiled the geometry a second time"
        assert snap.message.startswith(f"{preview.n_fluid:,} fluid nodes in "
                                       f"{preview.n_tiles:,} tiles")
        level, sentence = board.geometry_panel._memory(preview)
        verdict = assess_memory(preview.problem, "numpy", snap.memory_bytes)
        assert level == verdict.level == "ok"
        assert f"({verdict.required} bytes)" in sentence  # free memory moves between calls
    finally:
        board.close()


@pytest.mark.parametrize("offset", ["best", (0, 0, 0), (1, 2, 3)])
def test_tiling_reports_eta_t_at_the_origin(offset):
    from solver.tiling import tile_utilisation

    solid = generators.random_sphere_pack((20,) * 3, porosity=0.6, diameter=8, seed=4).solid
    tiling = Tiling.build(solid, 4, offset)
    assert tiling.eta_t_origin == pytest.approx(tile_utilisation(solid, 4), rel=1e-12)
