"""Physics in the user's units: voxel size, fluid and pressure gradient next to lattice values.

The user sets SI quantities; the panel shows what they map to with the chosen tau (time step,
lattice body force), the expected peak speed and lattice Mach number from
:func:`solver.stability.assess` (warned above 0.1, refused above 0.3; tau below 0.55 warned) and
Kozeny-Carman estimates of the permeability and pore Reynolds number.
Once the run has settled the measured permeability is shown in m^2 and millidarcy with the
measured pore Reynolds number and whether Darcy's law applies.
"""

from __future__ import annotations

import html
import math

import numpy as np
import panel as pn
import param

from solver.config import MAX_MACH, SimulationConfig
from solver.stability import StabilityReport, assess
from solver.units import UnitSystem, lattice_viscosity, mach_number, to_millidarcy

from ..controller import Controller, copy_config
from ..estimates import darcy_regime, estimate_flow
from ..openings import drives
from .settings_cards import readable_number_format

__all__ = ["PhysicsPanel", "PhysicalSetup"]


class PhysicalSetup(param.Parameterized):
    """The physical problem, SI units."""

    voxel_size_um = param.Number(10.0, bounds=(1e-3, 1e6), label="Voxel size (µm)",
                                 doc="Edge of one voxel in micrometres.")
    viscosity = param.Number(1.0e-6, bounds=(1e-9, 1.0), label="Kinematic viscosity (m²/s)",
                             doc="Fluid kinematic viscosity; water at 20 °C: 1.0e-6 m²/s.")
    density = param.Number(1000.0, bounds=(1e-3, 1e5), label="Density (kg/m³)",
                           doc="Fluid density; water: 1000 kg/m³.")
    pressure_gradient = param.Number(5000.0, bounds=(0.0, None), label="Pressure gradient (Pa/m)",
                                     doc="Driving pressure drop per metre along the flow axis, "
                                         "applied as a body force per unit volume (the SI view "
                                         "of Settings → Numerics → body force).")

    def units(self, tau: float, voxel_size: float | None = None) -> UnitSystem:
        """Lattice units at relaxation time ``tau`` (voxel edge ``voxel_size`` m if given)."""
        dx = voxel_size or self.voxel_size_um * 1e-6
        return UnitSystem.from_viscosity(dx, self.viscosity, self.density, tau)


