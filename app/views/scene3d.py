"""The 3D view: a cutaway of the solid and the current slice plane, rendered by vtk.js.

An off-screen :class:`pyvista.Plotter` holds the scene (:mod:`solver.scene_frames`, the same
scene the command line's 3D frames render) and :class:`panel.pane.VTK` mirrors it in
the browser. The solid surface is the marching-cubes contour (pyvista ``contour``) of the
solid mask at 0.5, halfway between solid and fluid nodes where the bounce-back walls sit,
computed once per geometry (on a coarsened mask for large domains, decimated if still large)
and clipped at the slice so the plane is visible. The plane shows the snapshot's quantity in
the pores and the solid colour in the grains. The browser copy is refreshed every few seconds,
not every frame: serialising the scene costs the server far more than a 2D image.
The openings of the geometry (:attr:`geometries.VoxelGeometry.openings`) are discs at their
centres across their planes, coloured by the kind the run applies (inlet, outlet, outflow,
closed), each with a 3D text label of its id and diameter ("1 (d 2 mm)"): text as polygons,
which vtk.js shows like any mesh. The plane's colour bar (:func:`colour_bar_html`) sits under
the 3D view in SI units: vtk.js does not show VTK's scalar-bar actor.
"""

from __future__ import annotations

import html
import logging
import time

import matplotlib
import numpy as np
import panel as pn
import param
import pyvista as pv
from panel.pane.vtk.vtk import VTKRenderWindowSynchronized

from solver.coarse_flow import COARSE_FIELDS
from solver.flow_fields import FIELDS
from solver.flow_meshes import (
    SEED_SOURCES,
    auto_level,
    coarse_grid,
    isosurface,
    seed_points,
    streamlines,
)
from solver.opening_kinds import OPENING_TYPES, opening_kind
from solver.scene_frames import (
    BACKGROUND_RGB,
    MAX_TRIANGLES,
    SOLID_RGB,
    VESSEL_OPACITY,
    add_scene_actors,
    clip_solid,
    is_vessel,
    outline,
    reset_view,
    slice_plane,
    solid_surface,
    style_solid,
)

from ..controller import Controller
from ..openings import opening_groups
from ..recording import SceneRecorder
from .field_units import field_si
from .slice_view import colour_range

__all__ = ["Scene3D", "solid_surface", "is_vessel", "slice_plane", "camera_state", "opening_marks",
           "colour_openings", "discs_by_kind", "add_opening_actors", "colour_bar_html",
           "flow_info_html",
           # the shared scene (solver.scene_frames), re-exported for the app's other views
           "SOLID_RGB", "VESSEL_OPACITY", "MAX_TRIANGLES"]

log = logging.getLogger(__name__)

pv.OFF_SCREEN = True
#: Seconds between coarse 3D flows the runner reads, unless the view is given its scene refresh
#: period (the dashboard's: the flow then comes as often as the scene was synced before). Each
#: new one goes to the browser at once (within a poll) and stands for that sync: every sync
#: makes vtk.js rebuild its render window with a new WebGL context, and at a sync every 2 s a
#: slow browser fell behind by tens of seconds and Chromium dropped the oldest context, the
#: plots' (Bokeh's "regl context lost").
FLOW3D_INTERVAL_S = 10.0
LABEL_RGB = "#1f2a37"
#: Disc colour per opening kind (the run's applied condition; unlisted = closed): each kind's
#: own colour (solver/opening_kinds.py).
KIND_COLOURS = {name: opening_kind(name).colour for name in OPENING_TYPES}
#: Openings labelled in 3D (the largest first; a rock's face patches can be hundreds).
MAX_LABELS = 12


