"""Deployment settings of the dashboard, read from the environment once per process.

``POROUS_LBM_MAX_UPLOAD_MB`` (default 200) caps the size of an uploaded geometry file. The
browser sends an upload in chunks of 10 MB (Panel's ``FileDropper``, see ``app/uploads.py``),
each one websocket message below Bokeh's default 20 MB limit, so ``panel serve app`` needs no
websocket option for any cap.

``POROUS_LBM_REFRESH_MS`` (default 100: 10 frames per second; the runner publishes a little
faster, so every refresh finds a new frame) is the period of the slice and counter refresh and
``POROUS_LBM_SCENE_REFRESH_S`` (default 10) that of the 3D view; ``POROUS_LBM_3D=0`` turns the
3D view off (it renders with WebGL in the browser and costs the server a scene serialisation
per refresh); ``POROUS_LBM_AUTOSTART=0`` opens sessions paused instead of running.

``POROUS_LBM_IDLE_TIMEOUT_S`` (default 60): a served session's simulation stops by itself when
its page has not read a snapshot for that long. Closed sessions normally stop theirs at once;
this frees the memory of a session whose server-side document hung.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

__all__ = ["Settings", "settings"]

log = logging.getLogger(__name__)


def _env_number(name: str, default: float, low: float, high: float) -> float:
    """A number from the environment, or ``default`` (with a warning) if unset or invalid."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number; using %s.", name, raw, default)
        return default
    if not low <= value <= high:
        log.warning("%s=%s is outside [%s, %s]; using %s.", name, value, low, high, default)
        return default
    return value


def _env_flag(name: str, default: bool) -> bool:
    """A yes/no switch from the environment (0/off/false/no turn it off)."""
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return raw.strip().lower() not in ("0", "off", "false", "no")


@dataclass(frozen=True)
class Settings:
    """Upload cap (MB) and refresh periods of one server process."""

    max_upload_mb: float = 200.0
    refresh_ms: int = 100
    scene_refresh_s: float = 10.0
    scene_3d: bool = True
    autostart: bool = True
    idle_timeout_s: float = 60.0

    @classmethod
    def from_environment(cls) -> Settings:
        """Settings from ``POROUS_LBM_*`` environment variables."""
        return cls(
            max_upload_mb=_env_number("POROUS_LBM_MAX_UPLOAD_MB", 200.0, 0.001, 1e5),
            refresh_ms=int(_env_number("POROUS_LBM_REFRESH_MS", 100, 50, 5000)),
            scene_refresh_s=_env_number("POROUS_LBM_SCENE_REFRESH_S", 10.0, 1.0, 600),
            scene_3d=_env_flag("POROUS_LBM_3D", True),
            autostart=_env_flag("POROUS_LBM_AUTOSTART", True),
            idle_timeout_s=_env_number("POROUS_LBM_IDLE_TIMEOUT_S", 60.0, 5.0, 86400.0),
        )

    @property
    def max_upload_bytes(self) -> int:
        """Upload cap in bytes."""
        return int(self.max_upload_mb * 1e6)


settings = Settings.from_environment()
