"""Point probes and a line: a live time series per probe and a live profile along the line.

Points and the line are typed in voxel indices (or a probe is added by clicking the slice, see
:class:`~app.views.slice_view.SlicePlot`); the controller hands them to the runner, which
samples just those nodes on the device with every snapshot (:mod:`solver.probes`). The time
series stream through a :class:`holoviews.streams.Buffer`, the profile through a
:class:`holoviews.streams.Pipe`; values are shown in SI with the physical setup's units.
The series start again whenever the simulation is rebuilt (Reset, Apply, a new geometry:
``Snapshot.build``), so one run's samples never mix with another's. Probes and lines that a
new, smaller geometry leaves outside are dropped by the controller and named here, with their
positions in SI (:func:`dropped_note`).
"""

from __future__ import annotations

import html
import re

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn

from solver.flow_fields import FIELDS
from solver.probes import PROBE_FIELDS, Line, Probe, ProbeSet

from ..controller import Controller
from .field_units import field_si

__all__ = ["ProbesView", "parse_points", "parse_line", "series_rows", "dropped_note"]

#: Samples kept per probe in the live plot.
SERIES_LENGTH = 2000
#: Drawn on a canvas, not WebGL: each WebGL plot holds a browser context, and with the slice,
#: the counters and the 3D views a page had so many that Chromium dropped the oldest.
CANVAS = {"plot.output_backend": "canvas"}


def parse_points(text: str, ndim: int = 3) -> list[tuple[int, ...]]:
    """Points from text such as ``"10 12 8; 20, 12, 8"`` (voxel indices); ValueError if not."""
    points = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        values = re.split(r"[\s,]+", part.strip("()[] "))
        if len(values) != ndim or not all(re.fullmatch(r"\d+", v) for v in values):
            raise ValueError(f"A probe is {ndim} whole voxel indices, e.g. "
                             f"{' '.join(['10'] * ndim)}; got {part!r}.")
        points.append(tuple(int(v) for v in values))
    return points


def parse_line(text: str, ndim: int = 3) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """A line from ``"x0 y0 z0 -> x1 y1 z1"`` (voxel indices; None for empty text)."""
    if not text.strip():
        return None
    ends = re.split(r"\s*(?:->|→|;)\s*", text.strip())
    if len(ends) != 2:
        raise ValueError("A line is two points, e.g. 0 10 8 -> 47 10 8 (voxel indices).")
    start, end = (parse_points(e, ndim) for e in ends)
    if len(start) != 1 or len(end) != 1:
        raise ValueError("A line is two points, e.g. 0 10 8 -> 47 10 8 (voxel indices).")
    return start[0], end[0]


def series_rows(readings, field: str, factor: float) -> pd.DataFrame:
    """One row (step + a column per probe) of ``field`` times ``factor`` from Readings."""
    row = {"step": float(readings.step)}
    row.update({name: values[field] * factor for name, values in readings.probes.items()})
    return pd.DataFrame([row])


def dropped_note(outside, geometry, voxel_size: float | None) -> str:
    """HTML naming the probes and lines (``outside``) a new geometry left out, each point as
    voxel indices and as the SI position of that voxel's centre (``voxel_size`` m, from the
    geometry's origin; indices alone if None); empty for none."""
    if not outside:
        return ""
    voxels = " × ".join(map(str, geometry.shape))

    def centre(point: tuple[int, ...]) -> np.ndarray:  # metres, the voxel's centre
        return (np.asarray(point) + 0.5) * voxel_size + np.asarray(geometry.origin, float)
    points = [p for item in outside
              for p in ((item.point,) if isinstance(item, Probe) else (item.start, item.end))]
    box = f"{voxels} voxels"
    if voxel_size:
        top = max(float(np.abs(centre(p)).max()) for p in points)
        scale, unit = (1e3, "mm") if top >= 1e-3 else (1e6, "µm")
        box = (" × ".join(f"{n * voxel_size * scale:.4g}" for n in geometry.shape)
               + f" {unit}, {box}")

    def where(point: tuple[int, ...]) -> str:
        text = str(tuple(int(v) for v in point))
        if voxel_size:
            text += " = (" + ", ".join(f"{v * scale:.4g}" for v in centre(point)) + f") {unit}"
        return text
    parts = [f"{item.name} at {where(item.point)}" if isinstance(item, Probe)
             else f"{item.name} from {where(item.start)} to {where(item.end)}"
             for item in outside]
    return (f'<div class="probe-dropped" data-dropped="{len(outside)}" '
            f'style="color:#b45309;font-size:13px">Outside the new geometry ({box}), no '
            f"longer sampled and removed: {html.escape('; '.join(parts))}.</div>")


