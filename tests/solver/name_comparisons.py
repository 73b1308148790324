"""Finding comparisons against a chosen name in source code, for the tests that forbid them."""

from __future__ import annotations

import ast
from collections.abc import Iterable


def name_comparisons(source: str, label: str, names: set[str], words: Iterable[str]
                     ) -> list[str]:
    """``x == 'NAME'`` / ``x in ('NAME', ...)`` with NAME in ``names``, where the compared
    text mentions one of ``words`` (``label:line: code`` for each)."""
    words = tuple(words)
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        text = " ".join(ast.unparse(s) for s in sides)
        consts = {c.value for s in sides for c in ast.walk(s)
                  if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        if consts & names and any(word in text for word in words):
            found.append(f"{label}:{node.lineno}: {ast.unparse(node)}")
    return found
