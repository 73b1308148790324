"""The live 2D cut through the flow: a HoloViews Image fed by a Pipe, optional velocity arrows.

Each new snapshot is pushed through a :class:`holoviews.streams.Pipe`; the DynamicMap redraws
the image (solids NaN, drawn grey), its colour bar and, when asked, a subsampled
:class:`holoviews.VectorField` of the in-plane velocity. The field is any of
:data:`solver.flow_fields.FIELDS`, shown in SI units when the view has the physical setup's
units (else lattice units). The colour range is automatic (the 1st to 99th percentile, so a
few extreme nodes at a wall do not wash the picture out; symmetric about 0 for a signed field)
or fixed by the user.
"""

from __future__ import annotations

import html

import holoviews as hv
import numpy as np
import panel as pn

from solver.flow_fields import FIELDS

from ..controller import Controller
from ..exports import QUANTITY_LABELS
from ..recording import SliceRecorder

__all__ = ["SlicePlot", "frame_of", "colour_range", "ARROWS_PER_SIDE", "SIGNED"]

#: Fields whose sign matters: a diverging colour map, symmetric about 0.
SIGNED = ("ux", "uy", "uz", "pressure", "qcrit")

#: Arrows along the longer side of the cut.
ARROWS_PER_SIDE = 24
SOLID_COLOUR = "#4a4a4a"
#: Length of the longer side of the image frame, pixels.
FRAME_PX = 400


def frame_of(snapshot, arrows: bool, shape: tuple[int, ...] = (2, 2, 2), units=None,
             fixed: tuple[float, float] | None = None) -> dict:
    """The data one redraw of the cut needs, from a Snapshot (zeros of ``shape``'s cut if none):
    the plane in SI with ``units`` (a :class:`solver.units.UnitSystem`, else lattice units),
    its label and colour range (``fixed``, else :func:`colour_range`).

    The placeholder is the fluid at rest rather than all NaN, whose colour range HoloViews
    cannot compute (a RuntimeWarning in notebooks).
    """
    plane = snapshot.plane
    if plane is None:
        axis = snapshot.view.axis if len(shape) == 3 else 2
        plane = np.zeros([n for a, n in enumerate(shape) if a != axis])
    quantity = snapshot.view.quantity
    spec = FIELDS[quantity]
    if units is not None:
        plane = np.asarray(plane, dtype=float) * spec.si_factor(units)
    label = spec.si_label() if units is not None else QUANTITY_LABELS[quantity]
    return dict(plane=plane, velocity=snapshot.plane_velocity if arrows else None,
                axes=snapshot.plane_axes, quantity=quantity, label=label,
                clim=fixed or colour_range(plane, quantity),
                title=f"{label}, {'xyz'[snapshot.view.axis]} = {snapshot.view.index or 0}, "
                      f"step {snapshot.step}")


def colour_range(plane: np.ndarray, quantity: str) -> tuple[float, float]:
    """The automatic colour range of a cut: its 1st to 99th percentile over the fluid,
    symmetric about 0 for a :data:`SIGNED` field; (0, 1) without a finite value."""
    finite = np.asarray(plane, dtype=float)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        return 0.0, 1.0
    low, high = (float(v) for v in np.percentile(finite, [1.0, 99.0]))
    if quantity in SIGNED:
        bound = max(abs(low), abs(high))
        low, high = -bound, bound
    if not high > low:
        high = low + max(abs(low) * 1e-6, 1e-30)
    return low, high


def _image(frame: dict) -> hv.Image:
    a, b = frame["axes"]
    plane = np.asarray(frame["plane"], dtype=float)
    na, nb = plane.shape
    value = hv.Dimension(frame["quantity"], label=frame.get("label",
                                                             QUANTITY_LABELS[frame["quantity"]]))
    return hv.Image((np.arange(na), np.arange(nb), plane.T), kdims=[a, b], vdims=[value])


