"""Recording the slice and the 3D view: frames taken at a chosen interval, saved as a GIF or
an MP4.

A :class:`SliceRecorder` keeps a copy of the slice plane (as shown: SI units when the view has
them) every ``interval_s`` seconds of wall time, at most ``max_frames`` of them (the oldest are
dropped), and :meth:`SliceRecorder.gif` and :meth:`SliceRecorder.mp4` render them with
matplotlib (:mod:`solver.movie`, the writers of the command line's frames too) with one colour
range over the whole recording, so colours mean the same in every frame. A
:class:`SceneRecorder` keeps pictures of the 3D view (RGB, rendered off screen by PyVista, so
it works headless) the same way and writes them with the same writers.
"""

from __future__ import annotations

import tempfile
import time
from collections import deque
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.figure import Figure

from solver.movie import write_frames, write_pictures

__all__ = ["SliceRecorder", "SceneRecorder", "MAX_FRAMES", "MAX_SCENE_FRAMES"]

#: Frames kept at most (a 256^2 float64 plane is 0.5 MB: 300 frames stay below 160 MB).
MAX_FRAMES = 300
#: Pictures of the 3D view kept at most (640 x 480 RGB is 0.9 MB: 150 stay below 140 MB).
MAX_SCENE_FRAMES = 150


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
        return self._movie("gif", fps, dpi)

    def mp4(self, fps: float = 5.0, dpi: int = 80) -> bytes:
        """The frames as an H.264 MP4 (solids grey); ValueError without frames."""
        return self._movie("mp4", fps, dpi)

    def _movie(self, suffix: str, fps: float, dpi: int) -> bytes:
        """Every frame drawn with one colour range into a ``suffix`` movie; the file's bytes."""
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

        def draw(frame: tuple[np.ndarray, str, str]) -> None:
            image.set_data(np.ma.masked_invalid(frame[0].T))
            ax.set_title(frame[1], fontsize=9)

        return _movie_bytes(suffix, lambda path: write_frames(path, figure, dpi, self.frames,
                                                              draw, fps))

    def __len__(self) -> int:
        return len(self.frames)


class SceneRecorder:
    """Pictures of the 3D view (RGB, uint8) at ``interval_s`` seconds apart (``clock``: wall
    time), each with a title; rendered only when one is due (rendering costs the server)."""

    def __init__(self, interval_s: float = 2.0, max_frames: int = MAX_SCENE_FRAMES,
                 clock=time.monotonic) -> None:
        if not interval_s > 0:
            raise ValueError(f"The recording interval must be positive, got {interval_s!r} s.")
        self.interval_s, self.clock = float(interval_s), clock
        self.frames: deque[tuple[np.ndarray, str]] = deque(maxlen=max_frames)
        self._last = -np.inf

    def offer(self, take, title: str) -> bool:
        """Keep the picture ``take()`` returns (H, W, 3 or 4, uint8) if the interval has
        passed (``take`` is not called otherwise); True if kept. A picture of another size
        starts a new recording."""
        now = self.clock()
        if now - self._last < self.interval_s:
            return False
        self._last = now
        picture = np.ascontiguousarray(np.asarray(take(), dtype=np.uint8)[..., :3])
        if self.frames and self.frames[-1][0].shape != picture.shape:
            self.frames.clear()
        self.frames.append((picture, title))
        return True

    def clear(self) -> None:
        """Forget every picture."""
        self.frames.clear()
        self._last = -np.inf

    def gif(self, fps: float = 2.0) -> bytes:
        """The pictures as an animated GIF; ValueError without pictures."""
        return self._movie("gif", fps)

    def mp4(self, fps: float = 2.0) -> bytes:
        """The pictures as an H.264 MP4; ValueError without pictures."""
        return self._movie("mp4", fps)

    def _movie(self, suffix: str, fps: float) -> bytes:
        """Every picture at its own size (one pixel each), its title in a corner."""
        if not self.frames:
            raise ValueError("Nothing recorded yet: tick 'record 3D view', let the run go on, "
                             "then download the recording.")
        return _movie_bytes(suffix, lambda path: write_pictures(path, list(self.frames), fps))

    def __len__(self) -> int:
        return len(self.frames)


def _movie_bytes(suffix: str, write) -> bytes:
    """The bytes of the movie ``write(path)`` writes to a ``suffix`` file in a private
    temporary folder (never a user's name)."""
    with tempfile.TemporaryDirectory(prefix="porous-lbm-movie-") as folder:
        path = Path(folder) / f"recording.{suffix}"
        write(path)
        return path.read_bytes()
