"""Reading chosen nodes alone (issue 30 item 6): cuts, probes and the coarse 3D flow gather
only their nodes' populations from the stored layout (tiled slots, compact popcount slots)
and give the same bits as the moments of the whole tiles they used to convert, on the NumPy
backend and on a compact run (NumPy arrays, kernels through the g++ emulator)."""

from __future__ import annotations

import numpy as np
import pytest

from solver.backends.base import node_index, tiled_node_populations
from solver.backends.cuda.tables import slot_table
from solver.coarse_flow import coarse_flow
from solver.config import SimulationConfig
from solver.fields import tile_moments
from solver.simulation import Simulation

from .compact_emulator import compiler
from .porous_cases import as_stored, noisy_start, porous_solid


def _numpy_sim(storage: str = "auto") -> Simulation:
    config = SimulationConfig(backend="numpy", lattice="D3Q19", collision="TRT", tau=0.7,
                              body_force=(2e-5, -1e-5, 5e-6), y_min="wall", y_max="wall",
                              storage=storage)
    sim = Simulation(porous_solid((26, 15, 11)), config)
    sim.allocate()
    sim.backend.set_populations(sim.state, as_stored(sim.problem, noisy_start(sim.problem)))
    sim.step(3)
    return sim


def _nodes(sim: Simulation, count: int = 300, seed: int = 1) -> np.ndarray:
    """Random voxels (fluid and solid, in and outside tiles) and every corner."""
    rng = np.random.default_rng(seed)
    shape = np.array(sim.solid.shape)
    corners = np.array(np.meshgrid(*[[0, n - 1] for n in shape], indexing="ij")).reshape(3, -1).T
    return np.concatenate([rng.integers(0, shape, size=(count, 3)), corners])


def _old_gather(sim: Simulation, nodes: np.ndarray):
    """The gather before node reads (solver/probes.py of d887927): the moments of every tile
    holding a node, read chunk by chunk, then indexed."""
    reader, tiling, xp = sim._reader(), sim.tiling, sim.backend.xp
    tile, node = tiling.locate(nodes)
    flat = np.where(tile >= 0, tile.astype(np.int64) * tiling.nodes_per_tile + node, 0)
    solid = (tile < 0) | tiling.solid.reshape(-1)[flat]
    tiles = np.unique(tile[~solid]) if (~solid).any() else np.zeros(1, dtype=np.int64)
    position = np.searchsorted(tiles, np.maximum(tile, 0))
    rho = xp.full(len(nodes), float(sim.config.initial_density))
    u = xp.zeros((3, len(nodes)))
    for part, rho_chunk, u_chunk in reader.chunks(xp.asarray(tiles)):
        pick = np.flatnonzero(~solid & (position >= part.start) & (position < part.stop))
        local = xp.asarray((position[pick] - part.start) * tiling.nodes_per_tile + node[pick])
        where = xp.asarray(pick)
        rho[where] = rho_chunk.reshape(-1)[local]
        u[: u_chunk.shape[0], where] = u_chunk.reshape(u_chunk.shape[0], -1)[:, local]
    return rho, u, solid


def _old_cut(sim: Simulation, axis: int, index: int, names: list[str]) -> np.ndarray:
    """A cut's planes before node reads: the moments of the tiles it passes through."""
    cut = sim._cut(axis, index)
    rho, u = sim._reader().moments(cut.tiles)
    return sim._planes(rho, u, cut.local, cut.solid, names)[0]  # (planes, probe values)


def _assert_same(sim: Simulation) -> None:
    """Probes' gather, cuts (with and without health) and the coarse flow: the same bits."""
    from solver.probes import gather

    host = sim.backend.to_host
    nodes = _nodes(sim)
    new, old = gather(sim, sim._reader(), nodes), _old_gather(sim, nodes)
    np.testing.assert_array_equal(new[2], old[2])
    for a, b in zip(new[:2], old[:2], strict=True):
        np.testing.assert_array_equal(host(a), host(b))
    assert (~new[2]).sum() > 50 and new[2].sum() > 20  # fluid and solid nodes were read
    names = ["pressure", "ux", "uy", "uz", "umag"]
    for axis, index in ((0, 5), (1, 14), (2, 0), (2, 7)):
        old_planes = _old_cut(sim, axis, index, names)
        np.testing.assert_array_equal(sim._look(axis, index, names, False)[0], old_planes)
        np.testing.assert_array_equal(sim._look(axis, index, names, True)[0], old_planes)
        np.testing.assert_array_equal(sim._look(axis, index, names, False)[0], old_planes)
    for name in ("umag", "pressure", "qcrit"):
        for edge in (6, 64):
            flow = sim.coarse_flow(name, max_edge=edge)
            stride = flow.stride
            axes = [np.arange(0, n, stride) for n in sim.solid.shape]
            grid = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3)
            rho, u, solid = _old_gather(sim, grid)
            coarse = tuple(len(a) for a in axes)
            np.testing.assert_array_equal(flow.fluid, ~solid.reshape(coarse))
            np.testing.assert_array_equal(flow.velocity,
                                          host(u).reshape(3, *coarse).astype(np.float32))
            if name == "pressure":
                expect = ((host(rho) - sim.config.initial_density) / 3).reshape(coarse)
                np.testing.assert_array_equal(flow.scalar[flow.fluid],
                                              expect[flow.fluid].astype(np.float32))
    vorticity = coarse_flow(sim, sim._reader(), "vorticity", 6)
    assert np.isfinite(vorticity.scalar[vorticity.fluid]).all()


