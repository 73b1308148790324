"""CPU checks of the generated CUDA kernels: the variants compile, and the kernel text runs.

* The variants of :func:`kernel_cover.compile_cover` (every combination of three parts' values
  of the variant space, which is exactly what the plans launch: ``test_variant_space.py``;
  ``LBM_COMPILE_ALL=1``: every variant) are compiled with the local ``nvcc`` for sm_80 and
  sm_90 (many variants per translation unit, each in its own namespace), so template and syntax
  errors show without a GPU.
* A few variants run through the g++ emulation of :mod:`kernel_emulator` and must match the NumPy
  reference on porous geometries with periodic wrap, walls, empty tiles and a body force, and on
  the boundary and MRT cases of :mod:`physics_cases` (Zou-He faces, moving walls and objects,
  MRT on D2Q9, D3Q19 and D3Q13).
* Solid nodes: the XYZ-layout kernels write the rest equilibrium exactly into the solid nodes
  that share a 32-byte sector with a fluid node and nothing else, no fluid value depends on a
  solid one, and both backends hold the same solid values (:mod:`solver.backends.base`).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from solver.backends.cuda.kernels import (
    SECTOR_FILL_MIN_MIX,
    KernelVariant,
    all_variants,
    kernel_source,
)
from solver.backends.cuda.tables import (
    SOURCE32_LIMIT,
    direction_layouts,
    needs_wide_sources,
    shared_bytes,
    slot_table,
)
from solver.config import SimulationConfig
from solver.lattice import get_lattice
from solver.problem import Problem

from .kernel_cover import compile_cover, parts
from .kernel_emulator import EmulatedKernel, compiler, emulate
from .physics_cases import physics_problem
from .porous_cases import (
    as_stored,
    half_tolerance,
    make_problem,
    noisy_start,
    reference,
    sector_filled,
)

NVCC = shutil.which("nvcc") or next(
    (p for p in ("/usr/local/bin/nvcc", "/usr/local/cuda/bin/nvcc") if Path(p).exists()), None)
#: What nvcc compiles: a 3-way cover of the variant space (kernel_cover), or all of it.
VARIANTS = all_variants() if os.environ.get("LBM_COMPILE_ALL") else list(compile_cover())


def _nvcc(source: Path, arch: str) -> None:
    out = subprocess.run([NVCC, "-cubin", f"-arch={arch}", "-o", str(source.with_suffix(".cubin")),
                          str(source)], capture_output=True, text=True)
    assert out.returncode == 0, f"nvcc {arch} failed on {source.name}:\n{out.stderr[-4000:]}"


def test_the_compiled_variants_cover_every_three_parts_of_the_space() -> None:
    """Every value of any three parts that meet in a plan's kernel meets in a compiled one:
    the in-place kernels with every boundary code and storage, MRT's boundary codes on every
    lattice it runs, float16 storage with the wide halo sources, the compact kernels, ..."""
    def triples(variants) -> set:
        return {c for v in variants for c in itertools.combinations(parts(v), 3)}

    space = all_variants()
    assert set(VARIANTS) <= set(space) and triples(VARIANTS) == triples(space)
    assert len(VARIANTS) < len(space) // 20 or len(VARIANTS) == len(space)
    names = {v.name for v in VARIANTS}
    for lattice, suffix in itertools.product(("D2Q9", "D3Q19", "D3Q13"), ("_zh", "_mw")):
        assert any(f"_{lattice}_" in n and "_MRT_" in n and suffix in n for n in names)
    assert {(v.streaming, v.boundary, v.storage) for v in VARIANTS if v.mode == "full"} >= {
        (s, b, t) for s in ("aa_neighbour", "aa_local") for b in ("none", "zou_he", "moving")
        for t in ("auto", "float16")}


@pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) is not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_every_kernel_variant_compiles(arch: str, tmp_path: Path) -> None:
    batches = [VARIANTS[k::4] for k in range(4)]
    sources = []
    for k, batch in enumerate(batches):
        sources.append(tmp_path / f"variants{k}.cu")
        sources[-1].write_text("\n".join(kernel_source(v) for v in batch))
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda s: _nvcc(s, arch), sources))
    assert len({v.name for v in VARIANTS}) == len(VARIANTS) >= 100


_TILED = [v for v in VARIANTS if not v.compact]


@pytest.mark.parametrize("variant", _TILED[:1] + _TILED[-1:] + [
    KernelVariant("D3Q13", "float32", "MRT", False, "paper", "full", 4, "moving"),
    KernelVariant("D2Q9", "float64", "TRT", True, "xyz", "full", 8, "zou_he")],
    ids=lambda v: v.name)
def test_kernel_has_one_block_barrier_and_no_headers(variant: KernelVariant) -> None:
    src = kernel_source(variant)
    assert src.count("__syncthreads()") == 1
    assert "#include" not in src and f" {variant.name}(" in src and 'extern "C"' in src
    assert ("switch (face)" in src) == (variant.boundary != "none")
    assert ("NO_WALL) {" in src) == (variant.boundary == "moving")


def test_kernel_refuses_what_it_does_not_implement() -> None:
    with pytest.raises(ValueError, match="MRT is implemented for"):
        kernel_source(KernelVariant("D3Q27", "float64", "MRT"))
    with pytest.raises(ValueError, match="Unknown collision"):
        kernel_source(KernelVariant("D3Q19", "float64", "KBC"))
    with pytest.raises(ValueError, match="Unknown boundary"):
        kernel_source(KernelVariant("D3Q19", "float64", boundary="slip"))


def test_paper_layout_assignment() -> None:
    lat = get_lattice("D3Q19")
    kinds = dict(zip(lat.names, direction_layouts("D3Q19", "paper", 4), strict=True))
    assert {n for n, k in kinds.items() if k == "xyz"} == set("O N S T B NT NB ST SB".split())
    assert {n for n, k in kinds.items() if k == "yxz"} == set(
        "E W ET EB NW SW WT WB".split())
    assert {n for n, k in kinds.items() if k == "zigzag"} == {"NE", "SE"}
    assert direction_layouts("D2Q9", "paper", 8) == ("xyz",) * 9
    for lattice, a in (("D3Q19", 4), ("D3Q27", 4), ("D2Q9", 8)):
        for row in slot_table(lattice, "paper", a):
            assert sorted(row.tolist()) == list(range(a ** get_lattice(lattice).d))


needs_gxx = pytest.mark.skipif(compiler() is None, reason="g++ is not installed")


@needs_gxx
@pytest.mark.parametrize("lattice, precision, collision, fluid, layout, tpb, offset", [
    ("D3Q19", "float64", "TRT", "quasi-compressible", "paper", 2, (1, 3, 2)),
    ("D3Q19", "float32", "BGK", "incompressible", "xyz", 4, None),
    ("D2Q9", "float64", "TRT", "incompressible", "xyz", 1, (5, 2)),
    ("D3Q27", "float64", "BGK", "quasi-compressible", "paper", 1, None),
    ("D3Q19", "float32", "TRT", "quasi-compressible", "xyz", 2, None),
    ("D3Q19", "float64", "RR", "quasi-compressible", "xyz", 2, (1, 3, 2)),
    ("D2Q9", "float32", "RR", "incompressible", "paper", 1, None),
])
def test_emulated_kernel_matches_numpy(lattice, precision, collision, fluid, layout, tpb,
                                       offset) -> None:
    problem = make_problem(lattice, precision, collision, fluid, layout, tpb, offset)
    f0 = noisy_start(problem)
    got = emulate(problem, f0, 12, tpb)
    ref = reference(problem, f0, 12)
    tol = 1e-12 if precision == "float64" else 1e-5
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()


@needs_gxx
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_emulated_rr_with_smagorinsky_matches_numpy(precision) -> None:
    """RR's Smagorinsky branch (a sqrt per node) in the compiled kernel, near tau = 1/2."""
    from solver.regularized import rr_rates

    problem = make_problem("D3Q19", precision, "RR", "incompressible", "xyz", 2)
    problem = replace(problem, rates=rr_rates(0.51, 0.17))
    f0 = noisy_start(problem)
    got = emulate(problem, f0, 12, 2)
    ref = reference(problem, f0, 12)
    tol = 1e-12 if precision == "float64" else 1e-5
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()


