"""Movies of pictures: an animated GIF or an H.264 MP4, written with matplotlib's writers.

The one movie writer of the app's recordings (``app/recording.py``) and the command line's
frames (``frames: {movie: gif}`` of a case file): Pillow for GIFs, FFmpeg for MP4s with the
ffmpeg binary of the imageio-ffmpeg wheel (no system ffmpeg needed), in ``yuv420p``, the pixel
format every browser and player decodes. Headless: matplotlib's ``Figure`` needs no display.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.animation import AbstractMovieWriter, FFMpegWriter, PillowWriter
from matplotlib.figure import Figure

__all__ = ["MOVIE_FORMATS", "movie_writer", "write_frames", "write_pictures"]

#: File formats a movie can be written in.
MOVIE_FORMATS = ("gif", "mp4")


def movie_writer(suffix: str, fps: float) -> AbstractMovieWriter:
    """The writer of a ``suffix`` movie (gif or mp4) at ``fps`` frames per second."""
    if suffix == "gif":
        return PillowWriter(fps=fps)
    if suffix == "mp4":
        return FFMpegWriter(fps=fps, codec="h264", extra_args=["-pix_fmt", "yuv420p"])
    raise ValueError(f"Unknown movie format {suffix!r}; choose one of {MOVIE_FORMATS}.")


def write_frames(path: str | Path, figure: Figure, dpi: int, frames: Iterable,
                 draw: Callable, fps: float) -> Path:
    """``draw`` each of ``frames`` on ``figure`` and grab it into the movie at ``path`` (its
    suffix, gif or mp4, picks the writer); the path."""
    path = Path(path)
    writer = movie_writer(path.suffix.lstrip(".").lower(), fps)
    context: dict = {}
    if isinstance(writer, FFMpegWriter):
        import imageio_ffmpeg

        # The wheel's own ffmpeg: matplotlib looks for one on PATH otherwise.
        context["animation.ffmpeg_path"] = imageio_ffmpeg.get_ffmpeg_exe()
    with matplotlib.rc_context(context), writer.saving(figure, str(path), dpi):
        for frame in frames:
            draw(frame)
            writer.grab_frame()
    return path


def write_pictures(path: str | Path, pictures: Sequence[tuple[np.ndarray, str]],
                   fps: float = 2.0) -> Path:
    """A movie at ``path`` of RGB(A) ``pictures`` (H, W, 3 or 4, uint8, all one size), each at
    its own size (one pixel each) with its title in a corner; ValueError without pictures."""
    if not pictures:
        raise ValueError("No pictures to write a movie of.")
    height, width = pictures[0][0].shape[:2]
    dpi = 100
    # Even sizes: H.264 in yuv420p halves both.
    figure = Figure(figsize=(2 * (width // 2) / dpi, 2 * (height // 2) / dpi), dpi=dpi)
    ax = figure.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_axis_off()
    image = ax.imshow(pictures[0][0], interpolation="nearest")
    text = ax.text(0.01, 0.99, "", transform=ax.transAxes, va="top", fontsize=9,
                   color="#1f2a37")

    def draw(frame: tuple[np.ndarray, str]) -> None:
        image.set_data(frame[0])
        text.set_text(frame[1])

    return write_frames(path, figure, dpi, pictures, draw, fps)
