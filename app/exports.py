"""Files the dashboard offers for download: VTI of the fields, PNG of the slice, CSV of counters.

Each function turns host arrays (lattice units, NaN in solids) into the bytes of one file; the
app fetches the arrays from the runner thread and never writes where a user could choose.
"""

from __future__ import annotations

import csv
import io
import tempfile
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from solver.flow_fields import FIELDS
from solver.io import write_vti
from solver.slice_frames import slice_figure as draw_slice

__all__ = ["fields_vti", "slice_png", "slice_figure", "history_csv", "QUANTITY_LABELS"]

QUANTITY_LABELS = {name: spec.lattice_label() for name, spec in FIELDS.items()}


def fields_vti(
    fields: dict[str, np.ndarray], solid: np.ndarray, voxel_size: float | None = None
) -> bytes:
    """VTK image (.vti) as the command line writes it (:func:`solver.io.write_vti`).

    One cell per voxel with ``rho``, ``u`` (3 components, lattice units, NaN in solids) and
    ``solid`` (0/1); spacing is ``voxel_size`` metres when known, else 1.
    """
    extra = {"solid": np.asarray(solid, dtype=np.uint8)}
    # write_vti writes to a path: use a private temporary folder, never a user-given name.
    with tempfile.TemporaryDirectory(prefix="porous-lbm-export-") as folder:
        path = write_vti(Path(folder) / "fields.vti", fields, voxel_size, extra=extra)
        return path.read_bytes()


def slice_png(
    plane: np.ndarray, axes: tuple[str, str], quantity: str, title: str = "", dpi: int = 120
) -> bytes:
    """PNG of a cut (n_a, n_b) with a colour bar; solids (NaN) grey."""
    figure = slice_figure(plane, axes, quantity, title, dpi)
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()


def slice_figure(
    plane: np.ndarray, axes: tuple[str, str], quantity: str, title: str = "", dpi: int = 120
) -> Figure:
    """The matplotlib figure of :func:`slice_png` (:func:`solver.slice_frames.slice_figure`,
    the rendering the command line's frames use too)."""
    return draw_slice(plane, axes, QUANTITY_LABELS.get(quantity, quantity), title, dpi)


def history_csv(history: dict[str, np.ndarray], columns: tuple[str, ...]) -> str:
    """CSV text of the time series ``history`` (one row per sample) in ``columns`` order."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    n = len(history.get(columns[0], ()))
    for i in range(n):
        writer.writerow([_number(history[c][i]) for c in columns])
    return out.getvalue()


def _number(value: float) -> str:
    value = float(value)
    if not np.isfinite(value):
        return ""
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
