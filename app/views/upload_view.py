"""Uploading a geometry file: the options its loader declares, then the file.

The option widgets are built from the store's upload options, whose parameters come from the
loaders' declared options (:data:`geometries.loaders.LOADER_OPTIONS`): an option declared
beside a loader shows here with no list kept in the app. A dropped file goes to the store
(:meth:`GeometryStore.read_upload`), which previews it and re-reads it when an option changes.
"""

from __future__ import annotations

import panel as pn
import param

from ..settings import Settings
from ..uploads import BoundedFileDropper
from .geometry_store import GeometryStore

__all__ = ["UploadView", "FORMATS_TEXT", "option_widgets"]

FORMATS_TEXT = "STL, .npy/.npz, .raw, .mat, .tif, .vti/.vtk/.mha/.nrrd"


def option_widgets(options: param.Parameterized) -> dict[str, type[pn.widgets.Widget]]:
    """Widget types of the upload options that Panel's defaults would show badly: whole
    numbers as typed inputs (a slider over 8-1024 voxels is too coarse)."""
    return {name: pn.widgets.IntInput for name, p in options.param.objects().items()
            if isinstance(p, param.Integer)}


class UploadView(pn.viewable.Viewer):
    """The declared upload options and the bounded file dropper."""

    store = param.ClassSelector(class_=GeometryStore)

    def __init__(self, store: GeometryStore, settings: Settings, **params) -> None:
        super().__init__(store=store, **params)
        self.settings = settings
        self.options = pn.Param(store.upload_options, show_name=False,
                                widgets=option_widgets(store.upload_options))
        # No accepted_filetypes: the browser would check MIME types, which .stl, .raw or .npy
        # files rarely carry; the loader checks the format and says what it accepts.
        self.file_input = BoundedFileDropper(max_bytes=settings.max_upload_bytes, multiple=False,
                                             layout="compact", previews=[],
                                             sizing_mode="stretch_width")
        self.file_input.param.watch(self._uploaded, "value")
        self.file_input.param.watch(self._refused, "refused")

    async def _uploaded(self, event) -> None:
        if not event.new:
            return
        name, data = list(event.new.items())[-1]
        if isinstance(data, str):  # the dropper decodes files the browser calls text/*
            data = data.encode("utf-8")
        # Keep one copy (the session's), not the widget's too.
        self.file_input.value = {}
        await self.store.read_upload(name, data)

    def _refused(self, event) -> None:
        if event.new:
            self.store.failed(event.new)

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.pane.Markdown(
                f"{FORMATS_TEXT}; at most {self.settings.max_upload_mb:g} MB. The file is "
                "read from memory only; changed options re-apply to it."),
            self.options, self.file_input)
