"""The Geometry tab's data store: where the geometry comes from, its preview and what is said.

Panel's data-store pattern: :class:`GeometryStore` holds the tab's state as parameters (the
source, generator, sample and drive chosen, the last upload, the newest preview, the message)
and its actions (preview the source, read an upload, use the preview); the views
(:mod:`.geometry_source`, :mod:`.upload_view`, :mod:`.geometry_preview`, assembled by
:mod:`.geometry_panel`) show its parameters and call its actions. The preview (mid-slice,
porosity, tile utilisation, memory) is computed on the host in a worker thread; nothing is
allocated on the device until "Use this geometry". Upload errors become the message and leave
the running simulation alone; the last upload is kept, so a changed upload option re-reads it at
once; only the newest preview is shown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import param

from geometries.errors import GeometryError
from solver.memory import assess_memory, judge

from ..controller import Controller
from ..geometry_sources import (
    GENERATORS,
    GeometryPreview,
    UploadOptions,
    UploadOptionsBase,
    load_sample,
    load_upload,
    make_preview,
    sample_names,
)
from ..openings import DRIVES
from ..settings import Settings
from ..uploads import UploadedFile, safe_text

__all__ = ["GeometryStore", "memory_verdict"]

log = logging.getLogger(__name__)


def memory_verdict(needed: int, available: int | None, where: str) -> tuple[str, str]:
    """('ok' | 'warning' | 'refused', sentence) of :func:`solver.memory.judge`."""
    verdict = judge(needed, available, where)
    return verdict.level, verdict.message


class GeometryStore(param.Parameterized):
    """The Geometry tab's state and actions (one per session)."""

    source = param.Selector(objects=["Generator", "Sample", "Upload"], default="Generator")
    generator = param.Selector(objects=list(GENERATORS), default="Random sphere pack")
    sample = param.Selector(objects=[""], default="")
    preview = param.ClassSelector(class_=GeometryPreview, allow_None=True, precedence=-1)
    drive = param.Selector(objects=list(DRIVES), default=next(iter(DRIVES)),
                           label="Flow driven by",
                           doc="Body force (periodic box; Physics tab), the geometry's openings "
                               "(a vessel), or a pair of box faces as inlet and outlet.")
    upload = param.ClassSelector(class_=UploadedFile, allow_None=True, precedence=-1)
    #: What the tab says: an Alert level ('info', 'success', 'warning', 'danger') and text.
    level = param.String("info", precedence=-1)
    message = param.String("", precedence=-1)
    #: The memory verdict's sentence of the preview, and whether "Use this geometry" may be
    #: pressed (a preview whose memory is not refused).
    memory_text = param.String("", precedence=-1)
    usable = param.Boolean(False, precedence=-1)
    #: Raised by :meth:`use` after the controller took the preview.
    used = param.Event(precedence=-1)

    def __init__(self, controller: Controller, settings: Settings,
                 upload_options: UploadOptionsBase | None = None, **params) -> None:
        super().__init__(**params)
        self.controller, self.settings = controller, settings
        names = sample_names()
        self.param.sample.objects = names
        self.sample = names[0] if names else ""
        self.specs = {name: cls(name=name) for name, cls in GENERATORS.items()}
        self.upload_options = upload_options or UploadOptions(name="Upload options")
        self.upload_options.param.watch(
            self._option_changed, [p for p in self.upload_options.param if p != "name"])
        self._build: tuple | None = None  # the last preview's (build, what): a drive re-runs it
        self._drive_set = False
        self._generation = 0  # previews started; only the newest one's result is shown
        self._error_status: str | None = None  # what this tab last put in the status bar
        # Where the previewed and the used geometry came from: a case's geometry section.
        self._recipe: dict | None = None
        self.used_recipe: dict | None = None

    # ------------------------------------------------------------------ actions
    async def preview_source(self) -> None:
        """Preview the chosen generator or sample."""
        if self.source == "Generator":
            spec = self.specs[self.generator]
            await self.make_preview(spec.build, f"Generating {self.generator.lower()}")
        else:
            name = self.sample
            await self.make_preview(lambda: load_sample(name), f"Loading {name}")

    async def read_upload(self, name: str, data: bytes) -> None:
        """Keep an uploaded file (the session's one copy) and preview it."""
        self.upload = UploadedFile(str(name) or "upload", bytes(data))
        await self._preview_upload()

    def use(self) -> None:
        """Hand the preview to the controller (allocated on the device now)."""
        if self.preview is None:
            return
        if self.controller.use_geometry(self.preview):
            self.used_recipe = self._recipe
            name = safe_text(self.preview.geometry.name or "the geometry")
            self.say("success", f"Simulating {name}.")
            self.param.trigger("used")
        else:  # the status bar holds the reason until the next action
            self.say("danger", f"Not used: {safe_text(self.controller.status)}")

    def failed(self, message: str) -> None:
        """Show a failed preview or upload here and in the status bar (until the next action)."""
        self.param.update(preview=None, memory_text="", usable=False)
        self.say("danger", safe_text(message))
        self._error_status = f"Geometry not loaded: {message}"
        self.controller.notify("danger", self._error_status)

    def say(self, level: str, text: str) -> None:
        """Set the tab's message."""
        self.param.update(level=level, message=text)

    def memory(self, preview: GeometryPreview) -> tuple[str, str]:
        """The memory verdict of running ``preview`` (the current run's state freed first)."""
        verdict = assess_memory(preview.problem, preview.config.backend,
                                reclaimable=self.controller.snapshot.memory_bytes)
        return verdict.level, verdict.message

    # ------------------------------------------------------------------ previews
    async def _option_changed(self, *events) -> None:
        # B1: options re-apply to the file already uploaded.
        if self.source == "Upload" and self.upload is not None:
            await self._preview_upload()

    async def _preview_upload(self) -> None:
        upload, options = self.upload, self.upload_options
        cap = self.settings.max_upload_bytes
        await self.make_preview(
            lambda: load_upload(upload.data, upload.name, options.options(upload.name), cap),
            f"Reading {upload.name}")

    @param.depends("drive", watch=True)
    async def _drive_changed(self) -> None:
        """Preview the last geometry again with the drive chosen (not the preview's own)."""
        if not self._drive_set and self._build is not None:
            await self.make_preview(*self._build, drive=self.drive)

    async def make_preview(self, build: Callable, what: str, drive: str | None = None) -> None:
        """Build the geometry with ``build`` in a worker thread and preview it (``drive``:
        re-run the last one with another drive)."""
        if drive is None:  # a new geometry (a drive change keeps the one previewed)
            self._recipe = self._source_recipe()
        self._generation += 1
        generation = self._generation
        self._build = (build, what)
        self.usable = False
        self.say("info", f"{safe_text(what)} …")
        config = self.controller.config
        try:
            preview = await asyncio.to_thread(lambda: make_preview(build(), config, drive))
        except Exception as exc:  # any parse or validation failure becomes a message
            log.info("geometry preview failed: %s", exc)
            if generation == self._generation:
                self.failed(f"{what.split(' ', 1)[-1]} failed: {exc}")
            return
        if generation != self._generation:
            return  # a newer preview was started meanwhile
        self._set_drive(preview.drive)
        verdict, sentence = self.memory(preview)
        self.param.update(preview=preview, memory_text=sentence)
        notes = " ".join(safe_text(n) for n in preview.notes)
        level = {"ok": "success", "warning": "warning", "refused": "danger"}[verdict]
        if verdict == "ok" and notes:
            level = "warning"
        text = sentence if verdict != "ok" else (
            "Usable, but check it first:" if preview.doubtful else
            "Ready: press “Use this geometry” to simulate it.")
        self.say(level, f"{text} {notes}".strip())
        self.usable = verdict != "refused"
        self._clear_error_status()

    def _clear_error_status(self) -> None:
        """B12: a successful preview replaces this tab's earlier error in the status bar."""
        if self._error_status is not None and self.controller.status == self._error_status:
            self.controller.notify("info", "Geometry preview ready.")
        self._error_status = None

    def _set_drive(self, drive: str) -> None:
        """Show the preview's drive without re-running it."""
        self._drive_set = True
        try:
            self.drive = drive
        finally:
            self._drive_set = False

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
