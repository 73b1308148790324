"""Chunked readout of fluid-compacted runs (issue 20 item 1): fields, cuts, health numbers and
checkpoints of a compact run read a bounded number of tiles at a time, give the same bits as
one whole conversion under every chunking, and never build a tiled copy of all populations;
the memory estimate is the state plus one chunk. On the CPU: a Simulation whose backend steps
a :class:`CompactRun` on NumPy arrays, kernels through the g++ emulator."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from solver.backends.cuda.compact import CompactTiling
from solver.backends.cuda.compact_readout import (
    compact_state_bytes,
    readout_budget,
    readout_tile_bytes,
    readout_tiles,
    state_bytes,
)
from solver.backends.numpy_backend import NumpyBackend
from solver.config import SimulationConfig
from solver.io import read_checkpoint
from solver.memory import cut_bytes, device_bytes
from solver.problem import Problem
from solver.simulation import Simulation

from .compact_emulator import FakeCupy, compiler
from .porous_cases import as_stored, noisy_start, porous_solid

pytestmark = pytest.mark.skipif(compiler() is None, reason="g++ is not installed")


class EmulatedCompactBackend(NumpyBackend):
    """The CuPy backend's compact path on the host: a CompactRun of NumPy arrays, its kernels
    through the emulator (plain launches)."""

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.launcher = FakeCupy().launcher()

    def allocate(self, problem: Problem):
        from solver.backends.cuda.compact_run import CompactRun

        return CompactRun(problem, 1, xp=np, launcher=self.launcher)

    def step(self, state, n: int = 1) -> float:
        return state.step(n)

    def populations(self, state) -> np.ndarray:
        return state.populations()

    def device_populations(self, state, tiles=None):
        return state.device_populations(tiles)

    def readout_tiles(self, state) -> int:
        return state.readout_tiles

    def node_index(self, state, tile, node, solid):
        return state.node_index(tile, node, solid)

    def node_populations(self, state, index):
        return state.node_populations(index)

    def fluid_populations(self, state, part):
        return state.fluid_populations(part)

    def set_populations(self, state, f) -> None:
        state.set_populations(f)

    def set_step(self, state, step: int) -> None:
        pass

    def iolet_flux(self, state) -> None:
        return None  # compact runs have no openings' pass

    def state_bytes(self, problem: Problem) -> int:
        return state_bytes(problem)

    def memory_required(self, problem: Problem) -> int:
        return device_bytes(problem)

    def release(self, state) -> None:
        state.release()


def whole_tiled_copy(run) -> np.ndarray:
    """The readout before chunking (CompactRun.device_populations of fc2d818): one tiled copy
    of all populations, converted direction by direction."""
    run._natural()
    p = run.problem
    rest = p.rest_populations().astype(p.dtype)
    out = np.empty((p.tiling.n_tiles, p.lattice.q, p.tiling.nodes_per_tile), dtype=p.dtype)
    out[...] = rest[None, :, None]
    at, block, tiled = run.edge
    flat, latest = out.reshape(-1), run.f[run.current]
    for i in range(p.lattice.q):
        flat[tiled + i * 64] = latest[at + i * block]
    return out


def _simulation(precision: str = "float32", shape=(26, 15, 11), **faces) -> Simulation:
    config = SimulationConfig(lattice="D3Q19", precision=precision, collision="TRT",
                              body_force=(2e-5, -1e-5, 5e-6), tau=0.7, y_min="wall",
                              y_max="wall", tile_storage="compact", **faces)
    sim = Simulation(porous_solid(shape), config, EmulatedCompactBackend())
    sim.allocate()
    sim.backend.set_populations(sim.state, as_stored(sim.problem, noisy_start(sim.problem)))
    sim.step(3)
    return sim


@pytest.fixture(scope="module")
def sim() -> Simulation:
    """x walls too: the flow axis x is not periodic, so health reports layer densities."""
    return _simulation(x_min="wall", x_max="wall")


@pytest.mark.parametrize("tiles", [1, 3, 7, 60, 10**6])
def test_chunked_readout_equals_one_whole_conversion_bit_for_bit(sim, tiles, tmp_path) -> None:
    """Chunks of 1, 3, 7 and 60 tiles (7 leaves a short last chunk; wall shear reads
    chunk/27 own tiles at a time, 60 makes that 2) and one chunk of all tiles: populations,
    checkpoint, fields, cuts and view planes all the same bits as the readout that converted
    all tiles at once; health numbers and wall shear the same up to the order of sums."""
    run = sim.state
    n = sim.tiling.n_tiles
    assert n % 7 and n > 20
    run.readout_tiles = min(tiles, n)
    whole = whole_tiled_copy(run)
    np.testing.assert_array_equal(run.device_populations(), whole)
    np.testing.assert_array_equal(sim.populations(), whole.astype(np.float64))
    picked = np.array([n - 1, 0, 5, 6, 2])  # a cut's tiles: an index array, any order
    np.testing.assert_array_equal(run.device_populations(picked), whole[picked])
    np.testing.assert_array_equal(run.device_populations(slice(4, 11)), whole[4:11])
    checkpoint = read_checkpoint(sim.save(tmp_path / "c.npz"))
    assert checkpoint.populations.dtype == np.float32
    np.testing.assert_array_equal(checkpoint.populations, whole)

    run.readout_tiles = n  # the reference: one chunk of all tiles
    fields, health = sim.fields(), sim.health()
    views = [sim.view(axis, 5, "umag", health=h) for axis in range(3) for h in (True, False)]
    cut = sim.slice(2, 4, "rho")
    shear = sim.wall_shear_stress()
    run.readout_tiles = min(tiles, n)
    np.testing.assert_array_equal(np.isnan(sim.wall_shear_stress()), np.isnan(shear))
    np.testing.assert_allclose(sim.wall_shear_stress(), shear, rtol=1e-12, atol=0)
    for key in ("rho", "u"):
        np.testing.assert_array_equal(sim.fields()[key], fields[key])
    np.testing.assert_array_equal(sim.slice(2, 4, "rho"), cut)
    again = [sim.view(axis, 5, "umag", health=h) for axis in range(3) for h in (True, False)]
    for old, new in zip(views, again, strict=True):
        np.testing.assert_array_equal(new["plane"], old["plane"])
        np.testing.assert_array_equal(new["velocity"], old["velocity"])
    chunked = sim.health()
    assert chunked["finite"] and health["finite"]
    assert chunked["max_speed"] == health["max_speed"]
    assert chunked["layer_density"] == health["layer_density"] is not None
    for key in ("mean_velocity", "mean_momentum"):
        np.testing.assert_allclose(chunked[key], health[key], rtol=1e-12, atol=0)


def test_health_sees_a_nan_in_any_chunk(sim) -> None:
    run = sim.state
    saved = run.f[run.current].copy()
    try:
        run.readout_tiles = 3
        run.f[run.current][-1] = np.nan  # the last fluid node's last direction: last chunk
        health = sim.health()
        assert not health["finite"] and health["max_speed"] == float("inf")
    finally:
        run.f[run.current][...] = saved


#: Bytes a readout allocates whatever its chunk size (partial sums, views, Python objects).
SLACK = 16 << 10


def _peak_during(action) -> tuple[int, object]:
    """Bytes allocated at the peak of ``action()`` above what was allocated before, and its
    result."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        result = action()
        return tracemalloc.get_traced_memory()[1] - before, result
    finally:
        tracemalloc.stop()


