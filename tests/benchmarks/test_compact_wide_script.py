"""benchmarks/compact/compact_wide.py on the CPU: its timing loop builds and steps the 32-bit and
the wide compact runs the plan would run (kernels through the g++ emulator, a small pack, one
short measurement each), and its table gives the mean per storage and the wide/32-bit ratio."""

from __future__ import annotations

import sys
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "compact"))

import compact_wide  # noqa: E402

from ..solver.compact_emulator import FakeCupy, compiler  # noqa: E402


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
def test_timing_loop_steps_both_offsets_of_each_storage(monkeypatch) -> None:
    from solver.backends.cuda import compact_run

    fake, real = FakeCupy(), compact_run.CompactRun
    monkeypatch.setattr(compact_run, "CompactRun", lambda *a, **k: real(
        *a, xp=np, launcher=fake.launcher(), cuda=fake.cuda, **k))

    def once(step, suite):  # one plain step instead of graphs of >= 16
        start = time.perf_counter()
        step(1)
        return 1, time.perf_counter() - start

    monkeypatch.setattr(compact_wide, "_median_seconds", once)
    # CUDA's function attributes (registers, spills) exist on the GPU only
    monkeypatch.setattr(compact_wide, "_registers", lambda run, kernels: (0, 0))
    rows = compact_wide.time_runs(24, repeats=2)
    assert [(r["storage"], r["wide"]) for r in rows] == [
        ("float32", False), ("float32", True), ("float32", True), ("float32", False),
        ("float16", False), ("float16", True), ("float16", True), ("float16", False)]
    assert all(r["kernel"].endswith("_o64") == r["wide"] for r in rows)
    assert all(r["fluid_g_per_s"] > 0 and 0 < r["eta_t"] <= 1 for r in rows)


def test_summary_gives_the_mean_per_storage_and_the_ratio() -> None:
    rows = [dict(case="rock", storage=s, wide=w, eta_t=0.5, fluid_g_per_s=g)
            for s, w, g in (("float32", False, 10.0), ("float32", False, 12.0),
                            ("float32", True, 9.9), ("float16", False, 16.0),
                            ("float16", True, 14.0))]
    tests = {"command": "pytest", "returncode": 0, "seconds": 12.0, "tail": ["3 passed"]}
    table = compact_wide.summary({"gpu": "GPU", "date": "d", "commit": "c", "tests": tests,
                                  "rows": rows})
    assert "return code 0" in table and "`3 passed`" in table
    assert "| rock | float32 | 0.500 | 32-bit | 11.00 | 1.000 |  |" in table
    assert "| rock | float32 | 0.500 | wide | 9.90 | 0.900 |  |" in table
    assert "| rock | float16 | 0.500 | wide | 14.00 | 0.875 |  |" in table



@pytest.mark.parametrize("storage", ["auto", "float16"])
def test_the_counted_stand_in_gives_the_estimators_numbers_of_a_real_tiling(storage,
                                                                            monkeypatch):
    """``wide_memory.py`` runs the estimators on counts (fluid nodes, tiles, box): on a real
    mirrored sample they give the numbers of its real tiling, compact (32-bit and, with the
    plan's limit lowered, wide) and tiled, for one process and one rank, and 'auto' makes the
    same choice on them for every device memory (tiled where it fits, wide compact where only
    the compact state fits)."""
    from dataclasses import replace

    import wide_memory

    from solver.backends import plan as plan_module
    from solver.backends.cuda.footprint import device_bytes
    from solver.backends.plan import plan_for
    from solver.config import SimulationConfig
    from solver.distributed.mirrored import device_estimate
    from solver.problem import Problem

    box = wide_memory.mirrored_box(36)
    config = SimulationConfig(precision="float32", storage=storage, streaming="in-place",
                              collision="TRT", tile_offset="origin", tile_storage="compact")
    real = Problem.from_config(box, config)
    t = real.tiling
    counted = replace(real, tiling=wide_memory.CountedTiling(box.shape, t.n_fluid, t.n_tiles))
    assert counted.tiling.tile_map.shape == t.tile_map.shape

    def numbers(problem):
        plan = plan_for(problem)
        with wide_memory.counted_compact() if problem is counted else nullcontext():
            return (plan.compact, plan.wide, device_bytes(problem, plan),
                    device_estimate(problem),
                    device_bytes(replace(problem, tile_storage="tiled")),
                    problem.tiled_state_bytes(),
                    plan_module.compact_state_estimate(problem, plan.pad))

    def auto(problem, capacity):
        plan = plan_for(replace(problem, tile_storage="auto", device_capacity=capacity))
        return plan.tile_storage, plan.wide

    assert numbers(real)[:2] == (True, False) and numbers(counted) == numbers(real)
    monkeypatch.setattr(plan_module, "COMPACT", replace(plan_module.COMPACT, value_limit=1))
    assert numbers(real)[:2] == (True, True) and numbers(counted) == numbers(real)
    tiled, compact = numbers(real)[5:]
    room = plan_module.device_headroom(real)
    for capacity, chosen in ((None, ("tiled", False)), (tiled + room, ("tiled", False)),
                             (compact + room, ("compact", True))):
        assert auto(real, capacity) == auto(counted, capacity) == chosen
