"""Entry point of the served app: ``python -m panel serve app`` runs this file per session.

Each browser session gets its own :class:`~app.dashboard.Dashboard` (and so its own simulation
thread); when the session ends its runner is stopped and its memory freed. Errors raised by
widget callbacks are shown in the session's status area instead of as tracebacks.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import panel as pn

# ``panel serve`` runs this file as a script; make the repository importable from anywhere.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

from app.dashboard import Dashboard  # noqa: E402
from app.server_log import quiet_closed_sockets  # noqa: E402
from app.session_refs import weak_callback  # noqa: E402
from app.settings import settings  # noqa: E402


def _log_lifecycle() -> None:
    """Show the app's and the runners' INFO lines (session start/stop, live runner count)."""
    for name in ("app", "solver.runner"):
        logger = logging.getLogger(name)
        if not any(getattr(h, "_porous_lbm", False) for h in logger.handlers):
            handler = logging.StreamHandler()
            handler._porous_lbm = True
            handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
            logger.propagate = False  # panel serve's root handler would print it twice


_log_lifecycle()
quiet_closed_sockets()
pn.extension("vtk", "filedropper", sizing_mode="stretch_width", notifications=False)

dashboard = Dashboard(idle_timeout=settings.idle_timeout_s)
# Per session, in a table Panel never clears: held weakly or it keeps the closed session alive.
pn.config.exception_handler = weak_callback(dashboard.controller.report)
# Bind the dashboard now: bokeh clears this module's globals before destroy callbacks run.
pn.state.on_session_destroyed(lambda session_context, board=dashboard: board.close())
dashboard.template().servable()
