"""float16 storage on the fluid-compacted storage (issue 20 item 2), checked on the CPU.

The compact kernels store, decode and round float16 values with the tiled kernel's code
(:mod:`solver.backends.cuda.storage`) and key the random bits of stochastic rounding by the
node's tiled identity ``tile * 64 + n``, so a compact float16 run holds the tiled float16 run's
bits after every step (graphs, plain launches, a resumed step counter, in place or two copies);
both agree with the NumPy reference to a few binary16 steps, as the tiled kernel does (float32
arithmetic in another order moves some values across a rounding threshold). Reading back gives
the exact stored values (checkpoints), memory counts 2-byte values, and 'auto' keeps float16 on
the tiled storage until the lead times the compact one. The GPU twin: test_cupy_compact.py.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from solver.backends.cuda.compact import CompactTiling
from solver.backends.cuda.compact_source import probe_source, real_param_names
from solver.backends.cuda.kernels import KernelVariant, kernel_source
from solver.backends.cuda.kernels import real_param_names as variant_reals
from solver.backends.plan import (
    AUTO_COMPACT_BELOW,
    AUTO_COMPACT_BELOW_FLOAT16,
    plan_for,
)
from solver.memory import device_bytes
from solver.problem import Problem

from .compact_emulator import FakeCupy, compiler
from .kernel_emulator import EmulatedKernel
from .porous_cases import as_stored, half_tolerance, make_problem, noisy_start, reference
from .test_kernel_compile import NVCC

needs_gxx = pytest.mark.skipif(compiler() is None, reason="g++ is not installed")


def _problem(collision: str = "BGK", fluid: str = "incompressible", streaming: str = "two-copy",
             tpb: int = 1) -> Problem:
    problem = make_problem("D3Q19", "float32", collision, fluid, "xyz", tpb, offset=(1, 2, 3),
                           storage="float16")
    return replace(problem, streaming=streaming, tile_storage="compact")


def _compact_run(problem: Problem, packed: int = 0):
    from solver.backends.cuda.compact_run import CompactRun

    fake = FakeCupy()
    return CompactRun(problem, 1, xp=np, launcher=fake.launcher(), cuda=fake.cuda,
                      tiles_per_block=problem.tiles_per_block, packed=packed)


def _tiled_bits(emu: EmulatedKernel) -> np.ndarray:
    """The tiled emulator's latest stored values in XYZ order, binary16 bits (uint16)."""
    if emu.in_place and emu.current == 1:
        emu.step(1, "swap")
    q = np.arange(emu.problem.lattice.q)[:, None]
    return emu.f[0 if emu.in_place else emu.current][:, q, emu.slots].view(np.uint16)


@needs_gxx
@pytest.mark.parametrize("collision, fluid, tpb, packed", [
    ("BGK", "incompressible", 2, 0),  # S-scaled deviations
    ("TRT", "incompressible", 1, 0),
    ("MRT", "incompressible", 1, 0),  # deviations, times S on store
    ("BGK", "quasi-compressible", 1, 4),  # populations; the packed kernel
])
def test_compact_float16_stores_the_tiled_bits(collision, fluid, tpb, packed) -> None:
    """2 warm-up launches, a captured graph of 16, 1 plain launch, then the step counter set
    to 100 (a resume) and 19 more: every fluid value's binary16 bits equal the tiled float16
    kernel's (through the emulator), solid nodes hold binary16 zero (the rest state), the
    counters agree, and the values are within a few binary16 steps of the NumPy reference."""
    problem = _problem(collision, fluid, tpb=tpb)
    assert plan_for(problem).compact
    run = _compact_run(problem, packed)
    assert run.variant.half and run.f[0].dtype == np.float16 and run.seeds is not None
    f0 = noisy_start(problem)
    run.set_populations(as_stored(problem, f0))
    emu = EmulatedKernel(problem, tpb)
    emu.set_populations(problem.initial_populations())
    emu.f[1 - emu.current] = emu.f[emu.current]
    emu.set_populations(as_stored(problem, f0))
    run.step(19)
    assert run.graphs  # 16 of them from a replayed graph
    emu.step(19)
    run.set_step(100)
    emu.set_step(100)
    run.step(19)
    emu.step(19)
    np.testing.assert_array_equal(run.seeds, emu.seeds)
    assert int(run.seeds[run.current]) == 119
    fluid_nodes = np.broadcast_to(~problem.tiling.solid[:, None, :], f0.shape)
    got = run.stored_tiled().view(np.uint16)
    want = _tiled_bits(emu)
    np.testing.assert_array_equal(got[fluid_nodes], want[fluid_nodes])
    assert (got[~fluid_nodes] == 0).all()
    moved = np.count_nonzero(got[fluid_nodes] != as_stored(problem, f0).astype(np.float16)
                             .view(np.uint16)[fluid_nodes])
    assert moved > 0.5 * fluid_nodes.sum()  # the flow moved most values
    ref = reference(problem, f0, 19, then_from_step=100)  # 19 steps, then 19 from step 100
    assert np.abs(run.populations() - ref).max() <= half_tolerance(problem, ref, 8)