class ProbesView(pn.viewable.Viewer):
    """Probe and line inputs, the probes' time series and the line's profile."""

    def __init__(self, controller: Controller, setup=None, **params) -> None:
        super().__init__(**params)
        self.controller, self.setup = controller, setup
        ndim = len(controller.geometry.shape)
        example = " ".join(["10"] * ndim)
        self.points = pn.widgets.TextInput(name="Probes (voxel indices, ';' between)",
                                           placeholder=f"{example}; …",
                                           sizing_mode="stretch_width")
        self.line = pn.widgets.TextInput(name="Line (from -> to)",
                                         placeholder=f"{example} -> …",
                                         sizing_mode="stretch_width")
        self.apply = pn.widgets.Button(name="Set probes", button_type="primary", align="end")
        self.apply.on_click(lambda event: self.set_from_text())
        self.field = pn.widgets.Select(name="Probe field", options={
            FIELDS[f].label: f for f in PROBE_FIELDS}, value="umag", width=160)
        self.field.param.watch(lambda e: self._restart(), "value")
        self._columns: tuple[str, ...] = ()
        self.buffer = self._new_buffer(())
        self.series = pn.pane.HoloViews(self._series_map(), sizing_mode="stretch_width",
                                        height=230, css_classes=["probe-series"])
        self.profile_pipe = hv.streams.Pipe(data={"s": np.zeros(0), "v": np.zeros(0),
                                                  "label": "", "name": ""})
        self.profile = pn.pane.HoloViews(hv.DynamicMap(self._profile, streams=[
            self.profile_pipe]), sizing_mode="stretch_width", height=230,
            css_classes=["line-profile"])
        self.info = pn.pane.HTML("", sizing_mode="stretch_width", css_classes=["probe-info"])
        self.dropped = pn.pane.HTML("", sizing_mode="stretch_width", css_classes=["probe-note"])
        self._last_step = -1
        self._build = controller.snapshot.build  # the simulation the series shows
        controller.param.watch(self._update, "snapshot")
        controller.param.watch(self._probes_changed, "probes")
        controller.param.watch(self._show_dropped, "probes_dropped")

    # ------------------------------------------------------------------ inputs
    def set_from_text(self) -> bool:
        """Send the typed probes and line to the controller; True if accepted."""
        ndim = len(self.controller.geometry.shape)
        try:
            points = parse_points(self.points.value, ndim)
            line = parse_line(self.line.value, ndim)
        except ValueError as exc:
            self.controller.report(exc)
            return False
        probes = ProbeSet(tuple(Probe(f"p{k + 1}", p) for k, p in enumerate(points)),
                          () if line is None else (Line("line", *line),))
        return self.controller.set_probes(probes)

    def _probes_changed(self, *events) -> None:
        probes = self.controller.probes
        text = "; ".join(" ".join(map(str, p.point)) for p in probes.probes)
        if text != self.points.value:  # a probe added by a click shows in the input
            self.points.value = text
        if not probes.lines and self.line.value:  # dropped with a new geometry
            self.line.value = ""
        self._restart()

    def _show_dropped(self, *events) -> None:
        geometry = self.controller.geometry
        voxel = geometry.voxel_size or (self.setup.voxel_size_um * 1e-6 if self.setup else None)
        self.dropped.object = dropped_note(self.controller.probes_dropped, geometry, voxel)

    # ------------------------------------------------------------------ plots
    def _new_buffer(self, columns: tuple[str, ...]) -> hv.streams.Buffer:
        frame = pd.DataFrame({k: [] for k in ("step", *columns)}, dtype=float)
        return hv.streams.Buffer(frame, length=SERIES_LENGTH, index=False)

    def _series_map(self) -> hv.DynamicMap:
        columns = self._columns
        label = field_si(self.field.value, self.setup, self.controller)[1]

        def curves(data: pd.DataFrame) -> hv.Overlay:
            items = [hv.Curve(data, "step", hv.Dimension(c, label=label), label=c)
                     for c in columns] or [hv.Curve([], "step", label)]
            return hv.Overlay(items).opts(
                hv.opts.Curve(line_width=2, responsive=True, height=220, framewise=True,
                              show_grid=True, tools=["hover"]),
                hv.opts.Overlay(title=f"Probes: {label}", legend_position="top_left",
                                framewise=True, responsive=True, backend_opts=CANVAS))
        return hv.DynamicMap(curves, streams=[self.buffer])

    def _restart(self) -> None:
        """A fresh series for the current probes and field (names or units changed)."""
        self._columns = tuple(p.name for p in self.controller.probes.probes)
        self.buffer = self._new_buffer(self._columns)
        self.series.object = self._series_map()
        self._last_step = -1

    @staticmethod
    def _profile(data: dict) -> hv.Curve:
        return hv.Curve((data["s"], data["v"]), "distance along the line (voxels)",
                        hv.Dimension("v", label=data["label"] or "value")).opts(
            responsive=True, height=220, line_width=2, framewise=True, show_grid=True,
            title=f"Line profile {data['name']}", tools=["hover"], backend_opts=CANVAS)

    def _update(self, *events) -> None:
        snap = self.controller.snapshot
        if snap.build != self._build:  # a rebuilt simulation: its series starts afresh
            self._build, self._last_step = snap.build, -1
            self.buffer.clear()
        readings = snap.probes
        if readings is None or readings.step == self._last_step:
            return
        if tuple(readings.probes) != self._columns:
            return  # an older probe set's sample: the next snapshot brings the new one
        self._last_step = readings.step
        field = self.field.value
        factor, label = field_si(field, self.setup, self.controller)
        if self._columns:
            self.buffer.send(series_rows(readings, field, factor))
        for name, profile in readings.lines.items():
            self.profile_pipe.send({"s": profile["s"], "v": profile[field] * factor,
                                    "label": label, "name": name})
        n = len(readings.probes)
        self.info.object = (f'<span class="probe-step" data-step="{readings.step}">'
                            f"{n} probes, {len(readings.lines)} lines · step "
                            f"{readings.step}</span>")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.Row(self.points, self.line, self.apply, sizing_mode="stretch_width"),
            self.dropped,
            pn.Row(self.field, self.info, sizing_mode="stretch_width"),
            pn.Row(self.series, self.profile, sizing_mode="stretch_width"),
            sizing_mode="stretch_width")
