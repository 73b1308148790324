"""Choosing a geometry: generator, shipped sample or upload, previewed before it is used.

The preview (mid-slice image, porosity, tile utilisation before and after the offset search,
memory the run will need against what is available) is computed on the host in a worker
thread; nothing is allocated on the device until the user presses "Use this geometry". Upload
errors appear as messages and leave the running simulation alone.
"""

from __future__ import annotations

import asyncio
import logging

import holoviews as hv
import numpy as np
import panel as pn
import param
import psutil

from ..controller import Controller
from ..geometry_sources import (
    GENERATORS,
    GeometryPreview,
    UploadOptions,
    load_sample,
    load_upload,
    make_preview,
    sample_names,
)
from ..settings import Settings
from .counters import format_bytes

__all__ = ["GeometryPanel", "memory_verdict"]

log = logging.getLogger(__name__)

ACCEPT = ".stl,.npy,.npz,.raw,.tif,.tiff,.vti,.vtk,.mha,.mhd,.nrrd"


def memory_verdict(needed: int, available: int | None, where: str) -> tuple[str, str]:
    """('ok' | 'warning' | 'refused', sentence) for a run needing ``needed`` bytes."""
    if not available:
        return "ok", f"needs {format_bytes(needed)}"
    text = f"needs {format_bytes(needed)} of {format_bytes(available)} {where}"
    if needed > 0.9 * available:
        return "refused", (f"The run {text}: too large. Choose a smaller or coarser geometry, "
                           "or float32 precision.")
    if needed > 0.5 * available:
        return "warning", f"The run {text}; other programs may run short."
    return "ok", text