@needs_gxx
@pytest.mark.parametrize("packed", [0, 4])
def test_compact_float16_in_place_equals_two_copy_bit_for_bit(packed) -> None:
    """AA pattern on one compact float16 copy (per-node and packed kernels): after odd and
    even step counts (the swap kernel decodes an odd phase and keeps the step counter) the
    bits equal the two-copy run's, and the one copy is half the two-copy populations' bytes,
    2 bytes a value."""
    one, two = (_compact_run(_problem("TRT", streaming=s), packed)
                for s in ("in-place", "two-copy"))
    assert len(one.f) == 1 and one.variants[0].streaming == "aa_neighbour"
    f0 = noisy_start(one.problem)
    for run in (one, two):
        run.set_populations(as_stored(one.problem, f0))
    fluid = np.broadcast_to(~one.problem.tiling.solid[:, None, :], f0.shape)
    for n in (1, 2, 19, 3):
        for run in (one, two):
            run.step(n)
        assert one.current == n % 2
        np.testing.assert_array_equal(one.stored_tiled().view(np.uint16)[fluid],
                                      two.stored_tiled().view(np.uint16)[fluid])
        assert one.current == 0 and int(one.seeds[0]) == int(two.seeds[two.current])
    q, slots = 19, one.compact.n_slots
    assert one.f[0].nbytes == q * slots * 2
    assert one.memory_bytes() == two.memory_bytes() - q * slots * 2


@needs_gxx
def test_compact_float16_reads_back_and_resumes_exactly() -> None:
    """populations() gives the stored values exactly in float64 (a deviation far below the
    float32 spacing of w_i rho0 included), and setting them back stores the same bits: a
    checkpoint resumes bit for bit, on the compact or the tiled storage."""
    problem = _problem()
    run = _compact_run(problem)
    f0 = noisy_start(problem)
    tiny = float(problem.storage.shift[3]) + 2.0**-30  # below float32 resolution near w rho0
    assert np.float32(tiny) == problem.storage.shift[3]
    tile = int(np.flatnonzero((~problem.tiling.solid).any(axis=1))[0])
    f0[tile, 3, np.flatnonzero(~problem.tiling.solid[tile])[0]] = tiny
    run.set_populations(f0)  # float64 values that are exactly stored ones: kept exactly
    saved = run.populations()
    assert saved.dtype == np.float64 and (saved == tiny).sum() == 1
    run.step(2)
    after = run.stored_tiled().copy()
    again = _compact_run(problem)
    again.set_populations(saved)
    np.testing.assert_array_equal(again.populations(), saved)
    again.step(2)
    np.testing.assert_array_equal(again.stored_tiled().view(np.uint16),
                                  after.view(np.uint16))


def test_compact_accepts_float16_and_auto_follows_its_own_crossover(monkeypatch) -> None:
    from solver.backends import plan

    problem = _problem()
    assert plan_for(problem).compact  # 'compact' runs float16
    auto = replace(problem, tile_storage="auto")
    assert AUTO_COMPACT_BELOW["float16"] == AUTO_COMPACT_BELOW_FLOAT16 == 0.75
    assert problem.tiling.eta_t < AUTO_COMPACT_BELOW_FLOAT16
    choice = plan_for(auto)
    assert choice.compact and choice.packed == plan.COMPACT_PACKED_FLOAT16 == 4
    monkeypatch.setitem(AUTO_COMPACT_BELOW, "float16", problem.tiling.eta_t)  # just above it
    choice = plan_for(replace(problem, tile_storage="auto"))
    assert choice.tile_storage == "tiled" and "float16" in choice.reason
    float32 = replace(make_problem("D3Q19", "float32", "BGK", offset=(1, 2, 3)),
                      tile_storage="auto")
    assert plan_for(float32).compact  # the float32 rule is unchanged


