"""Keep the served app's log to what needs attention: closed-socket writes are not errors.

When a browser leaves while the server is writing a frame to it, Panel's pending write futures
of that session end with tornado's ``WebSocketClosedError`` and are cancelled with the session
without being awaited, so asyncio prints "Task exception was never retrieved" with two
tracebacks (about 1.5 per closed session with a 10 Hz refresh). Nothing is lost: the page is
gone. :func:`quiet_closed_sockets` logs them as one INFO line instead and leaves every other
unhandled exception to asyncio's default handler.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tornado.iostream import StreamClosedError
from tornado.websocket import WebSocketClosedError

__all__ = ["quiet_closed_sockets", "is_closed_socket"]

log = logging.getLogger(__name__)


def is_closed_socket(context: dict[str, Any]) -> bool:
    """Whether an asyncio exception context is a write to a websocket that was closed."""
    return isinstance(context.get("exception"), WebSocketClosedError | StreamClosedError)


def _handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if is_closed_socket(context):
        log.info("a browser left while a frame was being sent to it (ignored)")
        return
    loop.default_exception_handler(context)


def quiet_closed_sockets(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Install the filter on ``loop`` (default: the running/current one); idempotent."""
    if loop is None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = asyncio.get_event_loop_policy().get_event_loop()
    if loop.get_exception_handler() is not _handler:
        if loop.get_exception_handler() is not None:
            return  # someone else's handler: leave it alone
        loop.set_exception_handler(_handler)
