"""A compact run's edge tables made on the device (solver.backends.cuda.compact_edges) against
the host's (compact_run.edge_nodes): the same values and dtypes, bit for bit. On the CPU the
kernel text runs under g++ (:mod:`.grid_stride_emulator`); ``-m gpu``: on CuPy."""

from __future__ import annotations

import numpy as np
import pytest

from solver.backends.cuda import compact_edges, compact_run
from solver.backends.cuda.compact import CompactTiling, fluid_words
from solver.backends.cuda.compact_readout import fluid_starts
from solver.backends.cuda.compact_run import edge_nodes
from solver.backends.cuda.tables import fluid_masks
from solver.config import SimulationConfig
from solver.problem import Problem

from .grid_stride_emulator import compiler, launch_args, load, run_template
from .porous_cases import porous_solid

_PARAMS = ("const unsigned long long* masks, const at_t* base, const int* padded, "
           "const long long* starts, long long n_tiles, int q, at_t* at, int* block, "
           "tiled_t* tiled, value_t* f, const value_t* rest, int fill")
_ARGS = "masks, base, padded, starts, n_tiles, q, at, block, tiled, f, rest, fill"


def _launch(source: str, blocks: int, threads: int, args: tuple) -> None:
    """The kernel under g++: 2 blocks of 32 threads (the grid stride covers every tile)."""
    lib = load(source, run_template("compact_edges", _PARAMS, _ARGS), "compact_edges")
    lib.run_compact_edges(min(blocks, 2), 32, *launch_args(args))


def _compact(pad: int, wide: bool) -> tuple[CompactTiling, int]:
    problem = Problem.from_config(porous_solid((20, 16, 12), seed=4),
                                  SimulationConfig(precision="float32"))
    return CompactTiling(problem.tiling, pad, wide), problem.lattice.q


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("pad, wide, wide_tiled", [(1, False, False), (8, False, False),
                                                   (1, True, False), (1, True, True)])
def test_device_edge_tables_are_the_hosts(pad, wide, wide_tiled, monkeypatch):
    """32- and 64-bit value offsets, padded blocks, and an int64 tiled index (forced: it takes
    2^31 tiled values, 1.8 M tiles)."""
    for module in (compact_edges, compact_run):
        monkeypatch.setattr(module, "wide_edges", lambda compact, q, w=wide_tiled: w)
    compact, q = _compact(pad, wide)
    host = edge_nodes(compact, q)
    device = compact_edges.device_edges(compact, q, fluid_starts(compact), compact.masks,
                                        compact.base_table(), np, launch=_launch)
    assert host[0].size == compact.tiling.n_fluid
    for got, want in zip(device, host, strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("precision, storage, copies", [("float32", "auto", "two-copy"),
                                                        ("float64", "auto", "in-place"),
                                                        ("float32", "float16", "two-copy")])
def test_the_edge_kernels_fill_stores_fill_rests_bits(precision, storage, copies):
    """The launch that makes the edge tables also stores the rest equilibrium at every fluid
    node of a copy (pad 1: every slot; a copy of other bits at first): the bits
    CompactRun.fill_rest stores into its zeroed copy (float16: encoded, binary16 zero)."""
    from solver.backends.cuda.compact_run import CompactRun

    problem = Problem.from_config(porous_solid((20, 16, 12), seed=4), SimulationConfig(
        precision=precision, storage=storage, streaming=copies, tile_storage="compact"))
    run = CompactRun(problem, 1, xp=np)  # host arrays: filled by fill_rest
    filled = np.full(run.f[0].nbytes, 0xAB, np.uint8).view(run.f[0].dtype)
    edges = compact_edges.device_edges(run.compact, problem.lattice.q, run.starts,
                                       *run.tables[:2], np, launch=_launch,
                                       fill=(filled, run.rest_stored()))
    assert filled.dtype == run.f[0].dtype
    np.testing.assert_array_equal(filled.view(np.uint8), run.f[0].view(np.uint8))
    for got, want in zip(edges, run.edge, strict=True):
        np.testing.assert_array_equal(got, want)


def test_fluid_words_and_counts_are_the_tiles_fluid_nodes():
    """CompactTiling's masks (packed solid bits, inverted) and counts (their popcounts) are
    the tiled kernels' fluid masks and the tiles' fluid node counts."""
    compact, _ = _compact(1, False)
    fluid = ~compact.tiling.solid
    np.testing.assert_array_equal(compact.masks, fluid_masks(fluid)[:, 0])
    np.testing.assert_array_equal(compact.counts, fluid.sum(axis=1))
    np.testing.assert_array_equal(fluid_words(compact.tiling.solid), compact.masks)
    np.testing.assert_array_equal(fluid_starts(compact)[1:], np.cumsum(fluid.sum(axis=1)))


@pytest.mark.gpu
def test_a_cupy_compact_run_makes_the_hosts_edge_tables():
    """On CuPy a compact run without host edge tables (as the backend prepares it) makes them
    on its device: the values of edge_nodes."""
    cp = pytest.importorskip("cupy")
    from solver.backends.cuda.compact_run import CompactRun, compact_host

    problem = Problem.from_config(porous_solid((20, 16, 12), seed=4),
                                  SimulationConfig(precision="float32", tile_storage="compact"))
    from solver.backends import get_backend

    backend = get_backend("cupy")
    backend.prepare(problem)  # as a study prepares the run ahead: no host edge tables
    runs = [backend.allocate(problem)]
    for wide in (False, True):
        host = compact_host(problem, 1, wide, edges=False)
        assert host.edge is None
        runs.append(CompactRun(problem, 1, cp, wide=wide, host=host))
    assert runs[0].edge[0].dtype == np.int32 and runs[2].edge[0].dtype == np.int64
    for run in runs:
        for got, want in zip(run.edge, edge_nodes(run.compact, problem.lattice.q),
                             strict=True):
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(cp.asnumpy(got), want)
        backend.release(run)


def test_host_arrays_make_the_edge_tables_a_gpu_run_leaves_out():
    """Host tables made for a GPU run (no edge tables) still serve a run of host arrays: it
    makes the edge tables and the rest fill on the host, as with none made ahead."""
    from solver.backends.cuda.compact_run import CompactRun, compact_host

    problem = Problem.from_config(porous_solid((20, 16, 12), seed=4),
                                  SimulationConfig(precision="float32", tile_storage="compact"))
    host = compact_host(problem, 1, edges=False)
    assert host.edge is None
    run, fresh = CompactRun(problem, 1, xp=np, host=host), CompactRun(problem, 1, xp=np)
    assert run.compact is host.compact
    for got, want in zip((*run.edge, *run.f), (*fresh.edge, *fresh.f), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
