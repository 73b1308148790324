"""The execution plan (issue 27): decided once on the CPU from declared data and the geometry's
numbers, with a reason per choice; the families' declared support agrees with the kernel
generators; and no code outside the plan compares an execution option's name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from solver.backends import plan as plan_module
from solver.backends.cuda import kernels
from solver.backends.cuda.boundary import BOUNDARY_KINDS
from solver.backends.cuda.kernels import MODES, KernelVariant, kernel_source
from solver.backends.plan import COMPACT, FAMILIES, TILED, plan_for
from solver.config import GPU_LAYOUTS, STREAMING, TILE_STORAGES, SimulationConfig
from solver.lattice import get_lattice
from solver.problem import Problem
from solver.storage import STORAGES
from solver.values import ConfigError

from .name_comparisons import name_comparisons
from .porous_cases import porous_solid

ROOT = Path(__file__).resolve().parents[2]
#: Where an execution option's name may be compared: the plan, the configuration that declares
#: the options, the host storage that parses ``storage``, and the kernel generators' own
#: vocabulary (kernel storage, in-tile layouts).
OWNERS = {"solver/backends/plan.py", "solver/config.py", "solver/storage.py",
          "solver/backends/cuda/storage.py", "solver/backends/cuda/tables.py"}
#: The execution options' names, and the words that say a comparison is about one.
OPTION_NAMES = (set(STREAMING) | set(TILE_STORAGES) | set(GPU_LAYOUTS) | set(STORAGES)) \
    - {"auto"} | {"float16"}
OPTION_WORDS = ("streaming", "tile_storage", "layout", "storage", "label", "precision")


def _problem(solid=None, **options) -> Problem:
    solid = porous_solid((16, 12, 12)) if solid is None else solid
    config = SimulationConfig(lattice=options.pop("lattice", "D3Q19"),
                              precision=options.pop("precision", "float32"), **options)
    return Problem.from_config(solid, config)


def test_a_porous_run_gets_the_compact_family_with_its_reasons() -> None:
    plan = plan_for(_problem())
    assert plan.compact and plan.family is COMPACT and plan.tile_storage == "compact"
    assert plan.pad == 1 and plan.packed == 0 and plan.code.inner and not plan.half
    assert plan.why("tile_storage").startswith("auto: eta_t") and "below 0.92" in plan.reason
    assert [c for c, _ in plan.reasons] == ["precision", "storage", "layout", "streaming",
                                            "tile_storage", "offsets", "launch"]
    assert len(plan.describe().splitlines()) == 7 and not plan.wide
    assert plan.why("offsets").startswith("32-bit value offsets")


def test_a_dense_box_stays_tiled_and_says_why() -> None:
    plan = plan_for(_problem(np.zeros((16, 12, 12), bool)))
    assert plan.family is TILED and not plan.compact and plan.copies == 2
    assert "not below 0.92" in plan.reason and "D3Q19, float32, two-copy" in plan.reason
    assert plan.why("launch") == "tiles_per_block=2"


def test_float16_and_in_place_follow_their_own_rules() -> None:
    half = plan_for(_problem(storage="float16"))
    assert half.half and half.storage == "float16" and half.packed == 4
    assert "one thread per fluid node" in half.describe()
    in_place = plan_for(_problem(streaming="in-place"))
    assert in_place.in_place and in_place.copies == 1 and "below 0.85" in in_place.reason


def test_auto_keeps_a_run_beyond_the_32_bit_offsets_tiled_where_the_tiled_state_fits(
        monkeypatch) -> None:
    """The compact kernels address a copy with 32-bit offsets below ``COMPACT.value_limit``
    values; beyond (a 1000³ rock image mirrored: 7.6e9 values) they need 64-bit offsets, which
    ran 21 % slower than the tiled storage on an H200. So 'auto' keeps such a run tiled, with
    a reason citing the measurement, where the device's memory is not given or the tiled
    state fits it; compact with 64-bit offsets only where the tiled state does not fit and
    the compact one does; an explicit 'compact' always gets the wide kernels."""
    from dataclasses import replace

    problem = _problem(streaming="in-place")
    values = problem.lattice.q * problem.tiling.n_fluid
    monkeypatch.setattr(plan_module, "COMPACT", replace(COMPACT, value_limit=values + 1))
    assert plan_for(problem).compact and not plan_for(problem).wide
    monkeypatch.setattr(plan_module, "COMPACT", replace(COMPACT, value_limit=values))
    plan = plan_for(problem)
    assert plan.family is TILED and "64-bit value offsets" in plan.reason
    assert plan_module.WIDE_SLOWER in plan.reason and "device memory not given" in plan.reason
    tiled = problem.tiled_state_bytes()
    compact = plan_module.compact_state_estimate(problem, plan_module.COMPACT_PAD)
    assert compact < tiled
    room = plan_module.device_headroom(problem)  # beside the state, per tile node
    assert room == plan_module.AUTO_HEADROOM_PER_TILE_NODE * problem.tiling.n_tiles * 64

    def on(capacity: float):
        return plan_for(replace(problem, device_capacity=int(capacity)))

    roomy = on(tiled + room)
    assert roomy.family is TILED and "the tiled state fits" in roomy.reason
    tight = on(tiled + room - 1)
    assert tight.compact and tight.wide and "only the compact state fits" in tight.reason
    assert tight.reason.startswith("auto: eta_t") and "64-bit" in tight.why("offsets")
    assert on(compact + room).wide
    small = on(compact + room - 1)
    assert small.family is TILED and "neither state fits" in small.reason
    assert COMPACT.value_limit == 2**31
    explicit = _problem(streaming="in-place", tile_storage="compact")
    for capacity in (None, 1, 10 * tiled):
        chosen = plan_for(replace(explicit, device_capacity=capacity))
        assert chosen.compact and chosen.wide and chosen.reason == "tile_storage='compact'"


def test_the_compact_estimate_of_the_plan_bounds_the_allocated_state() -> None:
    """The plan's compact state from counts (:func:`compact_state_estimate`) is the wide
    storage's :func:`compact_state_bytes` or at most 4 bytes per fluid node above it (the
    edge tables' tiled index, int32 where the tiled copy is small)."""
    from solver.backends.cuda.compact import CompactTiling
    from solver.backends.cuda.compact_readout import compact_state_bytes

    for streaming in ("in-place", "two-copy"):
        problem = _problem(streaming=streaming)
        exact = compact_state_bytes(problem, CompactTiling(problem.tiling, 1, wide=True))
        estimate = plan_module.compact_state_estimate(problem, 1)
        assert exact <= estimate <= exact + 4 * problem.tiling.n_fluid


