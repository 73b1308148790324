"""Files the dashboard offers for download: VTI of the fields, PNG of the slice, CSV of counters.

Each function turns host arrays (lattice units, NaN in solids) into the bytes of one file; the
app fetches the arrays from the runner thread and never writes where a user could choose.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile

import numpy as np
import pyvista as pv
from matplotlib.figure import Figure

__all__ = ["fields_vti", "slice_png", "history_csv", "QUANTITY_LABELS"]

QUANTITY_LABELS = {
    "umag": "|u| (lattice units)", "ux": "u_x (lattice units)", "uy": "u_y (lattice units)",
    "uz": "u_z (lattice units)", "rho": "density (lattice units)",
}


def fields_vti(
    fields: dict[str, np.ndarray], solid: np.ndarray, voxel_size: float | None = None
) -> bytes:
    """VTK XML image (.vti) with point arrays rho, velocity (3 components) and solid (0/1).

    Point (i, j, k) is voxel (x, y, z); spacing is ``voxel_size`` metres when known, else 1.
    Velocities and density stay in lattice units; solids hold 0 instead of NaN.
    """
    rho, u = fields["rho"], fields["u"]
    shape = rho.shape + (1,) * (3 - rho.ndim)
    spacing = (voxel_size or 1.0,) * 3
    image = pv.ImageData(dimensions=shape, spacing=spacing)
    velocity = np.zeros((3,) + rho.shape)
    velocity[: u.shape[0]] = np.nan_to_num(u)
    image.point_data["rho"] = np.nan_to_num(rho).ravel(order="F")
    image.point_data["velocity"] = velocity.reshape(3, -1, order="F").T
    image.point_data["solid"] = np.asarray(solid, dtype=np.uint8).ravel(order="F")
    # pyvista writes to a path only: use a private temporary file, never a user-given name.
    handle, path = tempfile.mkstemp(suffix=".vti")
    os.close(handle)
    try:
        image.save(path)
        with open(path, "rb") as stream:
            return stream.read()
    finally:
        os.unlink(path)


def slice_png(
    plane: np.ndarray, axes: tuple[str, str], quantity: str, title: str = "", dpi: int = 120
) -> bytes:
    """PNG of a cut (n_a, n_b) with a colour bar; solids (NaN) grey."""
    figure = Figure(figsize=(6.0, 5.0), dpi=dpi, layout="constrained")
    ax = figure.add_subplot()
    data = np.ma.masked_invalid(np.asarray(plane, dtype=float).T)
    image = ax.imshow(data, origin="lower", cmap="viridis", interpolation="nearest")
    image.cmap.set_bad("#4a4a4a")
    figure.colorbar(image, ax=ax, label=QUANTITY_LABELS.get(quantity, quantity))
    ax.set_xlabel(f"{axes[0]} (nodes)")
    ax.set_ylabel(f"{axes[1]} (nodes)")
    ax.set_title(title)
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()


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