def test_a_readout_never_builds_a_tiled_copy_of_all_populations() -> None:
    """A health check, a view and a checkpoint's read of a compact run allocate at most one
    chunk's temporaries (readout_tile_bytes per tile), far less than one tiled copy of the
    populations in the arithmetic precision; before chunking each built that copy."""
    sim = _simulation(shape=(40, 31, 29))
    run, p = sim.state, sim.problem
    n, per_tile = sim.tiling.n_tiles, readout_tile_bytes(p)
    tiled_copy = n * p.lattice.q * 64 * p.dtype.itemsize
    run.readout_tiles = 4
    chunk = 4 * per_tile
    assert chunk < tiled_copy / 8
    sim.health()  # warm: the fluid mask and layer tables are made once per run,
    sim.view(0, 20, "umag", health=True)  # the cut's index arrays once per cut
    peak, _ = _peak_during(sim.health)
    assert peak <= chunk + SLACK
    peak, _ = _peak_during(lambda: sim.view(0, 20, "umag", health=True))
    assert peak <= chunk + cut_bytes(p) + SLACK
    peak, f = _peak_during(sim.populations)
    assert peak - f.nbytes <= chunk + SLACK  # the host array itself, and one chunk beside it
    run.readout_tiles = n
    peak, _ = _peak_during(sim.health)
    assert peak > tiled_copy  # one chunk of all tiles: what every read cost before


