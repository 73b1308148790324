"""The openings of a previewed geometry in 3D, before "Use this geometry" (#18 item 4).

The Geometry tab's preview shows the solid surface (the 3D view's :func:`solid_surface`:
coarsened to at most ~96 nodes per axis and decimated, so a 256^3 upload stays cheap) with the
openings as the 3D view draws them (:func:`opening_marks`: discs across their planes, coloured by
the kind the preview's config gives each, labelled with id and diameter). One plotter and one
vtk.js pane live as long as the panel, on the page from the start, and each preview replaces
their meshes in place: a VTK pane added to the page later is removed again by Bokeh at once and
vtk.js then fails on its deleted interactor (an uncaught error in the browser).
"""

from __future__ import annotations

import logging

import numpy as np
import panel as pn
import pyvista as pv

from geometries import VoxelGeometry

from .scene3d import (
    KIND_COLOURS,
    SOLID_RGB,
    _servable,
    add_opening_actors,
    camera_state,
    colour_openings,
    discs_by_kind,
    opening_marks,
    solid_surface,
)

__all__ = ["OpeningsPreview3D", "preview_meshes"]

log = logging.getLogger(__name__)

WAITING = ("**Openings in 3D** · shown here after the preview of a 3D geometry with openings "
           "(an STL of a vessel)")
SHOWING = ("**Openings in 3D** · red inlet, blue pressure outlet, green outflow, grey closed "
           "(as set in the table below); drag to turn")


def preview_meshes(geometry: VoxelGeometry, openings: dict[int, dict]) -> dict[str, pv.PolyData]:
    """The solid surface, box outline, opening discs (cell scalar 'kind' from ``openings``,
    ``SimulationConfig.openings``) and labels of ``geometry``, in node coordinates."""
    surface = solid_surface(np.asarray(geometry.solid, dtype=bool))
    outline = pv.Box(bounds=[v for n in geometry.shape for v in (-0.5, n - 0.5)]).outline()
    discs, labels = opening_marks(geometry)
    if discs.n_cells:
        colour_openings(discs, openings)
    return {"solid": surface, "outline": outline, "openings": discs, "labels": labels}


class OpeningsPreview3D(pn.viewable.Viewer):
    """A 3D view of the previewed geometry's openings (empty until there is one to show)."""

    def __init__(self, **params) -> None:
        super().__init__(**params)
        self.plotter = pv.Plotter(off_screen=True, window_size=(480, 360))
        self.plotter.set_background("#f4f6f8")
        self.plotter.theme.allow_empty_mesh = True
        self._meshes = {key: _servable(pv.PolyData())
                        for key in ("solid", "outline", "labels", *KIND_COLOURS)}
        self._meshes["outline"].copy_from(pv.Box(bounds=(-0.5, 0.5) * 3).outline())
        self._discs = pv.PolyData()  # every disc, cell array 'opening' (id)
        # Translucent: the openings sit on the lumen's ends, partly inside the solid's surface.
        self.plotter.add_mesh(self._meshes["solid"], color=SOLID_RGB, opacity=0.35,
                              smooth_shading=True)
        self.plotter.add_mesh(self._meshes["outline"], color="#6b7785", line_width=1)
        # One plain-coloured mesh per kind: a recolour moves discs between them.
        add_opening_actors(self.plotter, self._meshes, self._meshes["labels"])
        self.geometry: VoxelGeometry | None = None
        self.caption = pn.pane.Markdown(WAITING, sizing_mode="stretch_width", margin=(0, 5))
        self.pane = pn.pane.VTK(self.plotter.ren_win, sizing_mode="stretch_width", height=360)
        self.layout = pn.Column(self.caption, self.pane, sizing_mode="stretch_width",
                                css_classes=["openings-3d"])

    @property
    def shown(self) -> bool:
        """Whether the view shows a geometry's openings."""
        return self.geometry is not None

    def show(self, geometry: VoxelGeometry | None, openings: dict[int, dict]) -> None:
        """Show ``geometry``'s openings (empty the view for None, 2D or no openings)."""
        if geometry is None or geometry.ndim != 3 or not geometry.openings:
            self.clear()
            return
        try:
            meshes = preview_meshes(geometry, openings)
        except Exception:  # a broken preview picture must not block "Use this geometry"
            log.exception("3D openings preview failed")
            self.clear()
            return
        self._replace(meshes, openings)
        self.geometry = geometry
        self.caption.object = SHOWING

    def recolour(self, openings: dict[int, dict]) -> None:
        """Colour the discs by ``openings`` (``SimulationConfig.openings``: the table's edits)."""
        if self.geometry is None:
            return
        self._split_discs(openings)
        self.pane.synchronize()

    def _split_discs(self, openings: dict[int, dict]) -> None:
        """Put each disc in the mesh of its opening's kind (KIND_COLOURS)."""
        for kind, mesh in discs_by_kind(self._discs, openings).items():
            self._meshes[kind].copy_from(mesh)

    def clear(self) -> None:
        """Empty the view (a failed preview, or a geometry without openings)."""
        if self.geometry is None:
            return
        self._replace({key: pv.PolyData() for key in ("solid", "outline", "labels",
                                                      "openings")}, {})
        self.geometry = None
        self.caption.object = WAITING

    def _replace(self, meshes: dict[str, pv.PolyData], openings: dict[int, dict]) -> None:
        for key in ("solid", "outline", "labels"):
            self._meshes[key].copy_from(_servable(meshes[key]))
        self._discs = meshes["openings"]
        self._split_discs(openings)
        self.plotter.view_isometric()
        self.plotter.camera.zoom(1.1)
        self.pane.synchronize()
        self.pane.reset_camera()
        # The browser re-applies the pane's last camera after a sync: give it the new one.
        self.pane.camera = camera_state(self.plotter.camera)

    def close(self) -> None:
        """Release the VTK objects of this view."""
        self.plotter.close()
        self.plotter.deep_clean()
        self._meshes.clear()

    def __panel__(self) -> pn.viewable.Viewable:
        return self.layout
