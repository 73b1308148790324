"""The upload options are the loaders' declared options: one widget per declared option, and an
option added to a loader's declaration shows a widget whose value reaches the loader."""

from __future__ import annotations

import asyncio

import numpy as np
import panel as pn
import pytest

from app.dashboard import Dashboard
from app.geometry_sources import UploadOptions, upload_options_type
from app.views.geometry_store import GeometryStore
from app.views.upload_view import UploadView
from geometries import generators
from geometries.loaders import LOADER_OPTIONS, LoaderOption
from solver.config import SimulationConfig

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def board():
    pack = generators.random_sphere_pack((12,) * 3, porosity=0.6, diameter=5, seed=2)
    board = Dashboard(pack, SimulationConfig(backend="numpy", body_force=(2e-5, 0, 0)),
                      refresh=False, autostart=False)
    yield board
    board.close()


def _widgets(view: UploadView) -> dict[str, pn.widgets.Widget]:
    """The view's option widgets by label."""
    return {w.name: w for w in view.__panel__().select(pn.widgets.Widget)
            if not isinstance(w, pn.widgets.FileDropper)}


def test_every_declared_option_has_one_widget_in_the_upload_view(board):
    view = board.geometry_panel.upload_view
    shown = _widgets(view)
    declared = {o.label for options in LOADER_OPTIONS.values() for o in options}
    assert set(shown) == declared
    assert len({o.field for options in LOADER_OPTIONS.values() for o in options}) == len(shown)
    # choices as a select of the shown texts, whole numbers typed
    assert list(shown["STL units"].options) == ["guess from size", "m", "mm", "µm"]
    assert isinstance(shown["STL resolution (voxels)"], pn.widgets.IntInput)


def test_an_option_added_to_a_loaders_declaration_shows_a_widget_and_reaches_it(board,
                                                                              monkeypatch):
    """The raw loader's ``header_bytes`` (not declared today) declared: a widget appears, and
    a .raw with a 16-byte header reads right once it is set (without it the size is wrong)."""
    header = LoaderOption("header_bytes", "raw_header", "RAW header (bytes)",
                          "RAW: bytes to skip before the voxels.", 0, bounds=(0, None))
    monkeypatch.setitem(LOADER_OPTIONS, "raw", (*LOADER_OPTIONS["raw"], header))
    options = upload_options_type()(raw_shape="6, 7, 8")
    store = GeometryStore(board.controller, board.settings, upload_options=options,
                          source="Upload")
    view = UploadView(store, board.settings)
    widget = _widgets(view)["RAW header (bytes)"]
    assert isinstance(widget, pn.widgets.IntInput) and "header_bytes" not in \
        UploadOptions.param  # the declaration, not a list in the app, made it
    volume = np.zeros((6, 7, 8), dtype=np.uint8)
    volume[:, :2] = 1
    data = b"H" * 16 + volume.tobytes(order="F")
    asyncio.run(store.read_upload("block.raw", data))
    assert store.preview is None and store.level == "danger"  # 16 bytes too many
    widget.value = 16  # the widget edits the options, which re-read the kept upload
    assert options.options("block.raw")["header_bytes"] == 16
    assert store.preview is not None, store.message
    solid = store.preview.geometry.solid
    assert solid.shape == (6, 7, 8) and solid[:, :2].all() and not solid[:, 2:].any()