def test_halo_sources_widen_only_where_a_copy_outgrows_32_bits() -> None:
    """A source is an offset in a copy (tile * Q * NPT + node); the node's own slots reach one
    tile further, so 32 bits hold up to 2^31 / (Q * NPT) - 1 tiles."""
    def problem(n_tiles: int) -> SimpleNamespace:
        tiling = SimpleNamespace(n_tiles=n_tiles, nodes_per_tile=64)
        return SimpleNamespace(tiling=tiling, lattice=get_lattice("D3Q19"))

    most = SOURCE32_LIMIT // (19 * 64) - 1
    assert not needs_wide_sources(problem(most)) and needs_wide_sources(problem(most + 1))
    assert shared_bytes("D3Q19", 4, 2, "full", 8) - shared_bytes("D3Q19", 4, 2) == 2 * 4 * 216
    wide = KernelVariant("D3Q19", "float32", layout="xyz", wide_sources=True)
    assert wide.name.endswith("_s64") and "typedef long long src_t;" in kernel_source(wide)
    assert "typedef int src_t;" in kernel_source(replace(wide, wide_sources=False))
    # Kernels that resolve no halo have no sources to widen: one kernel each.
    probe = replace(wide, mode="readwrite")
    assert probe.canonical() == replace(probe, wide_sources=False).canonical()


