"""Recording the slice: frames taken from the snapshots at a chosen interval, saved as a GIF
or an MP4.

A :class:`SliceRecorder` keeps a copy of the slice plane (as shown: SI units when the view has
them) every ``interval_s`` seconds of wall time, at most ``max_frames`` of them (the oldest are
dropped), and :meth:`SliceRecorder.gif` and :meth:`SliceRecorder.mp4` render them with
matplotlib (its Pillow writer; its FFmpeg writer with the ffmpeg binary of the imageio-ffmpeg
wheel, so no system ffmpeg is needed) with one colour range over the whole recording, so
colours mean the same in every frame.
"""

from __future__ import annotations

import tempfile
import time
from collections import deque
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.animation import AbstractMovieWriter, FFMpegWriter, PillowWriter
from matplotlib.figure import Figure

__all__ = ["SliceRecorder", "MAX_FRAMES"]

#: Frames kept at most (a 256^2 float64 plane is 0.5 MB: 300 frames stay below 160 MB).
MAX_FRAMES = 300


class SliceRecorder:
    """Frames of the slice at ``interval_s`` seconds apart (``clock``: wall time)."""

    def __init__(self, interval_s: float = 1.0, max_frames: int = MAX_FRAMES,
                 clock=time.monotonic) -> None:
        if not interval_s > 0:
            raise ValueError(f"The recording interval must be positive, got {interval_s!r} s.")
        self.interval_s, self.clock = float(interval_s), clock
        self.frames: deque[tuple[np.ndarray, str, str]] = deque(maxlen=max_frames)
        self._last = -np.inf

    def offer(self, plane: np.ndarray, title: str, label: str) -> bool:
        """Keep ``plane`` (with its title and colour-bar label) if the interval has passed;
        True if kept. A plane of another shape (another cut) starts a new recording."""
        now = self.clock()
        if now - self._last < self.interval_s:
            return False
        self._last = now
        if self.frames and self.frames[-1][0].shape != np.shape(plane):
            self.frames.clear()  # another cut: a recording holds frames of one shape
        self.frames.append((np.array(plane, dtype=np.float32), title, label))
        return True

    def clear(self) -> None:
        """Forget every frame."""
        self.frames.clear()
        self._last = -np.inf

    def gif(self, fps: float = 5.0, dpi: int = 80) -> bytes:
        """The frames as an animated GIF (solids grey); ValueError without frames."""
        return self._movie(PillowWriter(fps=fps), "gif", dpi)

    def mp4(self, fps: float = 5.0, dpi: int = 80) -> bytes:
        """The frames as an H.264 MP4 (solids grey); ValueError without frames."""
        import imageio_ffmpeg

        # The wheel's own ffmpeg: matplotlib looks for one on PATH otherwise.
        with matplotlib.rc_context({"animation.ffmpeg_path": imageio_ffmpeg.get_ffmpeg_exe()}):
            # yuv420p: the pixel format every browser and player decodes.
            return self._movie(FFMpegWriter(fps=fps, codec="h264",
                                            extra_args=["-pix_fmt", "yuv420p"]), "mp4", dpi)

    def _movie(self, writer: AbstractMovieWriter, suffix: str, dpi: int) -> bytes:
        """Every frame drawn with one colour range and written by ``writer``; the file's bytes."""
        if not self.frames:
            raise ValueError("Nothing recorded yet: tick 'record slice', let the run go on, "
                             "then download the recording.")
        planes = [p for p, _, _ in self.frames]
        finite = np.concatenate([p[np.isfinite(p)] for p in planes])
        low, high = (np.percentile(finite, [1, 99]) if finite.size else (0.0, 1.0))
        high = high if high > low else low + 1e-30
        figure = Figure(figsize=(5.0, 4.2), dpi=dpi, layout="constrained")
        ax = figure.add_subplot()
        cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#4a4a4a")
        image = ax.imshow(np.ma.masked_invalid(planes[0].T), origin="lower", cmap=cmap,
                          vmin=low, vmax=high, interpolation="nearest")
        figure.colorbar(image, ax=ax, label=self.frames[0][2])
        # The writers write to a path: a private temporary folder, never a user's name.
        with tempfile.TemporaryDirectory(prefix="porous-lbm-movie-") as folder:
            path = Path(folder) / f"slice.{suffix}"
            with writer.saving(figure, str(path), dpi):
                for plane, title, _ in self.frames:
                    image.set_data(np.ma.masked_invalid(plane.T))
                    ax.set_title(title, fontsize=9)
                    writer.grab_frame()
            return path.read_bytes()

    def __len__(self) -> int:
        return len(self.frames)
