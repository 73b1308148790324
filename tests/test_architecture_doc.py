"""ARCHITECTURE.md stays the map of the code: every module is listed, README links it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _listed() -> set[str]:
    """Module paths of ARCHITECTURE.md: each bullet's `path.py` under its `### `pkg/`` heading."""
    listed, package = set(), None
    for line in (ROOT / "ARCHITECTURE.md").read_text().splitlines():
        heading = re.match(r"### `([a-z_/]+)/`", line)
        if heading:
            package = heading.group(1)
        item = re.match(r"- `([\w/]+\.py)`", line)
        if item and package:
            listed.add(f"{package}/{item.group(1)}")
    return listed


def test_every_module_has_its_line() -> None:
    modules = {str(p.relative_to(ROOT)) for package in ("geometries", "solver", "app")
               for p in (ROOT / package).rglob("*.py")}
    listed = _listed()
    assert sorted(modules - listed) == []  # add a line for each new module
    assert sorted(listed - modules) == []  # remove the lines of deleted or moved ones


def test_readme_links_the_architecture() -> None:
    assert "(ARCHITECTURE.md)" in (ROOT / "README.md").read_text()