@needs_gxx
@pytest.mark.parametrize("case, lattice, precision, layout, streaming, tpb", [
    ("porous", "D3Q19", "float32", "xyz", "two-copy", 2),
    ("porous", "D3Q19", "float64", "paper", "in-place", 1),
    ("zou_he_moving", "D2Q9", "float32", "xyz", "two-copy", 1),
    ("zou_he_moving", "D3Q19", "float64", "paper", "in-place", 1),
])
def test_emulated_wide_sources_match_narrow_bit_for_bit(case, lattice, precision, layout,
                                                        streaming, tpb) -> None:
    """The 64-bit halo sources address the same slots as the 32-bit ones: same values."""
    if case == "porous":
        problem = make_problem(lattice, precision, "TRT", "incompressible", layout, tpb)
    else:
        problem = physics_problem(case, lattice, precision, "TRT", "incompressible", layout,
                                  tpb)
    problem = replace(problem, streaming=streaming)
    assert not needs_wide_sources(problem)
    f0 = noisy_start(problem)
    narrow = emulate(problem, f0, 5, tpb)
    wide = emulate(problem, f0, 5, tpb, wide_sources=True)
    assert np.array_equal(narrow, wide)
    ref = reference(problem, f0, 5)
    tol = 1e-12 if precision == "float64" else 1e-5
    assert np.abs(wide - ref).max() <= tol * np.abs(ref).max()


@needs_gxx
@pytest.mark.parametrize("case, lattice, precision, collision, fluid, layout, tpb", [
    ("zou_he", "D3Q19", "float64", "TRT", "quasi-compressible", "paper", 2),
    ("zou_he_moving", "D3Q19", "float64", "MRT", "incompressible", "xyz", 1),
    ("zou_he_moving", "D2Q9", "float32", "BGK", "incompressible", "xyz", 1),
    ("zou_he", "D3Q13", "float64", "MRT", "incompressible", "xyz", 2),
    ("cavity", "D3Q19", "float64", "MRT", "incompressible", "xyz", 4),
    ("cavity", "D2Q9", "float64", "TRT", "quasi-compressible", "xyz", 2),
    ("objects", "D3Q19", "float64", "BGK", "quasi-compressible", "paper", 1),
    ("far_field", "D2Q9", "float64", "MRT", "quasi-compressible", "xyz", 2),
    ("mrt", "D2Q9", "float32", "MRT", "quasi-compressible", "xyz", 1),
    ("mrt", "D3Q13", "float64", "MRT", "quasi-compressible", "paper", 2),
    ("mrt", "D3Q19", "float64", "MRT", "quasi-compressible", "xyz", 2),
    ("mrt", "D3Q19", "float32", "MRT", "incompressible", "xyz", 1),
])
def test_emulated_boundaries_and_mrt_match_numpy(case, lattice, precision, collision, fluid,
                                                 layout, tpb) -> None:
    problem = physics_problem(case, lattice, precision, collision, fluid, layout, tpb)
    f0 = noisy_start(problem)
    got = emulate(problem, f0, 12, tpb)
    ref = reference(problem, f0, 12)
    tol = 1e-12 if precision == "float64" else 1e-5
    assert np.abs(got - ref).max() <= tol * np.abs(ref).max()