class GeometryPanel(pn.viewable.Viewer):
    """Geometry source selection, preview and the "Use this geometry" action."""

    source = param.Selector(objects=["Generator", "Sample", "Upload"], default="Generator")
    generator = param.Selector(objects=list(GENERATORS), default="Random sphere pack")
    sample = param.Selector(objects=[""], default="")
    preview = param.ClassSelector(class_=GeometryPreview, allow_None=True, precedence=-1)

    def __init__(self, controller: Controller, settings: Settings, **params) -> None:
        super().__init__(**params)
        self.controller, self.settings = controller, settings
        names = sample_names()
        self.param.sample.objects = names
        self.sample = names[0] if names else ""
        self.specs = {name: cls(name=name) for name, cls in GENERATORS.items()}
        self.upload_options = UploadOptions(name="Upload options")
        self.file_input = pn.widgets.FileInput(accept=ACCEPT, multiple=False,
                                               sizing_mode="stretch_width")
        self.file_input.param.watch(self._uploaded, "value")
        self.preview_button = pn.widgets.Button(name="Preview", button_type="primary")
        self.preview_button.on_click(self._preview_clicked)
        self.use_button = pn.widgets.Button(name="Use this geometry", button_type="success",
                                            disabled=True)
        self.use_button.on_click(self._use_clicked)
        self.alert = pn.pane.Alert("", alert_type="info", visible=False,
                                   sizing_mode="stretch_width")
        self.info = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.image = pn.pane.HoloViews(self._image(None), height=330, width=360)

    # ------------------------------------------------------------------ layout
    @param.depends("source", "generator")
    def _source_controls(self) -> pn.viewable.Viewable:
        if self.source == "Generator":
            return pn.Column(
                pn.Param(self.param.generator, show_name=False),
                pn.Param(self.specs[self.generator], show_name=False),
                self.preview_button)
        if self.source == "Sample":
            return pn.Column(pn.Param(self.param.sample, show_name=False), self.preview_button)
        return pn.Column(
            pn.pane.Markdown(
                f"STL, .npy/.npz, .raw, .tif, .vti/.vtk/.mha/.nrrd; at most "
                f"{self.settings.max_upload_mb:g} MB. The file is read from memory only."),
            pn.Param(self.upload_options, show_name=False,
                     widgets={"stl_resolution": pn.widgets.IntInput}),
            self.file_input)

    def __panel__(self) -> pn.viewable.Viewable:
        chooser = pn.Column(
            pn.widgets.RadioButtonGroup.from_param(self.param.source, button_style="outline"),
            self._source_controls, width=340)
        result = pn.Column(self.alert, pn.Row(self.image, self.info), self.use_button,
                           sizing_mode="stretch_width")
        return pn.Row(chooser, result, sizing_mode="stretch_width")

    # ------------------------------------------------------------------ actions
    async def _preview_clicked(self, event) -> None:
        if self.source == "Generator":
            spec = self.specs[self.generator]
            await self._make_preview(spec.build, f"Generating {self.generator.lower()}")
        else:
            name = self.sample
            await self._make_preview(lambda: load_sample(name), f"Loading {name}")

    async def _uploaded(self, event) -> None:
        data, filename = event.new, self.file_input.filename or "upload"
        if not data:
            return
        options = self.upload_options
        cap = self.settings.max_upload_bytes
        await self._make_preview(
            lambda: load_upload(data, filename, options.options(filename), cap),
            f"Reading {filename}")

    async def _make_preview(self, build, what: str) -> None:
        self.use_button.disabled = True
        self._show("info", f"{what} …")
        config = self.controller.config
        try:
            preview = await asyncio.to_thread(lambda: make_preview(build(), config))
        except Exception as exc:  # any parse or validation failure becomes a message
            log.info("geometry preview failed: %s", exc)
            self.preview = None
            self.info.object = ""
            self.image.object = self._image(None)
            self._show("danger", f"{what.split(' ', 1)[-1]} failed: {exc}")
            self.controller.notify("danger", f"Geometry not loaded: {exc}")
            return
        self.preview = preview
        verdict, sentence = self._memory(preview)
        self.image.object = self._image(preview)
        self.info.object = self._table(preview, sentence)
        level = {"ok": "success", "warning": "warning", "refused": "danger"}[verdict]
        self._show(level, ("Ready: press “Use this geometry” to simulate it." if verdict == "ok"
                           else sentence))
        self.use_button.disabled = verdict == "refused"

    def _use_clicked(self, event) -> None:
        if self.preview is not None:
            self.controller.use_geometry(self.preview)
            self._show("success", f"Simulating {self.preview.geometry.name or 'the geometry'}.")

    # ------------------------------------------------------------------ rendering
    def _show(self, level: str, text: str) -> None:
        self.alert.param.update(object=text, alert_type=level, visible=bool(text))

    def _memory(self, preview: GeometryPreview) -> tuple[str, str]:
        snap = self.controller.snapshot
        device_memory = (snap.device or {}).get("memory")
        if device_memory:
            return memory_verdict(preview.memory_bytes, device_memory + snap.memory_bytes,
                                  "of GPU memory")
        available = psutil.virtual_memory().available + snap.memory_bytes
        return memory_verdict(preview.memory_bytes + preview.table_bytes, available,
                              "of free host memory")

    @staticmethod
    def _image(preview: GeometryPreview | None) -> hv.Image:
        cut = np.zeros((2, 2)) if preview is None else preview.mid_slice.astype(float)
        axes = ("x", "y")
        title = "mid-slice (solid = dark)" if preview is None else (
            f"{preview.geometry.name[:40]}: mid-slice" if preview.geometry.name else "mid-slice")
        return hv.Image((np.arange(cut.shape[0]), np.arange(cut.shape[1]), cut.T),
                        kdims=list(axes), vdims=["solid"]).opts(
            cmap=["#f4f1ea", "#5b4a36"], clim=(0, 1), data_aspect=1,
            title=title, toolbar=None, colorbar=False, fontsize={"title": 10})

    @staticmethod
    def _table(p: GeometryPreview, memory: str) -> str:
        g = p.geometry
        voxel = "unknown" if g.voxel_size is None else f"{g.voxel_size * 1e6:.3g} µm"
        return "\n".join([
            "| | |", "|---|---|",
            f"| shape | {' × '.join(map(str, g.shape))} voxels ({voxel}) |",
            f"| porosity | {p.porosity:.3f} |",
            f"| fluid nodes | {p.n_fluid:,} |",
            f"| lattice | {p.config.lattice}, {p.config.precision} |",
            f"| tiles | {p.n_tiles:,} |",
            f"| η<sub>t</sub> origin → best offset {p.offset} | "
            f"{p.eta_t_origin:.3f} → {p.eta_t_best:.3f} |",
            f"| memory | {memory} |",
            f"| flow axis | {'xyz'[g.flow_axis]} |",
        ])