def test_float16_has_its_own_packed_setting(monkeypatch) -> None:
    """COMPACT_PACKED_FLOAT16 / COMPACT_CODE_FLOAT16 set the float16 compact kernel (the lead
    sets them after timing) without touching float32's."""
    from solver.backends import plan
    from solver.backends.cuda.compact_source import CompactCode

    entry_by_entry = CompactCode()
    monkeypatch.setattr(plan, "COMPACT_PACKED_FLOAT16", 8)
    monkeypatch.setattr(plan, "COMPACT_CODE_FLOAT16", entry_by_entry)
    half = plan_for(_problem())
    assert half.packed == 8 and half.code == entry_by_entry
    single = replace(make_problem("D3Q19", "float32", "BGK", offset=(1, 2, 3)),
                     tile_storage="compact")
    choice = plan_for(single)
    assert choice.packed == plan.COMPACT_PACKED == 0
    assert choice.code == plan.COMPACT_CODE == CompactCode(inner=True)


def test_compact_float16_memory_counts_two_byte_values() -> None:
    """The estimate (solver.memory) counts 2 bytes a stored value and the float32 tiled copy
    a readout decodes into (device_populations, one direction at a time: no binary16 copy on
    the way); CompactRun reports what it allocated."""
    half = _problem()
    single = replace(make_problem("D3Q19", "float32", "BGK", offset=(1, 2, 3)),
                     tile_storage="compact")
    compact = CompactTiling(half.tiling, 1)
    q = 19
    assert device_bytes(half) - device_bytes(single) == \
        compact.memory_bytes(q, 2) - compact.memory_bytes(q, 4)
    if compiler() is not None:
        run = _compact_run(half)
        allocated = sum(a.nbytes for a in (*run.f, *run.tables, *run.edge, run.seeds))
        assert run.memory_bytes() == allocated
        assert run.device_populations().dtype == np.float32


def test_compact_float16_kernel_text_and_arguments() -> None:
    """Named apart from float32, binary16 pointers, the tiled kernel's float16 arguments
    (storage constants, then the step counter), the same hash key as the tiled kernel."""
    v = KernelVariant("D3Q19", "float32", "BGK", True, "xyz", "full", storage="float16",
                      compact=1)
    src = kernel_source(v)
    assert "_f32s16_" in v.name and v.name != replace(v, storage="auto").name
    assert "const store_t* __restrict__ fin" in src and "typedef unsigned short store_t" in src
    assert "unsigned int* __restrict__ fs_seed)" in src
    assert "mix32((unsigned int)(tile * NPT + n)" in src
    assert "encode_scaled(" in src and "half_bits_to_float(fin[" in src
    tiled = KernelVariant("D3Q19", "float32", "BGK", True, "xyz", "full", storage="float16")
    assert variant_reals(v) == variant_reals(tiled) == real_param_names(
        "D3Q19", "float32", "BGK", True, "float16")
    for mode in ("propagate", "swap"):
        assert variant_reals(replace(v, mode=mode))[-1] == "fs_kinetic"
    with pytest.raises(ValueError, match="float32 arithmetic"):
        probe_source("D3Q19", "float64", 1, True, "BGK", storage="float16")


@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compact_float16_compiles_with_nvcc(arch: str, tmp_path: Path) -> None:
    from solver.backends.plan import COMPACT_CODE

    sources = [probe_source("D3Q19", "float32", 1, True, coll, inc, packed, streaming,
                            COMPACT_CODE, "float16")
               for coll, inc in (("BGK", True), ("TRT", True), ("MRT", True), ("BGK", False))
               for packed in (0, 4) for streaming in ("pull", "aa_neighbour", "aa_local")]
    sources += [probe_source("D3Q19", "float32", pad, True, None, True, 0, streaming,
                             COMPACT_CODE, "float16")
                for pad in (1, 16) for streaming in ("pull", "swap")]
    source = tmp_path / "compact16.cu"
    source.write_text("\n".join(sources))
    out = subprocess.run([NVCC, "-cubin", f"-arch={arch}", "-o", str(tmp_path / "c.cubin"),
                          str(source)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
