"""Start/Pause/Step/Reset buttons whose commands apply in click order, the last one winning.

Panel's buttons lose their click order in the browser: each button's JavaScript callback is
compiled asynchronously on its first use and Panel's click events may be handled at once or on
the next tick, so after a burst of Start/Pause/Step/Reset clicks the run ended in another state
than the last click's (issue 16 item 7). Here the four buttons are plain HTML buttons of one
component whose click handler runs synchronously: it numbers the click (one above the last
number in the field) and appends ``"<number>:<command>"`` to the synced ``commands`` field,
which keeps the latest :data:`WINDOW` clicks. The server applies, in number order, every click
above the last one it applied: clicks merged by a busy server are not lost and a stale value
arriving late applies nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import param
from panel.custom import JSComponent

__all__ = ["RunButtons", "WINDOW"]

#: Clicks the synced field remembers (more than the server can fall behind by in practice).
WINDOW = 256

CSS = """
.run-grid { display: grid; grid-template-columns: 1fr 1fr; gap: 6px; }
.run-button { font: inherit; font-size: 14px; padding: 6px 8px; border-radius: 6px;
              cursor: pointer; border: 1px solid; background: #fff; }
.run-button.success { background: #198754; border-color: #198754; color: #fff; }
.run-button.warning { background: #ffc107; border-color: #ffc107; color: #000; }
.run-button.primary { color: #0d6efd; border-color: #0d6efd; }
.run-button.danger { color: #dc3545; border-color: #dc3545; }
.run-button:active { filter: brightness(0.85); }
"""


class RunButtons(JSComponent):
    """The run command buttons; ``actions`` maps each label to (button kind, action)."""

    buttons = param.List(default=[], doc="[label, kind] of each button, in order.")
    commands = param.String(default="", doc="The latest clicks, 'number:label;...'.")

    _esm = f"""
    export function render({{ model, el }}) {{
      const grid = document.createElement('div');
      grid.className = 'run-grid';
      // The clicks live here, not in model.commands: a value synced back late from the
      // server would reuse numbers the server already applied, and those clicks were lost.
      const recent = model.commands ? model.commands.split(';') : [];
      let last = recent.reduce((top, entry) => Math.max(top, parseInt(entry) || 0), 0);
      for (const [label, kind] of model.buttons) {{
        const button = document.createElement('button');
        button.className = 'run-button ' + kind;
        button.textContent = label;
        button.addEventListener('click', () => {{
          // Synchronous: the number is the click's place in the order the user clicked.
          last += 1;
          recent.push(last + ':' + label);
          recent.splice(0, Math.max(recent.length - {WINDOW}, 0));
          model.commands = recent.join(';');
        }});
        grid.appendChild(button);
      }}
      el.appendChild(grid);
    }}
    """
    _stylesheets = [CSS]

    def __init__(self, actions: dict[str, tuple[str, Callable[[], None]]],
                 **params: Any) -> None:
        """``actions``: label -> (kind: success, warning, primary or danger; action)."""
        super().__init__(buttons=[[label, kind] for label, (kind, _) in actions.items()],
                         **params)
        self._actions = {label: action for label, (_, action) in actions.items()}
        self.last = 0

    def send(self, *clicks: tuple[int, str]) -> None:
        """Deliver the recent ``(number, label)`` clicks as the browser does (tests)."""
        self.commands = ";".join(f"{n}:{label}" for n, label in clicks)

    @param.depends("commands", watch=True)
    def _received(self) -> None:
        clicks = []
        for entry in self.commands.split(";"):
            number, _, label = entry.partition(":")
            if number.isdigit() and label in self._actions:
                clicks.append((int(number), label))
        for number, label in sorted(clicks):
            if number > self.last:
                self.last = number
                self._actions[label]()
