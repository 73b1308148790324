"""Callbacks handed to Panel's per-document tables without keeping the session alive.

Panel keeps some per-session values in process-wide ``WeakKeyDictionary`` tables keyed by the
session's Bokeh ``Document``: ``pn.config.exception_handler`` set in a session goes to
``config._session_config[doc]`` and ``pn.state.onload`` callbacks to ``state._onload[doc]``
(popped only when a browser loads the page, so never for a plain HTTP request). Panel does not
clear either when it destroys the session. A weak-key entry dies with its key only if its value
does not lead back to the key; a bound method of the session's controller does (controller ->
watchers -> views -> Bokeh models -> document), so every closed session, its dashboard, its
Bokeh models and its ServerSession stayed in memory for the life of the server (issue 16 item
6: 50-75 MiB per cycle of 3 sessions). :func:`weak_callback` breaks that path.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["weak_callback"]


def weak_callback(method: Callable[..., Any]) -> Callable[..., Any]:
    """A function calling the bound ``method`` while its object lives (then a no-op, None).

    The object must be kept alive by its session (the dashboard is, through the session's
    destroy callback); the returned function holds it only weakly.
    """
    ref = weakref.WeakMethod(method)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = ref()
        return None if bound is None else bound(*args, **kwargs)

    call.__name__ = call.__qualname__ = f"weak_{getattr(method, '__name__', 'callback')}"
    return call
