"""The layering of ARCHITECTURE.md, executable: every import statement of the three packages,
module-level or inside a function, is read with :mod:`ast` and checked against the rules.

* ``geometries`` imports neither ``solver`` nor ``app``;
* ``solver`` never imports ``app``;
* ``app`` reaches the solver through its host-side API, never ``solver.backends`` or
  ``solver.tiling``;
* only the CuPy backend (``solver/backends/cuda/``) imports ``cupy``;
* inside ``solver``, the physics modules never import the simulation or the ways of running it;
* no import circle, however long, module-level or inside functions (Tarjan's strongly connected
  components of the module graph).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("geometries", "solver", "app")
#: The CuPy backend: the only place allowed to import CuPy.
CUPY_BACKEND = "solver.backends.cuda"
#: Layers inside ``solver`` above the physics (ARCHITECTURE.md, layers 4 and 5): the physics,
#: tiling, config, problem and backends below them never import these.
SOLVER_UPPER = ("solver.simulation", "solver.runner", "solver.run", "solver.snapshot",
                "solver.validation", "solver.distributed", "solver.benchmarking",
                "solver.__main__", "solver.io", "solver.case")
SOLVER_LOWER = ("solver.lattice", "solver.moments", "solver.collision", "solver.mrt",
                "solver.collisions", "solver.face_kinds",
                "solver.boundaries", "solver.node_types", "solver.storage", "solver.streaming",
                "solver.tiling", "solver.config", "solver.problem", "solver.fields",
                "solver.observables", "solver.backends", "solver.values")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str | None = None) -> set[str]:
    """Absolute names of every module ``path`` (module ``name``) imports; ``from x import y``
    gives x and x.y."""
    name = name or _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


@cache
def import_graph() -> dict[str, set[str]]:
    """Module name -> modules it imports, for every module of the three packages."""
    return {_module_name(p): _imports(p)
            for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


def _within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(importer: tuple[str, ...], imported: tuple[str, ...],
               allowed: tuple[str, ...] = ()) -> list[str]:
    """'a imports b' for every module a under ``importer`` (not under ``allowed``) importing a
    module under ``imported``."""
    return sorted(f"{module} imports {name}" for module, names in import_graph().items()
                  if _within(module, importer) and not _within(module, allowed)
                  for name in names if _within(name, imported))


def test_the_walk_sees_every_package() -> None:
    graph = import_graph()
    assert {"geometries.voxel", "solver.simulation", "app.dashboard"} <= graph.keys()
    # The walk resolves relative and function-level imports (solver.simulation's save/load).
    assert "solver.backends" in graph["solver.simulation"]


def test_geometries_import_neither_solver_nor_app() -> None:
    assert violations(("geometries",), ("solver", "app")) == []


def test_solver_never_imports_app() -> None:
    assert violations(("solver",), ("app",)) == []


def test_app_does_not_reach_into_the_backends() -> None:
    assert violations(("app",), ("solver.backends",)) == []


def test_app_does_not_tile() -> None:
    assert violations(("app",), ("solver.tiling",)) == []


def test_only_the_cupy_backend_imports_cupy() -> None:
    assert violations(PACKAGES, ("cupy",), allowed=(CUPY_BACKEND,)) == []


def test_solver_physics_never_imports_the_layers_above() -> None:
    assert violations(SOLVER_LOWER, SOLVER_UPPER) == []


def test_the_walk_catches_relative_and_nested_imports(tmp_path: Path) -> None:
    """The checker itself: a relative upward import and a CuPy import inside a function."""
    fake = tmp_path / "fake.py"
    fake.write_text("from ..simulation import Simulation\n\ndef f():\n    import cupy as cp\n")
    names = _imports(fake, "solver.backends.fake")
    assert "solver.simulation" in names and "cupy" in names
    assert any(_within(n, SOLVER_UPPER) for n in names)


def test_no_two_modules_import_each_other() -> None:
    """A pair of modules importing each other (even inside a function) is one concept split in
    two or a layer inverted; package ``__init__`` re-exports are not counted."""
    graph = import_graph()
    packages = {p.parent for p in ROOT.rglob("__init__.py")}
    modules = {m for m in graph
               if not any(ROOT.joinpath(*m.split(".")) == p for p in packages)}
    pairs = sorted(f"{a} <-> {b}" for a in modules for b in graph[a] & modules
                   if a < b and a in graph[b])
    assert pairs == []


def _module_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Module -> the modules of the three packages it imports. ``from pkg import sub`` of a
    submodule counts as importing ``sub`` only: the package ``__init__`` that Python runs on
    the way is a re-export (``app/__init__`` imports ``Dashboard`` lazily), not a dependency on
    every module it names; ``from pkg import name`` of anything else imports ``pkg``."""
    edges: dict[str, set[str]] = {}
    for module, names in graph.items():
        found = {n for n in names if n in graph}
        found -= {n for n in found if any(other.startswith(n + ".") and other in graph
                                          for other in names)}
        found |= {n.rpartition(".")[0] for n in names
                  if n not in graph and n.rpartition(".")[0] in graph}
        edges[module] = found - {module}
    return edges


def import_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle: the strongly connected components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph is a few hundred modules deep at most
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(circles)


def test_no_import_circles() -> None:
    """No chain of imports, function-level ones included, leads back to where it started (a
    circle is a layer inverted: move what both sides need down a layer instead)."""
    assert import_circles(_module_edges(import_graph())) == []


def test_the_circle_check_sees_a_circle_through_a_function_import(tmp_path: Path) -> None:
    """The checker itself: a three-module circle closed by an import inside a function, and a
    package re-export of a submodule that is no circle."""
    files = {"solver.a": "from .b import x\n", "solver.b": "from . import c\n",
             "solver.c": "def f():\n    from .a import y\n", "solver.d": "from solver import a\n"}
    graph = {}
    for name, text in files.items():
        path = tmp_path / f"{name.rpartition('.')[2]}.py"
        path.write_text(text)
        graph[name] = _imports(path, name)
    graph["solver"] = set()
    edges = _module_edges(graph)
    assert edges["solver.b"] == {"solver.c"} and edges["solver.d"] == {"solver.a"}
    assert import_circles(edges) == [["solver.a", "solver.b", "solver.c"]]
