"""One device-run protocol, and benchmark-only code out of the backends (issue 27, item 2).

:class:`solver.backends.cuda.device_run.DeviceRun` is what the CuPy backend, a distributed rank
(:class:`~solver.backends.cuda.phases.CupyPhases`) and the readers ask of a run's device state;
the tiled and the compact run implement all of it, and the backend's state access only
delegates (no test of which run it holds). The probe kernels, re-laid views and the compact
kernels' timing twin are what only ``python -m solver bench``, :mod:`solver.benchmarking` and
``benchmarks/`` ask for: they live in :mod:`solver.benchmarking`. Read from the source with
:mod:`ast` where CuPy would be needed, so the checks run on the CPU.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CUDA = ROOT / "solver" / "backends" / "cuda"
BENCHMARK_ONLY = {"probe", "reconfigure", "time", "upload", "download"}
RUN_CLASSES = (("tiled_run.py", "TiledRun"), ("compact_run.py", "CompactRun"))


def _class(path: Path, name: str) -> ast.ClassDef:
    tree = ast.parse(path.read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _methods(path: Path, name: str) -> set[str]:
    return {n.name for n in _class(path, name).body if isinstance(n, ast.FunctionDef)}


def _members(path: Path, name: str) -> set[str]:
    """Methods, properties, class attributes and attributes set on ``self`` of a class."""
    found = _methods(path, name)
    for node in ast.walk(_class(path, name)):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            for leaf in ast.walk(target):
                if isinstance(leaf, ast.Name):
                    found.add(leaf.id)
                elif isinstance(leaf, ast.Attribute) and ast.unparse(leaf.value) == "self":
                    found.add(leaf.attr)
    return found


def _protocol() -> set[str]:
    members = _members(CUDA / "device_run.py", "DeviceRun")
    assert {"step", "launch_tiles", "latest", "populations", "readout_tiles"} <= members
    return members


def test_tiled_and_compact_runs_implement_the_device_run_protocol() -> None:
    protocol = _protocol()
    for module, name in RUN_CLASSES:
        assert not protocol - _members(CUDA / module, name), (name, protocol - _members(
            CUDA / module, name))


def test_a_compact_run_is_a_device_run_at_run_time() -> None:
    """The runtime check of the protocol on a compact run of host arrays (no kernel runs)."""
    from solver.backends.cuda.compact_run import CompactRun
    from solver.backends.cuda.device_run import DeviceRun

    from .porous_cases import make_problem

    problem = make_problem("D3Q19", "float64", "BGK", tile_storage="compact")
    assert isinstance(CompactRun(problem, 1, xp=np), DeviceRun)


def test_the_backend_reaches_runs_through_the_protocol_only() -> None:
    """The backend, its state access and a distributed rank's phases never ask which run they
    hold: no isinstance of a run class, no attribute of a run sniffed (``getattr``/``hasattr``
    of ``self.state``), no private method of a run called from outside it."""
    for module in ("backend.py", "state_access.py", "phases.py", "compact_check.py",
                   "prolong.py"):
        tree = ast.parse((CUDA / module).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "isinstance":
                assert not {"TiledRun", "CompactRun"} & {
                    n.id for n in ast.walk(node) if isinstance(n, ast.Name)}, module
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "hasattr"):
                assert ast.unparse(node.args[0]) != "self.state", (module, ast.unparse(node))
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                    not node.attr.startswith("__"):
                assert ast.unparse(node.value) in ("self", "cp", "np"), (module,
                                                                           ast.unparse(node))
    state_access = ast.parse((CUDA / "state_access.py").read_text())
    imported = {n.module for n in ast.walk(state_access) if isinstance(n, ast.ImportFrom)}
    assert not {"compact_run", "tiled_run"} & imported  # one state access: the protocol's


def test_run_backends_hold_no_benchmark_only_method() -> None:
    for path, cls in ((CUDA / "backend.py", "CupyBackend"), (CUDA / "tiled_run.py", "TiledRun"),
                      (CUDA / "compact_run.py", "CompactRun"),
                      (ROOT / "solver/backends/numpy_backend.py", "NumpyBackend")):
        assert not _methods(path, cls) & BENCHMARK_ONLY, cls


def test_benchmark_only_code_lives_in_benchmarking() -> None:
    """The probe backend and the compact kernels' timing twin are in solver/benchmarking, and
    every module of solver/backends has an importer other than the benchmarks and tests."""
    bench = ROOT / "solver" / "benchmarking"
    probe = _class(bench / "probe_backend.py", "ProbeBackend")
    assert [ast.unparse(b) for b in probe.bases] == ["CupyBackend"]
    assert _methods(bench / "probe_backend.py", "ProbeBackend") == {"probe", "reconfigure"}
    assert "time" in _methods(bench / "compact_probe.py", "CompactProbe")
    assert not (CUDA / "probe_backend.py").exists() and not (CUDA / "compact_timing.py").exists()

    from ..test_layers import _imports, _module_name

    users: set[str] = set()
    for package in ("solver", "app", "geometries"):
        for path in (ROOT / package).rglob("*.py"):
            name = _module_name(path)
            if not name.startswith("solver.benchmarking"):
                users |= {m for m in _imports(path) if m != name}
    for path in (ROOT / "solver" / "backends").rglob("*.py"):
        name = _module_name(path)
        if path.name != "__init__.py":
            assert name in users, f"{name} is imported only by benchmarks or tests"