def test_estimate_is_the_state_plus_one_chunk_and_bounds_the_measured_peak() -> None:
    """``device_bytes`` of a compact problem: the allocated state (CompactRun.memory_bytes),
    one readout chunk of readout_tiles tiles, the fluid mask and wall bytes, and one cut's
    moments; the chunk is 1/8 of the state within [8, 64] MiB; the measured peak of a health
    check at that chunk size stays below the chunk's share of the estimate."""
    sim = _simulation(precision="float64", shape=(40, 31, 29))
    run, p = sim.state, sim.problem
    t = p.tiling
    state = run.memory_bytes()
    assert state == compact_state_bytes(p, CompactTiling(t, 1)) == sim.memory_bytes()
    assert sim.memory_bytes() == sim.backend.state_bytes(p)
    per_tile = readout_tile_bytes(p)
    assert run.readout_tiles == readout_tiles(p, state) == min(t.n_tiles,
                                                                (64 << 20) // per_tile)
    nodes = t.n_tiles * 64
    assert device_bytes(p) == state + run.readout_tiles * per_tile + 2 * nodes + cut_bytes(p)
    assert readout_budget(8 * (4 << 30)) == 256 << 20  # a large run: 256 MiB chunks
    assert readout_budget(8 * (100 << 20)) == 100 << 20  # 1/8 of an 800 MiB state
    assert readout_budget(8 << 20) == 64 << 20  # a small run: at least 64 MiB
    for tiles in (3, 17):  # the per-tile bound holds, and is not loose by more than 2x
        run.readout_tiles = tiles
        sim.health()
        peak, _ = _peak_during(sim.health)
        assert 0.5 * tiles * per_tile <= peak <= tiles * per_tile + SLACK


@pytest.mark.parametrize("room", [True, False], ids=["device copy", "host copy"])
def test_last_good_of_a_compact_run_keeps_its_fluid_slots_only(room) -> None:
    """A compact run's last good state is its stored compact copy, on the device where there
    is room, else on the host: nothing beside the copy itself (before, keep() converted all
    tiles into a tiled copy first, then copied that); restoring gives the kept populations
    back bit for bit."""
    from solver.last_good import LastGood

    sim = _simulation(shape=(40, 31, 29))
    run = sim.state
    run.readout_tiles = 4
    sim.backend.free_memory = lambda: 1 << 50 if room else 0
    good = LastGood()
    peak, _ = _peak_during(lambda: good.keep(sim))
    assert good.on_device is room and good.step == sim.time_step
    assert good._f.shape == run.f[run.current].shape  # fluid slots, not tile nodes
    assert peak - good._f.nbytes <= SLACK
    kept = sim.populations()
    copy = good._f
    sim.step(2)
    assert not np.array_equal(sim.populations(), kept)
    good.restore(sim)
    np.testing.assert_array_equal(sim.populations(), kept)
    if room:
        sim.step(1)
        peak, _ = _peak_during(lambda: good.keep(sim))
        assert good._f is copy and peak <= SLACK
        np.testing.assert_array_equal(good._f, run.f[run.current])


def test_writing_tile_ranges_stores_the_bits_of_one_whole_write() -> None:
    """set_populations(f[part], tiles=part) over consecutive ranges (a start built a chunk at a
    time, solver.distributed.coarse_start) stores what one whole write stores."""
    sim = _simulation(shape=(40, 31, 29))
    run, p = sim.state, sim.problem
    f = noisy_start(p, seed=6)
    run.readout_tiles = 5
    run.set_populations(f)
    whole = run.f[run.current].copy()
    run.f[run.current][...] = -9.0
    cuts = [0, 3, 17, 18, p.tiling.n_tiles]
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        run.set_populations(f[lo:hi], slice(lo, hi))
    np.testing.assert_array_equal(run.f[run.current], whole)


@pytest.mark.parametrize("tiles", [1, 7, 10**6])
def test_writing_in_chunks_stores_the_same_bits_in_one_chunk_of_memory(tiles) -> None:
    """set_populations (checkpoint resume, rollback) writes readout_tiles tiles at a time: the
    compact copy gets the same bits as from one whole write, the padding is left alone, and
    the write allocates one chunk's temporaries, not a column of every tile node per
    direction plus tile-node indices of every fluid node as before."""
    sim = _simulation(shape=(40, 31, 29))
    run, p = sim.state, sim.problem
    f = noisy_start(p, seed=5)
    run.readout_tiles = p.tiling.n_tiles
    run.f[run.current][...] = -9.0
    run.set_populations(f)
    whole = run.f[run.current].copy()
    run.readout_tiles = min(tiles, p.tiling.n_tiles)
    run.f[run.current][...] = -9.0
    peak, _ = _peak_during(lambda: run.set_populations(f))
    np.testing.assert_array_equal(run.f[run.current], whole)
    if tiles < p.tiling.n_tiles:
        assert peak <= run.readout_tiles * readout_tile_bytes(p) + SLACK


@pytest.mark.parametrize("tiles", [1, 7, 10**6])
@pytest.mark.parametrize("window", [(3, 20), (0, 26)])
def test_permeability_check_reads_the_compact_copy_as_the_tiled_chunks(sim, tiles, window,
                                                                       monkeypatch) -> None:
    """KCheck on a compact run reads the fluid nodes from the compact copy (issue 29): the
    same health numbers and k as the pass over tiled readout chunks, under any chunking; a
    window with end layers (x walls) and the whole box."""
    from solver.rock.check import KCheck

    monkeypatch.setattr(sim.state, "readout_tiles", tiles)
    check = KCheck(sim, 0, window, 1e-5)
    assert check.nodes is not None  # the compact path
    health, k = check.read()
    check.nodes = None  # the tiled readout chunks
    tiled_health, tiled_k = check.read()
    assert health["finite"] and tiled_health["finite"]
    assert health["max_speed"] == tiled_health["max_speed"]
    assert health["flow_tortuosity"] == pytest.approx(tiled_health["flow_tortuosity"],
                                                      rel=1e-12)
    assert k.lattice == pytest.approx(tiled_k.lattice, rel=1e-12, abs=0)
    assert k.gradient == pytest.approx(tiled_k.gradient, rel=1e-12, abs=0)


def test_permeability_check_sees_a_nan_in_the_compact_copy() -> None:
    from solver.rock.check import KCheck

    sim = _simulation(x_min="wall", x_max="wall")
    sim.state.readout_tiles = 5
    check = KCheck(sim, 0, (3, 20), None)
    at, block, _ = sim.state.edge
    node = len(at) - 1  # the last fluid node: the last chunk
    sim.state.f[sim.state.current][at[node] + 3 * block[node]] = np.nan
    health, k = check.read()
    assert not health["finite"] and k is None


@pytest.mark.parametrize("options", [{"precision": "float32"},
                                     {"precision": "float64", "streaming": "in-place"},
                                     {"precision": "float32", "storage": "float16"}])
def test_a_new_compact_run_holds_the_rest_state_without_a_host_array(options) -> None:
    """CompactRun fills its rest state on the device (issue 29: the host array of every tile
    node was most of a rock run's allocation): the same bits, padding included, as writing
    ``initial_populations()``, in every chunking."""
    from solver.backends.cuda.compact_run import CompactRun

    config = SimulationConfig(lattice="D3Q19", collision="TRT", tile_storage="compact",
                              **options)
    problem = Problem.from_config(porous_solid((20, 14, 11)), config)
    run = CompactRun(problem, 1, xp=np, launcher=FakeCupy().launcher())
    filled = [np.array(f) for f in run.f]

    def same(reference) -> bool:
        return all(a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
                   for a, b in zip(reference, run.f, strict=True))

    for f in run.f:
        f[...] = 0
    run.set_populations(problem.initial_populations())
    assert same(filled)
    for f in run.f:
        f[...] = 0
    run.readout_tiles = 3  # chunks of 3 tiles' worth of fluid nodes
    run.fill_rest()
    assert same(filled)


def test_edge_tables_follow_their_definition_from_the_ranks():
    """edge_nodes (one pass over the flat fluid indices, issue 29) lists every fluid node tile
    by tile with its compact index q base + rank, its block length and its tiled index."""
    from solver.backends.cuda.compact_run import edge_nodes

    problem = Problem.from_config(porous_solid((20, 16, 12), seed=4),
                                  SimulationConfig(precision="float32"))
    compact = CompactTiling(problem.tiling, 8)
    q = problem.lattice.q
    ranks = compact.ranks()
    tile, node = np.nonzero(ranks >= 0)
    at, block, tiled = edge_nodes(compact, q)
    np.testing.assert_array_equal(at, q * compact.base[tile] + ranks[tile, node])
    np.testing.assert_array_equal(block, compact.padded[tile])
    np.testing.assert_array_equal(tiled, tile * (q * 64) + node)
    assert at.dtype == block.dtype == tiled.dtype == np.int32
