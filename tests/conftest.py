"""Shared fixtures: the backend fixture and the visible skip of GPU tests without a GPU."""

from __future__ import annotations

import pytest

from solver.backends import gpu_available


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``gpu`` with the reason the CuPy backend cannot run here."""
    ok, why = gpu_available()
    if ok:
        return
    skip = pytest.mark.skip(reason=f"GPU test skipped: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=["numpy", pytest.param("cupy", marks=pytest.mark.gpu)])
def backend_name(request) -> str:
    """Every physics test runs on the NumPy reference and, on a GPU machine, on CuPy."""
    return request.param
