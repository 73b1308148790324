"""Shared pytest setup: tests marked ``gpu`` skip, with the reason, where no GPU is usable."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu`` tests with the reason from :func:`solver.backends.gpu_available`."""
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    from solver.backends import gpu_available

    ok, why = gpu_available()
    if not ok:
        skip = pytest.mark.skip(reason=f"needs a CUDA GPU with CuPy: {why}")
        for item in gpu_items:
            item.add_marker(skip)
