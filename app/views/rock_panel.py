"""Rock-sample checks and run choices before a permeability run (a self-contained tab).

"Check sample" classifies the pore space of the current geometry along x, y and z with the
lattice's own connectivity (:mod:`geometries.pores`: percolating, dead-end and isolated pore
volume as fractions and m³) and shows the inverted-label hints; "Price choices" lists the full
image, downsampled by 2 and 4 and a centred crop with the memory, tile utilisation eta_t, steps
and estimated time of the mirrored permeability protocol (:func:`solver.rock.preview_choices`)
at the throughput the run has measured (or 2 MFLUPS before it has). "Measure k (x, y, z)"
runs the mirrored protocol along x, y and z one after another as commands on the session's
runner (:class:`solver.rock.job.TensorJob`: one device thread per session) on simulations of
its own, shows each axis's progress and, once converged, k in mD with its interval
(:mod:`solver.rock.uncertainty`), the flow tortuosity, then the formation factor F and the
electrical tortuosity F·φ per axis and, with "REV curve" ticked, k, φ and F on nested
sub-volumes (:mod:`solver.rock.rev`), with the wall time of each part; "Stop measuring"
cancels it. "JSON" and "CSV" download what has been measured (SI units: m², mD, m). A
geometry whose file gave no voxel size is measured with the Physics tab's "Voxel size (µm)",
as the Physics tab's k is, and the tab says so. The
session's run pauses while the job measures and starts again when it ends, said under the
table. The pressure protocol and the CLI's choices are ``python -m solver run CASE --protocol
both --axes all``.
"""

from __future__ import annotations

import csv
import html
import io
import json

import panel as pn
import param

from geometries import VoxelGeometry
from geometries.pores import pore_reports
from solver.lattice import get_lattice
from solver.rock import PermeabilitySettings, preview_choices
from solver.rock.job import TensorJob, TensorProgress

from ..controller import Controller

__all__ = ["RockPanel"]

#: Throughput assumed before the run has measured one, million fluid-node updates per second.
DEFAULT_MFLUPS = 2.0
#: How often the tensor's progress is redrawn while it is measured, milliseconds.
PROGRESS_PERIOD_MS = 500