def _arrows(frame: dict) -> hv.VectorField:
    a, b = frame["axes"]
    dims = dict(kdims=[a, b], vdims=["angle", "magnitude"])
    velocity = frame["velocity"]
    if velocity is None:
        return hv.VectorField([], **dims)
    na, nb = velocity.shape[1:]
    stride = max(1, max(na, nb) // ARROWS_PER_SIDE)
    ia, ib = np.meshgrid(np.arange(stride // 2, na, stride), np.arange(stride // 2, nb, stride),
                         indexing="ij")
    va, vb = velocity[0][ia, ib], velocity[1][ia, ib]
    keep = np.isfinite(va) & np.isfinite(vb)
    magnitude = np.hypot(va, vb)[keep]
    scale = magnitude / magnitude.max() if magnitude.size and magnitude.max() > 0 else magnitude
    data = (ia[keep], ib[keep], np.arctan2(vb[keep], va[keep]), scale)
    return hv.VectorField(data, **dims).opts(
        magnitude="magnitude", scale=0.9 * stride, pivot="mid", color="white", line_width=1.2,
        alpha=0.85)


class SlicePlot(pn.viewable.Viewer):
    """Slice controls and the live image of the controller's latest snapshot."""

    def __init__(self, controller: Controller, setup=None, **params) -> None:
        """``setup``: the :class:`~app.views.physics_panel.PhysicalSetup` whose units show the
        field in SI (None: lattice units)."""
        super().__init__(**params)
        self.controller, self.setup = controller, setup
        self.fix_range = pn.widgets.Checkbox(name="fix colour range", value=False, width=130,
                                             align="end")
        self.low = pn.widgets.FloatInput(name="colours from", value=0.0, width=120)
        self.high = pn.widgets.FloatInput(name="to", value=1.0, width=120)
        first = self._frame(controller.snapshot)
        self.pipe = hv.streams.Pipe(data=first)
        self.dmap = hv.DynamicMap(self._render, streams=[self.pipe])
        self.click_probe = pn.widgets.Checkbox(name="click adds a probe", value=True, width=140,
                                               align="end")
        self.recorder = SliceRecorder()
        self.record = pn.widgets.Checkbox(name="record slice", value=False, width=100)
        self.record_every = pn.widgets.FloatInput(name="every (s)", value=1.0, start=0.1,
                                                  width=90)
        self.record_every.param.watch(self._record_interval, "value")
        self.record.param.watch(lambda e: self.recorder.clear() if e.new else None, "value")
        self._tap = self._tap_stream()
        self._shape, self._label = first["plane"].shape, first["label"]
        self._shown = -1
        controller.param.watch(self._update, ["snapshot", "arrows"])
        for widget in (self.fix_range, self.low, self.high):
            widget.param.watch(self._range_changed, "value")
        p = controller.param
        self.field = pn.widgets.Select.from_param(p.quantity, name="Field", width=170,
                                                  css_classes=["field-select"])
        self._controls = pn.Column(
            pn.Row(
                self.field,
                pn.widgets.RadioButtonGroup.from_param(p.axis, button_style="outline",
                                                       button_type="primary", width=130,
                                                       name="Normal", align="end"),
                pn.widgets.IntSlider.from_param(p.position, name="Slice position",
                                                sizing_mode="stretch_width"),
                sizing_mode="stretch_width",
            ),
            pn.Row(self.fix_range, self.low, self.high, sizing_mode="stretch_width"),
            pn.Row(
                pn.widgets.Checkbox.from_param(p.arrows, name="velocity arrows", width=140),
                self.click_probe, self.record, self.record_every,
                sizing_mode="stretch_width",
            ),
            sizing_mode="stretch_width",
        )
        # Unlinked: Panel would otherwise share the x/y ranges of every HoloViews plot on the
        # page with the same axis names, cropping the geometry preview to this cut's range.
        self._pane = pn.pane.HoloViews(self.dmap, sizing_mode="stretch_width",
                                       css_classes=["slice-plot"], linked_axes=False)
        # The title as text above the plot: a Bokeh title is cut at the width of a narrow cut.
        self.caption = pn.pane.HTML(_caption(first["title"]), sizing_mode="stretch_width",
                                    height=22, css_classes=["slice-title"])

    def _update(self, *events) -> None:
        snap = self.controller.snapshot
        if snap.seq == self._shown and not any(e.name == "arrows" for e in events):
            return
        self._shown = snap.seq
        frame = self._frame(snap)
        if self.record.value and snap.plane is not None:
            self.recorder.offer(frame["plane"], frame["title"], frame["label"])
        self.caption.object = _caption(frame["title"])
        if (frame["plane"].shape, frame["label"]) == (self._shape, self._label):
            self.pipe.send(frame)
            return
        # A cut of another shape needs new axis ranges, another field a new colour bar title:
        # start a fresh plot.
        self._shape, self._label = frame["plane"].shape, frame["label"]
        self.pipe = hv.streams.Pipe(data=frame)
        self.dmap = hv.DynamicMap(self._render, streams=[self.pipe])
        self._tap = self._tap_stream()
        self._pane.object = self.dmap

    def _record_interval(self, event) -> None:
        if event.new and event.new > 0:
            self.recorder.interval_s = float(event.new)

    def _tap_stream(self) -> hv.streams.Tap:
        """A click on the cut: a probe at that node (when ``click_probe`` is on)."""
        tap = hv.streams.Tap(source=self.dmap, transient=True)
        tap.add_subscriber(self._tapped)
        return tap

    def _tapped(self, x=None, y=None, **_) -> None:
        if x is None or y is None or not self.click_probe.value:
            return
        point = [int(round(x)), int(round(y))]
        if len(self.controller.geometry.shape) == 3:
            point.insert(self.controller.axis, self.controller.position)
        self.controller.add_probe(tuple(point))

    def _frame(self, snap) -> dict:
        """:func:`frame_of` with this view's units and colour range; an automatic range is
        shown in the range inputs (a starting point to fix)."""
        units = None
        if self.setup is not None:
            try:
                tau = float(snap.config.get("tau", self.controller.config.tau))
                units = self.setup.units(tau, self.controller.geometry.voxel_size)
            except ValueError:  # an invalid setup: lattice units rather than no picture
                units = None
        fixed = (self.low.value, self.high.value) if self.fix_range.value else None
        if fixed is not None and not fixed[1] > fixed[0]:
            fixed = None
        frame = frame_of(snap, self.controller.arrows, self.controller.geometry.shape, units,
                         fixed)
        if not self.fix_range.value:
            self._syncing = True
            try:
                self.low.value, self.high.value = (float(f"{v:.4g}") for v in frame["clim"])
            finally:
                self._syncing = False
        return frame

    def _range_changed(self, event) -> None:
        if getattr(self, "_syncing", False) or (event.obj is not self.fix_range
                                                 and not self.fix_range.value):
            return
        self._shown = -1  # redraw the latest snapshot with the new range
        self._update()

    @staticmethod
    def _render(data: dict) -> hv.Overlay:
        na, nb = np.shape(data["plane"])
        scale = FRAME_PX / max(na, nb)  # square pixels per node, longest side FRAME_PX
        signed = data["quantity"] in SIGNED
        image = _image(data).opts(
            cmap="RdBu_r" if signed else "viridis", clim=tuple(data["clim"]), colorbar=True,
            clipping_colors={"NaN": SOLID_COLOUR},
            frame_width=max(120, round(na * scale)), frame_height=max(120, round(nb * scale)),
            framewise=True, tools=["hover"],
            toolbar="above", colorbar_opts={"width": 12},
        )
        # A canvas, not WebGL (as the counters and probes): WebGL contexts the 3D views'
        # syncs take made Chromium drop the plot's (regl "context lost").
        return (image * _arrows(data)).opts(framewise=True,
                                            backend_opts={"plot.output_backend": "canvas"})

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(self._controls, self.caption, self._pane, sizing_mode="stretch_width")


def _caption(title: str) -> str:
    """The slice title as one line of HTML (wraps instead of being cut)."""
    return (f'<div style="font-weight:600;font-size:13px;white-space:normal">'
            f"{html.escape(title)}</div>")