def test_the_layout_choice_gives_its_reason() -> None:
    flat = plan_for(_problem(porous_solid((16, 16)), lattice="D2Q9", gpu_layout="paper"))
    assert flat.layout == "xyz" and "3D tiles of edge 4 only" in flat.why("layout")
    assert flat.family is TILED and "3D tiles" in flat.reason  # compact lacks 2D
    paper = plan_for(_problem(gpu_layout="paper", tile_storage="tiled"))
    assert paper.layout == "paper" and paper.why("layout") == "gpu_layout='paper'"


def test_the_plan_compiles_no_kernel(monkeypatch) -> None:
    """What the compact family lacks (here the boundary code of Zou-He faces) is read from the
    declared table: the plan is decided with kernel generation switched off."""
    def refuse(*_):
        raise AssertionError("the plan generated a kernel")

    monkeypatch.setattr(kernels, "kernel_source", refuse)
    faces = {"x_min": "velocity", "x_min_value": 0.01, "x_max": "pressure", "x_max_value": 1.0}
    plan = plan_for(_problem(**faces))
    assert plan.family is TILED and "boundary code 'zou_he'" in plan.reason
    with pytest.raises(ConfigError, match="(?s)boundary code 'zou_he'.*tile_storage='tiled'"):
        plan_for(_problem(tile_storage="compact", **faces))


