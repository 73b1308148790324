"""Performance and convergence counters: a row of cards and live time series.

The cards show the latest snapshot's MFLUPS, time steps and steps per second, tile utilisation
eta_t, the fraction of the memory bandwidth used (against the device's theoretical peak and a
measured copy; "n/a" where the backend does not know them, e.g. on the CPU), the device and its
memory, and the peak speed as a lattice Mach number. Time series of MFLUPS, residual and
permeability (lattice units) stream through a :class:`holoviews.streams.Buffer`.
"""

from __future__ import annotations

import html
import math
import time

import holoviews as hv
import numpy as np
import pandas as pd
import panel as pn

from solver.units import mach_number

from ..controller import Controller
from ..openings import drives

__all__ = ["CountersView", "Smoothed", "counter_cards", "format_bytes"]

SERIES = ("step", "mflups", "residual", "permeability")
CARD_CSS = """
:host { width: 100%; }
.cards { display: grid; grid-template-columns: repeat(8, minmax(0, 1fr)); gap: 8px; }
.card[data-counter="k"] .value { font-size: 16px; line-height: 1.9; }
.card.wide .value { font-size: 13px; line-height: 1.3; white-space: normal; height: 34px;
                    overflow: hidden; }
.card { background: var(--panel-surface-color, #fff); border: 1px solid #e3e6ea;
        border-radius: 8px; padding: 8px 12px; box-shadow: 0 1px 2px rgba(0,0,0,.05); }
.label { font-size: 12px; color: #5f6b7a; letter-spacing: .02em; }
.value { font-size: 22px; font-weight: 600; color: #1f2a37; line-height: 1.3;
         font-variant-numeric: tabular-nums; white-space: nowrap; }
.sub { font-size: 12px; color: #6b7785; white-space: nowrap; overflow: hidden;
       text-overflow: ellipsis; }
.status-running .value, .status-converged .value { color: #1a7f37; }
.status-paused .value { color: #9a6700; }
.status-diverged .value, .status-error .value { color: #cf222e; }
"""


def format_bytes(n: float | None) -> str:
    """Human-readable size, e.g. 1.5 GB."""
    if not n:
        return "n/a"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"


def _fraction(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f} %"


class Smoothed:
    """Exponential moving average over wall time: ``tau_s`` seconds of memory, any sample rate.

    The CPU's MFLUPS of one publish interval jumps between about 0.5 and 8; the card shows this
    average and the plot the raw values.
    """

    def __init__(self, tau_s: float = 3.0, clock=time.monotonic) -> None:
        self.tau_s, self.clock = tau_s, clock
        self.value: float | None = None
        self._time = 0.0

    def update(self, sample: float) -> float:
        """Fold in ``sample`` (taken now) and return the average."""
        now = self.clock()
        if self.value is None:
            self.value = float(sample)
        else:
            weight = 1.0 - math.exp(-max(now - self._time, 0.0) / self.tau_s)
            self.value += weight * (float(sample) - self.value)
        self._time = now
        return self.value

    def reset(self) -> None:
        """Forget the history (a new run, or a pause)."""
        self.value = None


def counter_cards(snap, mflups: float | None = None) -> list[tuple[str, str, str, str]]:
    """(key, label, value, detail) of every card, from a Snapshot; ``mflups`` is the smoothed
    MFLUPS to show (default: the snapshot's latest)."""
    m = snap.metrics
    if mflups is None:
        mflups = m.get("mflups", 0.0)
    device = snap.device or {}
    peak = m.get("bandwidth_fraction_peak")
    copy = m.get("bandwidth_fraction_copy")
    bandwidth = _fraction(peak)
    detail = (f"of peak · {_fraction(copy)} of copy" if peak is not None or copy is not None
              else "no device peak (CPU)")
    memory = f"state {format_bytes(snap.memory_bytes)}"
    if device.get("memory"):
        memory += f" of {format_bytes(device['memory'])}"
    return [
        ("status", "Status", snap.status, snap.geometry_name or ""),
        ("mflups", "MFLUPS", f"{mflups:.2f}",
         f"now {m.get('mflups', 0.0):.2f} · mean {m.get('mflups_mean', 0.0):.2f}"),
        ("steps", "Time steps", f"{snap.step:,}", f"{snap.steps_per_second:.1f} steps/s"),
        ("eta", "Tile utilisation ηt", f"{m.get('eta_t', 0.0):.3f}",
         f"{m.get('fluid_nodes', 0):,} fluid nodes · {m.get('n_tiles', 0):,} tiles"),
        ("bandwidth", "Bandwidth used", bandwidth, detail),
        ("mach", "Peak speed", f"{snap.max_speed:.2e}" if np.isfinite(snap.max_speed) else "NaN",
         f"Mach {mach_number(snap.max_speed):.3f}" if np.isfinite(snap.max_speed) else ""),
        ("device", "Device", str(device.get("name", "—")), memory),
        *([] if _driven_through_openings(snap) else [("k", "Permeability", *_k_card(snap))]),
    ]


