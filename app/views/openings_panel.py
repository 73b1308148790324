"""The openings table: per opening (or box face) its size, kind, SI value, unit and profile.

Each row edits ``SimulationConfig.openings`` of the bound config (the preview's until the
geometry is used, then the session's pending settings) through
:class:`~app.openings.OpeningUnits`; the config is the truth and the SI values are re-derived
from it when the units (voxel size, fluid, τ) change. A refused value (above the Mach limit, a
pressure below the lattice's vacuum) leaves the config as it was and says, in SI, what is allowed.

Below the rows the panel states the lattice parameters of these SI values
(:func:`solver.lattice_parameters.choose_lattice`: τ, time step, steps per flow-through and
their wall time). With "Choose τ" on (the default) the chosen τ is applied to the config and
the openings' lattice values are re-derived so that their SI values stay as entered: no τ is
needed; with it off, the config's τ is kept and judged against the Mach target.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

import numpy as np
import panel as pn
import param

from solver.config import SimulationConfig
from solver.opening_kinds import DENSITY, PROFILES, SPEED
from solver.values import ConfigError
from solver.waveform import BUILTIN_WAVEFORMS, MAX_CSV_BYTES

from ..openings import (
    DEFAULT_INLET_SPEED,
    FLOW_UNITS,
    KIND_LABELS,
    STEADY,
    UPLOADED,
    VALUE_UNITS,
    WAVEFORMS,
    OpeningGroup,
    OpeningUnits,
    builtin_shape,
    caveat,
    csv_shape,
    drives,
    inlet_mean,
    quantity,
    retimed_openings,
    value_units,
)

__all__ = ["OpeningRow", "OpeningsPanel", "lattice_text", "Chooser"]

#: ``chooser(config, groups, geometry, tau)``: the lattice parameters of the table's SI values
#: (:class:`solver.lattice_parameters.LatticeChoice`; tau None = choose it), None without a
#: driven opening; ConfigError when no stable tau can run them.
Chooser = Callable[[SimulationConfig, Sequence[OpeningGroup], object, "float | None"], object]

_KINDS = {label: kind for kind, label in KIND_LABELS.items()}
_ALL_UNITS = list(dict.fromkeys(u for units in VALUE_UNITS.values() for u in units))


class OpeningRow(param.Parameterized):
    """One row of the table, in SI units."""

    label = param.String(default="", doc="Opening id and equivalent diameter.")
    kind = param.Selector(objects=list(_KINDS), default=KIND_LABELS["closed"],
                          doc="What the opening does.")
    value = param.Number(default=None, allow_None=True,
                         doc="Inlet: mean speed or flow rate; outlet: pressure relative to the "
                             "reference (Pa).")
    unit = param.Selector(objects=_ALL_UNITS, default="", doc="Unit of the value.")
    profile = param.Selector(objects=list(PROFILES), default="uniform",
                             doc="Inlet velocity profile across the opening.")
    waveform = param.Selector(objects=list(WAVEFORMS), default=STEADY,
                              doc="Inlet: steady, or a heartbeat whose mean over the cycle is "
                                  "the value (built-in: period 1 s; a CSV: its own).")
    rp = param.Number(default=None, allow_None=True, bounds=(0, None), label="Rp",
                      doc="RCR outlet: proximal resistance (Pa·s/m³); all three empty = a "
                          "fixed pressure (the value, also the distal pressure of an RCR).")
    compliance = param.Number(default=None, allow_None=True, bounds=(0, None), label="C",
                              doc="RCR outlet: compliance (m³/Pa).")
    rd = param.Number(default=None, allow_None=True, bounds=(0, None), label="Rd",
                      doc="RCR outlet: distal resistance (Pa·s/m³).")
    lattice = param.String(default="", doc="The solver's condition, lattice units.")

    def __init__(self, group: OpeningGroup, **params) -> None:
        super().__init__(label=group.label, **params)
        self.group = group


def lattice_text(spec: dict | None) -> str:
    """The config entry of an opening in words (lattice units)."""
    if not spec or not drives(spec["kind"]):
        return "closed"
    if quantity(spec["kind"]) == SPEED:
        pulse = f" ~{spec['waveform']['period']:.4g} steps" if spec.get("waveform") else ""
        return f"u* {inlet_mean(spec):.4g} {spec.get('profile', 'uniform')}{pulse}"
    if quantity(spec["kind"]) == DENSITY:
        return f"ρ* {spec.get('value', 1.0):.6g}" + (" RCR" if spec.get("windkessel") else "")
    return spec["kind"]


class OpeningsPanel(pn.viewable.Viewer):
    """Rows of the openings of one geometry, bound to the config they edit."""

    message = param.String(default="", doc="Why the last edit was refused (SI).")
    choose_tau = param.Boolean(default=True, label="Choose τ and the time step from these SI "
                               "values (Mach target)",
                               doc="Apply the τ chosen for the openings' SI values; off: keep "
                                   "the configured τ and judge it.")
    choice = param.String(default="", doc="The lattice parameters of the openings and their "
                                          "cost (SI), or why none can run them.")

    def __init__(self, units: Callable[[SimulationConfig, OpeningGroup], OpeningUnits],
                 chooser: Chooser | None = None, **params) -> None:
        super().__init__(**params)
        self.units = units
        self.chooser = chooser
        self.geometry = None
        self.rows: list[OpeningRow] = []
        self._uploaded: dict[int, dict] = {}  # first opening id -> an uploaded CSV's shape
        self.config: SimulationConfig | None = None
        self._syncing = False
        self._watchers: list = []
        self.layout = pn.Column(sizing_mode="stretch_width", css_classes=["openings-table"])
        self.alert = pn.pane.Alert("", alert_type="danger", visible=False,
                                   sizing_mode="stretch_width")
        self.param.watch(lambda e: self.alert.param.update(object=html.escape(e.new),
                                                           visible=bool(e.new)), "message")
        # Outflow stays offered (fast flows out of a long straight segment) with this warning.
        self.note = pn.pane.Alert("", alert_type="warning", visible=False,
                                  sizing_mode="stretch_width", css_classes=["outflow-note"])
        header = pn.pane.Markdown("**Openings** · kind and value in SI (the solver's lattice "
                                  "value on the right); the box faces are walls",
                                  sizing_mode="stretch_width")
        self.choice_pane = pn.pane.Alert("", alert_type="info", visible=False,
                                         sizing_mode="stretch_width",
                                         css_classes=["lattice-choice"])
        self.param.watch(self._show_choice, "choice")
        self.param.watch(lambda e: self._choose(), "choose_tau")
        auto = pn.widgets.Checkbox.from_param(self.param.choose_tau)
        self.view = pn.Column(header, self.alert, self.note, self.layout, auto,
                              self.choice_pane, sizing_mode="stretch_width", visible=False)

    def bind(self, groups: Sequence[OpeningGroup], config: SimulationConfig | None,
             geometry=None) -> None:
        """Show ``groups`` of ``geometry`` and edit ``config.openings`` (no rows when there are
        none)."""
        self.geometry = geometry
        if self.config is not None:
            for watcher in self._watchers:
                self.config.param.unwatch(watcher)
        self._watchers = []
        self.config = config
        self.message = ""
        self._uploaded = {}  # a new table: an uploaded shape lives on in the config only
        self.rows = [OpeningRow(group) for group in groups] if config is not None else []
        for row in self.rows:
            row.param.watch(lambda *events, row=row: self._edited(row, *events),
                            ["kind", "value", "unit", "profile", "waveform", "rp",
                             "compliance", "rd"])
        if config is not None:
            self._watchers.append(config.param.watch(self.refresh, ["openings", "tau",
                                                                    "initial_density"]))
        self.refresh()
        self.layout.objects = [self._row_view(row) for row in self.rows]
        self.view.visible = bool(self.rows)
        self._choose()

    def refresh(self, *events) -> None:
        """Re-derive every row's SI value from the config (units or config changed)."""
        if self._syncing:
            return
        for row in self.rows:
            self._show(row)
        self._warn_outflow()
        if events and any(getattr(e, "name", "") != "openings" for e in events):
            self._choose()  # the units or tau changed: the choice and its cost too

    def _choose(self, strict: bool = False) -> None:
        """State (and with :attr:`choose_tau` apply) the lattice parameters of the rows;
        ``strict``: raise the ConfigError of a refusal instead of showing it."""
        if self._syncing or self.chooser is None or self.config is None or not self.rows:
            self.choice = ""
            return
        config, groups = self.config, [row.group for row in self.rows]
        try:
            choice = self.chooser(config, groups, self.geometry,
                                  None if self.choose_tau else config.tau)
        except (ConfigError, ValueError) as exc:
            if strict:
                raise ConfigError(str(exc)) from exc
            self.choice = f"⚠ {exc}"
            return
        if choice is None:
            self.choice = ""
            return
        if self.choose_tau and abs(choice.tau - config.tau) > 1e-12:
            # The same SI values on the new time step (dt is proportional to tau - 1/2).
            ratio = (choice.tau - 0.5) / (config.tau - 0.5)
            openings = retimed_openings(config.openings, ratio, config.initial_density)
            self._syncing = True
            try:
                config.param.update(tau=choice.tau, openings=openings)
            finally:
                self._syncing = False
            for row in self.rows:
                self._show(row)
        self.choice = choice.text() if not choice.warnings else f"⚠ {choice.text()}"

    def _show_choice(self, event) -> None:
        text = event.new
        self.choice_pane.param.update(object=html.escape(text), visible=bool(text),
                                      alert_type="warning" if text.startswith("⚠") else "info")

    def _warn_outflow(self) -> None:
        """Warn while a row's kind has a caveat (an outflow: in slow flows almost a wall)."""
        chosen: dict[str, list[str]] = {}
        for row in self.rows:
            chosen.setdefault(_KINDS[row.kind], []).append(row.group.name)
        text = " ".join(
            f"Opening{'s' if len(names) > 1 else ''} {', '.join(names)}: {caveat(kind)}"
            for kind, names in chosen.items() if caveat(kind))
        if text != self.note.object or self.note.visible != bool(text):
            self.note.param.update(object=text, visible=bool(text))

    # ------------------------------------------------------------------ editing
    def _spec(self, row: OpeningRow) -> dict:
        """The config entry of the row's first opening (every member holds the same)."""
        return dict(self.config.openings.get(row.group.ids[0], {"kind": "closed"}))

    def _show(self, row: OpeningRow) -> None:
        spec = self._spec(row)
        kind = spec["kind"]
        units = value_units(kind, row.group)
        unit = row.unit if row.unit in units else units[0]
        units = self.units(self.config, row.group)
        value = units.value(spec, unit, row.group)
        rcr = units.rcr(spec) or {}
        partial = [row.rp, row.compliance, row.rd]
        if not rcr and quantity(kind) == DENSITY and None in partial and any(
                v is not None for v in partial):  # being entered one by one: kept as typed
            rcr = dict(zip(("Rp", "C", "Rd"), partial, strict=True))
        self._syncing = True
        try:
            row.param.update(kind=KIND_LABELS[kind], unit=unit,
                             value=None if value is None else float(f"{value:.4g}"),
                             profile=spec.get("profile", "uniform"),
                             waveform=_waveform_name(units.shape(spec)),
                             rp=_rounded(rcr.get("Rp")), compliance=_rounded(rcr.get("C")),
                             rd=_rounded(rcr.get("Rd")), lattice=lattice_text(spec))
        finally:
            self._syncing = False

    def _edited(self, row: OpeningRow, *events) -> None:
        if self._syncing:
            return
        self._apply(row, {event.name for event in events})

    def _apply(self, row: OpeningRow, names: set[str]) -> None:
        """Write the row's edited fields ``names`` to the config (or say why not)."""
        kind = _KINDS[row.kind]
        try:
            if names == {"unit"}:
                pass  # the same condition, shown in the new unit below
            elif "kind" in names:
                self._write(row, self._default(kind, row))
            elif self.choose_tau and self.chooser is not None:
                self._write_choosing(row, kind)
            else:
                self._write(row, self._row_spec(row, kind))
            self.message = ""
        except ConfigError as exc:
            self.message = str(exc)
        self._show(row)  # a refused value goes back to the config's
        self._warn_outflow()
        if not self.message:
            self._choose()

    def _write_choosing(self, row: OpeningRow, kind: str) -> None:
        """Write the row's SI value and choose tau for it: a value too fast for the present tau
        is what a new tau is for. ConfigError (config unchanged) when none can run it."""
        config = self.config
        before = (config.tau, dict(config.openings))
        self._write(row, self._row_spec(row, kind, check=False))
        try:
            self._choose(strict=True)
            # The lattice limits at the chosen tau (Mach, density change), said in SI.
            self._row_spec(row, kind)
        except ConfigError:
            self._syncing = True
            try:
                config.param.update(tau=before[0], openings=before[1])
            finally:
                self._syncing = False
            self._choose()
            raise

    def _row_spec(self, row: OpeningRow, kind: str, check: bool = True) -> dict:
        """The config entry of the row's SI fields (its waveform and RCR values included)."""
        units = self.units(self.config, row.group)
        return units.spec(kind, row.value, row.unit, row.group, row.profile, check=check,
                          shape=self._row_shape(row, units), windkessel=_row_rcr(row))

    def _row_shape(self, row: OpeningRow, units: OpeningUnits) -> dict | None:
        """The waveform the row asks for, relative to its mean (None: steady)."""
        if row.waveform == STEADY:
            return None
        if row.waveform in BUILTIN_WAVEFORMS:
            return builtin_shape(row.waveform)
        shape = self._uploaded.get(row.group.ids[0]) or units.shape(self._spec(row))
        if shape is None:
            raise ConfigError(f"Opening {row.group.name}: upload a waveform CSV first (header "
                              "t,flow_rate in m³/s or t,mean_speed in m/s, one period).")
        return shape

    def upload_waveform(self, row: OpeningRow, data: bytes, filename: str = "waveform.csv"
                        ) -> None:
        """Make ``row`` a velocity inlet pulsing as the uploaded CSV ``data`` (parsed as data
        by the case files' parser; its mean is the row's value); the message says what was
        wrong with a refused file."""
        try:
            if len(data) > MAX_CSV_BYTES:
                raise ConfigError(f"{filename}: a waveform CSV holds at most "
                                  f"{MAX_CSV_BYTES:,} bytes (one period of (t, value) rows).")
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError as exc:
                raise ConfigError(f"{filename} is not a UTF-8 text CSV; save it as plain "
                                  "text with the header t,flow_rate or t,mean_speed.") from exc
            what, mean, shape = csv_shape(text, filename)
            units = value_units("velocity", row.group)
            unit = "m/s" if what == "mean_speed" else "mL/s"
            if unit not in units:
                raise ConfigError(f"{filename}: a 2D run takes a mean speed "
                                  "(t,mean_speed in m/s), not a flow rate.")
        except ConfigError as exc:
            self.message = str(exc)
            return
        key = row.group.ids[0]
        before = self._uploaded.get(key)
        self._uploaded[key] = shape
        value = mean if unit == "m/s" else mean / FLOW_UNITS[unit]
        self._syncing = True
        try:
            row.param.update(kind=KIND_LABELS["velocity"], unit=unit, value=value,
                             waveform=UPLOADED)
        finally:
            self._syncing = False
        self._apply(row, {"waveform"})
        if self.message:  # refused (e.g. its peak above the Mach limit): not kept
            self._uploaded.pop(key)
            if before is not None:
                self._uploaded[key] = before

    def _default(self, kind: str, row: OpeningRow) -> dict:
        if quantity(kind) == SPEED:
            return {"kind": kind, "value": DEFAULT_INLET_SPEED, "profile": row.profile}
        if quantity(kind) == DENSITY:
            return {"kind": kind, "value": float(self.config.initial_density)}
        return {"kind": kind}

    def _write(self, row: OpeningRow, spec: dict) -> None:
        openings = dict(self.config.openings)
        openings.update({i: dict(spec) for i in row.group.ids})
        self._syncing = True
        try:
            self.config.openings = openings
        finally:
            self._syncing = False

    # ------------------------------------------------------------------ layout
    def _row_view(self, row: OpeningRow) -> pn.Row:
        name = pn.pane.HTML(f'<span class="opening-label" data-opening="{row.group.ids[0]}">'
                            f"{html.escape(row.label)}</span>", width=120)
        kind = pn.widgets.Select.from_param(row.param.kind, name="", width=135)
        value = pn.widgets.FloatInput.from_param(row.param.value, name="", width=95)
        unit = pn.widgets.Select.from_param(row.param.unit, name="", width=65)
        profile = pn.widgets.Select.from_param(row.param.profile, name="", width=95)
        waveform = pn.widgets.Select.from_param(row.param.waveform, name="", width=110,
                                                css_classes=["opening-waveform"])
        upload = pn.widgets.FileInput(accept=".csv", width=150, css_classes=["waveform-csv"])
        upload.param.watch(lambda e: e.new and self.upload_waveform(
            row, e.new, upload.filename or "waveform.csv"), "value")
        rcr = [pn.widgets.FloatInput.from_param(p, width=80, placeholder=f"{p.label} {u}")
               for p, u in ((row.param.rp, "Pa·s/m³"), (row.param.compliance, "m³/Pa"),
                            (row.param.rd, "Pa·s/m³"))]

        def fit(*events) -> None:  # only the units and options of the row's kind
            kind_name = _KINDS[row.kind]
            unit.options = list(value_units(kind_name, row.group))
            value.visible = unit.visible = quantity(kind_name) is not None
            profile.visible = waveform.visible = upload.visible = \
                quantity(kind_name) == SPEED
            for widget in rcr:
                widget.visible = quantity(kind_name) == DENSITY
        row.param.watch(fit, "kind")
        fit()
        lattice = pn.pane.HTML(pn.bind(lambda text: f'<span class="opening-lattice">'
                                                    f"{html.escape(text)}</span>",
                                       row.param.lattice), width=130)
        return pn.Row(name, kind, value, unit, profile, waveform, upload, *rcr, lattice,
                      sizing_mode="stretch_width", css_classes=["opening-row"])

    def __panel__(self) -> pn.viewable.Viewable:
        return self.view


def _row_rcr(row: OpeningRow) -> dict | None:
    """The row's RCR values (SI), None when all three are empty; ConfigError when some are."""
    values = {"Rp": row.rp, "C": row.compliance, "Rd": row.rd}
    if all(v is None for v in values.values()):
        return None
    missing = [k for k, v in values.items() if v is None]
    if missing:
        raise ConfigError(f"Opening {row.group.name}: an RCR outlet needs Rp (Pa·s/m³), C "
                          f"(m³/Pa) and Rd (Pa·s/m³); {', '.join(missing)} missing. Clear all "
                          "three for a fixed pressure.")
    return values


def _waveform_name(shape: dict | None) -> str:
    """Which of :data:`~app.openings.WAVEFORMS` a config's waveform shape is."""
    if shape is None:
        return STEADY
    for name in BUILTIN_WAVEFORMS:
        known = builtin_shape(name)
        if len(known["fourier"]) == len(shape["fourier"]) and \
                abs(shape["period_s"] - known["period_s"]) < 1e-6 and \
                np.allclose(shape["fourier"], known["fourier"], rtol=1e-6, atol=1e-9):
            return name
    return UPLOADED


def _rounded(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")
