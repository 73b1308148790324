"""The sidebar's settings cards: one widget per :class:`~solver.config.SimulationConfig` parameter.

Widgets are built from the config's parameters (:func:`config_widget`: Panel's public
``Param.widget_type`` and the parameter's label, doc, options and bounds), grouped in cards
(:data:`SETTING_GROUPS`); a boundary face that needs a number (velocity inlet, pressure outlet,
moving wall) shows a value field next to its type. Parameters without a widget are listed in
:data:`EXCLUDED_SETTINGS` with the reason, and a test checks that every parameter is one or the
other. All values are lattice units, as in the config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import panel as pn
import param
from bokeh.models import PrintfTickFormatter

from solver.config import FACE_NAMES, SimulationConfig

__all__ = ["SETTING_GROUPS", "EXCLUDED_SETTINGS", "WIDGETS", "VALUE_HINTS", "SettingsCards",
           "config_widget", "readable_number_format"]

#: Sidebar cards: title -> SimulationConfig parameters.
SETTING_GROUPS = {
    "Numerics": ["lattice", "collision", "fluid_model", "precision", "storage", "tau", "trt_magic",
                 "smagorinsky_cs", "body_force", "initial_density", "ramp_steps"],
    "Boundaries": [p for face in FACE_NAMES for p in (face, f"{face}_value")],
    "Tiling and device": ["tile_edge", "tile_offset", "backend", "gpu_layout",
                          "tiles_per_block", "streaming", "tile_storage"],
}
#: Parameters deliberately without a widget, and why.
EXCLUDED_SETTINGS = {
    "name": "param's instance name, not a setting",
    "object_velocities": "moving labelled objects need a labelled geometry, which only case "
                         "files and the Python API can give",
    "openings": "set per opening of the loaded geometry in the openings table, whose rows "
                "depend on the geometry",
    "mrt_rates": "expert MRT tuning: the defaults derive every rate from tau; set them in a "
                 "case file",
}


def readable_number_format() -> PrintfTickFormatter:
    """Number format of input fields: 6 significant digits, scientific where needed (1e-06)."""
    # A numbro pattern such as "0.[000]e+0" renders 1e-6 as "+0" and 10 as "+10".
    return PrintfTickFormatter(format="%.6g")


WIDGETS: dict[str, dict[str, Any]] = {
    # No lower bound on the widget: the browser would clamp 0.45 to it silently; the config
    # refuses tau <= 0.5 with a message instead.
    "tau": {"type": pn.widgets.FloatInput, "step": 0.01, "start": None, "end": None},
    "trt_magic": {"type": pn.widgets.FloatInput, "step": 0.01, "start": None, "end": None},
    "smagorinsky_cs": {"type": pn.widgets.FloatInput, "step": 0.01, "start": None, "end": None},
    "initial_density": {"type": pn.widgets.FloatInput, "step": 0.01},
    "ramp_steps": {"type": pn.widgets.IntInput, "start": 0, "name": "soft start (steps)",
                   "placeholder": "auto: one characteristic time"},
    "tile_edge": {"type": pn.widgets.IntInput, "start": 1, "end": 16,
                  "placeholder": "default (4 in 3D, 8 in 2D)"},
}
for _name in ("tau", "trt_magic", "initial_density"):
    WIDGETS[_name]["format"] = readable_number_format()

#: Hint shown in a face's value field per boundary kind (lattice units).
VALUE_HINTS = {
    "velocity": "inlet velocity, lattice units: u along the axis, e.g. 0.01, or (ux, uy, uz)",
    "pressure": "outlet density, lattice units (empty: initial density)",
    "moving_wall": "wall velocity (ux, uy, uz), lattice units, along the face",
}
for _face in FACE_NAMES:
    WIDGETS[f"{_face}_value"] = {"type": pn.widgets.LiteralInput, "serializer": "ast",
                                 "name": f"{_face} value", "visible": False}


def config_widget(config: param.Parameterized, name: str,
                  spec: dict[str, Any] | None = None) -> pn.widgets.Widget:
    """A widget showing ``config.name``, not linked to it; ``spec``: the widget type under
    ``type`` and keyword overrides (as :data:`WIDGETS`)."""
    parameter = config.param[name]
    kw = dict(spec or {})
    widget_type = kw.pop("type", None) or pn.Param.widget_type(parameter)
    kw.setdefault("name", parameter.label)
    if parameter.doc:
        kw.setdefault("description", " ".join(parameter.doc.split()))
    if isinstance(parameter, param.Selector):
        kw["options"] = parameter.get_range()
    if isinstance(parameter, param.Number):  # Integer included; soft bounds as Panel's own
        low, high = parameter.get_soft_bounds()
        for key, bound in (("start", low), ("end", high)):
            if bound is not None:
                kw.setdefault(key, bound)
    kw = {k: v for k, v in kw.items() if k in widget_type.param}
    return widget_type(value=getattr(config, name), **kw)


class SettingsCards:
    """Cards of config widgets; ``widgets`` maps each covered parameter to its widget.

    A value the config refuses (tau = 0.45) goes to ``report`` and the widget goes back to the
    pending value (a plain link would raise inside Panel's event processing instead, where
    the message and the widget's reset never reach the browser); a config changed elsewhere
    (a preview, a case) shows in its widgets.
    """

    def __init__(self, config: SimulationConfig,
                 report: Callable[[BaseException], None]) -> None:
        self.config, self.report = config, report
        self.widgets: dict[str, pn.widgets.Widget] = {
            name: config_widget(config, name,
                                {"sizing_mode": "stretch_width", **WIDGETS.get(name, {})})
            for params in SETTING_GROUPS.values() for name in params}
        for name, widget in self.widgets.items():
            widget.param.watch(self._setter(name, widget), "value")
        config.param.watch(self._shown, list(self.widgets))
        config.param.watch(self._show_value_fields, list(FACE_NAMES))
        self._show_value_fields()

    def _setter(self, name: str, widget: pn.widgets.Widget) -> Callable[[Any], None]:
        """The widget -> config link of ``name``, reporting refused values."""
        def link(event: Any) -> None:
            try:
                self.config.param.update(**{name: event.new})
            except Exception as exc:  # a refused value: say why, show what is still pending
                self.report(exc)
                _later(lambda: setattr(widget, "value", getattr(self.config, name)))
        return link

    def _shown(self, *events: Any) -> None:
        """The config -> widget link: a value set elsewhere shows in its widget."""
        for event in events:
            self.widgets[event.name].value = event.new

    def _show_value_fields(self, *events: Any) -> None:
        """Show a face's value field only for the kinds that take a value, with a hint."""
        for face in FACE_NAMES:
            kind = getattr(self.config, face)
            widget = self.widgets[f"{face}_value"]
            widget.param.update(visible=kind in VALUE_HINTS,
                                placeholder=VALUE_HINTS.get(kind, ""))

    def cards(self) -> list[pn.Card]:
        """One collapsed card per group."""
        return [pn.Card(*(self.widgets[name] for name in params), title=title, collapsed=True,
                        sizing_mode="stretch_width")
                for title, params in SETTING_GROUPS.items()]


def _later(fn: Callable[[], None]) -> None:
    """Run ``fn`` after the current browser event (at once outside a server session).

    A widget's own value changed while Panel processes that widget's event is not sent back
    to the browser.
    """
    document = pn.state.curdoc
    if document is not None and getattr(document, "session_context", None):
        document.add_next_tick_callback(fn)
    else:
        fn()
