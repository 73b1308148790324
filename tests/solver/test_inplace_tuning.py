"""Tuning of the in-place (AA) step kernels: register cap and read-only-cache loads.

* :class:`~solver.backends.cuda.streaming.AATuning` changes only the in-place step kernels:
  every two-copy kernel, the decoding 'swap' and the in-place read/write probe stay the same
  source; the tuned kernels say it in their names, and a cap where CUDA cannot take one is
  refused with what to do.
* Tuned in-place runs (g++ emulation) equal two-copy runs bit for bit, and the backend's
  choice per precision (``AA_TUNING``) reaches the kernels.
* With nvcc: ptxas keeps a capped kernel within its cap without spilling (float32 and float16
  storage at 40 registers), and the neighbour step does the two-copy kernel's arithmetic: the
  same floating-point PTX instructions, so its stores (which go to neighbours' slots) never
  change how NVVM contracts products into FMAs.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from solver.backends.cuda import streaming
from solver.backends.cuda.kernels import KernelVariant, all_variants, kernel_source
from solver.backends.cuda.streaming import AATuning

from .kernel_emulator import EmulatedKernel, compiler
from .porous_cases import make_problem, noisy_start
from .test_inplace_streaming import NVCC

TUNED = AATuning(max_registers=40, nc_loads=True)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")


def test_tuning_leaves_two_copy_swap_and_readwrite_kernels_alone() -> None:
    variants = all_variants()  # pull, plus the in-place 'swap' decoding
    assert {v.streaming for v in variants} == {"pull", "aa_local"}
    for v in variants[::5]:
        tuned = replace(v, aa=TUNED).canonical()
        assert tuned == v.canonical() and kernel_source(tuned) == kernel_source(v)
    for mode in ("readwrite", "swap"):
        v = KernelVariant("D3Q19", "float32", mode=mode, streaming="aa_local", aa=TUNED)
        assert v.canonical().aa == AATuning() and "__maxnreg__" not in kernel_source(v)


@pytest.mark.parametrize("streaming_", ["aa_neighbour", "aa_local"])
@pytest.mark.parametrize("storage", ["auto", "float16"])
def test_tuned_in_place_kernel_text(streaming_: str, storage: str) -> None:
    plain = KernelVariant("D3Q19", "float32", "BGK", True, "xyz", streaming=streaming_,
                          storage=storage)
    tuned = replace(plain, aa=TUNED)
    assert tuned.name == plain.name + "_r40_nc"
    src, base = kernel_source(tuned), kernel_source(plain)
    assert 'extern "C" __global__ void __maxnreg__(40) ' + tuned.name in src
    assert src.count("__ldg(&fin[") == 19 and "__ldg" not in base
    assert src.replace("__ldg(&fin[", "(fin[").count("(fin[") == base.count("fin[")
    capped = replace(plain, aa=AATuning(max_registers=48))
    assert "__ldg" not in kernel_source(capped) and capped.name.endswith("_r48")


def test_register_cap_refused_where_cuda_cannot_take_it() -> None:
    big = KernelVariant("D2Q9", "float64", "BGK", True, "xyz", tile_edge=16,
                        streaming="aa_neighbour")
    assert "__launch_bounds__(1024)" in kernel_source(big)
    with pytest.raises(ValueError, match="at most 64 nodes, not 256; use AATuning"):
        kernel_source(replace(big, aa=AATuning(max_registers=48)))
    assert "__ldg(&fin[" in kernel_source(replace(big, aa=AATuning(nc_loads=True)))


def test_backend_choice_per_precision_reaches_the_kernels(monkeypatch) -> None:
    problem = replace(make_problem("D3Q19", "float32", "BGK", layout="xyz"),
                      streaming="in-place")
    assert KernelVariant.for_problem(problem).aa == AATuning()  # compiler's choice until timed
    monkeypatch.setitem(streaming.AA_TUNING, "float32", TUNED)
    assert KernelVariant.for_problem(problem, "full", 0).aa == TUNED
    assert KernelVariant.for_problem(problem, "full", 1).aa == TUNED
    assert KernelVariant.for_problem(problem, "swap", 1).aa == AATuning()
    two_copy = KernelVariant.for_problem(replace(problem, streaming="two-copy"))
    assert two_copy.aa == AATuning() and "__maxnreg__" not in kernel_source(two_copy)


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("precision, storage, layout", [
    ("float32", "auto", "xyz"), ("float64", "auto", "paper"), ("float32", "float16", "xyz")])
def test_tuned_in_place_equals_two_copy_bit_for_bit(monkeypatch, precision, storage,
                                                    layout) -> None:
    monkeypatch.setitem(streaming.AA_TUNING, "float16" if storage == "float16" else precision,
                        TUNED)
    problem = make_problem("D3Q19", precision, "TRT", "quasi-compressible", layout, 2,
                           (1, 3, 2), storage=storage)
    two = EmulatedKernel(problem, 2)
    one = EmulatedKernel(replace(problem, streaming="in-place"), 2, reverse_blocks=True)
    assert KernelVariant.for_problem(one.problem).name.endswith("_aan_r40_nc")
    f0 = noisy_start(problem)
    for emu in (two, one):
        emu.set_populations(problem.initial_populations())
        emu.f[:] = emu.f[emu.current]
        emu.set_populations(f0)
    fluid = ~problem.tiling.solid[:, None, :].repeat(problem.lattice.q, axis=1)
    for steps in (3, 2):
        two.step(steps)
        one.step(steps)
        assert np.array_equal(one.populations()[fluid], two.populations()[fluid])


def _ptxas(tmp_path: Path, variant: KernelVariant) -> tuple[int, int]:
    """Registers per thread and spill-store bytes ptxas reports for ``variant`` (sm_90)."""
    cu = tmp_path / f"{variant.name}.cu"
    cu.write_text(kernel_source(variant))
    out = subprocess.run([NVCC, "-cubin", "-arch=sm_90", "-Xptxas", "-v", "-o",
                          str(cu.with_suffix(".cubin")), str(cu)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    return (int(re.search(r"Used (\d+) registers", out.stderr).group(1)),
            int(re.search(r"(\d+) bytes spill stores", out.stderr).group(1)))


@needs_nvcc
@pytest.mark.parametrize("storage", ["auto", "float16"])
def test_register_cap_holds_without_spills(tmp_path: Path, storage: str) -> None:
    for pattern in ("aa_neighbour", "aa_local"):
        v = KernelVariant("D3Q19", "float32", "BGK", True, "xyz", streaming=pattern,
                          storage=storage, aa=AATuning(max_registers=40))
        registers, spilled = _ptxas(tmp_path, v)
        assert registers <= 40 and spilled == 0, (v.name, registers, spilled)


def _float_ops(tmp_path: Path, variant: KernelVariant) -> Counter:
    cu = tmp_path / f"{variant.name}.cu"
    cu.write_text(kernel_source(variant))
    ptx = cu.with_suffix(".ptx")
    out = subprocess.run([NVCC, "-ptx", "-arch=sm_90", "-o", str(ptx), str(cu)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]
    return Counter(re.findall(r"^\s*((?:fma|mul|add|sub|neg|cvt)\.[a-z0-9.]*f(?:16|32|64)\b"
                              r"[a-z0-9.]*)", ptx.read_text(), re.M))


@needs_nvcc
@pytest.mark.parametrize("precision, storage, collision, layout", [
    ("float32", "auto", "BGK", "xyz"), ("float64", "auto", "BGK", "paper"),
    ("float64", "auto", "MRT", "xyz"), ("float32", "float16", "TRT", "xyz")])
def test_neighbour_step_does_the_two_copy_arithmetic(tmp_path: Path, precision, storage,
                                                     collision, layout) -> None:
    pull = KernelVariant("D3Q19", precision, collision, True, layout, storage=storage,
                         sector_fill=False)
    ref = _float_ops(tmp_path, pull)
    assert sum(ref.values()) > 100
    for aa in (AATuning(), TUNED):
        assert _float_ops(tmp_path, replace(pull, streaming="aa_neighbour", aa=aa)) == ref


class _FakeState:
    def __init__(self, problem) -> None:
        self.problem, self.launches, self.graphs = problem, {}, {}
        self.in_place = problem.streaming == "in-place"


class _FakeBackend:
    """Times a step at 1.0 ms in two copies and 1.25 ms in place (0.8 of two-copy)."""

    def __init__(self) -> None:
        self.released, self.stepped = 0, []

    def allocate(self, problem):
        return _FakeState(problem)

    def reconfigure(self, state, **changes):
        return _FakeState(replace(state.problem, **changes))

    def probe(self, state, mode, n, tpb):
        assert mode == "full"
        self.stepped.append(KernelVariant.for_problem(state.problem).name)
        return n * (1.25e-3 if state.in_place else 1e-3)

    def release(self, state) -> None:
        self.released += 1


def test_inplace_tune_times_every_tuning_through_the_backend_choice() -> None:
    """benchmarks/in_place/inplace_tune.py (run on the GPU) on a fake backend: one two-copy row and
    one in-place row per tuning and tiles per block, the tuned kernels are what the backend
    resolves, their registers reported, and the backend's choice restored afterwards."""
    import importlib.util

    from solver.benchmarking.cases import BenchCase

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "in_place" / "inplace_tune.py"
    spec = importlib.util.spec_from_file_location("inplace_tune", path)
    tune = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tune)

    class Compiled:
        def __init__(self, variant) -> None:
            self.num_regs, self.local_size_bytes = variant.aa.max_registers or 42, 0

    backend = _FakeBackend()
    case = BenchCase("box 8^3", np.zeros((8, 8, 8), dtype=bool), tile_offset="origin")
    rows = tune.measure(backend, Compiled, case, "float32", [2, 4], 0.01, 3)
    tunings = tune.TUNINGS["float32"]
    assert len(rows) == 2 * (1 + len(tunings)) and backend.released == 2
    assert [r["tuning"] for r in rows if r["tpb"] == 2] == ["-", "-", "r48", "r44", "r40"]
    for r in rows:
        in_place = r["streaming"] == "in-place"
        assert r["of_two_copy"] == pytest.approx(0.8 if in_place else 1.0)
        assert len(r["kernels"]) == len(r["registers"]) == (2 if in_place else 1)
        if r["tuning"].startswith("r40"):
            assert r["registers"] == [40, 40]
            assert all(k.endswith(("_aan_" + r["tuning"], "_aal_" + r["tuning"]))
                       for k in r["kernels"])
    assert any(name.endswith("_aan_r44") for name in backend.stepped)
    assert streaming.AA_TUNING["float32"] == AATuning()