@pytest.mark.parametrize("storage", ["auto", "float16"])
def test_node_reads_equal_the_tile_reads_on_numpy(storage) -> None:
    sim = _numpy_sim(storage)
    _assert_same(sim)
    sim.close()


@pytest.mark.skipif(compiler() is None, reason="g++ is not installed")
@pytest.mark.parametrize("precision,storage,tiles", [
    ("float32", "auto", 1), ("float32", "float16", 7), ("float64", "auto", 10**6)])
def test_node_reads_equal_the_chunked_reads_of_a_compact_run(precision, storage, tiles) -> None:
    """Compact storage read in chunks of 1 and 7 tiles, and in one chunk (the cut with health
    then comes from the whole pass): the popcount-slot gather gives the chunks' bits."""
    from .test_compact_readout import _simulation

    sim = _simulation(precision, storage=storage)
    sim.state.readout_tiles = min(tiles, sim.tiling.n_tiles)
    _assert_same(sim)
    # Straight from the compact copy: the values of the converted tiles, rest at solid nodes.
    nodes = _nodes(sim, 200, seed=3)
    tile, node = sim.tiling.locate(nodes)
    flat = np.where(tile >= 0, tile.astype(np.int64) * 64 + node, 0)
    solid = (tile < 0) | sim.tiling.solid.reshape(-1)[flat]
    index = sim.state.node_index(np.maximum(tile, 0), node, solid)
    whole = sim.state.device_populations()
    expect = whole[np.maximum(tile, 0), :, node].T
    got = sim.state.node_populations(index)
    np.testing.assert_array_equal(got[:, ~solid], expect[:, ~solid])
    t, n = np.argwhere(sim.tiling.solid)[0]  # what the converted tiles show at a solid node
    np.testing.assert_array_equal(got[:, solid], np.repeat(whole[t, :, n, None], solid.sum(), 1))


def test_tiled_gather_follows_the_slot_table_of_a_gpu_layout() -> None:
    """The CuPy tiled state stores direction i of XYZ node n at slot ``slots[i, n]`` (the
    paper's layouts permute them): the gather reads what the backend's tiled decode shows."""
    sim = _numpy_sim()
    p = sim.problem
    slots = slot_table("D3Q19", "paper", 4)
    assert not (slots == np.arange(64)).all()
    xyz = sim.state.f[sim.state.current]
    natural = np.empty_like(xyz)  # the paper layout of the same populations
    natural[:, np.arange(19)[:, None], slots] = xyz
    nodes = _nodes(sim)
    tile, node = sim.tiling.locate(nodes)
    flat = np.where(tile >= 0, tile.astype(np.int64) * 64 + node, 0)
    solid = (tile < 0) | sim.tiling.solid.reshape(-1)[flat]
    got = tiled_node_populations(p, natural, node_index(tile, node, solid), slots)
    decoded = p.storage.decode(xyz)
    np.testing.assert_array_equal(got[:, ~solid], decoded[tile[~solid], :, node[~solid]].T)
    rho, u = tile_moments(got[None], p.lattice, p.force, p.incompressible)
    assert np.isfinite(rho).all() and np.isfinite(u).all()
    sim.close()


@pytest.mark.gpu
@pytest.mark.parametrize("tile_storage,storage,streaming", [
    ("compact", "auto", "two-copy"), ("compact", "float16", "in-place"),
    ("tiled", "auto", "two-copy"), ("tiled", "float16", "in-place")])
def test_node_reads_equal_the_tile_reads_on_the_gpu(tile_storage, storage, streaming) -> None:
    """The CuPy backend, tiled (its slot table; in place read after the decoding launch) and
    compact (popcount slots; chunked readout): the same bits as the tile reads."""
    config = SimulationConfig(lattice="D3Q19", collision="TRT", backend="cupy", tau=0.7,
                              body_force=(2e-5, -1e-5, 5e-6), x_min="wall", x_max="wall",
                              y_min="wall", y_max="wall", tile_storage=tile_storage,
                              storage=storage, streaming=streaming)
    sim = Simulation(porous_solid((40, 31, 29)), config)
    sim.step(5)
    if tile_storage == "compact":
        sim.state.readout_tiles = 7  # chunked: the health check reads fluid nodes as stored
    _assert_same(sim)
    sim.step(1)  # in place: phase 1, the reads decode it first
    _assert_same(sim)
    sim.close()