@pytest.mark.parametrize("case", ["zou_he", "far_field", "objects", "mrt"])
def test_kernel_without_ladd_only_where_no_link_needs_it(case) -> None:
    """The 'zou_he' kernel has no Ladd term: the reference must then have no such link."""
    from solver.backends.cuda.boundary import boundary_kind
    from solver.boundaries import ladd_links

    problem = physics_problem(case, "D3Q19")
    kind = boundary_kind(problem)
    assert kind == {"zou_he": "zou_he", "mrt": "none"}.get(case, "moving")
    links = ladd_links(problem.pull_table, problem.tiling, problem.lattice, problem.boundary,
                       problem.periodic)
    assert (links.node.size == 0) == (kind != "moving")


@needs_gxx
@pytest.mark.parametrize("case, lattice, collision, fluid, layout, tpb", [
    ("porous", "D3Q19", "BGK", "incompressible", "xyz", 2),
    ("porous", "D3Q19", "TRT", "quasi-compressible", "paper", 1),
    ("porous", "D2Q9", "TRT", "incompressible", "xyz", 1),
    ("zou_he_moving", "D3Q19", "MRT", "incompressible", "xyz", 1),
    ("cavity", "D2Q9", "BGK", "incompressible", "xyz", 2),
])
def test_emulated_float16_storage_matches_numpy(case, lattice, collision, fluid, layout,
                                                tpb) -> None:
    """Same binary16 values, same stochastic-rounding bits: only float32 arithmetic in another
    order may move a value across a rounding threshold."""
    if case == "porous":
        problem = make_problem(lattice, "float32", collision, fluid, layout, tpb,
                               storage="float16")
    else:
        problem = physics_problem(case, lattice, "float32", collision, fluid, layout, tpb)
        problem = replace(problem, storage_kind="float16")
    assert KernelVariant.for_problem(problem).half
    f0 = noisy_start(problem)
    emu = EmulatedKernel(problem, tpb)
    emu.set_populations(problem.initial_populations())
    emu.f[1 - emu.current] = emu.f[emu.current]
    emu.set_populations(as_stored(problem, f0))  # rest equilibrium in solid nodes
    emu.step(6)
    emu.set_step(100)  # a resumed run's counter: NumPy must draw the same bits
    emu.step(6)
    ref = reference(problem, f0, 6, then_from_step=100)
    got = emu.populations()
    assert emu.f.dtype == np.float16 and emu.seeds[emu.current] == 106
    assert np.abs(got - ref).max() <= half_tolerance(problem, ref)


@needs_gxx
@pytest.mark.parametrize("precision, storage", [("float64", "auto"), ("float32", "float16")])
def test_emulated_probes_move_exactly_the_fluid_values(precision, storage) -> None:
    problem = make_problem("D3Q19", precision, layout="paper", offset=(2, 1, 3),
                           storage=storage)
    fluid = ~problem.tiling.solid[:, None, :].repeat(problem.lattice.q, axis=1)
    f0 = noisy_start(problem)
    emu = EmulatedKernel(problem)
    emu.f[1 - emu.current] = np.nan  # poison: every fluid value must be written
    emu.set_populations(f0)
    emu.step(1, "readwrite")
    out = emu.populations()
    assert np.array_equal(out[fluid], f0[fluid]) and np.isnan(out[~fluid]).all()
    emu.f[1 - emu.current] = np.nan
    emu.set_populations(f0)
    emu.step(1, "propagate")
    table = problem.pull_table
    expected = np.full(f0.size, np.nan)
    expected[table.dst.ravel()] = f0.ravel()[table.src.ravel()]
    assert np.array_equal(emu.populations(), expected.reshape(f0.shape), equal_nan=True)


