"""Pictures of a slice: the one rendering the app's PNG export, its recording and the command
line's headless frames share (matplotlib, no display needed).

A case file's ``frames`` section asks a headless run for a PNG of one cut every ``every``
steps::

    frames: {field: umag, axis: z, index: auto, every: 500}

``index: auto`` takes the layer with the most fluid (:func:`fullest_layer`: the middle of a
thin vessel's box often holds none). Frames are in SI when the case gives the units, else in
lattice units, and are written as ``frames/<field>_<axis><index>_<step>.png`` in the output
folder.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .flow_fields import FIELDS

__all__ = ["slice_figure", "save_slice_png", "fullest_layer", "FrameSettings", "frame_settings",
           "plane_axes", "AXES"]

AXES = "xyz"
#: Colour of solid nodes (NaN) in every slice picture.
SOLID_GREY = "#4a4a4a"


def slice_figure(plane: np.ndarray, axes: tuple[str, str], label: str, title: str = "",
                 dpi: int = 120, vmin: float | None = None,
                 vmax: float | None = None) -> Figure:
    """A figure of the cut ``plane`` (n_a, n_b) with a colour bar named ``label``; solids
    (NaN) grey; ``vmin``/``vmax``: a fixed colour range (None: the plane's own)."""
    figure = Figure(figsize=(6.0, 5.0), dpi=dpi, layout="constrained")
    ax = figure.add_subplot()
    data = np.ma.masked_invalid(np.asarray(plane, dtype=float).T)
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad=SOLID_GREY)
    image = ax.imshow(data, origin="lower", cmap=cmap, interpolation="nearest", vmin=vmin,
                      vmax=vmax)
    figure.colorbar(image, ax=ax, label=label)
    ax.set_xlabel(f"{axes[0]} (nodes)")
    ax.set_ylabel(f"{axes[1]} (nodes)")
    if title:
        # Over the figure, not the axes: a narrow cut's axes are narrower than the title.
        figure.suptitle(textwrap.fill(title, 60))
    return figure


def save_slice_png(path: str | Path, plane: np.ndarray, axes: tuple[str, str], label: str,
                   title: str = "", dpi: int = 100) -> Path:
    """Write :func:`slice_figure` of ``plane`` as a PNG at ``path``; the path."""
    path = Path(path)
    slice_figure(plane, axes, label, title, dpi).savefig(path, format="png")
    return path


def fullest_layer(solid: np.ndarray, axis: int) -> int:
    """The layer normal to ``axis`` with the most fluid nodes (the one nearest the middle among
    equals): a thin vessel's middle layer may hold no fluid at all, a blank first slice."""
    fluid = (~np.asarray(solid, dtype=bool)).sum(axis=tuple(a for a in range(3) if a != axis))
    n = len(fluid)
    best = np.flatnonzero(fluid == fluid.max())
    return int(best[np.argmin(np.abs(best - (n - 1) / 2))])


def plane_axes(axis: int, ndim: int) -> tuple[str, str]:
    """The names of a cut's two in-plane axes (x, y order) normal to ``axis``; 2D: x, y."""
    if ndim == 2:
        return ("x", "y")
    a, b = (k for k in range(3) if k != axis)
    return (AXES[a], AXES[b])


@dataclass(frozen=True)
class FrameSettings:
    """One cut written as a PNG every ``every`` steps: ``field`` of FIELDS, normal ``axis``
    (0, 1, 2), layer ``index`` (None: the fullest layer)."""

    field: str = "umag"
    axis: int = 2
    index: int | None = None
    every: int = 500

    def layer(self, solid: np.ndarray) -> int:
        """The layer index on ``solid``; ValueError if it lies outside."""
        if solid.ndim == 2:
            return 0
        index = fullest_layer(solid, self.axis) if self.index is None else self.index
        if not 0 <= index < solid.shape[self.axis]:
            raise ValueError(f"frames: index {index} is outside the {solid.shape[self.axis]} "
                             f"layers along {AXES[self.axis]}; use 0..{solid.shape[self.axis] - 1}"
                             " or auto.")
        return index


FRAME_KEYS = ("field", "axis", "index", "every")


def frame_settings(spec: Any, source: str = "case") -> FrameSettings | None:
    """:class:`FrameSettings` from a case file's ``frames`` mapping (None: no frames);
    ValueError naming the key and the fix."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ValueError(f"{source}: `frames` must be a mapping, e.g. "
                         "frames: {field: umag, axis: z, index: auto, every: 500}.")
    unknown = sorted(str(k) for k in spec if k not in FRAME_KEYS)
    if unknown:
        raise ValueError(f"{source}: unknown key(s) {unknown} in frames; valid keys are "
                         f"{list(FRAME_KEYS)}.")
    field = str(spec.get("field", "umag"))
    if field not in FIELDS:
        raise ValueError(f"{source}: frames.field {field!r} is not a field; choose one of "
                         f"{list(FIELDS)}.")
    axis = str(spec.get("axis", "z")).lower()
    if axis not in AXES:
        raise ValueError(f"{source}: frames.axis must be x, y or z, got {spec.get('axis')!r}.")
    index = spec.get("index", "auto")
    if index == "auto" or index is None:
        index = None
    elif isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"{source}: frames.index must be a layer number (0 or more) or auto, "
                         f"got {index!r}.")
    every = spec.get("every", 500)
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ValueError(f"{source}: frames.every must be a whole number of steps (1 or more), "
                         f"got {every!r}.")
    return FrameSettings(field, AXES.index(axis), index, every)
