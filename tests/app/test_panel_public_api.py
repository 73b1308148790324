"""The app reaches Panel through its public API only: no ``pane._widgets``, no ``pn.state._x``.

A source scan of every module in ``app/``: an attribute chain rooted at ``pn``/``panel`` with a
private part, or a private name (attribute or ``getattr`` string) that Panel's own objects carry
(``_widgets`` of a ``Param`` pane, ``_process_event`` of a widget...), is refused unless listed
in :data:`ALLOWED` with the reason Panel offers no public way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import panel as pn
import param
import pytest

APP = Path(__file__).resolve().parents[2] / "app"

#: (module, private name) -> why no public API does it.
ALLOWED = {
    ("uploads.py", "_rename"): "a widget subclass declares its server-only parameters so "
                               "(Panel's documented extension point for custom widgets)",
    ("uploads.py", "_process_event"): "the server-side upload cap must drop chunks as they "
                                      "arrive; FileDropper has no public hook for them",
    ("uploads.py", "_file_buffer"): "the chunks of a dropped transfer are freed at once",
}


def _panel_objects() -> list:
    """Instances whose private attributes are Panel's internals."""
    class _P(param.Parameterized):
        x = param.Number(1.0)

    return [pn.state, pn.config, pn.Param(_P()), pn.widgets.Button(), pn.widgets.FloatInput(),
            pn.widgets.Select(), pn.widgets.FileDropper(), pn.pane.Markdown(), pn.pane.HTML(),
            pn.pane.HoloViews(), pn.Column(), pn.Row(), pn.Card(), pn.Tabs()]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _uses(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, name, how) of every private name used in ``tree``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            how = "pn" if _root(node) in ("pn", "panel") else (
                "self" if _root(node) in ("self", "cls") and isinstance(node.value, ast.Name)
                else "other")
            out.append((node.lineno, node.attr, how))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            out.append((node.lineno, node.args[1].value, "other"))
        elif isinstance(node, ast.ClassDef) and any(_root(b) in ("pn", "panel")
                                                    and "Viewer" not in ast.unparse(b)
                                                    for b in node.bases):
            # A subclass of a Panel widget, pane or layout: its own private names must not
            # be Panel's (overriding or reaching internals).
            for item in ast.walk(node):
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and _private(
                        item.name):
                    out.append((item.lineno, item.name, "subclass"))
                elif isinstance(item, ast.Assign):
                    out += [(item.lineno, t.id, "subclass") for t in item.targets
                            if isinstance(t, ast.Name) and _private(t.id)]
                elif (isinstance(item, ast.Attribute) and _private(item.attr)
                      and _root(item) == "self"):
                    out.append((item.lineno, item.attr, "subclass"))
    return out


def _panel_private_names() -> set[str]:
    names = {"_widgets"}
    for obj in _panel_objects():
        names |= {n for n in dir(obj) if _private(n)}
    return names


def test_no_module_in_app_uses_private_panel_attributes():
    internals = _panel_private_names()
    found = []
    for path in sorted(APP.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, name, how in _uses(tree):
            if (path.name, name) in ALLOWED:
                continue
            if how == "pn" or (how in ("other", "subclass") and name in internals):
                found.append(f"{path.relative_to(APP.parent)}:{line}: {name}")
    assert not found, ("Panel's private attributes used (build widgets with pn.Param / "
                       "Widget.from_param / pn.Param.widget_type, read them from public "
                       "attributes, or list the use in ALLOWED with why): " + ", ".join(found))


@pytest.mark.parametrize("source, expected", [
    ("widgets = pane._widgets['tau']", ["_widgets"]),
    ("x = pn.state._is_pyodide", ["_is_pyodide"]),
    ("v = getattr(pane, '_widgets', None)", ["_widgets"]),
    ("class D(pn.widgets.FileDropper):\n    def _process_event(self, e):\n        pass",
     ["_process_event"]),
])
def test_the_scan_finds_what_it_forbids(source, expected):
    """The scan itself: the settings cards' old ``pane._widgets`` and the other forms."""
    internals = _panel_private_names()
    hits = [name for _, name, how in _uses(ast.parse(source))
            if how == "pn" or (how in ("other", "subclass") and name in internals)]
    assert hits == expected
