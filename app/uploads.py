"""Uploaded geometry files: the chunked upload widget, capped in bytes, and the kept file.

Panel's ``FileDropper`` sends a file in chunks (10 MB by default), each its own websocket message,
so files far above Bokeh's 20 MB message limit arrive without raising any server setting. The
browser refuses files over the cap before sending; :class:`BoundedFileDropper` also drops a
transfer on the server once it passes the cap, so a client that ignores the browser check
cannot fill the server's memory. The last good upload is kept in the session
(:class:`UploadedFile`, at most the cap) so that changed options re-apply without a second
upload.
"""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass

import panel as pn
import param

__all__ = ["BoundedFileDropper", "UploadedFile", "safe_text"]

log = logging.getLogger(__name__)


def safe_text(text: object) -> str:
    """``text`` from a user (a file name, a name stored in a file) escaped for HTML/Markdown."""
    # Markdown panes pass raw HTML through, so escape before it is ever rendered.
    return html.escape(str(text), quote=True)


@dataclass(frozen=True)
class UploadedFile:
    """Bytes of one upload and the name the browser gave it (used only for its extension)."""

    name: str
    data: bytes

    @property
    def megabytes(self) -> float:
        """Size in MB (10^6 bytes)."""
        return len(self.data) / 1e6


class BoundedFileDropper(pn.widgets.FileDropper):
    """A ``FileDropper`` whose server side drops any transfer above ``max_bytes``."""

    max_bytes = param.Integer(default=200_000_000, bounds=(1, None), precedence=-1,
                              doc="Largest file accepted, bytes.")
    refused = param.String(default="", precedence=-1,
                           doc="Message about the last transfer dropped for its size.")

    _rename = {**pn.widgets.FileDropper._rename, "max_bytes": None, "refused": None}

    def __init__(self, **params) -> None:
        params.setdefault("max_file_size", f"{params.get('max_bytes', 200_000_000) // 10**6}MB")
        super().__init__(**params)
        self._received: dict[str, int] = {}

    def _process_event(self, event) -> None:
        if event.event_name != "upload_event":
            return super()._process_event(event)
        data = event.data
        name = data["name"]
        if data["chunk"] == 1:
            self._received[name] = 0
        elif name not in self._received:  # the rest of a transfer already dropped
            return None
        self._received[name] += len(data["data"])
        if self._received[name] > self.max_bytes:
            # Drop what arrived so far and ignore the remaining chunks of this transfer.
            del self._received[name]
            self._file_buffer.pop(name, None)
            log.info("upload %r dropped above %d bytes", name, self.max_bytes)
            self.refused = ""  # a repeated message must still notify its watchers
            self.refused = (f"{name} is larger than the upload limit of "
                            f"{self.max_bytes / 1e6:.0f} MB; choose a smaller or cropped file.")
            return None
        if data["chunk"] == data["total_chunks"]:
            self._received.pop(name, None)
        return super()._process_event(event)
