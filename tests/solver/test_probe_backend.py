"""Benchmark-only methods stay off the backends a run uses (issue 27, item 2).

The probe kernels and re-laid views of one allocation are what only ``python -m solver bench``,
:mod:`solver.benchmarking` and ``benchmarks/`` ask for; they live on
:class:`solver.backends.cuda.probe_backend.ProbeBackend`, a subclass of the CuPy backend. Read
from the source with :mod:`ast`, so the check runs without CuPy.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK_ONLY = {"probe", "reconfigure"}


def _methods(path: str, cls: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    found = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {n.name for n in found.body if isinstance(n, ast.FunctionDef)}


def test_run_backends_hold_no_benchmark_only_method() -> None:
    for path, cls in (("solver/backends/cuda/backend.py", "CupyBackend"),
                      ("solver/backends/cuda/compact_run.py", "CompactRun"),
                      ("solver/backends/numpy_backend.py", "NumpyBackend")):
        assert not _methods(path, cls) & BENCHMARK_ONLY, cls


def test_probe_backend_adds_the_probes_to_the_cupy_backend() -> None:
    tree = ast.parse((ROOT / "solver/backends/cuda/probe_backend.py").read_text())
    probe = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ProbeBackend")
    assert [ast.unparse(b) for b in probe.bases] == ["CupyBackend"]
    assert _methods("solver/backends/cuda/probe_backend.py", "ProbeBackend") == BENCHMARK_ONLY
