"""What the views lay out: titles that fit, unlinked plot axes, the 3D camera (issue 17)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from bokeh.models import Plot
from matplotlib.backends.backend_agg import FigureCanvasAgg

from app.dashboard import Dashboard
from app.exports import slice_figure
from app.geometry_sources import GENERATORS, make_preview
from geometries import generators
from solver.config import SimulationConfig
from solver.runner import live_runners

pytestmark = pytest.mark.timeout(300)

TITLE = "Narrow duct of a long name (6 x 6 x 160), step 123,456"


@pytest.fixture
def board():
    before = live_runners()
    geometry = generators.random_sphere_pack((16,) * 3, porosity=0.6, diameter=6, seed=2)
    dashboard = Dashboard(geometry, SimulationConfig(backend="numpy", body_force=(2e-5, 0, 0)),
                          refresh=False, autostart=False)
    yield dashboard
    dashboard.close()
    assert live_runners() == before


@pytest.mark.parametrize("shape", [(6, 160), (160, 6), (40, 40)])
def test_exported_slice_title_fits_in_the_png(shape):
    """B11: the PNG's title is whole for narrow cuts too."""
    figure = slice_figure(np.ones(shape), ("x", "z"), "umag", TITLE)
    renderer = FigureCanvasAgg(figure).get_renderer()
    figure.draw(renderer)
    texts = [t for t in figure.findobj(lambda a: hasattr(a, "get_text"))
             if t.get_text() and "step 123,456" in t.get_text().replace("\n", " ")]
    assert texts, "the title must be drawn"
    width, height = figure.bbox.width, figure.bbox.height
    for text in texts:
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= width and box.y1 <= height, (box, width)


def test_slice_title_is_text_above_the_plot_not_a_plot_title(board):
    """B11: a Bokeh title is cut at a narrow plot's width; the caption wraps."""
    board.controller.step(2)
    board.controller.runner.wait_for(lambda s: s.step == 2 and s.plane is not None, 60)
    board.controller.poll()
    assert "step 2" in board.slice.caption.object
    plot = board.slice._pane.get_root()
    figures = [m for m in plot.references() if isinstance(m, Plot)]
    assert figures and all(not (f.title and f.title.text) for f in figures)


def _figures(pane) -> list[Plot]:
    return [f for model, _ in pane._models.values() for f in model.references()
            if isinstance(f, Plot)]


def test_geometry_preview_axes_are_not_linked_to_the_slice(board):
    """B4: a 40^3 preview must not share (and be cropped to) the 16^3 slice's axis ranges."""
    big = GENERATORS["Square duct"](length=40, width=30).build()
    panel = board.geometry_panel
    panel.image.object = panel._image(make_preview(big, board.controller.config))
    board.main.get_root()  # lays out the page: Panel links the axes of its plots here
    slice_figures, preview_figures = _figures(board.slice._pane), _figures(panel.image)
    assert slice_figures and preview_figures
    slice_ranges = {id(r) for f in slice_figures for r in (f.x_range, f.y_range)}
    assert not slice_ranges & {id(r) for f in preview_figures for r in (f.x_range, f.y_range)}
    assert max(f.x_range.end for f in preview_figures) >= 39


def test_3d_camera_is_reset_in_the_browser_after_a_geometry_change(board):
    """B5: the pane's synced camera (which the browser re-applies) follows the new geometry."""
    c, scene = board.controller, board.scene
    scene.pane.camera = {"position": [1.0, 2.0, 3.0], "focalPoint": [8.0, 8.0, 8.0],
                         "viewUp": [0.0, 0.0, 1.0]}  # as a browser rotation leaves it
    geometry = GENERATORS["Square duct"](length=60, width=10).build()
    c.use_geometry(make_preview(geometry, c.config), autostart=False)
    c.runner.wait_for(lambda s: s.shape == geometry.shape and s.plane is not None
                      and (s.view.axis, s.view.index) == (c.axis, c.position), 60)
    c.poll()
    scene.refresh()
    centre = [(n - 1) / 2 for n in geometry.shape]
    assert scene.pane.camera["focalPoint"] == pytest.approx(centre, abs=1.0)
    assert scene.pane.camera["position"] != [1.0, 2.0, 3.0]


def _card_value(html_text: str, key: str) -> float:
    part = html_text.split(f'data-counter="{key}"')[1]
    return float(part.split('<div class="value">')[1].split("<")[0])


def test_mflups_card_shows_a_smoothed_value_and_the_plot_the_raw_one(board):
    """The CPU's MFLUPS alternating 0.5 / 8 every 0.2 s shows as a steady ~4 on the card."""
    counters, c = board.counters, board.controller
    clock = [100.0]
    counters.mflups.clock = lambda: clock[0]
    base = c.snapshot
    shown = []
    for i in range(60):
        clock[0] += 0.2
        raw = 0.5 if i % 2 else 8.0
        c.snapshot = replace(base, seq=base.seq + i + 1, step=10 * (i + 1), status="running",
                             metrics={**base.metrics, "mflups": raw, "mflups_mean": 4.25})
        shown.append(_card_value(counters.cards.object, "mflups"))
    settled = shown[30:]
    assert 3.0 < min(settled) and max(settled) < 5.5, settled
    assert "now 0.50" in counters.cards.object or "now 8.00" in counters.cards.object
    c.snapshot = replace(c.snapshot, seq=c.snapshot.seq + 1, status="paused")
    assert counters.mflups.value is None, "a pause starts a new average"


def test_closed_socket_errors_are_one_info_line_and_others_stay_errors(caplog):
    """Closing a page used to print two WebSocketClosedError tracebacks per session."""
    import asyncio
    import logging

    from tornado.websocket import WebSocketClosedError

    from app.server_log import quiet_closed_sockets

    loop = asyncio.new_event_loop()
    try:
        quiet_closed_sockets(loop)
        with caplog.at_level(logging.INFO):
            loop.call_exception_handler({"message": "Task exception was never retrieved",
                                         "exception": WebSocketClosedError()})
            loop.call_exception_handler({"message": "boom", "exception": KeyError("x")})
    finally:
        loop.close()
    closed = [r for r in caplog.records if "browser left" in r.getMessage()]
    assert len(closed) == 1 and closed[0].levelno == logging.INFO
    assert any(r.levelno == logging.ERROR and "boom" in r.getMessage() for r in caplog.records)


def test_close_releases_the_runner_and_the_3d_scene_and_is_idempotent():
    """Issue 16 item 6: a destroyed session stops its runner and frees its scene at once."""
    geometry = generators.random_sphere_pack((12,) * 3, porosity=0.6, diameter=5, seed=4)
    before = live_runners()
    board = Dashboard(geometry, SimulationConfig(backend="numpy"), refresh=False,
                      autostart=True)
    board.controller.runner.wait_for(lambda s: s.step > 0, 60)
    assert live_runners() == before + 1
    board.close()
    assert live_runners() == before and not board.controller.runner.alive
    assert board.scene._meshes == {} and board.scene.plotter._closed
    board.close()  # Bokeh and the idle watchdog may both end a session
    assert board.controller.runner.snapshot().status == "stopped"
