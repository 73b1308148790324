"""Finding comparisons against a chosen name in source code, for the tests that forbid them."""

from __future__ import annotations

import ast
import re
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



def code_comparisons(source: str, label: str, codes: set[int], namespace: dict | None = None,
                     word: str = "code") -> list[str]:
    """Comparisons of an integer kind code outside its registry, for the tests that forbid
    them: in Python, an expression mentioning ``word`` (``tables.code``, ``code[k]``)
    compared with an integer of ``codes`` or with a name that ``namespace`` (the module's)
    binds to one (``tables.code == PRESSURE``); in generated C, ``code[...] ==`` followed by a
    number or an interpolated value (``f"if (code[k] == {PRESSURE})"``)."""
    namespace = namespace or {}
    mentions = re.compile(rf"\b{word}\b")
    c_compare = rf"\b{word}\[[^\]]*\]\s*[=!]=\s*"

    def is_code(side: ast.expr) -> bool:
        if isinstance(side, ast.Constant):
            return type(side.value) is int and side.value in codes
        if isinstance(side, ast.Name):
            value = namespace.get(side.id)
            return type(value) is int and value in codes
        return False

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(mentions.search(ast.unparse(s)) for s in sides) and any(map(is_code, sides)):
                found.append(f"{label}:{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.JoinedStr):
            parts = node.values
            for n, part in enumerate(parts):
                if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                    continue
                interpolated = (re.search(c_compare + "$", part.value) and n + 1 < len(parts)
                                and isinstance(parts[n + 1], ast.FormattedValue))
                if interpolated or re.search(c_compare + r"\d", part.value):
                    found.append(f"{label}:{node.lineno}: {ast.unparse(node)}")
                    break
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if re.search(c_compare + r"\d", node.value):
                found.append(f"{label}:{node.lineno}: {node.value.strip()}")
    return found


def _int_assignments(tree: ast.Module) -> dict[str, int]:
    """Module-level ``NAME = 3`` and ``A, B = 0, 1`` bindings of integers."""
    out = {}
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = []
            if isinstance(target, ast.Name):
                pairs = [(target, node.value)]
            elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts, strict=False))
            for name, value in pairs:
                if (isinstance(name, ast.Name) and isinstance(value, ast.Constant)
                        and type(value.value) is int):
                    out[name.id] = value.value
    return out


def integer_names(sources: dict[str, str]) -> dict[str, dict[str, int]]:
    """Per file (repository path -> source), the integer constants its names hold: its own
    module-level ones and those it imports from another of ``sources`` (resolved statically,
    without importing anything)."""
    trees = {path: ast.parse(text) for path, text in sources.items()}
    own = {path: _int_assignments(tree) for path, tree in trees.items()}
    out = {}
    for path, tree in trees.items():
        names = dict(own[path])
        package = path.rsplit("/", 1)[0].split("/")
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.module is None and not node.level:
                continue
            base = package[: len(package) - node.level + 1] if node.level else []
            parts = base + (node.module.split(".") if node.module else [])
            for candidate in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
                if candidate in own:
                    for alias in node.names:
                        if alias.name in own[candidate]:
                            names[alias.asname or alias.name] = own[candidate][alias.name]
        out[path] = names
    return out