def test_sector_fill_is_chosen_by_the_share_of_mixed_sectors() -> None:
    porous = make_problem("D3Q19", "float32", layout="xyz", offset=(1, 3, 2))
    assert porous.sector_mix > SECTOR_FILL_MIN_MIX
    assert KernelVariant.for_problem(porous).sector_fill
    dense = Problem.from_config(np.zeros((16, 8, 8), bool),
                                SimulationConfig(gpu_layout="xyz", tile_offset="origin"))
    assert dense.sector_mix == 0.0 and not KernelVariant.for_problem(dense).sector_fill
    one_solid = np.zeros((16, 8, 8), bool)
    one_solid[5, 2, 3] = True  # one mixed sector of 32 bytes among all of them
    sparse = Problem.from_config(one_solid, SimulationConfig(gpu_layout="xyz",
                                                             tile_offset="origin"))
    per_sector = 32 // sparse.storage_dtype.itemsize
    assert sparse.sector_mix == pytest.approx(per_sector / one_solid.size)
    assert not KernelVariant.for_problem(sparse).sector_fill
    paper = make_problem("D3Q19", "float32", layout="paper")
    assert not KernelVariant.for_problem(paper).sector_fill  # slots permuted: never
    assert "_nf" in KernelVariant.for_problem(dense).name
    assert "_nf" not in KernelVariant.for_problem(paper).name


@needs_gxx
def test_emulated_kernel_without_sector_fill_never_writes_solid_nodes(monkeypatch) -> None:
    import solver.backends.cuda.kernels as kernels

    monkeypatch.setattr(kernels, "SECTOR_FILL_MIN_MIX", 1.5)  # above any share: no fill
    problem = make_problem("D3Q19", "float32", "BGK", layout="xyz", offset=(1, 3, 2))
    assert not KernelVariant.for_problem(problem).sector_fill
    f0 = noisy_start(problem)
    emu = EmulatedKernel(problem, 2)
    emu.f[...] = np.nan  # poison: only fluid slots may be written
    emu.set_populations(as_stored(problem, f0))
    emu.step(5)
    solid = problem.tiling.solid[:, None, :].repeat(problem.lattice.q, axis=1)
    latest = emu.populations()  # the copy steps 1, 3 and 5 wrote
    assert np.isnan(latest[solid]).all()
    ref = reference(problem, f0, 5)
    assert np.abs(latest[~solid] - ref[~solid]).max() <= 1e-5 * np.abs(ref).max()


@needs_gxx
@pytest.mark.parametrize("precision, storage, fluid", [
    ("float32", "auto", "quasi-compressible"), ("float64", "auto", "quasi-compressible"),
    ("float32", "float16", "quasi-compressible"),  # float16 populations
    ("float32", "float16", "incompressible")])  # float16 S-scaled deviations
