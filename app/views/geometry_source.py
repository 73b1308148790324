"""Choosing where the geometry comes from: a generator with its parameters, a shipped sample,
or an upload (:mod:`.upload_view`); "Preview" asks the store for a preview of the choice."""

from __future__ import annotations

import panel as pn
import param

from .geometry_store import GeometryStore
from .upload_view import UploadView

__all__ = ["SourceChooser"]


class SourceChooser(pn.viewable.Viewer):
    """The source buttons and the chosen source's controls."""

    store = param.ClassSelector(class_=GeometryStore)

    def __init__(self, store: GeometryStore, upload: UploadView, **params) -> None:
        super().__init__(store=store, **params)
        self.upload = upload
        self.preview_button = pn.widgets.Button(name="Preview", button_type="primary")
        self.preview_button.on_click(self._clicked)

    async def _clicked(self, event) -> None:
        await self.store.preview_source()

    def _controls(self, source: str, generator: str) -> pn.viewable.Viewable:
        """The controls of ``source`` (a generator's parameters, the sample list, the upload)."""
        store = self.store
        if source == "Generator":
            return pn.Column(pn.Param(store.param.generator, show_name=False),
                             pn.Param(store.specs[generator], show_name=False),
                             self.preview_button)
        if source == "Sample":
            return pn.Column(pn.Param(store.param.sample, show_name=False), self.preview_button)
        return self.upload

    def __panel__(self) -> pn.viewable.Viewable:
        store = self.store
        return pn.Column(
            pn.widgets.RadioButtonGroup.from_param(store.param.source, button_style="outline"),
            pn.bind(self._controls, store.param.source, store.param.generator), width=340)