class PhysicsPanel(pn.viewable.Viewer):
    """Physical setup, its lattice counterpart and the measured permeability."""

    def __init__(self, controller: Controller, setup: PhysicalSetup | None = None,
                 **params) -> None:
        super().__init__(**params)
        self.controller = controller
        # Shared with the openings table, which reads its SI values in the same units.
        self.setup = setup or PhysicalSetup(name="Physical setup")
        voxel = controller.geometry.voxel_size
        if voxel:
            self.setup.voxel_size_um = voxel * 1e6
        self.apply_button = pn.widgets.Button(name="Apply to simulation", button_type="primary")
        self.apply_button.on_click(self._apply)
        self.mapping = pn.Column(sizing_mode="stretch_width")
        # Updated in place with a fixed height: replacing children or changing the size on
        # every snapshot would re-lay out the page (and re-render the 3D view) several times
        # a second.
        self.measured = pn.pane.HTML("", stylesheets=[TABLE_CSS], sizing_mode="stretch_width",
                                     height=230)
        self._measured_step = -1
        self._assessed: tuple | None = None
        self._syncing = False
        controller.param.watch(self._geometry_changed, "geometry")
        # One source of truth: the config's body force. The pressure gradient shows it in SI
        # (re-derived when the force, tau, the units or the flow axis change) and editing the
        # gradient writes the force's flow-axis component.
        units = ["voxel_size_um", "viscosity", "density"]
        controller.param.watch(self._show_gradient, "geometry")
        controller.config.param.watch(self._show_gradient, ["tau", "body_force"])
        self.setup.param.watch(self._show_gradient, units)
        self.setup.param.watch(self._gradient_edited, "pressure_gradient")
        self._show_gradient()
        controller.param.watch(self._refresh_mapping, ["surface", "geometry"])
        controller.config.param.watch(self._refresh_mapping, ["tau", "body_force", "openings"])
        inputs = [p for p in PhysicalSetup.param if p != "name"]
        self.setup.param.watch(self._refresh_mapping, inputs)
        self.setup.param.watch(self._refresh_measured, inputs)
        controller.param.watch(self._refresh_measured, "snapshot")
        self._refresh_mapping()
        self._refresh_measured()

    def _geometry_changed(self, event) -> None:
        voxel = getattr(event.new, "voxel_size", None)
        if voxel:
            self.setup.voxel_size_um = voxel * 1e6

    def units(self, tau: float) -> UnitSystem:
        """Lattice units of the setup at relaxation time ``tau``."""
        return self.setup.units(tau)

    def lattice_force(self) -> float:
        """Pending body force along the flow axis, lattice units (the pressure gradient's)."""
        return float(self.controller.config.body_force[self.controller.geometry.flow_axis])

    def _show_gradient(self, *events) -> None:
        """Show the pending body force as a pressure gradient, Pa/m."""
        if self._syncing:
            return
        tau = self.controller.config.tau
        gradient = self.units(tau).force_density_to_si(self.lattice_force())
        self._syncing = True
        try:
            # Clipped at 0 like the widget: a force against the axis shows as 0 until edited.
            self.setup.pressure_gradient = max(0.0, float(gradient))
        finally:
            self._syncing = False

    def _gradient_edited(self, event) -> None:
        """Write an edited pressure gradient into the pending body force (lattice units)."""
        if self._syncing:
            return
        config = self.controller.config
        force = list(config.body_force)
        force[self.controller.geometry.flow_axis] = self.units(
            config.tau).force_density_to_lattice(event.new)
        self._syncing = True
        try:
            config.body_force = tuple(force)
        finally:
            self._syncing = False

    def _apply(self, event) -> None:
        self.controller.apply_settings()

    def _refresh_mapping(self, *events) -> None:
        self.mapping.objects = [self._mapping()]

    def _refresh_measured(self, *events) -> None:
        snap = self.controller.snapshot
        if events and all(e.name == "snapshot" for e in events) and (
                snap.step == self._measured_step):
            return
        self._measured_step = snap.step
        self.measured.object = self._measured()

    def proposed_config(self) -> SimulationConfig:
        """A copy of the pending settings (the pressure gradient is their body force)."""
        return copy_config(self.controller.config)

    def _report(self, config: SimulationConfig) -> StabilityReport:
        """Pre-run stability verdict (cached per geometry and settings: it scans the mask)."""
        geometry = self.controller.geometry
        # driven through openings: near 1/2 the verdict is about the collision, not tau
        openings = any(drives(o.get("kind", "closed")) for o in config.openings.values())
        key = (id(geometry), config.tau, tuple(config.body_force), config.periodic_axes(),
               config.lattice, config.collision, openings)
        if self._assessed is None or self._assessed[0] != key:
            self._assessed = (key, assess(config, np.asarray(geometry.solid, dtype=bool),
                                          openings=openings))
        return self._assessed[1]

    def _mapping(self) -> pn.viewable.Viewable:
        c = self.controller
        tau = c.config.tau
        units = self.units(tau)
        force = self.lattice_force()
        try:
            report = self._report(self.proposed_config())
        except Exception as exc:  # e.g. settings that do not fit the geometry
            self.apply_button.disabled = True
            return pn.pane.Alert(str(exc), alert_type="danger", sizing_mode="stretch_width")
        self.apply_button.disabled = bool(report.errors)
        driven = [o for o in c.config.openings.values() if drives(o.get("kind", "closed"))]
        rows = [
            ("Drive", f"{len(driven)} openings" if driven else "body force",
             "Geometry → openings table; walls, no body force" if driven else
             "the pressure gradient below"),
            ("Relaxation time τ", f"{tau:g}", "set in Settings → Numerics"),
            ("Lattice viscosity ν*", f"{lattice_viscosity(tau):.4g}", "(τ − ½)/3"),
            ("Time step Δt", f"{units.dt:.3e} s", "ν* Δx² / ν"),
            ("Body force F*", f"{force:.3e}", f"{self.setup.pressure_gradient:g} Pa/m"),
            ("Expected peak speed", f"{report.u_estimate:.3e}",
             f"{units.velocity_to_si(report.u_estimate):.3e} m/s · pore size "
             f"{report.pore_size:.3g} voxels"),
            ("Expected Mach", f"{report.mach:.3f}", "warned above 0.1, refused above 0.3"),
        ]
        estimate = estimate_flow(float(c.geometry.porosity), c.surface, force,
                                 lattice_viscosity(tau))
        if estimate:
            k_si = units.permeability_to_si(estimate.permeability)
            rows += [
                ("Expected permeability", f"{k_si:.3e} m²",
                 f"{to_millidarcy(k_si):.4g} mD (Kozeny–Carman)"),
                ("Expected pore Reynolds", f"{estimate.reynolds:.3g}",
                 f"grain diameter ≈ {estimate.grain_diameter:.3g} voxels"),
            ]
        advice = self._si_advice(report, units)
        alerts = [pn.pane.Alert(text, alert_type=kind, sizing_mode="stretch_width")
                  for kind, texts in (("danger", [f"{e} {advice}" for e in report.errors]),
                                      ("warning", report.warnings))
                  for text in texts]
        return pn.Column(_table(rows), *alerts, sizing_mode="stretch_width")

    def _si_advice(self, report: StabilityReport, units: UnitSystem) -> str:
        """The refusal's numbers in SI: the expected speed and the largest pressure gradient."""
        if report.mach <= 0:
            return ""
        limit = self.setup.pressure_gradient * MAX_MACH / report.mach
        return (f"In SI: expected peak speed {units.velocity_to_si(report.u_estimate):.3g} m/s; "
                f"lower the pressure gradient below {limit:.3g} Pa/m, or raise the "
                "viscosity or τ.")

    def _measured(self) -> str:
        snap = self.controller.snapshot
        tau = snap.config.get("tau", self.controller.config.tau)
        if snap.permeability is None or not math.isfinite(snap.permeability):
            return ("<p><i>The measured permeability appears once a body force drives the "
                    "flow.</i></p>")
        units = self.units(tau)
        k_si = units.permeability_to_si(snap.permeability)
        axis = int(max(range(len(snap.mean_velocity)),
                       key=lambda a: abs(snap.config.get("body_force", (0, 0, 0))[a])))
        darcy = snap.mean_velocity[axis]
        estimate = estimate_flow(float(self.controller.geometry.porosity),
                                 self.controller.surface, 1.0, 1.0)
        # The run monitor decides whether k is an answer (converged, positive, Darcy flow).
        name = "Permeability k" if snap.k_answer else "k so far (not the answer)"
        rows = [
            (name, f"{k_si:.4e} m²", f"{to_millidarcy(k_si):.5g} mD"),
            ("Convergence", html.escape(snap.k_label), _remaining(snap)),
            ("k (lattice)", f"{snap.permeability:.5g} nodes²", f"at step {snap.step:,}"),
            ("Darcy velocity", f"{units.velocity_to_si(darcy):.3e} m/s", f"{darcy:.3e} lattice"),
            ("Peak Mach", f"{mach_number(snap.max_speed):.3f}", ""),
        ]
        if estimate:
            reynolds = abs(darcy) * estimate.grain_diameter / lattice_viscosity(tau)
            regime = darcy_regime(reynolds) if snap.permeability > 0 else (
                "negative k: the flow runs against the drive, Darcy's law gives no answer")
            rows.append(("Pore Reynolds", f"{reynolds:.3g}", regime))
        return _table_html(rows)

    def __panel__(self) -> pn.viewable.Viewable:
        widgets = {name: {"type": pn.widgets.FloatInput, "format": readable_number_format()}
                   for name in ("voxel_size_um", "viscosity", "density", "pressure_gradient")}
        inputs = pn.Column(pn.Param(self.setup, show_name=False, widgets=widgets),
                           self.apply_button, width=300)
        return pn.Row(
            inputs,
            pn.Column("#### Lattice values", self.mapping, sizing_mode="stretch_width"),
            pn.Column("#### Measured", self.measured, sizing_mode="stretch_width"),
            sizing_mode="stretch_width",
        )


def _remaining(snap) -> str:
    """The monitor's estimate of the steps still needed, in words."""
    if snap.k_converged:
        return ""
    if snap.steps_to_converge is None:
        return "steps still needed: not known yet"
    return f"about {snap.steps_to_converge:,} more steps"


TABLE_CSS = """
table { border-collapse: collapse; width: 100%; font-size: 13px; }
td { padding: 5px 8px; border-bottom: 1px solid #e6e9ed; vertical-align: top; }
td.value { font-weight: 600; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.note { color: #6b7785; }
"""


def _table_html(rows: list[tuple[str, str, str]]) -> str:
    body = "".join(f'<tr><td>{html.escape(a)}</td><td class="value">{html.escape(b)}</td>'
                   f'<td class="note">{html.escape(c)}</td></tr>' for a, b, c in rows)
    return f"<table>{body}</table>"


def _table(rows: list[tuple[str, str, str]]) -> pn.pane.HTML:
    return pn.pane.HTML(_table_html(rows), stylesheets=[TABLE_CSS], sizing_mode="stretch_width")
