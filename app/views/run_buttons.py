"""Start/Pause/Step/Reset buttons whose commands apply in click order, the last one winning.

Under load the browser's click events reach the server out of order (seen: blocks of clicks
delayed behind later ones in a burst of 200), so a run could end in another state than the
last click's (issue 16 item 7). Each click therefore numbers itself in the browser (a counter
of the page) and appends ``"<number>:<command>"`` to a hidden text field holding the latest
:data:`WINDOW` clicks; the server applies, in number order, every click above the last one it
applied. Value changes that Panel merges while it is busy lose nothing (the field carries the
recent history), and a stale value arriving late applies nothing: the commands apply in click
order and the state after a burst is the last click's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import panel as pn

__all__ = ["RunButtons"]

log = logging.getLogger(__name__)

#: Clicks the hidden field remembers (more than the server can fall behind by in practice).
WINDOW = 256
#: Numbers clicks per page; shared by every RunButtons of the page (one counter, one order).
_NUMBER_CLICK = f"""
window.__porousLbmClicks = (window.__porousLbmClicks || 0) + 1;
const recent = channel.value ? channel.value.split(';') : [];
recent.push(window.__porousLbmClicks + ':' + command);
channel.value = recent.slice(-{WINDOW}).join(';');
"""


class RunButtons:
    """The run command buttons and the ordered channel that carries their clicks."""

    def __init__(self, actions: dict[str, tuple[str, Callable[[], None]]]) -> None:
        """``actions``: label -> (button type, action)."""
        self.actions = {label: action for label, (_, action) in actions.items()}
        self.channel = pn.widgets.TextInput(value="", visible=False, name="run-commands")
        self.last = 0
        self.buttons = []
        for label, (kind, _) in actions.items():
            button = pn.widgets.Button(name=label, button_type=kind, sizing_mode="stretch_width",
                                       button_style="solid" if kind in ("success", "warning")
                                       else "outline")
            button.js_on_click(args={"channel": self.channel, "command": label},
                               code=_NUMBER_CLICK)
            self.buttons.append(button)
        self.channel.param.watch(self._received, "value")

    def send(self, *clicks: tuple[int, str]) -> None:
        """Deliver the recent ``(number, label)`` clicks as the browser does (tests)."""
        self.channel.value = ";".join(f"{n}:{label}" for n, label in clicks)

    def _received(self, event) -> None:
        clicks = []
        for entry in str(event.new).split(";"):
            number, _, label = entry.partition(":")
            if number.isdigit() and label in self.actions:
                clicks.append((int(number), label))
        for number, label in sorted(clicks):
            if number > self.last:
                self.last = number
                self.actions[label]()

    def layout(self) -> pn.viewable.Viewable:
        """The buttons in a 2x2 grid, with the hidden channel."""
        return pn.Column(pn.GridBox(*self.buttons, ncols=2, sizing_mode="stretch_width"),
                         self.channel, sizing_mode="stretch_width")
