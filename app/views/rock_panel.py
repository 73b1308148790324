"""Rock-sample checks and run choices before a permeability run (a self-contained tab).

"Check sample" classifies the pore space of the current geometry along x, y and z with the
lattice's own connectivity (:mod:`geometries.pores`: percolating, dead-end and isolated pore
volume as fractions and m³) and shows the inverted-label hints; "Price choices" lists the full
image, downsampled by 2 and 4 and a centred crop with the memory, tile utilisation eta_t, steps
and estimated time of the mirrored permeability protocol (:func:`solver.rock.preview_choices`)
at the throughput the run has measured (or 2 MFLUPS before it has). The protocol runs
themselves (mirrored / pressure / both, one axis or all) are ``python -m solver run CASE
--protocol both --axes all``. Nothing here touches the running simulation.
"""

from __future__ import annotations

import html

import panel as pn

from geometries.pores import pore_reports
from solver.lattice import get_lattice
from solver.rock import preview_choices

from ..controller import Controller

__all__ = ["RockPanel"]

#: Throughput assumed before the run has measured one, million fluid-node updates per second.
DEFAULT_MFLUPS = 2.0


class RockPanel(pn.viewable.Viewer):
    """Pore-space report and priced crop/downsample choices of the current geometry."""

    def __init__(self, controller: Controller, **params) -> None:
        super().__init__(**params)
        self.controller = controller
        self.check_button = pn.widgets.Button(name="Check sample", button_type="primary")
        self.price_button = pn.widgets.Button(name="Price choices")
        self.check_button.on_click(lambda _: self.check())
        self.price_button.on_click(lambda _: self.price())
        self.pores = pn.pane.HTML("", sizing_mode="stretch_width")
        self.choices = pn.pane.HTML("", sizing_mode="stretch_width")

    def check(self) -> None:
        """Fill the pore table (fractions of the pore volume and m³, per flow axis)."""
        geom = self.controller.geometry
        try:
            links = get_lattice(self.controller.config.lattice).c
            reports = pore_reports(geom, None, links)
        except ValueError as exc:
            self.pores.object = f"<p>Cannot check this sample: {html.escape(str(exc))}</p>"
            return
        rows = []
        for r in reports:
            cells = [f"{'xyz'[r.axis]}"]
            for name in ("percolating", "dead_end", "isolated"):
                voxels = getattr(r, f"{name}_voxels")
                m3 = r.volume_m3(voxels)
                si = f" ({m3:.3g} m³)" if m3 is not None else ""
                cells.append(f"{100 * r.fraction(voxels):.1f} %{si}")
            rows.append(cells)
        header = ["flow axis", "percolating", "dead-end", "isolated"]
        text = _table(header, rows)
        text += f"<p>Porosity {reports[0].porosity:.3f}; fractions of the pore volume.</p>"
        for hint in reports[0].hints:
            text += f"<p class='hint'>⚠ {html.escape(hint)}</p>"
        if not any(r.percolates for r in reports):
            text += "<p class='hint'>⚠ No axis has a connected pore path: no flow possible.</p>"
        self.pores.object = text

    def price(self) -> None:
        """Fill the choices table: memory (MB), eta_t, steps and time of each choice."""
        geom, config = self.controller.geometry, self.controller.config
        mflups = self.controller.snapshot.metrics.get("mflups") or DEFAULT_MFLUPS
        edge = min(geom.shape) // 2
        try:
            choices = preview_choices(geom, config, factors=(1, 2, 4), crops=(edge,),
                                      mflups=mflups)
        except ValueError as exc:
            self.choices.object = f"<p>Cannot price choices: {html.escape(str(exc))}</p>"
            return
        rows = [[c.label, "×".join(map(str, c.geometry.shape)),
                 f"{c.memory_bytes / 1e6:.1f}", f"{c.eta_t:.3f}", f"{c.steps}",
                 _duration(c.seconds)] if not c.problem else
                [c.label, "×".join(map(str, c.geometry.shape)), "cannot run: " + c.problem,
                 "", "", ""] for c in choices]
        header = ["choice", "shape", "memory (MB)", "η_t", "steps", "estimated time"]
        self.choices.object = (_table(header, rows) + f"<p>Mirrored protocol, at {mflups:.3g} "
                               "MFLUPS; steps: twice the pressure-diffusion time.</p>")

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(
            pn.pane.Markdown("Pore connectivity follows the lattice (D3Q19: faces and edges). "
                             "Measure k with `python -m solver run CASE --protocol both "
                             "--axes all`."),
            pn.Row(self.check_button, self.price_button), self.pores, self.choices,
            sizing_mode="stretch_width")


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A small HTML table (values escaped)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _duration(seconds: float) -> str:
    """Seconds as s, min or h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
