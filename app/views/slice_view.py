"""The live 2D cut through the flow: a HoloViews Image fed by a Pipe, optional velocity arrows.

Each new snapshot is pushed through a :class:`holoviews.streams.Pipe`; the DynamicMap redraws
the image (solids NaN, drawn grey), its colour bar and, when asked, a subsampled
:class:`holoviews.VectorField` of the in-plane velocity. Values are in lattice units.
"""

from __future__ import annotations

import html

import holoviews as hv
import numpy as np
import panel as pn

from ..controller import Controller
from ..exports import QUANTITY_LABELS

__all__ = ["SlicePlot", "frame_of", "ARROWS_PER_SIDE"]

#: Arrows along the longer side of the cut.
ARROWS_PER_SIDE = 24
SOLID_COLOUR = "#4a4a4a"
#: Length of the longer side of the image frame, pixels.
FRAME_PX = 400


def frame_of(snapshot, arrows: bool, shape: tuple[int, ...] = (2, 2, 2)) -> dict:
    """The data one redraw of the cut needs, from a Snapshot (zeros of ``shape``'s cut if none).

    The placeholder is the fluid at rest rather than all NaN, whose colour range HoloViews
    cannot compute (a RuntimeWarning in notebooks).
    """
    plane = snapshot.plane
    if plane is None:
        axis = snapshot.view.axis if len(shape) == 3 else 2
        plane = np.zeros([n for a, n in enumerate(shape) if a != axis])
    return dict(plane=plane, velocity=snapshot.plane_velocity if arrows else None,
                axes=snapshot.plane_axes, quantity=snapshot.view.quantity,
                title=f"{QUANTITY_LABELS[snapshot.view.quantity]}, "
                      f"{'xyz'[snapshot.view.axis]} = {snapshot.view.index or 0}, "
                      f"step {snapshot.step}")


def _image(frame: dict) -> hv.Image:
    a, b = frame["axes"]
    plane = np.asarray(frame["plane"], dtype=float)
    na, nb = plane.shape
    value = hv.Dimension(frame["quantity"], label=QUANTITY_LABELS[frame["quantity"]])
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

    def __init__(self, controller: Controller, **params) -> None:
        super().__init__(**params)
        self.controller = controller
        first = frame_of(controller.snapshot, controller.arrows, controller.geometry.shape)
        self.pipe = hv.streams.Pipe(data=first)
        self.dmap = hv.DynamicMap(self._render, streams=[self.pipe])
        self._shape = first["plane"].shape
        self._shown = -1
        controller.param.watch(self._update, ["snapshot", "arrows"])
        p = controller.param
        self._controls = pn.Column(
            pn.Row(
                pn.widgets.RadioButtonGroup.from_param(p.quantity, button_style="outline",
                                                       button_type="primary", width=300),
                pn.widgets.RadioButtonGroup.from_param(p.axis, button_style="outline",
                                                       button_type="primary", width=130,
                                                       name="Normal"),
            ),
            pn.Row(
                pn.widgets.IntSlider.from_param(p.position, name="Slice position",
                                                sizing_mode="stretch_width"),
                pn.widgets.Checkbox.from_param(p.arrows, name="velocity arrows", width=140,
                                               align="end"),
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
        frame = frame_of(snap, self.controller.arrows, self.controller.geometry.shape)
        self.caption.object = _caption(frame["title"])
        if frame["plane"].shape == self._shape:
            self.pipe.send(frame)
            return
        # A cut of another shape needs new axis ranges: start a fresh plot.
        self._shape = frame["plane"].shape
        self.pipe = hv.streams.Pipe(data=frame)
        self.dmap = hv.DynamicMap(self._render, streams=[self.pipe])
        self._pane.object = self.dmap

    @staticmethod
    def _render(data: dict) -> hv.Overlay:
        na, nb = np.shape(data["plane"])
        scale = FRAME_PX / max(na, nb)  # square pixels per node, longest side FRAME_PX
        image = _image(data).opts(
            cmap="viridis", colorbar=True, clipping_colors={"NaN": SOLID_COLOUR},
            frame_width=max(120, round(na * scale)), frame_height=max(120, round(nb * scale)),
            framewise=True, tools=["hover"],
            toolbar="above", colorbar_opts={"width": 12},
        )
        return (image * _arrows(data)).opts(framewise=True)

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(self._controls, self.caption, self._pane, sizing_mode="stretch_width")


def _caption(title: str) -> str:
    """The slice title as one line of HTML (wraps instead of being cut)."""
    return (f'<div style="font-weight:600;font-size:13px;white-space:normal">'
            f"{html.escape(title)}</div>")
