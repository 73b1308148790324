"""The dashboard: controls, status and views of one simulation, for a server or a notebook.

:class:`Dashboard` wires a :class:`~app.controller.Controller` to its views and starts the
periodic refresh (slice and counters at 10 Hz, the 3D view every few seconds). In a notebook it
displays as is; ``panel serve app`` wraps it in a template (:meth:`Dashboard.template`). The
sidebar's settings widgets are generated from :class:`~solver.config.SimulationConfig`.
"""

from __future__ import annotations

import contextlib
import html
import io
import logging
import sys
import weakref
from typing import Any

import panel as pn
import param
import yaml
from panel.io.callbacks import PeriodicCallback

from solver.config import SimulationConfig
from solver.probes import probe_specs
from solver.runner import live_runners

from .controller import Controller
from .session_refs import weak_callback
from .settings import Settings, settings
from .views.counters import CountersView
from .views.geometry_panel import GeometryPanel
from .views.opening_flows import OpeningFlowsView
from .views.physics_panel import PhysicsPanel
from .views.probes_view import ProbesView
from .views.rock_panel import RockPanel
from .views.run_buttons import RunButtons
from .views.scene3d import Scene3D
from .views.settings_cards import SETTING_GROUPS, SettingsCards
from .views.slice_view import SlicePlot
from .views.webgl_release import WebGLRelease

__all__ = ["Dashboard", "SETTING_GROUPS"]


def _connection_reader(document: Any):
    """A check the runner thread can call: does ``document``'s session have a browser?

    Bokeh keeps calling a session's periodic callbacks after its browser disconnected until
    it destroys the session, which it sometimes never does (a client that left while the
    server wrote to it), and a loaded server can delay a connected page's polls: the
    connection count is what tells who still reads. A session still being built (no server
    session yet) or gone counts as not read; the runner's idle clock starts at its creation,
    so a page that connects in time keeps it.
    """
    context = getattr(document, "session_context", None)
    if context is None:  # a notebook: no session, no watchdog reader
        return None

    # Weakly: the runner holds this closure, and the context leads to the session's document.
    context_ref = weakref.ref(context)

    def reader() -> bool:
        session = getattr(context_ref(), "_session", None)
        return session is not None and getattr(session, "connection_count", 0) > 0

    return reader

log = logging.getLogger(__name__)


def _served_session() -> bool:
    """Whether this dashboard is being built for a ``panel serve`` session."""
    document = pn.state.curdoc
    return bool(document is not None and getattr(document, "session_context", None)
                and "_pyodide" not in sys.modules and not pn.state.loaded)


def _background_callback(callback, period_ms: int) -> PeriodicCallback:
    """A started periodic callback that does not count as pending work.

    ``pn.state.add_periodic_callback`` marks the session busy during every run, so a refresh
    at 10 Hz kept the header's busy spinner spinning all the time.
    """
    periodic = PeriodicCallback(callback=callback, period=period_ms, background=True, log=False)
    periodic.start()
    return periodic

ACCENT = "#0f766e"


