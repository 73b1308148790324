"""Compact storage with 64-bit value offsets (the 'wide' kernels, issues 29 and 33), on the CPU.

A copy of 2^31 values or more (a 1000³ rock image mirrored: 7.6e9 D3Q19 values) cannot be
addressed by the compact kernels' 32-bit offsets; a compact plan then has the wide kernels
(``ExecutionPlan.wide``), the same templates with ``offset_t`` long long ('auto' takes them with
two copies wherever they fit, in place only where the tiled state does not fit). Here the
choice is forced on small cases (the plan's limit lowered, or ``CompactRun(wide=True)``) and
the wide kernels, run through the g++ emulator, must give the 32-bit kernels' bits: full
steps (two copies and in place, float32 and float16, per-node and packed kernels), tile-range
launches of a distributed rank, the readouts (tiled chunks, node gathers, writes) and the
fused k check. The memory estimates count the wide tables. The GPU twin:
test_cupy_compact_wide.py. No test allocates more than a few MB.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from solver.backends import plan as plan_module
from solver.backends.cuda import compact_check
from solver.backends.cuda.compact import OFFSET_LIMIT, CompactTiling
from solver.backends.cuda.compact_readout import compact_state_bytes, edge_bytes
from solver.backends.cuda.compact_run import CompactRun
from solver.backends.cuda.compact_source import probe_shared_bytes, probe_source
from solver.backends.cuda.kernels import KernelVariant, all_variants, kernel_source
from solver.backends.plan import COMPACT, TILED, plan_for
from solver.config import SimulationConfig
from solver.lattice import get_lattice
from solver.memory import device_bytes
from solver.problem import Problem
from solver.tiling import CountedTiling

from .compact_emulator import FakeCupy, compiler
from .porous_cases import as_stored, make_problem, noisy_start

needs_gxx = pytest.mark.skipif(compiler() is None, reason="g++ is not installed")


def _problem(precision: str = "float32", streaming: str = "two-copy", tpb: int = 2,
             collision: str = "TRT") -> Problem:
    """A porous D3Q19 box (26x15x11, empty and mixed tiles, walls in y) on compact storage;
    'float16': float16 storage, float32 arithmetic."""
    storage = "float16" if precision == "float16" else "auto"
    problem = make_problem("D3Q19", "float32" if storage == "float16" else precision,
                           collision, "incompressible", "xyz", tpb, offset=(1, 2, 3),
                           storage=storage)
    return replace(problem, streaming=streaming, tile_storage="compact")


def _pair(problem: Problem, packed: int = 0) -> list[CompactRun]:
    """A 32-bit and a wide run of ``problem`` from the same noisy start (emulated kernels)."""
    fake, f0 = FakeCupy(), as_stored(problem, noisy_start(problem))
    runs = [CompactRun(problem, 1, xp=np, launcher=fake.launcher(), cuda=fake.cuda,
                       tiles_per_block=problem.tiles_per_block, packed=packed,
                       code=plan_module.COMPACT_CODE, wide=wide)
            for wide in (False, True)]
    for run in runs:
        run.set_populations(f0)
    return runs


def _limit(monkeypatch, values: int) -> None:
    """Lower the values per copy the compact kernels' 32-bit offsets address (the plan's knob)."""
    monkeypatch.setattr(plan_module, "COMPACT", replace(COMPACT, value_limit=values))


def test_wide_kernels_are_the_same_template_with_64_bit_offsets() -> None:
    """The wide kernel of every compact variant has its own name and 64-bit offsets, bases and
    located halo sources; their padded counts are 32-bit (a halo node: 8 + 4 B of shared
    memory) but in the kernels of two copies with float32/float64 storage (8 + 8 B: the int
    count ran slower there); the variant space holds both (the 32-bit kernels' text is pinned
    by test_kernel_hashes.py; the emulated launches check the shared memory's bounds)."""
    narrow = KernelVariant("D3Q19", "float32", "BGK", True, "xyz", compact=1,
                           code=plan_module.COMPACT_CODE)
    wide = replace(narrow, wide=True)
    a, b = kernel_source(narrow), kernel_source(wide)
    assert wide.name == narrow.name + "_o64" and a != b
    assert "const long long* __restrict__ base" in b and "long long* s_halo" in b
    assert "long long at0, pc;" in b and "int at0, pc;" in a  # two copies, float32
    assert wide.spec().count_bytes == 8 and narrow.spec().count_bytes == 4
    for other in (replace(wide, streaming="aa_neighbour"), replace(wide, storage="float16")):
        assert "long long at0;\n    int pc;" in kernel_source(other)
        assert other.spec().count_bytes == 4
    for packed, tiles in ((0, 2), (4, 4)):  # per tile: 27 bases and 6^3 at0 4 B wider
        assert (probe_shared_bytes(2, True, packed, wide=True)
                - probe_shared_bytes(2, True, packed)) == tiles * (27 * 4 + 6**3 * 4)
        assert (probe_shared_bytes(2, True, packed, True, 8)
                - probe_shared_bytes(2, True, packed)) == tiles * (27 * 4 + 6**3 * 8)
    assert "long long" not in a.split('extern "C"')[1]  # the 32-bit kernel's body: int only
    assert b == probe_source("D3Q19", "float32", 1, True, "BGK", True,
                             code=plan_module.COMPACT_CODE, wide=True)
    assert replace(narrow, compact=0, wide=True).canonical().wide is False  # tiled: no such
    space = {v.name for v in all_variants() if v.compact}
    assert space and {n + "_o64" for n in space if not n.endswith("_o64")} <= space


@needs_gxx
@pytest.mark.parametrize("precision, streaming, packed", [
    ("float32", "two-copy", 0),
    ("float32", "in-place", 0),
    ("float16", "two-copy", 4),
    ("float16", "in-place", 4),
    ("float64", "in-place", 0),
])
def test_wide_step_gives_the_32_bit_kernels_bits(precision, streaming, packed) -> None:
    """1 then 2 steps (in place: an odd phase decoded, then an even one): every stored value
    of the wide run, padding included, equals the 32-bit run's bit for bit, as do the float16
    step counters; the wide run launched its '_o64' kernels on int64 bases."""
    narrow, wide = _pair(_problem(precision, streaming), packed)
    assert wide.tables[1].dtype == np.int64 and narrow.tables[1].dtype == np.int32
    assert wide.edge[0].dtype == np.int64 and narrow.edge[0].dtype == np.int32
    start = narrow.f[0].copy()
    for n in (1, 2):
        for run in (narrow, wide):
            run.step(n)
        assert narrow.current == wide.current
        for a, b in zip(narrow.f, wide.f, strict=True):
            np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    assert not np.array_equal(start, narrow.f[0])  # it moved
    if narrow.seeds is not None:
        np.testing.assert_array_equal(narrow.seeds, wide.seeds)
    assert all(v.wide and v.name.endswith("_o64") for v in wide.variants)
    assert wide.loaded and all(name.endswith("_o64") for name in wide.loaded)
    assert not any(name.endswith("_o64") for name in narrow.loaded)
    np.testing.assert_array_equal(wide.populations(), narrow.populations())


@needs_gxx
@pytest.mark.parametrize("precision, streaming, packed", [
    ("float32", "two-copy", 0), ("float16", "in-place", 4)])
def test_wide_tile_ranges_of_a_rank_give_the_32_bit_bits(precision, streaming, packed) -> None:
    """A distributed rank's launches (``launch_tiles``: the boundary range, then the interior
    one, the float16 counter keyed per range) take the wide variant and store the 32-bit
    run's bits."""
    narrow, wide = _pair(_problem(precision, streaming), packed)
    n = narrow.problem.tiling.n_tiles
    for _ in range(2):
        for run in (narrow, wide):
            run.launch_tiles(0, n // 3)
            run.launch_tiles(n // 3, n)
            run.current = 1 - run.current
    assert {v for v in wide.loaded} == {wide.variants[c].name for c in
                                        ((0, 1) if wide.in_place else (0,))}
    for a, b in zip(narrow.f, wide.f, strict=True):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@needs_gxx
@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_wide_readouts_and_writes_match_the_32_bit_ones(precision) -> None:
    """Tiled chunks (a range and a list of tiles), node gathers, fluid-node gathers and a
    write of tiled populations read and write the same values through int64 offsets."""
    problem = _problem(precision, "in-place")
    narrow, wide = _pair(problem)
    for run in (narrow, wide):
        run.step(1)  # odd phase: the readouts decode in place first
    t = problem.tiling
    tiles = np.array([t.n_tiles - 1, 0, 5, 3])
    np.testing.assert_array_equal(wide.device_populations(slice(2, 9)),
                                  narrow.device_populations(slice(2, 9)))
    np.testing.assert_array_equal(wide.device_populations(tiles),
                                  narrow.device_populations(tiles))
    np.testing.assert_array_equal(wide.stored_tiled().view(np.uint8),
                                  narrow.stored_tiled().view(np.uint8))
    part = slice(7, 7 + 3 * 64)
    np.testing.assert_array_equal(wide.fluid_populations(part), narrow.fluid_populations(part))
    tile, node = np.nonzero(np.ones((t.n_tiles, 64), bool))
    solid = t.solid[tile, node]
    a, b = (run.node_index(tile, node, solid) for run in (narrow, wide))
    np.testing.assert_array_equal(a.first, b.first)
    np.testing.assert_array_equal(wide.node_populations(b), narrow.node_populations(a))
    f = as_stored(problem, noisy_start(problem, seed=4))
    for run in (narrow, wide):
        run.set_populations(f[3:11], slice(3, 11))
    np.testing.assert_array_equal(wide.f[0].view(np.uint8), narrow.f[0].view(np.uint8))


@needs_gxx
def test_wide_fused_check_reads_the_32_bit_numbers() -> None:
    """The rock runs' one-kernel k check (grid-stride kernel under g++) reads int64 offsets of
    a wide run and gives the 32-bit run's health and Darcy sums exactly."""
    from .test_rock_check_kernel import _launch

    narrow, wide = _pair(_problem("float32", "two-copy"))
    for run in (narrow, wide):
        run.step(2)
    flags = np.full(int(narrow.problem.tiling.n_fluid), 9, np.uint8)
    flags[::5] |= 2
    a, b = (compact_check.darcy_check(run, flags, 0, launch=_launch, max_blocks=1)
            for run in (narrow, wide))
    assert a[0] == 0 and a[2] != 0  # finite, a flow along x
    np.testing.assert_array_equal(a, b)


@needs_gxx
def test_the_plan_passes_wide_offsets_to_the_run(monkeypatch) -> None:
    """With the limit lowered below this small case's values per copy the plan picks the wide
    kernels and says why; the kernel variant, the allocation and the estimates follow it."""
    problem = _problem("float32", "in-place")
    q, n_fluid = problem.lattice.q, problem.tiling.n_fluid
    assert not plan_for(problem).wide and "32-bit value offsets" in plan_for(problem).why(
        "offsets")
    _limit(monkeypatch, q * n_fluid)
    plan = plan_for(problem)
    assert plan.compact and plan.wide and "64-bit value offsets" in plan.why("offsets")
    assert "offsets: 64-bit" in plan.describe()
    assert KernelVariant.for_problem(problem, plan=plan).wide
    assert not KernelVariant.for_problem(problem, plan=replace(plan, wide=False)).wide
    narrow, wide = _pair(problem)
    allocated = sum(int(a.nbytes) for a in (*wide.f, *wide.tables, *wide.edge))
    assert wide.memory_bytes() == allocated
    t = problem.tiling
    # wide: 8-byte bases (per tile) and compact edge offsets (per fluid node)
    assert wide.memory_bytes() - narrow.memory_bytes() == 4 * t.n_tiles + 4 * n_fluid
    assert device_bytes(problem) >= allocated
    grown = device_bytes(problem) - device_bytes(problem, replace(plan, wide=False))
    assert grown == 4 * t.n_tiles + 4 * n_fluid


def test_memory_estimates_count_the_wide_tables(monkeypatch) -> None:
    """The state bytes, the edge tables' bytes per fluid node and a distributed rank's
    estimate (mirrored runs) grow by the wide tables' extra bytes and no more."""
    from solver.distributed.mirrored import device_estimate

    problem = _problem("float16", "in-place")
    t, q = problem.tiling, problem.lattice.q
    narrow, wide = CompactTiling(t, 1), CompactTiling(t, 1, wide=True)
    assert edge_bytes(wide, q) == edge_bytes(narrow, q) + 4
    extra = 4 * t.n_tiles + 4 * t.n_fluid
    assert compact_state_bytes(problem, wide) - compact_state_bytes(problem, narrow) == extra
    before = device_estimate(problem)
    _limit(monkeypatch, 1)
    assert device_estimate(problem) - before == extra


#: What the plan reads of a tiling, for a box too large to tile in a test: a 1000³ rock image
#: at porosity 0.2 mirrored along x (2000 x 1000 x 1000, 4e8 fluid nodes) at the tile
#: utilisation 0.478 measured on the generator's mirrored samples (rock_tensor.py).
HUGE_MIRRORED = CountedTiling((2000, 1000, 1000), 400_000_000, int(400_000_000 / (0.478 * 64)))


GB = 10**9


def _huge(storage: str, streaming: str) -> Problem:
    """The plan's view of the mirrored 1000³ rock (:data:`HUGE_MIRRORED`), TRT, 'auto'."""
    config = SimulationConfig(precision="float32", storage=storage, streaming=streaming,
                              collision="TRT")
    return Problem(lattice=get_lattice("D3Q19"), tiling=HUGE_MIRRORED, rates=None,
                   force=np.zeros(3), incompressible=True, rho0=1.0, periodic=(True,) * 3,
                   dtype=np.dtype("float32"), collision=config.collision_model(),
                   storage_kind=storage, streaming=streaming, tile_storage="auto",
                   layout="xyz", tiles_per_block=2)


def _wide_compact(plan) -> None:
    """``plan`` is the compact family with the wide kernels, as the offsets explain."""
    assert plan.compact and plan.wide, plan.describe()
    assert plan.why("tile_storage").startswith("auto: eta_t 0.478 below")
    assert plan.why("offsets") == ("64-bit value offsets (wide kernels): 7.6e+09 values per "
                                   f"copy, not below the 32-bit offsets' {OFFSET_LIMIT:.3g}")


@pytest.mark.parametrize("storage, streaming, per_tile_node, per_fluid_node",
                         [("auto", "in-place", 77, 96), ("float16", "in-place", 39, 58),
                          ("auto", "two-copy", 153, 172)])
def test_the_huge_run_state_counts_its_bytes(storage, streaming, per_tile_node,
                                             per_fluid_node) -> None:
    """Bytes per node of the mirrored 1000³ rock's resident state: populations (+ node type;
    + 20 B of wide edge tables), the tables under 3 %."""
    problem = _huge(storage, streaming)
    tiled = problem.tiled_state_bytes()
    compact = plan_module.compact_state_estimate(problem, plan_module.COMPACT_PAD)
    t = problem.tiling
    assert 1 < tiled / (per_tile_node * t.n_tiles * t.nodes_per_tile) < 1.03
    assert 1 < compact / (per_fluid_node * t.n_fluid) < 1.03


@pytest.mark.parametrize("storage", ["auto", "float16"])
def test_in_place_above_the_32_bit_offsets_is_tiled_unless_only_compact_fits(storage) -> None:
    """A mirrored 1000³ rock in place (7.6e9 values per copy, beyond 2^31): 'auto' keeps it
    tiled (the wide compact kernels ran 21 % slower there in place on an H200) where the
    device's memory is unknown or holds the tiled state (an H100's 80 GB: the in-place --huge
    run), and takes the wide kernels only where the tiled state does not fit and the compact
    one does; 'compact' asked for gets the wide kernels whatever the memory."""
    problem = _huge(storage, "in-place")
    compact = plan_module.compact_state_estimate(problem, plan_module.COMPACT_PAD)
    assert plan_for(problem).family is TILED
    room = plan_module.device_headroom(problem)
    # an 80 GB H100 (80 GiB of HBM3, a little of it the driver's): the --huge run held
    # 66.5 GB in CuPy's pool at its checks there, tiled in place
    h100 = plan_for(replace(problem, device_capacity=78 * 2**30))
    assert h100.family is TILED and "the tiled state fits" in h100.reason, h100.describe()
    plan = plan_for(replace(problem, device_capacity=compact + room))
    _wide_compact(plan)
    assert "only the compact state fits" in plan.why("tile_storage")
    assert COMPACT.value_limit == OFFSET_LIMIT == 2**31
    assert KernelVariant.for_problem(problem, plan=plan).name.endswith("_o64")
    asked = plan_for(replace(problem, tile_storage="compact"))
    assert asked.compact and asked.wide


def test_two_copies_above_the_32_bit_offsets_are_compact_wherever_they_fit() -> None:
    """The same rock with two copies (the default streaming): the wide compact kernels stepped
    its fine run 1.31x as fast as tiled in place on an H200, and tiled two copies ran out of
    the H200's memory where the plan had them fit (the bug: 'auto' chose them there). So
    'auto' takes the wide kernels wherever their state fits: memory unknown, an H200's 150 GB,
    an H100's 80 GB (85.5e9 bytes); below that, tiled (larger still), saying to stream in
    place."""
    problem = _huge("auto", "two-copy")
    compact = plan_module.compact_state_estimate(problem, plan_module.COMPACT_PAD)
    room = plan_module.device_headroom(problem)
    for capacity in (None, 150.1e9, 85.5e9, compact + room):
        plan = plan_for(replace(problem, device_capacity=None if capacity is None
                                else int(capacity)))
        _wide_compact(plan)
        assert plan_module.WIDE_TWO_COPIES_FASTER in plan.why("tile_storage")
    small = plan_for(replace(problem, device_capacity=int(compact + room - 1)))
    assert small.family is TILED and "streaming='in-place'" in small.reason, small.describe()


@needs_gxx
@pytest.mark.parametrize("precision, streaming, packed", [("float32", "two-copy", 0),
                                                          ("float16", "in-place", 4)])
def test_wide_kernel_steps_with_offsets_beyond_2_31(precision, streaming, packed) -> None:
    """The wide kernel's arithmetic past 2^31 without GBs: every tile's base moved up by
    2^27 nodes (19 x 2^27 = 2.55e9 values: every offset the kernel forms lies beyond 2^31)
    and the copies handed over as pointers moved down by as many values, so the same
    memory is addressed only if no offset wraps (the 32-bit kernel, so moved, faults); one
    step equals the 32-bit kernel's on the unmoved tables bit for bit."""
    import ctypes

    from solver.backends.cuda.compact_shape import packed_threads

    from .compact_emulator import emulated

    narrow, _ = _pair(_problem(precision, streaming), packed)
    v, q = narrow.variant, narrow.problem.lattice.q
    shift = 2**27
    assert q * shift >= OFFSET_LIMIT
    masks, base, tiles, tile_map = narrow.tables
    ints = np.array(narrow.ints, dtype=np.int32)
    reals = np.array(narrow.reals or [0.0], dtype=v.precision)
    n_tiles = narrow.problem.tiling.n_tiles
    k = packed or narrow.tiles_per_block
    threads = packed_threads(packed) if packed else 64 * k
    outputs = []
    for wide in (False, True):
        copies = [f.copy() for f in narrow.f]  # in place: one copy, read and written
        src, dst = copies[0], copies[-1]
        moved = q * shift * src.itemsize if wide else 0
        table = base.astype(np.int64) + shift if wide else base
        seeds = narrow.seeds.copy() if narrow.seeds is not None else np.zeros(2, np.uint32)
        run = emulated(v.precision, v.compact, True, v.collision, v.incompressible, packed,
                       v.streaming, v.code, v.storage, wide)
        ptr = lambda a, by=0: ctypes.c_void_p(a.ctypes.data - by)  # noqa: E731
        run(ctypes.c_int(-(-n_tiles // k)), ctypes.c_int(threads), ptr(src, moved),
            ptr(dst, moved), ptr(masks), ptr(table), ptr(tiles), ptr(tile_map), ptr(ints),
            ptr(reals), ptr(seeds))
        outputs.append(dst.view(np.uint8).copy())
    np.testing.assert_array_equal(outputs[1], outputs[0])
    assert not np.array_equal(outputs[0], narrow.f[-1].view(np.uint8))  # the step wrote
