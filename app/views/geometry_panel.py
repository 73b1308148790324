"""Choosing a geometry: generator, shipped sample or upload, previewed before it is used.

The preview (mid-slice image, porosity, tile utilisation before and after the offset search,
memory the run will need against what is available) is computed on the host in a worker
thread; nothing is allocated on the device until the user presses "Use this geometry". Upload
errors appear as messages and leave the running simulation alone. The last upload is kept in the
session, so a changed upload option re-reads it at once; only the newest preview is shown.
"""

from __future__ import annotations

import asyncio
import logging

import holoviews as hv
import numpy as np
import panel as pn
import param

from geometries.errors import GeometryError
from solver.lattice_parameters import choose_lattice, demand_of_specs
from solver.memory import assess_memory, judge
from solver.values import ConfigError

from ..case_export import case_document, case_yaml
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
from ..openings import DRIVES, OpeningGroup, OpeningUnits, drives, si_specs
from ..settings import Settings
from ..uploads import BoundedFileDropper, UploadedFile, safe_text
from .openings_panel import OpeningsPanel
from .openings_preview3d import OpeningsPreview3D
from .physics_panel import PhysicalSetup

__all__ = ["GeometryPanel", "memory_verdict"]

log = logging.getLogger(__name__)

FORMATS_TEXT = "STL, .npy/.npz, .raw, .mat, .tif, .vti/.vtk/.mha/.nrrd"


def memory_verdict(needed: int, available: int | None, where: str) -> tuple[str, str]:
    """('ok' | 'warning' | 'refused', sentence) of :func:`solver.memory.judge`."""
    verdict = judge(needed, available, where)
    return verdict.level, verdict.message


