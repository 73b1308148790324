"""Compact storage with 64-bit value offsets on the GPU (``pytest -m gpu``, issues 29 and 33).

The CuPy backend allocates the run its plan chooses; with the plan's 32-bit limit lowered
below a small case's values per copy it allocates the wide kernels (int64 bases and edge
offsets), which must store the 32-bit run's bits after plain launches, captured graphs and a
distributed rank's tile-range launches (two copies and in place, float32 and float16 storage),
and read the same populations, node gathers and fused k check. A Simulation gives the plan
the GPU's memory, so 'auto' keeps a run past the 32-bit offsets tiled where it fits. The CPU
twin (the kernels through the g++ emulator): test_compact_wide.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from .porous_cases import as_stored, noisy_start
from .test_compact_wide import _limit, _problem

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def backend():
    from solver.backends import get_backend

    return get_backend("cupy")


def _bytes(run) -> list[np.ndarray]:
    run.synchronize()
    return [f.get().view(np.uint8) for f in run.f]


@pytest.mark.parametrize("precision, streaming", [("float32", "in-place"),
                                                  ("float16", "in-place"),
                                                  ("float32", "two-copy")])
def test_wide_compact_run_stores_the_32_bit_bits_on_the_gpu(backend, monkeypatch, precision,
                                                            streaming):
    from solver.backends.cuda import compact_check
    from solver.backends.cuda.compact_run import CompactRun

    problem = _problem(precision, streaming)
    narrow = backend.allocate(problem)
    _limit(monkeypatch, 1)
    wide = backend.allocate(problem)
    assert isinstance(wide, CompactRun) and wide.variant.wide and not narrow.variant.wide
    assert wide.tables[1].dtype == np.int64 and wide.edge[0].dtype == np.int64
    f0 = as_stored(problem, noisy_start(problem))
    runs = (narrow, wide)
    for run in runs:
        backend.set_populations(run, f0)
    for n in (1, 20, 3):  # plain, warm-up + graph + plain, plain (in place: odd and even)
        for run in runs:
            backend.step(run, n)
        for a, b in zip(*(_bytes(r) for r in runs), strict=True):
            np.testing.assert_array_equal(a, b)
    n_tiles = problem.tiling.n_tiles
    for run in runs:  # a distributed rank's two ranges of one step
        run.launch_tiles(0, n_tiles // 3)
        run.launch_tiles(n_tiles // 3, n_tiles)
        run.current = 1 - run.current
    for a, b in zip(*(_bytes(r) for r in runs), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(backend.populations(wide), backend.populations(narrow))
    tiles = np.array([n_tiles - 1, 0, 7])
    np.testing.assert_array_equal(wide.device_populations(tiles).get(),
                                  narrow.device_populations(tiles).get())
    part = slice(11, 11 + 300)
    np.testing.assert_array_equal(wide.fluid_populations(part).get(),
                                  narrow.fluid_populations(part).get())
    if precision == "float32":
        import cupy as cp

        flags = cp.full(int(problem.tiling.n_fluid), 9, dtype=np.uint8)
        a, b = (compact_check.darcy_check(run, flags, 0) for run in runs)
        assert a[0] == 0 and a[2] != 0
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)  # atomics: any order
    for run in runs:
        backend.release(run)


def test_a_simulation_gives_the_plan_the_gpu_memory(backend, monkeypatch):
    """On the GPU a Simulation's problem carries the device's whole memory (memGetInfo's
    total, at least what is free), and 'auto' past the 32-bit offsets keeps an in-place run
    tiled there (a small case's tiled state fits any GPU), a two-copy one compact and wide."""
    import cupy as cp

    from solver.backends.plan import TILED, plan_for
    from solver.config import SimulationConfig
    from solver.simulation import Simulation

    from .porous_cases import porous_solid

    def problem(streaming: str):
        config = SimulationConfig(precision="float32", streaming=streaming)
        return Simulation(porous_solid((16, 12, 12)), config, backend).problem

    in_place, two_copies = problem("in-place"), problem("two-copy")
    total = int(cp.cuda.runtime.memGetInfo()[1])
    assert in_place.device_capacity == total >= backend.free_memory()
    assert plan_for(in_place).compact
    _limit(monkeypatch, 1)
    chosen = plan_for(in_place)
    assert chosen.family is TILED and "the tiled state fits" in chosen.reason
    wide = plan_for(two_copies)
    assert wide.compact and wide.wide, wide.describe()


def test_a_pool_limit_is_the_memory_the_plan_chooses_for(backend):
    """CuPy's pool limit (a GPU shared on purpose; rock_tensor.py --device-memory: an 80 GB
    H100 on a larger GPU) is the capacity the plan sees and bounds the free memory."""
    import cupy as cp

    pool = cp.get_default_memory_pool()
    total = int(cp.cuda.runtime.memGetInfo()[1])
    before = pool.get_limit()
    try:
        pool.set_limit(size=2 * 10**9)
        assert backend.memory_capacity() == 2 * 10**9 < total
        assert backend.free_memory() <= 2 * 10**9 - pool.used_bytes()
    finally:
        pool.set_limit(size=before)
    assert backend.memory_capacity() == total