def _driven_through_openings(snap) -> bool:
    """A run driven through openings without a body force (a vessel): no Darcy permeability
    to show; its flow is in the openings' cards."""
    driven = any(drives(o.kind) for o in snap.openings)
    return driven and snap.permeability is None


def _k_card(snap) -> tuple[str, str]:
    """(value, detail) of the permeability card: the monitor's convergence flag and estimate."""
    if snap.permeability is None:
        return "—", "needs a body force"
    if snap.k_converged and snap.k_answer:
        return "converged", f"k changes {100 * snap.k_change:.2g} % / 1000 steps"
    if snap.k_change is None:
        return "measuring", "needs 1000 steps of history"
    more = ("" if snap.steps_to_converge is None
            else f" · ~{snap.steps_to_converge:,} steps to go")
    flag = "not converged" if not snap.k_converged else "not an answer"
    return flag, f"k changes {100 * snap.k_change:.2g} % / 1000 steps{more}"


def _cards_html(snap, mflups: float | None = None) -> str:
    parts = []
    for key, label, value, detail in counter_cards(snap, mflups):
        # Values and details hold user text (the geometry's name comes from the upload's file
        # name or from inside an .npz): escaped, never markup (#16 item 4).
        value, detail = html.escape(value, quote=True), html.escape(detail, quote=True)
        extra = f" status-{snap.status}" if key == "status" else (
            " wide" if key == "device" else "")
        parts.append(
            f'<div class="card{extra}" data-counter="{key}"><div class="label">{label}</div>'
            f'<div class="value">{value}</div><div class="sub" title="{detail}">{detail}</div>'
            "</div>")
    return f'<div class="cards">{"".join(parts)}</div>'


class CountersView(pn.viewable.Viewer):
    """Counter cards and time series of the controller's snapshots."""

    def __init__(self, controller: Controller, **params) -> None:
        super().__init__(**params)
        self.controller = controller
        # Fixed height: a text change then never re-lays out the page (which would also
        # re-render the 3D view).
        self.cards = pn.pane.HTML(_cards_html(controller.snapshot), stylesheets=[CARD_CSS],
                                  sizing_mode="stretch_width", height=84,
                                  css_classes=["counters"])
        self.buffer = hv.streams.Buffer(pd.DataFrame({k: [] for k in SERIES}, dtype=float),
                                        length=2000, index=False)
        self._run_id = controller.snapshot.run_id
        self.mflups = Smoothed()
        self._mflups_step = -1
        self._last_sample = -1.0
        controller.param.watch(self._update, "snapshot")
        self.plots = pn.Row(
            self._series("mflups", "MFLUPS", "#2563eb"),
            self._series("residual", "residual |Δ⟨u⟩|/|⟨u⟩| per step", "#d97706", logy=True),
            self._series("permeability", "permeability k (nodes²)", "#059669"),
            sizing_mode="stretch_width",
        )

    def _series(
        self, column: str, label: str, colour: str, logy: bool = False
    ) -> pn.pane.HoloViews:
        def curve(data: pd.DataFrame) -> hv.Curve:
            return hv.Curve(data, "step", hv.Dimension(column, label=label)).opts(
                color=colour, line_width=2, responsive=True, height=190, logy=logy,
                framewise=True, title=label, show_grid=True, toolbar=None,
                default_tools=["hover"],
                # A canvas, not WebGL: the 3D views' syncs each take a browser context, and
                # after a new geometry Chromium dropped the plots' (regl "context lost").
                backend_opts={"plot.output_backend": "canvas"})
        dmap = hv.DynamicMap(curve, streams=[self.buffer])
        return pn.pane.HoloViews(dmap, sizing_mode="stretch_width", height=200)

    def _update(self, *events) -> None:
        snap = self.controller.snapshot
        if snap.run_id != self._run_id or snap.status != "running":
            self.mflups.reset()
        elif snap.step != self._mflups_step:  # a new measurement, not a republished one
            self.mflups.update(snap.metrics.get("mflups", 0.0))
        self._mflups_step = snap.step
        self.cards.object = _cards_html(snap, self.mflups.value)
        if snap.run_id != self._run_id:
            self.buffer.clear()
            self._run_id, self._last_sample = snap.run_id, -1.0
        history = snap.history
        if not history or not len(history.get("sample", ())):
            return
        new = history["sample"] > self._last_sample
        if not new.any():
            return
        self._last_sample = float(history["sample"][-1])
        rows = pd.DataFrame({k: history[k][new] for k in SERIES})
        # A log axis cannot show zero; a converged residual is clipped to 1e-16.
        rows["residual"] = rows["residual"].where(rows["residual"].isna(),
                                                  rows["residual"].clip(lower=1e-16))
        self.buffer.send(rows)

    def __panel__(self) -> pn.viewable.Viewable:
        return pn.Column(self.cards, self.plots, sizing_mode="stretch_width")