class GeometryPanel(pn.viewable.Viewer):
    """Geometry source selection, preview and the "Use this geometry" action."""

    source = param.Selector(objects=["Generator", "Sample", "Upload"], default="Generator")
    generator = param.Selector(objects=list(GENERATORS), default="Random sphere pack")
    sample = param.Selector(objects=[""], default="")
    preview = param.ClassSelector(class_=GeometryPreview, allow_None=True, precedence=-1)
    drive = param.Selector(objects=list(DRIVES), default=next(iter(DRIVES)),
                           label="Flow driven by",
                           doc="Body force (periodic box; Physics tab), the geometry's openings "
                               "(a vessel), or a pair of box faces as inlet and outlet.")

    def __init__(self, controller: Controller, settings: Settings,
                 setup: PhysicalSetup | None = None, **params) -> None:
        super().__init__(**params)
        self.controller, self.settings = controller, settings
        # The fluid and the physical units the openings' SI values are read in (Physics tab).
        self.setup = setup or PhysicalSetup(name="Physical setup")
        self.openings = OpeningsPanel(self._opening_units, chooser=self._lattice_choice)
        self._narrowings: dict = {}  # per geometry: the narrowest sections already measured
        self.setup.param.watch(self.openings.refresh, ["voxel_size_um", "viscosity", "density"])
        self._build: tuple | None = None  # the last preview's (build, what): a drive re-runs it
        # Where the previewed and the used geometry came from: a case's geometry section.
        self._recipe: dict | None = None
        self.used_recipe: dict | None = None
        self._drive_set = False
        self.param.watch(self._drive_changed, "drive")
        names = sample_names()
        self.param.sample.objects = names
        self.sample = names[0] if names else ""
        self.specs = {name: cls(name=name) for name, cls in GENERATORS.items()}
        self.upload_options = UploadOptions(name="Upload options")
        # No accepted_filetypes: the browser would check MIME types, which .stl, .raw or .npy
        # files rarely carry; the loader checks the format and says what it accepts.
        self.file_input = BoundedFileDropper(max_bytes=settings.max_upload_bytes, multiple=False,
                                             layout="compact", previews=[],
                                             sizing_mode="stretch_width")
        self.file_input.param.watch(self._uploaded, "value")
        self.file_input.param.watch(self._refused, "refused")
        self.upload: UploadedFile | None = None
        self.upload_options.param.watch(self._option_changed,
                                        [p for p in UploadOptions.param if p != "name"])
        self._generation = 0  # previews started; only the newest one's result is shown
        self._error_status: str | None = None  # what this panel last put in the status bar
        self.preview_button = pn.widgets.Button(name="Preview", button_type="primary")
        self.preview_button.on_click(self._preview_clicked)
        self.use_button = pn.widgets.Button(name="Use this geometry", button_type="success",
                                            disabled=True)
        self.use_button.on_click(self._use_clicked)
        self.alert = pn.pane.Alert("", alert_type="info", visible=False,
                                   sizing_mode="stretch_width")
        self.info = pn.pane.Markdown("", sizing_mode="stretch_width")
        self.image = pn.pane.HoloViews(self._image(None), height=330, width=360)
        self.preview3d = OpeningsPreview3D()
        self._recolour = None  # the watcher that recolours the 3D openings on table edits

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
                f"{FORMATS_TEXT}; at most {self.settings.max_upload_mb:g} MB. The file is "
                "read from memory only; changed options re-apply to it."),
            pn.Param(self.upload_options, show_name=False,
                     widgets={"stl_resolution": pn.widgets.IntInput}),
            self.file_input)

    def __panel__(self) -> pn.viewable.Viewable:
        chooser = pn.Column(
            pn.widgets.RadioButtonGroup.from_param(self.param.source, button_style="outline"),
            self._source_controls, width=340)
        drive = pn.widgets.Select.from_param(self.param.drive, width=320)
        result = pn.Column(self.alert, pn.Row(self.image, self.info), self.preview3d,
                           drive, self.openings,
                           self.use_button, sizing_mode="stretch_width")
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
        if not event.new:
            return
        name, data = list(event.new.items())[-1]
        if isinstance(data, str):  # the dropper decodes files the browser calls text/*
            data = data.encode("utf-8")
        # Keep one copy (the session's), not the widget's too.
        self.file_input.value = {}
        self.upload = UploadedFile(str(name) or "upload", bytes(data))
        await self._preview_upload()

    def _refused(self, event) -> None:
        if event.new:
            self._failed(event.new)

    async def _option_changed(self, *events) -> None:
        # B1: options re-apply to the file already uploaded.
        if self.source == "Upload" and self.upload is not None:
            await self._preview_upload()

    async def _preview_upload(self) -> None:
        upload, options = self.upload, self.upload_options
        cap = self.settings.max_upload_bytes
        await self._make_preview(
            lambda: load_upload(upload.data, upload.name, options.options(upload.name), cap),
            f"Reading {upload.name}")

    async def _drive_changed(self, event) -> None:
        if not self._drive_set and self._build is not None:
            await self._make_preview(*self._build, drive=event.new)

    async def _make_preview(self, build, what: str, drive: str | None = None) -> None:
        if drive is None:  # a new geometry (a drive change keeps the one previewed)
            self._recipe = self._source_recipe()
        self._generation += 1
        generation = self._generation
        self._build = (build, what)
        self.use_button.disabled = True
        self._show("info", f"{safe_text(what)} …")
        config = self.controller.config
        try:
            preview = await asyncio.to_thread(lambda: make_preview(build(), config, drive))
        except Exception as exc:  # any parse or validation failure becomes a message
            log.info("geometry preview failed: %s", exc)
            if generation == self._generation:
                self._failed(f"{what.split(' ', 1)[-1]} failed: {exc}")
            return
        if generation != self._generation:
            return  # a newer preview was started meanwhile
        self.preview = preview
        self._set_drive(preview.drive)
        self.openings.bind(preview.groups, preview.config, preview.geometry)
        verdict, sentence = self._memory(preview)
        self.image.object = self._image(preview)
        self.preview3d.show(preview.geometry, preview.config.openings)
        self._follow_kinds(preview.config)
        self.info.object = self._table(preview, sentence)
        notes = " ".join(safe_text(n) for n in preview.notes)
        level = {"ok": "success", "warning": "warning", "refused": "danger"}[verdict]
        if verdict == "ok" and notes:
            level = "warning"
        text = sentence if verdict != "ok" else (
            "Usable, but check it first:" if preview.doubtful else
            "Ready: press “Use this geometry” to simulate it.")
        self._show(level, f"{text} {notes}".strip())
        self.use_button.disabled = verdict == "refused"
        self._clear_error_status()

    def _failed(self, message: str) -> None:
        """Show a failed preview or upload here and in the status bar (until the next action)."""
        self.preview = None
        self.openings.bind((), None)
        self.info.object = ""
        self.image.object = self._image(None)
        self.preview3d.clear()
        self.use_button.disabled = True
        self._show("danger", safe_text(message))
        self._error_status = f"Geometry not loaded: {message}"
        self.controller.notify("danger", self._error_status)

    def _clear_error_status(self) -> None:
        """B12: a successful preview replaces this panel's earlier error in the status bar."""
        if self._error_status is not None and self.controller.status == self._error_status:
            self.controller.notify("info", "Geometry preview ready.")
        self._error_status = None

    def _use_clicked(self, event) -> None:
        if self.preview is None:
            return
        if self.controller.use_geometry(self.preview):
            self.used_recipe = self._recipe
            # From now on the rows edit the session's pending settings (Apply settings).
            self.openings.bind(self.preview.groups, self.controller.config,
                               self.preview.geometry)
            name = safe_text(self.preview.geometry.name or "the geometry")
            self._show("success", f"Simulating {name}.")
        else:  # the status bar holds the reason until the next action
            self._show("danger", f"Not used: {safe_text(self.controller.status)}")

    def _follow_kinds(self, config) -> None:
        """Recolour the 3D openings when the table edits ``config.openings`` (before Use)."""
        if self._recolour is not None:
            self._recolour[0].param.unwatch(self._recolour[1])
        watcher = config.param.watch(lambda e: self.preview3d.recolour(e.new), "openings")
        self._recolour = (config, watcher)

    def _source_recipe(self) -> dict | None:
        """The case-file geometry section of the current source (None for a generator)."""
        if self.source == "Sample":
            return {"sample": self.sample}
        if self.source == "Upload" and self.upload is not None:
            try:
                options = self.upload_options.options(self.upload.name)
            except GeometryError:
                return None  # options that cannot load the file: the preview says what is wrong
            return {"file": self.upload.name,
                    "options": {k: list(v) if isinstance(v, tuple) else v
                                for k, v in options.items()}}
        return None

    def case_text(self) -> str:
        """The session's run as a case file (YAML, openings by id in SI)."""
        if self.used_recipe is None:
            raise ConfigError("A case file needs a geometry from Sample or Upload used with "
                              "“Use this geometry”; a generated geometry is saved as a case "
                              "with `geometry: {generator: ..., parameters: ...}` by hand.")
        config = self.controller.applied_config
        geometry = self.controller.geometry
        units = self.setup.units(config.tau, geometry.voxel_size)
        name = (geometry.name or "dashboard").rsplit(".", 1)[0]
        return case_yaml(case_document(name, self.used_recipe, config, units,
                                       self.setup.viscosity, self.setup.density))

    def _set_drive(self, drive: str) -> None:
        """Show the preview's drive without re-running it."""
        self._drive_set = True
        try:
            self.drive = drive
        finally:
            self._drive_set = False

    def _lattice_choice(self, config, groups, geometry, tau):
        """The lattice parameters of the openings' SI values on ``geometry``
        (:func:`solver.lattice_parameters.choose_lattice`), None without a driven opening."""
        listed = [config.openings[g.ids[0]] for g in groups if g.ids[0] in config.openings]
        if geometry is None or not any(drives(spec["kind"]) for spec in listed):
            return None
        units = OpeningUnits(self.setup.units(config.tau, geometry.voxel_size),
                             config.initial_density)
        specs = si_specs(config.openings, groups, units)
        cache = self._narrowings.setdefault(id(geometry), {})
        if len(self._narrowings) > 4:  # previews come and go: keep the latest few
            self._narrowings.pop(next(iter(self._narrowings)))
        demand = demand_of_specs(specs, geometry, self.setup.viscosity, self.setup.density,
                                 geometry.voxel_size or self.setup.voxel_size_um * 1e-6,
                                 cache=cache)
        device = str((self.controller.snapshot.device or {}).get("name", "CPU"))
        return choose_lattice(demand, tau=tau, precision=config.precision,
                              backend="numpy" if device.startswith("CPU") else "cupy")

    def _opening_units(self, config, group: OpeningGroup) -> OpeningUnits:
        """SI <-> lattice units of an opening of the previewed (or used) geometry."""
        return OpeningUnits(self.setup.units(config.tau, group.voxel_size),
                            config.initial_density)

    # ------------------------------------------------------------------ rendering
    def _show(self, level: str, text: str) -> None:
        self.alert.param.update(object=text, alert_type=level, visible=bool(text))

    def _memory(self, preview: GeometryPreview) -> tuple[str, str]:
        # The one verdict the CLI and the runner use; the current run's state is freed first.
        verdict = assess_memory(preview.problem, preview.config.backend,
                                reclaimable=self.controller.snapshot.memory_bytes)
        return verdict.level, verdict.message

    @staticmethod
    def _image(preview: GeometryPreview | None) -> hv.Image:
        cut = np.zeros((2, 2)) if preview is None else preview.mid_slice.astype(float)
        axes = ("x", "y")
        # Bokeh renders titles as text, not HTML: no escaping needed here.
        title = "mid-slice (solid = dark)" if preview is None else (
            f"{preview.geometry.name[:40]}: mid-slice" if preview.geometry.name else "mid-slice")
        image = hv.Image((np.arange(cut.shape[0]), np.arange(cut.shape[1]), cut.T),
                         kdims=list(axes), vdims=["solid"]).opts(
            cmap=["#f4f1ea", "#5b4a36"], clim=(0, 1), data_aspect=1,
            title=title, toolbar=None, colorbar=False, fontsize={"title": 10})
        groups = () if preview is None else preview.groups
        if not groups:
            return image
        # The openings projected on the cut's plane (x, y), labelled with id and size.
        points = [(g.centre_nodes[0], g.centre_nodes[1], g.label) for g in groups]
        overlay = image * hv.Points(points, kdims=list(axes), vdims="label").opts(
            color="#d62728", size=8)
        # Labels read towards the middle, so those at the box's edges stay inside the plot.
        middle = cut.shape[0] / 2
        for side, align in ((lambda x: x < middle, "left"), (lambda x: x >= middle, "right")):
            chosen = [p for p in points if side(p[0])]
            if chosen:
                overlay = overlay * hv.Labels(chosen, kdims=list(axes), vdims="label").opts(
                    text_font_size="9pt", text_color="#d62728", text_align=align, yoffset=3)
        return overlay

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
            f"| drive | {_drive_text(p)} |",
        ])


def _drive_text(preview: GeometryPreview) -> str:
    """Which drive is on, in words."""
    if not preview.groups:
        force = max(preview.config.body_force, key=abs)
        return (f"body force {force:.3g} (lattice) along {'xyz'[preview.geometry.flow_axis]}, "
                "set as a pressure gradient in Physics" if force else "none: no body force "
                "and no opening")
    return (f"{len(preview.groups)} openings (table below); box faces are walls, no body "
            "force")