@pytest.mark.parametrize("family", list(FAMILIES.values()), ids=lambda f: f.name)
def test_declared_support_matches_the_kernel_generator(family) -> None:
    """Every mode, lattice shape and boundary code a family declares generates a kernel;
    every one the compact family declares it lacks is refused by the generator."""
    compact = 1 if family is COMPACT else 0
    for (lattice, a), mode, boundary in (
            (shape, m, b) for shape in (("D2Q9", 8), ("D3Q19", 4), ("D3Q19", 8), ("D3Q27", 4))
            for m in MODES for b in BOUNDARY_KINDS):
        v = KernelVariant(lattice, "float32", "BGK", True, "xyz", mode, a, boundary,
                          compact=compact)
        lacks = family.variant_lacks(mode, get_lattice(lattice).d, a, lattice,
                                     v.canonical().boundary)
        if lacks:
            with pytest.raises(ValueError, match="does not support"):
                kernel_source(v)
        else:
            assert f" {v.name}(" in kernel_source(v)


def _option_comparisons(source: str, label: str) -> list[str]:
    """``x == 'NAME'`` / ``x in ('NAME', ...)`` of an execution option's name, where x is
    about one (``streaming``, ``tile_storage``, ``layout``, ``storage``, ...)."""
    return name_comparisons(source, label, OPTION_NAMES, OPTION_WORDS)


def test_no_execution_option_name_is_compared_outside_the_plan() -> None:
    found = [hit for package in ("solver", "app", "geometries")
             for path in sorted((ROOT / package).rglob("*.py"))
             if str(path.relative_to(ROOT)) not in OWNERS
             for hit in _option_comparisons(path.read_text(), str(path.relative_to(ROOT)))]
    assert found == []


def test_the_option_check_sees_a_comparison() -> None:
    assert _option_comparisons("if problem.tile_storage == 'compact':\n    pass\n", "m")
    assert _option_comparisons("ok = r.get('streaming') in ('in-place',)", "m")
    assert _option_comparisons("half = config.storage == 'float16'", "m")
    assert not _option_comparisons("ok = mode == 'auto'", "m")


def test_the_plan_module_imports_no_compiler() -> None:
    """Decided from data: the plan imports neither the kernel generator nor the device."""
    from tests.test_layers import _imports

    names = _imports(ROOT / "solver/backends/plan.py", "solver.backends.plan")
    assert not any(n.startswith(("solver.backends.cuda.kernels", "solver.backends.cuda.device",
                                 "cupy")) for n in names)
    assert plan_module.__name__ == "solver.backends.plan"


def test_the_device_memory_reaches_the_plan_from_the_backend() -> None:
    """A Simulation fills ``Problem.device_capacity`` from its backend (all of the device's
    memory, the CuPy backend's ``memory_capacity``; None on NumPy) before any plan is made, and
    the memory verdict estimates the plan the run will get with it."""
    from dataclasses import replace

    from solver.backends.numpy_backend import NumpyBackend
    from solver.memory import assess_memory
    from solver.simulation import Simulation

    class Device(NumpyBackend):  # NumPy, with a device memory to report
        def memory_capacity(self) -> int:
            return 12345

    solid = porous_solid((16, 12, 12))
    config = SimulationConfig(precision="float32")
    assert Simulation(solid, config, NumpyBackend()).problem.device_capacity is None
    assert Simulation(solid, config, Device()).problem.device_capacity == 12345
    given = replace(_problem(), device_capacity=99)
    assert Simulation(solid, config, Device(), problem=given).problem.device_capacity == 99
    seen = []

    class Asked(Device):
        def memory_required(self, problem: Problem) -> int:
            seen.append(problem.device_capacity)
            return 1

    assess_memory(_problem(), Asked())
    assert seen == [12345]