def opening_marks(geometry) -> tuple[pv.PolyData, pv.PolyData]:
    """(discs, labels) of the geometry's openings, node coordinates: a disc of the equivalent
    diameter at each centre across the opening's plane, and a text of its id and size."""
    discs, labels = pv.PolyData(), pv.PolyData()
    groups = opening_groups(geometry) if geometry.ndim == 3 else ()
    h = geometry.voxel_size or 1.0
    extent = max(geometry.shape)
    for rank, group in enumerate(sorted(groups, key=lambda g: -g.area_nodes)):
        centre, normal = np.asarray(group.centre_nodes), np.asarray(group.normal)
        radius = max(group.diameter / h / 2.0, 0.5)
        disc = pv.Disc(center=centre, inner=0.0, outer=radius, normal=normal, c_res=32)
        disc.cell_data["opening"] = np.full(disc.n_cells, group.ids[0])
        discs = discs.merge(disc)
        if rank < MAX_LABELS:
            # Outside the opening, along its normal, at a size read at the box's scale.
            size = max(extent / 25.0, 1.0)
            labels = labels.merge(pv.Text3D(group.label, depth=size / 5, height=size,
                                            center=centre + normal * (radius * 0.5 + 2 * size),
                                            normal=normal))
    return discs, labels


def colour_openings(discs: pv.PolyData, openings: dict[int, dict]) -> None:
    """Set the discs' cell scalar 'kind' to the index in KIND_COLOURS of the kind ``openings``
    (``SimulationConfig.openings``) gives each one's opening; unlisted = closed."""
    codes = list(KIND_COLOURS)
    ids = discs.cell_data["opening"] if "opening" in discs.cell_data else np.zeros(0, int)
    code = {i: codes.index(openings.get(int(i), {}).get("kind", "closed"))
            for i in np.unique(ids)}
    discs.cell_data["kind"] = np.array([code[i] for i in ids], dtype=float)


def discs_by_kind(discs: pv.PolyData, openings: dict[int, dict]) -> dict[str, pv.PolyData]:
    """The discs of :func:`opening_marks` split by the kind ``openings`` gives each one's
    opening, one servable mesh per key of KIND_COLOURS. vtk.js draws these in plain colours:
    a replaced scalar array on one disc mesh was drawn in the wrong colours (closed as red)."""
    kinds = np.zeros(0)
    if discs.n_cells:
        colour_openings(discs, openings)
        kinds = discs.cell_data["kind"]
    out = {}
    for code, kind in enumerate(KIND_COLOURS):
        cells = np.flatnonzero(kinds == code)
        mesh = (discs.extract_cells(cells).extract_surface(algorithm="dataset_surface")
                if cells.size else pv.PolyData())
        out[kind] = _servable(mesh)
    return out


def add_opening_actors(plotter: pv.Plotter, kind_meshes: dict[str, pv.PolyData],
                       labels: pv.PolyData) -> dict[str, pv.Actor]:
    """Add the discs of :func:`discs_by_kind` (each kind its colour) and the labels."""
    actors = {kind: plotter.add_mesh(kind_meshes[kind], color=colour, opacity=0.85)
              for kind, colour in KIND_COLOURS.items()}
    actors["labels"] = plotter.add_mesh(labels, color=LABEL_RGB)
    return actors


class FlowSyncVTK(VTKRenderWindowSynchronized):
    """The VTK pane of the 3D view, sending each browser copy only the data arrays it lacks.

    Panel's pane sends every array of the scene on every sync (the browser never reports the
    ones it holds), and renders the window on the server first. vtk.js keeps the arrays it
    fetched by hash and drops only those no sync used for a while, so the arrays of the
    previous sync are still there: this pane sends only the others (a new streamline mesh, not
    the solid surface again). :meth:`synchronize` with ``render=False`` also skips the server
    render, about half a second of CPU for a 48^3 scene in software OpenGL, and updates only
    the mappers' input pipelines: pyvista draws the smooth-shaded isosurface through a normals
    filter whose output the serialiser reads as it is, so without that update every such sync
    sent the isosurface of the last render (after Apply or a new geometry, the empty one of
    the moment the run had no flow yet: it never came back while flows kept coming).
    """

    _render = True

    def __init__(self, *args, **params) -> None:
        super().__init__(*args, **params)
        self._held: dict[str, set[str]] = {}  # model id -> array hashes its last sync used

    def synchronize(self, render: bool = True) -> None:
        """Send the scene to the browser (``render``: render it on the server first)."""
        self._render = render
        try:
            super().synchronize()
        finally:
            self._render = True

    def _update(self, ref: str, model) -> None:
        context = self._contexts[model.id]
        held = self._held.get(model.id, set())
        scene, arrays, annotations = self._serialize_ren_win(self.object, context,
                                                             exclude_arrays=held)
        context.checkForArraysToRelease()
        self._held[model.id] = _array_hashes(scene)
        model.update(arrays=arrays, scene=scene, annotations=annotations)

    def _serialize_ren_win(self, ren_win, context, binary=False, compression=True,
                           exclude_arrays=None):
        from panel.pane.vtk import synchronizable_serializer as serializer

        ren_win.OffScreenRenderingOn()
        if self._render:
            ren_win.Modified()
            ren_win.Render()
        else:
            update_mapper_inputs(ren_win)
        scene = serializer.serializeInstance(None, ren_win, context.getReferenceId(ren_win),
                                             context, 0)
        scene["properties"]["numberOfLayers"] = 2  # as Panel's own: vtk.js's second layer
        skip = set(exclude_arrays or ())
        arrays = {name: context.getCachedDataArray(name, binary=True, compression=False)
                  for name in _array_hashes(scene) if name not in skip
                  and name in context.dataArrayCache}
        return scene, arrays, context.getAnnotations()