class Dashboard(pn.viewable.Viewer):
    """Interactive lattice-Boltzmann run of one geometry (the default sphere pack if None).

    ``idle_timeout`` (seconds, served sessions only) stops the simulation when the page has not
    polled for that long; leave it None in a notebook, where a long cell pauses the polling.
    """

    title = param.String(default="Porous-media flow · tiled sparse lattice Boltzmann")

    def __init__(
        self, geometry: Any = None, config: SimulationConfig | None = None, *,
        autostart: bool | None = None, refresh: bool = True,
        app_settings: Settings | None = None, idle_timeout: float | None = None,
        **params: Any,
    ) -> None:
        super().__init__(**params)
        self.settings = app_settings or settings
        if autostart is None:
            autostart = self.settings.autostart
        # The runner asks the session itself whether a browser is connected (not the polls:
        # see _connection_reader).
        reader = _connection_reader(pn.state.curdoc) if idle_timeout is not None else None
        served = _served_session()
        # A served session builds and runs its simulation only once a browser has loaded the
        # page: a plain HTTP GET (a crawler, a health check) renders it but never connects.
        self.controller = Controller(geometry, config, autostart=None if served else autostart,
                                     idle_timeout=idle_timeout, reader=reader)
        if served:
            # Weakly: Panel keeps a never-loaded page's onload callbacks after its session.
            pn.state.onload(weak_callback(self.controller.start if autostart
                                          else self.controller.prepare))
        self.physics = PhysicsPanel(self.controller)
        self.slice = SlicePlot(self.controller, self.physics.setup)  # SI units of the setup
        self.counters = CountersView(self.controller)
        self.probes = ProbesView(self.controller, self.physics.setup)
        self.scene = (Scene3D(self.controller, self.physics.setup,
                              flow_interval_s=self.settings.scene_refresh_s)
                      if self.settings.scene_3d
                      else None)
        self.geometry_panel = GeometryPanel(self.controller, self.settings, self.physics.setup)
        self.rock = RockPanel(self.controller, self.physics.setup)
        self.flows = OpeningFlowsView(self.controller, self.physics.setup)
        self.status = pn.pane.Alert(html.escape(self.controller.status), alert_type="info",
                                    sizing_mode="stretch_width", css_classes=["run-status"])
        self.server_info = pn.pane.HTML("", sizing_mode="stretch_width", height=24)
        self.controller.param.watch(self._show_status, ["status", "level"])
        self.controller.param.watch(self._structure_changed, ["geometry", "axis", "position"])
        self._scene_stale = False
        self._closed = False
        self._show_server_info()
        self._callbacks: list = []
        self.sidebar = self._sidebar()
        self.main = self._main()
        if refresh:
            self.start_refresh()

    # ------------------------------------------------------------------ lifecycle
    def start_refresh(self) -> None:
        """Start the periodic callbacks that move snapshots into the views."""
        if self._callbacks:
            return
        self._callbacks = [_background_callback(self.poll, self.settings.refresh_ms)]
        if self.scene is not None:
            self._callbacks.append(_background_callback(
                self.scene.refresh, int(self.settings.scene_refresh_s * 1000)))

    def poll(self) -> None:
        """Publish the latest snapshot; re-sync the 3D view at once after a new geometry or cut.

        A view on a hidden tab stays stale until its tab is shown (a geometry is usually
        changed from the Geometry tab), so it never shows the previous geometry when it comes
        back into sight.
        """
        # When the run's state changes, one message for the card and the status bar: sent
        # apart, the page showed the one updated and the other not for a moment (issue 31 item
        # 13). Only then: a hold on every tick kept the busy spinner spinning.
        with pn.io.hold() if self.controller.state_changes() else contextlib.nullcontext():
            self.controller.poll()
        # Every tick, not on new snapshots: a paused or finished run publishes none, and the
        # count of other sessions' simulations must still go down when they close.
        self._show_server_info()
        if self.scene is not None:  # a new coarse flow's meshes at once, not at the next sync
            self.scene.refresh_flow()
            self.scene.record_tick()
        snap = self.controller.snapshot
        if (self._scene_stale and self.scene is not None and self.scene.active
                and snap.plane is not None
                and snap.shape == tuple(self.controller.geometry.shape)
                and (snap.view.axis, snap.view.index) == (self.controller.axis,
                                                          self.controller.position)):
            self._scene_stale = False
            self.scene.refresh(force=True)

    def _structure_changed(self, *events) -> None:
        self._scene_stale = True

    def close(self) -> None:
        """Stop the runner (freeing the simulation), the refresh and the 3D scene (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.controller.close()  # first: nothing below may keep the memory alive
        self.rock.close()  # cancels a k-tensor measurement and its refresh
        for callback in self._callbacks:
            try:
                callback.stop()
            except Exception as exc:  # a destroyed session may have dropped it already
                log.debug("periodic callback stop failed: %s", exc)
        self._callbacks = []
        if self.scene is not None:
            self.scene.close()
        self.geometry_panel.preview3d.close()
        log.info("dashboard closed (live runners: %d)", live_runners())

    # ------------------------------------------------------------------ layout
    def _sidebar(self) -> pn.Column:
        c = self.controller
        # Plain labels rather than icon fonts: the page loads nothing from the internet.
        self.run_buttons = RunButtons(sizing_mode="stretch_width", actions={
            "Start": ("success", c.start),
            "Pause": ("warning", c.pause),
            "Step ×10": ("primary", lambda: c.step(10)),
            "Reset": ("danger", c.reset),
        })
        apply = pn.widgets.Button(name="Apply settings", button_type="primary",
                                  sizing_mode="stretch_width")
        apply.on_click(lambda event: c.apply_settings())
        c.param.watch(lambda e: setattr(apply, "name", "Apply settings  •  changed"
                                        if e.new else "Apply settings"), "settings_changed")
        self.settings_cards = SettingsCards(c.config, c.report)
        cards = self.settings_cards.cards()
        downloads = [
            self._download("Fields (.vti)", "fields.vti", c.export_vti),
            self._download("Slice (.png)", "slice.png", c.export_png),
            *([self._download("3D view (.png)", "view3d.png", self.scene.png)]
              if self.scene is not None else []),
            self._download("Slice recording (.gif)", "slice.gif", self.slice.recorder.gif),
            self._download("Slice recording (.mp4)", "slice.mp4", self.slice.recorder.mp4),
            *([self._download("3D recording (.gif)", "view3d.gif", self.scene.recorder.gif),
               self._download("3D recording (.mp4)", "view3d.mp4", self.scene.recorder.mp4)]
              if self.scene is not None else []),
            self._download("Counters (.csv)", "counters.csv", lambda: c.export_csv().encode()),
            # Reruns headless with the same openings: python -m solver run case.yaml
            self._download("Case (.yaml)", "case.yaml", lambda: self.case_text().encode()),
        ]
        return pn.Column(
            self.run_buttons, self.status,
            "### Settings", *cards, apply, "### Export", *downloads, self.server_info,
            sizing_mode="stretch_width")

    def _main(self) -> pn.Column:
        flow = pn.Row(pn.Column(self.slice, sizing_mode="stretch_width"),
                      sizing_mode="stretch_width")
        if self.scene is not None:
            flow.append(pn.Column(
                pn.pane.Markdown("**3D view** · cutaway at the slice, refreshed every "
                                 f"{self.settings.scene_refresh_s:g} s; streamlines and "
                                 "isosurface with each new 3D flow"),
                self.scene, sizing_mode="stretch_width"))
        flow = pn.Column(flow, self.probes, sizing_mode="stretch_width")
        tabs = pn.Tabs(("Flow", flow), ("Geometry", self.geometry_panel),
                       ("Physics", self.physics), ("Rock", self.rock), dynamic=False,
                       sizing_mode="stretch_width")
        if self.scene is not None:  # a hidden 3D view is not synchronised
            tabs.param.watch(lambda e: setattr(self.scene, "active", e.new == 0), "active")
        # The openings' flow right under the counters (one block: the tabs stay second).
        counters = pn.Column(self.counters.cards, self.flows.pane, sizing_mode="stretch_width")
        # Each vtk.js window gives its WebGL context back when replaced (app/views/webgl_release).
        return pn.Column(counters, tabs, self.counters.plots, WebGLRelease(),
                         sizing_mode="stretch_width")

    def case_text(self) -> str:
        """The session's run as a case file, with its probes and lines (voxel indices)."""
        text = self.geometry_panel.case_text()
        extra = probe_specs(self.controller.probes)
        return text + (yaml.safe_dump(extra, sort_keys=False) if extra else "")

    def _download(self, label: str, filename: str, make) -> pn.widgets.FileDownload:
        def callback() -> io.BytesIO:
            try:
                return io.BytesIO(make())
            except Exception as exc:  # shown as a message; the download is then empty
                self.controller.report(exc)
                return io.BytesIO(b"")
        return pn.widgets.FileDownload(callback=callback, filename=filename, label=label,
                                       button_type="light", embed=False,
                                       sizing_mode="stretch_width")

    def _show_status(self, *events) -> None:
        # Statuses quote user text (file names, errors about the file): shown literally.
        self.status.param.update(object=html.escape(self.controller.status),
                                 alert_type=self.controller.level)

    def _show_server_info(self, *events) -> None:
        """Live runner threads of this server process (read by the session-leak test)."""
        runners = live_runners()
        if f'data-live-runners="{runners}"' not in self.server_info.object:
            self.server_info.object = (
                f'<span class="server-info" data-live-runners="{runners}" '
                f'style="color:#6b7785;font-size:12px">Simulations running on this server: '
                f"{runners}</span>")

    def template(self) -> pn.template.BootstrapTemplate:
        """The served page: this dashboard in a Bootstrap template (no external resources)."""
        return pn.template.BootstrapTemplate(
            title=self.title, sidebar=[self.sidebar], main=[self.main],
            header_background=ACCENT, sidebar_width=360,
            meta_description="Interactive lattice-Boltzmann flow through porous media")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Row(pn.Column(self.sidebar, width=340), self.main, sizing_mode="stretch_width")