class RockPanel(pn.viewable.Viewer):
    """Pore-space report and priced crop/downsample choices of the current geometry."""

    progress = param.ClassSelector(class_=TensorProgress, allow_None=True, precedence=-1,
                                   doc="The measurement's last progress (the tables show it).")
    failure = param.String("", precedence=-1, doc="Why the measurement could not start.")

    def __init__(self, controller: Controller, setup: param.Parameterized | None = None,
                 **params) -> None:
        """``setup``: the Physics tab's :class:`~app.views.physics_panel.PhysicalSetup`, whose
        ``voxel_size_um`` stands in for a voxel size the geometry lacks."""
        super().__init__(**params)
        self.controller = controller
        self.setup = setup
        self.check_button = pn.widgets.Button(name="Check sample", button_type="primary")
        self.price_button = pn.widgets.Button(name="Price choices")
        self.check_button.on_click(lambda _: self.check())
        self.price_button.on_click(lambda _: self.price())
        self.pores = pn.pane.HTML("", sizing_mode="stretch_width")
        self.choices = pn.pane.HTML("", sizing_mode="stretch_width")
        self.measure_button = pn.widgets.Button(name="Measure k (x, y, z)",
                                                button_type="success")
        self.stop_button = pn.widgets.Button(name="Stop measuring", disabled=True)
        self.measure_button.on_click(lambda _: self.measure())
        self.stop_button.on_click(lambda _: self.stop())
        self.rev_box = pn.widgets.Checkbox(name="REV curve (k, φ, F on 1/8, 1/4, 1/2 of the "
                                                "volume; about 2x the time of k_x)", value=False)
        self.tensor = pn.pane.HTML(pn.bind(_tensor_text, self.param.progress, self.param.failure),
                                   sizing_mode="stretch_width")
        self.voxel_note = pn.pane.HTML("", sizing_mode="stretch_width")
        self.extras = pn.pane.HTML(pn.bind(_extras_html, self.param.progress),
                                   sizing_mode="stretch_width")
        self.json_download = pn.widgets.FileDownload(
            callback=self.export_json, filename="rock_results.json", label="JSON",
            disabled=True, button_type="light")
        self.csv_download = pn.widgets.FileDownload(
            callback=self.export_csv, filename="rock_results.csv", label="CSV",
            disabled=True, button_type="light")
        self.job: TensorJob | None = None
        self._callback = None

    def measure(self) -> None:
        """Start measuring k along x, y and z on the session's runner (its run pauses until
        the measurement ends)."""
        if self.job is not None and self.job.running:
            return
        try:
            settings = PermeabilitySettings(protocol="mirrored", rev=self.rev_box.value)
            self.job = TensorJob(self.sample(), self.controller.applied_config,
                                 settings, runner=self.controller.runner)
            self.job.start()
        except Exception as exc:  # said in the panel, never raised into the server
            self.failure = f"Cannot measure k: {exc}"
            return
        self.failure = ""
        self.voxel_note.object = _voxel_note(self.controller.geometry.voxel_size,
                                             self.job.geometry.voxel_size)
        self.measure_button.disabled, self.stop_button.disabled = True, False
        self.refresh()
        if pn.state.curdoc is not None and self._callback is None:
            self._callback = pn.state.add_periodic_callback(self.refresh, PROGRESS_PERIOD_MS)

    def sample(self) -> VoxelGeometry:
        """The geometry to measure: the controller's, with the Physics tab's voxel size when
        its file gave none (else k would have no m² or mD)."""
        geometry = self.controller.geometry
        if geometry.voxel_size is None and self.setup is not None:
            geometry = geometry.in_frame(voxel_size=self.setup.voxel_size_um * 1e-6)
        return geometry

    def stop(self) -> None:
        """Cancel the measurement at its next k check."""
        if self.job is not None:
            self.job.cancel()

    def refresh(self) -> None:
        """Redraw the tensor table; stop refreshing once the job has ended."""
        if self.job is None:
            return
        progress = self.job.progress()
        if not progress.running:  # the buttons first: "Done." must not show before them
            self.measure_button.disabled, self.stop_button.disabled = False, True
            self.json_download.disabled = self.csv_download.disabled = False
            self._stop_callback()
        self.progress = progress

    def export_json(self) -> io.StringIO:
        """The measured results as JSON (:meth:`PermeabilityStudy.as_dict`, SI units), with
        each axis's state ('axes'); 'converged' is false while an axis is unmeasured because
        the measurement was stopped (or has not ended)."""
        study = self.job.study() if self.job is not None else None
        data = study.as_dict() if study is not None else {}
        if self.job is not None:
            axes = self.job.progress().axes
            data["axes"] = {a.axis: {"state": a.state, "message": a.message} for a in axes}
            unfinished = {"waiting", "running", "cancelled", "not converged"}
            data["converged"] = data["converged"] and not any(a.state in unfinished
                                                              for a in axes)
        return io.StringIO(json.dumps(data, indent=2, default=_json_default))

    def export_csv(self) -> io.StringIO:
        """The measured results as CSV: one row per axis (k in m² and mD with its interval,
        F, electrical and flow tortuosity, seconds, k in voxel² and the voxel size in m), then
        the REV points."""
        out = io.StringIO()
        writer = csv.writer(out)
        if self.job is None:
            return out
        progress = self.job.progress()
        study = self.job.study()
        writer.writerow(["axis", "k_m2", "k_mD", "k_low_mD", "k_high_mD", "interval_relative",
                         "formation_factor", "electrical_tortuosity", "flow_tortuosity",
                         "porosity", "seconds", "k_voxel2", "voxel_size_m"])
        for r in study.results:
            i = progress.intervals.get(r.axis)
            c = study.conduction.get(r.axis)
            scale = (r.k_mD / r.k_lattice) if r.k_mD and r.k_lattice else None
            writer.writerow([r.axis, r.k_m2, r.k_mD,
                             i.low * scale if i and scale else "",
                             i.high * scale if i and scale else "",
                             i.relative if i else "",
                             c.formation_factor if c else "", c.tortuosity if c else "",
                             r.flow_tortuosity, c.porosity if c else "", r.seconds,
                             r.k_lattice, study.voxel_size or ""])
        if progress.rev:
            writer.writerow([])
            writer.writerow(["rev_volume_fraction", "shape", "porosity", "k_mD",
                             "formation_factor", "change_k", "change_formation_factor"])
            for p in progress.rev:
                writer.writerow([p.fraction, "x".join(map(str, p.shape)), p.porosity, p.k_mD,
                                 p.formation_factor, p.change_k, p.change_formation_factor])
        out.seek(0)
        return out

    def _stop_callback(self) -> None:
        if self._callback is not None:
            try:
                self._callback.stop()
            except Exception:  # a destroyed session may have dropped it already
                pass
            self._callback = None

    def close(self) -> None:
        """Cancel a measurement and stop its refresh (session end)."""
        self.stop()
        if self.job is not None:
            self.job.join(30)
        self._stop_callback()

    def check(self) -> None:
        """Fill the pore table (fractions of the pore volume and m³, per flow axis)."""
        geom = self.sample()
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
                             "*Measure k* runs the mirrored protocol along x, y and z (the "
                             "simulation pauses meanwhile); both protocols: `python -m solver "
                             "run CASE --protocol both --axes all`."),
            pn.Row(self.check_button, self.price_button), self.pores, self.choices,
            pn.Row(self.measure_button, self.stop_button, self.rev_box), self.tensor,
            self.voxel_note, self.extras, pn.Row(self.json_download, self.csv_download),
            sizing_mode="stretch_width")


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A small HTML table (values escaped)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _json_default(value):
    """JSON for numpy scalars and tuples in the study's dict."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def _tensor_html(progress: TensorProgress) -> str:
    """The tensor table: per axis state, steps, k (mD; 'so far' until converged), its
    interval, change, flow tortuosity and seconds."""
    rows = []
    for a in progress.axes:
        k = "" if a.k_mD is None else f"{a.k_mD:.4g}"
        if k and a.state != "converged":
            k += " (so far, not the answer)"
        change = "" if a.change is None else f"{100 * a.change:.3g} %"
        state = a.state + (f": {a.message}" if a.message else "")
        i = progress.intervals.get(a.axis)
        interval = ""
        if i is not None and a.k_mD:
            interval = (f"[{a.k_mD * (1 - i.relative):.4g}, {a.k_mD * (1 + i.relative):.4g}]"
                        f" (±{100 * i.relative:.2g} %)")
        flow = progress.flow_tortuosity.get(a.axis)
        seconds = progress.seconds.get(f"k {a.axis}")
        rows.append([a.axis, state, f"{a.step}", k, interval, change,
                     "" if flow is None else f"{flow:.3f}",
                     "" if seconds is None else f"{seconds:.1f}"])
    text = _table(["axis", "state", "steps", "k (mD)", "interval (mD)",
                   "change per 1000 steps", "flow tortuosity", "seconds"], rows)
    if progress.anisotropy is not None:
        text += (f"<p class='anisotropy'>Anisotropy k_max/k_min = {progress.anisotropy:.3f} "
                 f"(converged axes: {', '.join(progress.k_mD)})</p>")
    text += (f"<p>Measuring {html.escape(progress.stage)}… (converged: k changes &lt; 0.1 % "
             "per 1000 steps)</p>" if progress.running else "<p>Done.</p>")
    if progress.paused_run:
        text += ("<p class='paused-run'>The simulation is paused while k is measured (both "
                 "run on the session's one device thread); it starts again when the "
                 "measurement ends.</p>")
    return text


def _tensor_text(progress: TensorProgress | None, failure: str) -> str:
    """Why the measurement could not start, else the tensor table ('' before the first)."""
    if failure:
        return f"<p>{html.escape(failure)}</p>"
    return "" if progress is None else _tensor_html(progress)


def _extras_html(progress: TensorProgress | None) -> str:
    """F and electrical tortuosity per axis, the REV curve and the time of each part."""
    text = ""
    if progress is None:
        return text
    if progress.conduction:
        rows = [[a, f"{c.formation_factor:.4g}", f"{c.tortuosity:.4g}", f"{c.porosity:.4f}"]
                for a, c in progress.conduction.items()]
        text += _table(["axis", "formation factor F", "electrical tortuosity F·φ", "φ"], rows)
        text += ("<p>F: conduction in the pores only (insulating grains, fixed potential on "
                 "the two faces, no flux through grain walls and sealed sides). Interval: "
                 "convergence remainder + period-2 residual (k: the mean of two "
                 "consecutive steps at every check) + grid estimate (coarse start, order 2 "
                 "assumed); not "
                 "covered: segmentation, REV.</p>")
    if progress.rev:
        rows = []
        for p in progress.rev:
            k = "" if p.k_mD is None else f"{p.k_mD:.4g}"
            if p.change_k is not None:
                k += f" ({100 * p.change_k:+.1f} %)"
            f = "" if p.formation_factor is None else f"{p.formation_factor:.4g}"
            if p.change_formation_factor is not None:
                f += f" ({100 * p.change_formation_factor:+.1f} %)"
            rows.append([f"{p.fraction:.3g}", "×".join(map(str, p.shape)), f"{p.porosity:.4f}",
                         k, f, p.message])
        text += "<p class='rev'>REV along x (centred sub-volumes; change from the previous):</p>"
        text += _table(["volume fraction", "shape", "φ", "k (mD)", "F", ""], rows)
    if progress.seconds:
        text += "<p class='timing'>Time: " + ", ".join(
            f"{html.escape(name)} {s:.1f} s" for name, s in progress.seconds.items()) + "</p>"
    return text


def _voxel_note(given: float | None, used: float | None) -> str:
    """Where the voxel size behind k in m² and mD came from (µm), or why there is none."""
    if used is None:
        return "<p class='voxel-size'>No voxel size: k in voxel² only (JSON export).</p>"
    source = ("from the geometry" if given is not None else
              "the file gave none: the Physics tab's Voxel size (µm); set it there, or at "
              "upload, and measure again if it is not the image's")
    return f"<p class='voxel-size'>Voxel size {used * 1e6:.4g} µm ({source}).</p>"


def _duration(seconds: float) -> str:
    """Seconds as s, min or h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