def update_mapper_inputs(ren_win) -> None:
    """Bring every actor's mapper input up to date without rendering (a filter between a mesh
    and its mapper, e.g. pyvista's normals for smooth shading, runs only when asked)."""
    renderers = ren_win.GetRenderers()
    for i in range(renderers.GetNumberOfItems()):
        props = renderers.GetItemAsObject(i).GetViewProps()
        for j in range(props.GetNumberOfItems()):
            mapper = getattr(props.GetItemAsObject(j), "GetMapper", lambda: None)()
            if mapper is not None and mapper.GetNumberOfInputConnections(0):
                mapper.GetInputAlgorithm().Update()


def _array_hashes(scene) -> set[str]:
    """The hashes of every data array a serialised scene refers to."""
    found: set[str] = set()
    stack = [scene]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("hash"), str):
                found.add(item["hash"])
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


class Scene3D(pn.viewable.Viewer):
    """Cutaway 3D view of the geometry with the live slice plane."""

    active = param.Boolean(default=True, doc="Whether the view is on screen (else not synced).")

    def __init__(self, controller: Controller, setup=None, flow_interval_s: float | None = None,
                 **params) -> None:
        """``setup``: the :class:`~app.views.physics_panel.PhysicalSetup` whose units read the
        isosurface level in SI (None: lattice units); ``flow_interval_s``: seconds between
        coarse flows (None: FLOW3D_INTERVAL_S), the scene's refresh period in the dashboard."""
        super().__init__(**params)
        self.controller, self.setup = controller, setup
        self.flow_interval_s = float(flow_interval_s or FLOW3D_INTERVAL_S)
        self._synced_at = -float("inf")  # time.monotonic() of the last flow sync
        self._flow_controls()
        self.plotter = pv.Plotter(off_screen=True, window_size=(640, 480))
        self.plotter.set_background(BACKGROUND_RGB)
        # A cut through no fluid (a pore one voxel wide elsewhere) or a solid entirely behind
        # the cut leaves an empty mesh; pyvista refuses those unless its theme allows them.
        self.plotter.theme.allow_empty_mesh = True
        self._surface: pv.PolyData | None = None
        self._vessel = False
        self._meshes = {"solid": pv.PolyData(), "fluid": pv.UnstructuredGrid(),
                        "grains": pv.UnstructuredGrid(), "outline": pv.PolyData(),
                        "labels": _servable(pv.PolyData()),
                        "streamlines": _servable(pv.PolyData()), "iso": _servable(pv.PolyData()),
                        **{kind: _servable(pv.PolyData()) for kind in KIND_COLOURS}}
        self._discs = pv.PolyData()  # every opening's disc, cell array 'opening' (id)
        self._kinds: dict | None = None  # the kinds the discs are coloured by
        self._actors: dict = {}
        self._key: tuple | None = None
        self._geometry = None
        # Build the whole scene before the browser first sees it: vtk.js rebuilds its render
        # window on every change and a change during its first build loses the renderer.
        self._bar_text = ""  # the plane's colour bar (HTML), set by _update
        self._initial_scene()
        # No orientation widget: vtk.js re-creates the render window on every update and its
        # widget then reads the viewport of the deleted renderer (a console error).
        self.pane = FlowSyncVTK(self.plotter.ren_win, sizing_mode="stretch_width", height=480,
                                enable_keybindings=True, css_classes=["scene3d"])
        self.colour_bar = pn.pane.HTML(self._bar_text, sizing_mode="stretch_width", height=44,
                                       css_classes=["scene3d-colourbar"])
        self._flow_sent = None  # the CoarseFlow whose meshes the browser was last sent

    def _flow_controls(self) -> None:
        """Streamline and isosurface widgets; changing one asks the runner for the flow."""
        self.show_streamlines = pn.widgets.Checkbox(name="streamlines", value=False, width=110,
                                                    align="end")
        self.seeds = pn.widgets.IntSlider(name="seeds", start=5, end=300, value=60, step=5,
                                          width=160)
        self.seed_from = pn.widgets.Select(name="seeded from", options=list(SEED_SOURCES),
                                           width=140)
        self.show_iso = pn.widgets.Checkbox(name="isosurface", value=False, width=110,
                                            align="end")
        self.iso_field = pn.widgets.Select(name="of", options={
            FIELDS[f].label: f for f in COARSE_FIELDS}, value="umag", width=140)
        self.iso_level = pn.widgets.FloatInput(name="level, SI (0 = auto)", value=0.0,
                                               width=140)
        # Recording: a picture of the scene (rendered off screen) every so many seconds.
        self.recorder = SceneRecorder()
        self.record = pn.widgets.Checkbox(name="record 3D view", value=False, width=120,
                                          align="end")
        self.record_every = pn.widgets.FloatInput(name="every (s)", value=2.0, start=0.5,
                                                  width=90)
        self.record.param.watch(lambda e: self.recorder.clear() if e.new else None, "value")
        self.record_every.param.watch(self._record_interval, "value")
        self._flow_key: tuple | None = None
        # Which coarse flow the meshes show (its step and the wall time it was read at: the
        # browser tests measure an update's delay from it).
        self.flow_info = pn.pane.HTML(flow_info_html(None), height=20,
                                      sizing_mode="stretch_width", css_classes=["flow3d-info"])
        for widget in (self.show_streamlines, self.show_iso, self.iso_field):
            widget.param.watch(self._request_flow, "value")
        for widget in (self.seeds, self.seed_from, self.iso_level):
            widget.param.watch(self._flow_widgets_changed, "value")
        self.controls = pn.Column(
            pn.Row(self.show_streamlines, self.seeds, self.seed_from,
                   sizing_mode="stretch_width"),
            pn.Row(self.show_iso, self.iso_field, self.iso_level, sizing_mode="stretch_width"),
            pn.Row(self.record, self.record_every, sizing_mode="stretch_width"),
            self.flow_info, sizing_mode="stretch_width", css_classes=["flow3d-controls"])

    def _request_flow(self, *events) -> None:
        """Ask the runner for the coarse flow the shown views need (or for none)."""
        name = (self.iso_field.value if self.show_iso.value
                else "umag" if self.show_streamlines.value else None)
        self.controller.set_flow3d(name, self.flow_interval_s)
        self._flow_widgets_changed()

    def _flow_widgets_changed(self, *events) -> None:
        """Redraw the flow meshes from the latest coarse flow with the new settings."""
        if not self._meshes:
            return
        self._flow_key = None
        if self._update_flow(self.controller.snapshot.flow3d) and hasattr(self, "pane"):
            self.pane.synchronize()

    def _update_flow(self, flow) -> bool:
        """Rebuild the streamlines and the isosurface from ``flow`` (a CoarseFlow or None);
        True if a mesh changed."""
        want_lines, want_iso = self.show_streamlines.value, self.show_iso.value
        key = (None if flow is None else (id(flow), flow.step), want_lines, want_iso,
               self.seeds.value, self.seed_from.value, self.iso_level.value,
               self.controller.axis, self.controller.position)
        if key == self._flow_key:
            return False
        self._flow_key = key
        lines, surface = pv.PolyData(), pv.PolyData()
        usable = flow is not None and (flow.name == self.iso_field.value or not want_iso)
        if usable and (want_lines or want_iso):
            grid = coarse_grid(flow)
            if want_lines:
                c = self.controller
                seeds = seed_points(c.geometry, self.seed_from.value, self.seeds.value, c.axis,
                                    c.position, c.probes, c.applied_config.openings)
                lines = streamlines(grid, seeds)
            if want_iso:
                surface = isosurface(grid, self._level(flow))
        self._meshes["streamlines"].copy_from(_servable(lines))
        self._meshes["iso"].copy_from(_servable(surface))
        self.flow_info.object = flow_info_html(flow if usable and (want_lines or want_iso)
                                               else None)
        return True

    def refresh_flow(self) -> None:
        """Send a new coarse flow's streamlines and isosurface to the browser at once (called
        on every poll): they arrive within a poll of the runner publishing the flow, not at
        the scene's next refresh of every few seconds (issue 30: an update in <= 1 s)."""
        flow = self.controller.snapshot.flow3d
        geometry = self.controller.geometry
        if (not self.active or not self._meshes or flow is None or flow is self._flow_sent
                or not (self.show_streamlines.value or self.show_iso.value)
                or geometry is None or geometry.ndim != 3 or self._geometry is not geometry
                or flow.scalar.shape != tuple(-(-n // flow.stride) for n in geometry.shape)):
            return
        self._flow_sent = flow
        snap = self.controller.snapshot
        try:
            if snap.plane is not None and snap.plane.ndim == 2:  # the plane of the same sync
                self._update(geometry, snap.plane, snap.view)
                self._key = (id(geometry), snap.view, snap.step, snap.seq)
            changed = self._update_flow(flow)
        except Exception:  # a broken 3D view must not take the dashboard down
            log.exception("3D flow update failed")
            return
        if changed:
            self.pane.synchronize(render=False)
            self._synced_at = time.monotonic()

    def _record_interval(self, event) -> None:
        if event.new and event.new > 0:
            self.recorder.interval_s = float(event.new)

    def record_tick(self) -> bool:
        """With 'record 3D view' on and a picture due: bring the server's scene up to the
        latest snapshot (plane, streamlines, isosurface; the browser is not synced) and keep
        a picture of it (called on every poll); True if one was kept."""
        snap, geometry = self.controller.snapshot, self.controller.geometry
        if (not self.record.value or not self._meshes or geometry is None or geometry.ndim != 3
                or snap.plane is None or snap.plane.ndim != 2):
            return False

        def take() -> np.ndarray:
            self._update(geometry, snap.plane, snap.view)
            self._update_flow(snap.flow3d)
            return self.picture()

        return self.recorder.offer(take, f"step {snap.step:,}")

    def _level(self, flow) -> float:
        """The isosurface level in lattice units: the SI input over the field's factor, or
        :func:`~solver.flow_meshes.auto_level` for 0."""
        level = float(self.iso_level.value or 0.0)
        if level == 0.0:
            return auto_level(flow.scalar, flow.name)
        return level / field_si(flow.name, self.setup, self.controller)[0]

    def _initial_scene(self) -> None:
        """The geometry with the fluid at rest on the current cut (no snapshot needed)."""
        geometry = self.controller.geometry
        if geometry is None or geometry.ndim != 3:
            return
        view = self.controller.snapshot.view
        view = type(view)(view.quantity, self.controller.axis, self.controller.position)
        solid = np.asarray(geometry.solid, dtype=bool)
        plane = np.where(np.take(solid, view.index, axis=view.axis), np.nan, 0.0)
        self._update(geometry, plane, view)

    def refresh(self, force: bool = False) -> None:
        """Bring the browser's scene up to date with the latest snapshot (periodic callback;
        ``force``: even right after a flow's sync, e.g. for a new geometry or cut)."""
        snap = self.controller.snapshot
        geometry = self.controller.geometry
        if not self.active or not self._meshes or geometry is None or geometry.ndim != 3:
            return  # hidden, closed, or nothing 3D to show
        if not force and (self.show_streamlines.value or self.show_iso.value) and \
                time.monotonic() - self._synced_at < 0.9 * self.flow_interval_s:
            return  # the flow's own syncs (refresh_flow) bring the scene this often
        key = (id(geometry), snap.view, snap.step, snap.seq)
        if key == self._key:
            return
        if snap.plane is None or snap.plane.ndim != 2:
            return
        try:
            self._update(geometry, snap.plane, snap.view)
            self._update_flow(snap.flow3d)
        except Exception:  # a broken 3D view must not take the dashboard down
            log.exception("3D view update failed")
            return
        self._key = key
        self.pane.synchronize()

    def _update(self, geometry, plane: np.ndarray, view) -> None:
        new_geometry = geometry is not self._geometry
        if new_geometry:
            self._geometry = geometry
            self._vessel = is_vessel(geometry)
            self._surface = solid_surface(np.asarray(geometry.solid, dtype=bool),
                                          close_box=not self._vessel)
            self._meshes["outline"].copy_from(outline(geometry.shape))
            self._discs, labels = opening_marks(geometry)
            self._kinds = None
            self._meshes["labels"].copy_from(_servable(labels))
        self._colour_openings()
        index = view.index or 0
        # A vessel's see-through wall stays whole, and its cut shows the lumen alone.
        clipped = clip_solid(self._surface, self._vessel, view.axis, index)
        self._meshes["solid"].copy_from(_servable(clipped))
        fluid, grains = slice_plane(plane, view.axis, index)
        self._meshes["fluid"].copy_from(_servable_cells(fluid))
        self._meshes["grains"].copy_from(
            _servable_cells(grains if not self._vessel else pv.UnstructuredGrid()))
        if not self._actors:
            self._add_actors()
            new_geometry = True
        if new_geometry:
            self._style_solid()
        low, high = 0.0, 0.0
        if np.isfinite(plane).any():  # the slice's automatic range (a wall's extreme node
            # would wash the plane out), lattice units: the colours match the slice's
            low, high = colour_range(plane, view.quantity)
            self._actors["fluid"].mapper.scalar_range = (low, high)
        factor, label = field_si(view.quantity, self.setup, self.controller)
        self._bar_text = colour_bar_html(label, low * factor, high * factor)
        if hasattr(self, "colour_bar"):
            self.colour_bar.object = self._bar_text
        if new_geometry:
            reset_view(self.plotter)
            if hasattr(self, "pane"):  # the browser already shows an older geometry
                self.pane.reset_camera()
                # The browser re-applies the pane's `camera` (its last own camera) after every
                # scene sync: replace it, or the new geometry is seen from the old viewpoint.
                self.pane.camera = camera_state(self.plotter.camera)

    def _colour_openings(self) -> None:
        """Colour each disc by the kind the run applies to its opening (KIND_COLOURS)."""
        openings = self.controller.applied_config.openings
        kinds = {i: spec.get("kind") for i, spec in openings.items()}
        if kinds == self._kinds:
            return  # unchanged: nothing to send to the browser
        self._kinds = kinds
        for kind, mesh in discs_by_kind(self._discs, openings).items():
            self._meshes[kind].copy_from(mesh)

    def _style_solid(self) -> None:
        """A vessel's wall see-through and reddish, a porous sample's grains opaque sand."""
        style_solid(self._actors["solid"], self._vessel)

    def _add_actors(self) -> None:
        # The scene of the command line's 3D frames (solver.scene_frames), and the openings.
        self._actors.update(add_scene_actors(self.plotter, self._meshes))
        self._actors.update(add_opening_actors(self.plotter, self._meshes,
                                               self._meshes["labels"]))

    def picture(self) -> np.ndarray:
        """The 3D view (H, W, 3 uint8) rendered off screen from the browser's last camera."""
        camera = getattr(self.pane, "camera", None) or {}
        if {"position", "focalPoint", "viewUp"} <= set(camera):
            self.plotter.camera.position = tuple(camera["position"])
            self.plotter.camera.focal_point = tuple(camera["focalPoint"])
            self.plotter.camera.up = tuple(camera["viewUp"])
        # A render first: the screenshot alone returns the last rendered image, which the
        # meshes changed since (a recording's pictures were all the first one).
        self.plotter.render()
        return self.plotter.screenshot(return_img=True)

    def png(self) -> bytes:
        """The 3D view as a PNG, rendered off screen from the browser's last camera."""
        import io

        from matplotlib.image import imsave

        out = io.BytesIO()
        imsave(out, self.picture(), format="png")
        return out.getvalue()

    def close(self) -> None:
        """Release the VTK objects of this view (meshes, actors, render window)."""
        self.plotter.close()
        self.plotter.deep_clean()
        # The pane keeps the render window until the session's models are gone: empty it.
        self._meshes.clear()
        self._actors.clear()
        self._surface = self._geometry = None
        self._discs = pv.PolyData()

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(self.controls, self.pane, self.colour_bar, sizing_mode="stretch_width")


def colour_bar_html(label: str, low: float, high: float, stops: int = 11) -> str:
    """A horizontal viridis bar from ``low`` to ``high`` (the plane's colours) with its ends
    and ``label`` (e.g. ``|u| (m/s)``) as text; ``data-low``/``data-high`` carry the numbers."""
    cmap = matplotlib.colormaps["viridis"]
    colours = ", ".join(matplotlib.colors.to_hex(cmap(k / (stops - 1))) for k in range(stops))
    return (f'<div class="colourbar" data-low="{low:.6g}" data-high="{high:.6g}" '
            'style="display:flex;align-items:center;gap:6px;font-size:12px">'
            f'<span class="colourbar-low">{low:.3g}</span>'
            f'<span style="flex:1;height:12px;background:linear-gradient(to right, {colours})">'
            f'</span><span class="colourbar-high">{high:.3g}</span>'
            f'<span class="colourbar-label">{html.escape(label)}</span></div>')


def flow_info_html(flow) -> str:
    """What the flow meshes show: the step of ``flow`` (a CoarseFlow; None: nothing) with its
    step and read time (``data-step``, ``data-read``: wall-clock seconds) for tests."""
    if flow is None:
        return '<span class="flow3d-step" data-step="-1" data-read="0"></span>'
    return (f'<span class="flow3d-step" data-step="{flow.step}" data-read="{flow.read_at:.3f}" '
            f'style="font-size:12px;color:#555">3D flow of step {flow.step:,} '
            f'(every {flow.stride} voxels)</span>')


def camera_state(camera: pv.Camera) -> dict:
    """A pyvista camera as the vtk.js camera state the VTK pane syncs (scene coordinates)."""
    return {"position": list(camera.position), "focalPoint": list(camera.focal_point),
            "viewUp": list(camera.up), "viewAngle": float(camera.view_angle),
            "parallelScale": float(camera.parallel_scale)}


def _servable_cells(grid: pv.UnstructuredGrid) -> pv.UnstructuredGrid:
    """``grid``, or one zero-area triangle if it has no cells: Panel's serialiser drops a cut's
    empty cells (a vessel's grains, a layer without fluid), so the browser kept drawing the
    previous geometry's cut (a sphere pack's grains floating beside a vessel)."""
    if grid.n_cells:
        return grid
    empty = pv.UnstructuredGrid(np.array([3, 0, 0, 0]), np.array([pv.CellType.TRIANGLE]),
                                np.zeros((1, 3), dtype=np.float32))
    empty.cell_data["q"] = np.zeros(1)
    return empty


def _servable(mesh: pv.PolyData) -> pv.PolyData:
    """``mesh``, or one bare point without cells if empty: Panel's VTK serialiser fails on a
    polydata without points (a geometry without openings, a cut with no solid behind it)."""
    if mesh.n_points:
        return mesh
    empty = pv.PolyData()
    empty.points = np.zeros((1, 3), dtype=np.float32)
    return empty

