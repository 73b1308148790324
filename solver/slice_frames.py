"""Pictures of a slice: the one rendering the app's PNG export, its recording and the command
line's headless frames share (matplotlib, no display needed).

A case file's ``frames`` section asks a headless run for a PNG of one cut every ``every``
steps, and optionally a picture of the 3D view (:mod:`solver.scene_frames`, PyVista off
screen) with streamlines and an isosurface, and a movie of each at the end::

    frames: {field: umag, axis: z, index: auto, every: 500}
    frames: {field: umag, every: 200, views: [slice, 3d], streamlines: 60,
             isosurface: qcrit, movie: gif, fps: 5, range: [0, 0.2]}

``index: auto`` takes the layer with the most fluid (:func:`fullest_layer`: the middle of a
thin vessel's box often holds none). Frames are in SI when the case gives the units, else in
lattice units, and are written as ``frames/<field>_<axis><index>_<step>.png`` (the slice) and
``frames/scene_<field>_<axis><index>_<step>.png`` (the 3D view, the same cut) in the output
folder; ``movie`` (gif or mp4) writes each view's frames as one movie beside them at the end of
the run. ``range`` fixes the colour range (SI, or lattice units without units) so colours mean
the same in every frame; without it each frame takes its own.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from .coarse_flow import COARSE_FIELDS
from .flow_fields import FIELDS

__all__ = ["slice_figure", "save_slice_png", "fullest_layer", "FrameSettings", "frame_settings",
           "plane_axes", "AXES", "FRAME_VIEWS", "FRAME_MOVIES"]

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
                   title: str = "", dpi: int = 100,
                   clim: tuple[float, float] | None = None) -> Path:
    """Write :func:`slice_figure` of ``plane`` as a PNG at ``path`` (``clim``: a fixed colour
    range, None: the plane's own); the path."""
    path = Path(path)
    low, high = clim if clim is not None else (None, None)
    slice_figure(plane, axes, label, title, dpi, low, high).savefig(path, format="png")
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


#: The views a case's frames may show.
FRAME_VIEWS = ("slice", "3d")
#: Movie formats of a case's frames.
FRAME_MOVIES = ("gif", "mp4")


@dataclass(frozen=True)
class FrameSettings:
    """One cut written as a PNG every ``every`` steps: ``field`` of FIELDS, normal ``axis``
    (0, 1, 2), layer ``index`` (None: the fullest layer); ``views``: the slice and/or the 3D
    view (the same cut, ``streamlines`` seeds on it, 0: none, and an ``isosurface`` of a field
    of COARSE_FIELDS at its automatic level, None: none); ``movie``: gif or mp4 of each view's
    frames at ``fps`` (None: PNGs only); ``clim``: a fixed colour range (None: each frame's)."""

    field: str = "umag"
    axis: int = 2
    index: int | None = None
    every: int = 500
    views: tuple[str, ...] = ("slice",)
    movie: str | None = None
    fps: float = 5.0
    streamlines: int = 60
    isosurface: str | None = None
    clim: tuple[float, float] | None = None

    def layer(self, solid: np.ndarray) -> int:
        """The layer index on ``solid``; ValueError if it lies outside."""
        if solid.ndim == 2:
            if "3d" in self.views:
                raise ValueError("frames: views 3d needs a 3D geometry; this one is 2D "
                                 "(use views: [slice]).")
            return 0
        index = fullest_layer(solid, self.axis) if self.index is None else self.index
        if not 0 <= index < solid.shape[self.axis]:
            raise ValueError(f"frames: index {index} is outside the {solid.shape[self.axis]} "
                             f"layers along {AXES[self.axis]}; use 0..{solid.shape[self.axis] - 1}"
                             " or auto.")
        return index


FRAME_KEYS = ("field", "axis", "index", "every", "views", "movie", "fps", "streamlines",
              "isosurface", "range")


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
    every = _whole(spec.get("every", 500), 1, f"{source}: frames.every", "steps")
    return FrameSettings(field, AXES.index(axis), index, every, _views(spec, source),
                         _choice(spec.get("movie"), FRAME_MOVIES, f"{source}: frames.movie"),
                         _fps(spec.get("fps", 5.0), source),
                         _whole(spec.get("streamlines", 60), 0, f"{source}: frames.streamlines",
                                "seeds"),
                         _choice(spec.get("isosurface"), COARSE_FIELDS,
                                 f"{source}: frames.isosurface"),
                         _range(spec.get("range"), source))


def _whole(value: Any, least: int, what: str, unit: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{what} must be a whole number of {unit} ({least} or more), "
                         f"got {value!r}.")
    return value


def _views(spec: dict, source: str) -> tuple[str, ...]:
    views = spec.get("views", ["slice"])
    views = [views] if isinstance(views, str) else views
    if not isinstance(views, list | tuple) or not views or any(
            str(v).lower() not in FRAME_VIEWS for v in views):
        raise ValueError(f"{source}: frames.views must list one or both of {list(FRAME_VIEWS)},"
                         f" got {spec.get('views')!r}.")
    return tuple(v for v in FRAME_VIEWS if v in {str(w).lower() for w in views})


def _choice(value: Any, choices: tuple[str, ...], what: str) -> str | None:
    if value is None or str(value).lower() == "none":
        return None
    if str(value) not in choices:
        raise ValueError(f"{what} must be one of {list(choices)} or none, got {value!r}.")
    return str(value)


def _fps(value: Any, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 60:
        raise ValueError(f"{source}: frames.fps must be a number of frames per second in "
                         f"(0, 60], got {value!r}.")
    return float(value)


def _range(value: Any, source: str) -> tuple[float, float] | None:
    if value is None or value == "auto":
        return None
    ok = (isinstance(value, list | tuple) and len(value) == 2
          and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
          and value[0] < value[1])
    if not ok:
        raise ValueError(f"{source}: frames.range must be [low, high] with low < high (the "
                         f"field's units), or auto; got {value!r}.")
    return (float(value[0]), float(value[1]))