def test_emulated_sector_fill_writes_rest_state_into_solid_nodes(precision, storage,
                                                                 fluid) -> None:
    from solver.backends.numpy_backend import NumpyBackend

    problem = replace(make_problem("D3Q19", precision, "TRT", fluid, "xyz", 2,
                                   (1, 3, 2), storage=storage), rho0=1.037)  # w_i rho0 rounds
    solid, filled = problem.tiling.solid, sector_filled(problem)
    assert filled.any() and (solid & ~filled).any()  # both kinds of solid node occur
    st = problem.storage  # float16: sectors of 16 nodes, the rest state stored as binary16 0
    stored_rest = st.encode(problem.rest_populations()[:, None])
    assert not st.encoded or not stored_rest.view(np.uint16).any()
    rest = st.decode(stored_rest)[:, 0].astype(np.float64)
    f0 = noisy_start(problem)  # noise in solid nodes too
    node = lambda f: f.transpose(0, 2, 1)  # noqa: E731  (tile, node, direction)

    emu = EmulatedKernel(problem, 2)
    emu.f[...] = np.nan  # poison: a fluid node that reads a solid one turns NaN
    emu.set_populations(f0)
    emu.step(12)
    latest = emu.populations()
    other = st.decode(emu.f[1 - emu.current]).astype(np.float64)  # XYZ: slots are nodes
    for f, unfilled in ((latest, f0), (other, np.full_like(f0, np.nan))):
        assert np.array_equal(node(f)[filled], np.broadcast_to(rest, node(f)[filled].shape))
        assert np.array_equal(node(f)[solid & ~filled], node(unfilled)[solid & ~filled],
                              equal_nan=True)  # never written
    ref = reference(problem, f0, 12)
    tol = {"float64": 1e-12 * np.abs(ref).max(), "float32": 1e-5 * np.abs(ref).max()}[
        precision] if not st.encoded else half_tolerance(problem, ref)
    fluid = ~solid
    assert np.abs(node(latest)[fluid] - node(ref)[fluid]).max() <= tol

    numpy = NumpyBackend(threads=1)  # both copies, and the backends, agree exactly
    state = numpy.allocate(problem)
    numpy.set_populations(state, f0)
    for f in state.f:
        assert np.array_equal(node(st.decode(f))[solid].astype(np.float64),
                              np.broadcast_to(rest, node(f)[solid].shape))
    got = emulate(problem, f0, 12, 2)
    assert np.array_equal(node(got)[solid], node(ref)[solid])
    assert np.abs(got - ref).max() <= tol


@needs_gxx
@pytest.mark.parametrize("shape", [(1, 9, 2), (3, 6, 5)])
def test_emulated_kernel_on_domains_narrower_than_a_tile(shape) -> None:
    from solver.config import SimulationConfig
    from solver.problem import Problem

    config = SimulationConfig(lattice="D3Q19", precision="float64", collision="TRT",
                              fluid_model="quasi-compressible", body_force=(1e-5, 0.0, 2e-6),
                              y_min="wall", y_max="wall", tile_offset="origin")
    problem = Problem.from_config(np.zeros(shape, dtype=bool), config)
    f0 = noisy_start(problem)
    ref = reference(problem, f0, 15)
    assert np.abs(emulate(problem, f0, 15) - ref).max() <= 1e-12 * np.abs(ref).max()


@needs_gxx
@pytest.mark.parametrize("tpb", [1, 2])
def test_emulated_tile_range_steps_only_its_tiles(tpb) -> None:
    """A launch over tiles [lo, hi) writes exactly the fluid values of those tiles, equal to
    a full step's (a distributed rank launches its boundary and interior ranges so)."""
    problem = make_problem("D3Q19", "float64", "TRT", "quasi-compressible", "paper", tpb)
    f0 = noisy_start(problem)
    full = EmulatedKernel(problem, tpb)
    full.set_populations(f0)
    full.step(1)
    expected = full.populations()
    n = problem.tiling.n_tiles
    fluid = ~problem.tiling.solid[:, None, :].repeat(problem.lattice.q, axis=1)
    for lo, hi in ((0, 3), (3, n - 2), (n - 1, n)):  # odd starts: blocks straddle the range
        emu = EmulatedKernel(problem, tpb)
        emu.f[1 - emu.current] = np.nan
        emu.set_populations(f0)
        emu.step(1, tiles=(lo, hi))
        got = emu.populations()
        inside = np.zeros(n, dtype=bool)
        inside[lo:hi] = True
        mask = fluid & inside[:, None, None]
        assert np.array_equal(got[mask], expected[mask])
        assert np.isnan(got[~mask]).all()
