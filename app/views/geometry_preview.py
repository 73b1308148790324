"""The preview of the Geometry tab's store: its message, the mid-slice with the openings and
the cost table (shape, porosity, tiles, eta_t before and after the offset search, memory,
drive), each bound to the store's parameters."""

from __future__ import annotations

import holoviews as hv
import numpy as np
import panel as pn
import param

from ..geometry_sources import GeometryPreview
from .geometry_store import GeometryStore

__all__ = ["PreviewView", "preview_image", "preview_table"]


class PreviewView(pn.viewable.Viewer):
    """The store's message, mid-slice picture and cost table."""

    store = param.ClassSelector(class_=GeometryStore)

    def __init__(self, store: GeometryStore, **params) -> None:
        super().__init__(store=store, **params)
        self.alert = pn.pane.Alert(store.param.message, alert_type=store.param.level,
                                   visible=pn.bind(bool, store.param.message),
                                   sizing_mode="stretch_width")
        self.info = pn.pane.Markdown(
            pn.bind(preview_table, store.param.preview, store.param.memory_text),
            sizing_mode="stretch_width")
        self.image = pn.pane.HoloViews(pn.bind(preview_image, store.param.preview),
                                       height=330, width=360)

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(self.alert, pn.Row(self.image, self.info), sizing_mode="stretch_width")


#: Drawn on a canvas, not WebGL: the 3D views' syncs each take a browser context, and Chromium
#: dropped the oldest, a plot's (regl "context lost"), after a new geometry.
CANVAS = {"plot.output_backend": "canvas"}


def preview_image(preview: GeometryPreview | None) -> hv.Element:
    """The preview's mid-slice (solid dark) with its openings labelled (id and size)."""
    cut = np.zeros((2, 2)) if preview is None else preview.mid_slice.astype(float)
    axes = ("x", "y")
    # Bokeh renders titles as text, not HTML: no escaping needed here.
    title = "mid-slice (solid = dark)" if preview is None else (
        f"{preview.geometry.name[:40]}: mid-slice" if preview.geometry.name else "mid-slice")
    image = hv.Image((np.arange(cut.shape[0]), np.arange(cut.shape[1]), cut.T),
                     kdims=list(axes), vdims=["solid"]).opts(
        cmap=["#f4f1ea", "#5b4a36"], clim=(0, 1), data_aspect=1,
        title=title, toolbar=None, colorbar=False, fontsize={"title": 10},
        backend_opts=CANVAS)
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
    return overlay.opts(backend_opts=CANVAS)


def preview_table(p: GeometryPreview | None, memory: str) -> str:
    """The preview's cost as a Markdown table ('' without a preview)."""
    if p is None:
        return ""
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
