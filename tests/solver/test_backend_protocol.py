"""The optional parts of the :class:`~solver.backends.base.Backend` protocol are declared, never
sniffed: every backend declares where its readouts' sums are made (``reductions``) and whether
it writes and reads per-rank parts and keeps the voxel mask, and no caller in ``solver/`` asks
with ``getattr``/``hasattr`` whether a backend has them. Read with :mod:`ast` where CuPy would
be needed, so the checks run on the CPU."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DECLARED = ("reductions", "writes_parts", "reads_parts", "keeps_voxel_mask", "phase_stepper",
            "memory_required", "free_memory", "memory_capacity", "used_memory", "nccl_status")
#: What a caller once sniffed for (getattr/hasattr on a backend).
SNIFFED = {"tile_moments", "health_numbers", "k_check_numbers", "writes_parts", "reads_parts",
           "keeps_voxel_mask", "load_parts", "iolet_flux", "reductions", "wall_shear_vectors",
           "free_memory", "memory_required", "memory_capacity", "phase_stepper", "nccl_status",
           "used_memory"}


def _class_names(path: Path, name: str) -> set[str]:
    """Names a class body binds (assignments, annotations, methods, properties)."""
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    names = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def test_the_protocol_declares_its_optional_parts_and_every_backend_declares_them() -> None:
    assert set(DECLARED) <= _class_names(ROOT / "solver/backends/base.py", "Backend")
    for path, cls in (("solver/backends/numpy_backend.py", "NumpyBackend"),
                      ("solver/backends/cuda/backend.py", "CupyBackend"),
                      ("solver/distributed/backend.py", "DistributedBackend")):
        assert not set(DECLARED) - _class_names(ROOT / path, cls), cls


def test_no_caller_sniffs_a_backend_for_them() -> None:
    found = []
    for path in sorted((ROOT / "solver").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "hasattr") \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                    and node.args[1].value in SNIFFED:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    assert found == []


def test_one_device_sums_its_readouts_itself() -> None:
    """The single-device default hands back the caller's own computation, untouched."""
    from solver.backends.base import LOCAL_REDUCTIONS
    from solver.backends.numpy_backend import NumpyBackend

    backend = NumpyBackend(threads=1)
    assert backend.reductions is LOCAL_REDUCTIONS
    assert not backend.writes_parts and not backend.reads_parts and backend.keeps_voxel_mask
    assert backend.phase_stepper is None and backend.nccl_status() is None
    assert backend.memory_capacity() is None and backend.used_memory() is None
    numbers = np.arange(3.0)
    assert LOCAL_REDUCTIONS.health_numbers(None, 0, lambda: numbers) is numbers
    assert LOCAL_REDUCTIONS.k_check_numbers(None, 0, (1, 2), lambda: numbers) is numbers
    pair = (numbers, numbers)
    assert LOCAL_REDUCTIONS.tile_moments(None, slice(0, 1), lambda: pair) is pair


def test_ranks_sum_their_readouts_on_the_ranks() -> None:
    """A DistributedBackend's reductions ask the ranks and never the caller's ``local``."""
    pytest.importorskip("mpi4py")
    from solver.distributed import DistributedBackend
    from solver.distributed.reductions import RankReductions

    def local():
        raise AssertionError("a distributed readout must not sum on rank 0 alone")

    with DistributedBackend("numpy") as backend:
        assert isinstance(backend.reductions, RankReductions) and backend.reads_parts
        assert backend.phase_stepper is None and backend.nccl_status() is None
        assert backend.memory_required(None) is None and backend.free_memory() is None
        assert backend.memory_capacity() is None and backend.used_memory() is None
        asked = []
        backend.health_numbers = lambda state, axis: asked.append(("health", axis)) or 1.0
        backend.k_check_numbers = lambda state, axis, w: asked.append(("k", axis, w)) or 2.0
        backend.tile_moments = lambda state, tiles: asked.append(("moments", tiles)) or 3.0
        reductions = backend.reductions
        assert reductions.health_numbers("s", 1, local) == 1.0
        assert reductions.k_check_numbers("s", 2, (3, 4), local) == 2.0
        assert reductions.tile_moments("s", slice(0, 2), local) == 3.0
    assert asked == [("health", 1), ("k", 2, (3, 4)), ("moments", slice(0, 2))]
