"""Domain decomposition: load balance, halo selection, and bitwise equality with one process.

The MPI tests run ``mpirun -n N python -m solver.distributed`` in a subprocess and compare the
gathered populations with an ordinary single-process Simulation with ``np.array_equal``; they
are skipped with the reason when mpi4py or mpirun is missing. The same decomposition is also
checked in one process through the loopback exchange, which needs no MPI.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from solver.__main__ import EXIT_OUTPUT
from solver.backends.numpy_backend import CHUNK_NODES, NumpyBackend
from solver.config import ConfigError, SimulationConfig
from solver.distributed import (
    LoopbackHub,
    RankSolver,
    build_rank,
    crossing_directions,
    decompose,
    launched_size,
    mpi_available,
    step_together,
)
from solver.distributed.comm import find_mpirun
from solver.distributed.decomposition import cut_layers, layer_counts
from solver.distributed.halo import HaloPlan, check_plan_covers
from solver.distributed.stepper import tile_pieces
from solver.lattice import get_lattice
from solver.problem import Problem
from solver.simulation import Simulation
from solver.tiling import Tiling

REPO = Path(__file__).resolve().parents[2]
SHAPE = (26, 15, 23)  # no axis a multiple of the tile edge 4
FORCE = (2e-5, -1e-5, 5e-6)


def porous(shape=SHAPE, seed=0) -> np.ndarray:
    """Random solid mask (~35 % solid) with a solid block, so some tiles are empty."""
    solid = np.random.default_rng(seed).random(shape) < 0.35
    solid[:9, :9, :9] = True
    return solid


def config(**kw) -> SimulationConfig:
    """Periodic x and z, walls in y, body force, float64 TRT."""
    base = dict(lattice="D3Q19", collision="TRT", precision="float64", tau=0.7,
                body_force=FORCE, y_min="wall", y_max="wall", backend="numpy")
    base.update(kw)
    return SimulationConfig(**base)


def noisy_start(problem: Problem, seed: int = 1) -> np.ndarray:
    """Rest equilibrium with 1 % noise in the storage precision (float64 array)."""
    f0 = problem.initial_populations()
    noise = np.random.default_rng(seed).standard_normal(f0.shape)
    return (f0 * (1 + 0.01 * noise)).astype(problem.dtype).astype(np.float64)


def reference(solid, cfg, f0, steps) -> np.ndarray:
    """Populations of one ordinary process after ``steps`` steps from ``f0``."""
    sim = Simulation(solid, cfg, backend=NumpyBackend(threads=1))
    sim.allocate()
    sim.backend.set_populations(sim.state, f0)
    sim.step(steps)
    return sim.populations()


# -- load balancing --------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=40), st.integers(1, 8))
def test_cuts_balance_tiles_to_within_one_layer(counts, n_ranks):
    counts = np.array(counts)
    if n_ranks > counts.size:
        with pytest.raises(ConfigError, match="ranks"):
            cut_layers(counts, n_ranks)
        return
    bounds = cut_layers(counts, n_ranks)
    assert bounds[0] == 0 and bounds[-1] == counts.size and np.all(np.diff(bounds) >= 1)
    per_rank = np.add.reduceat(counts, bounds[:-1])
    assert per_rank.sum() == counts.sum()
    assert np.all(np.abs(per_rank - counts.sum() / n_ranks) <= counts.max())


def test_slabs_follow_fluid_tiles_not_volume():
    shape = (64, 12, 12)
    solid = np.zeros(shape, bool)
    solid[:32] = np.random.default_rng(2).random((32, 12, 12)) < 0.995  # left half nearly solid
    tiling = Tiling.build(solid, 4, (0, 0, 0))
    dec = decompose(tiling, 2, axis=0)
    per_rank = dec.tiles_per_rank()
    counts = layer_counts(tiling, 0)
    assert abs(per_rank[0] - per_rank[1]) <= 2 * counts.max()  # within one tile layer each
    assert dec.bounds[1] > 10  # a volume split would cut at layer 8 and give 1 rank ~all tiles
    assert dec.imbalance() < 1.1
    assert np.array_equal(np.sort(np.concatenate([dec.tiles_of(0), dec.tiles_of(1)])),
                          np.arange(tiling.n_tiles))


def test_axis_choice_and_user_errors():
    tiling = Tiling.build(np.zeros((8, 20, 12), bool), 4, (0, 0, 0))
    assert decompose(tiling, 2).axis == 1  # longest
    assert decompose(tiling, 2, "flow", np.array([0, 0, 1e-5])).axis == 2
    assert decompose(tiling, 2, "flow", np.zeros(3)).axis == 1  # no force: longest
    assert decompose(tiling, 2, 0).axis == 0
    with pytest.raises(ConfigError, match="axis"):
        decompose(tiling, 2, "diagonal")
    with pytest.raises(ConfigError, match="does not exist"):
        decompose(tiling, 2, 3)
    with pytest.raises(ConfigError, match="at most 2"):
        decompose(tiling, 3, 0)
    thin = np.ones((8, 20, 12), bool)
    thin[:, 17:, :] = False  # fluid in the last tile layer only
    with pytest.raises(ConfigError, match="no fluid tile"):
        decompose(Tiling.build(thin, 4, (0, 0, 0)), 2, 1)


# -- halo selection ----------------------------------------------------------------------------
def test_crossing_directions_of_d3q19():
    lat = get_lattice("D3Q19")
    plus_x = [lat.names[i] for i in crossing_directions(lat, 0, +1)]
    assert sorted(plus_x) == sorted(["E", "NE", "SE", "ET", "EB"])
    minus_z = [lat.names[i] for i in crossing_directions(lat, 2, -1)]
    assert sorted(minus_z) == sorted(["B", "EB", "WB", "NB", "SB"])


def _exchanged(layout, plan, peer, q, kind):
    """(direction, node coordinates) of the values sent to / received from ``peer``."""
    flat = (plan.send if kind == "send" else plan.recv)[peer]
    n_node = layout.tiling.nodes_per_tile
    tile, i, node = flat // (q * n_node), (flat // n_node) % q, flat % n_node
    return i, layout.tiling.node_coordinates()[tile, node]


@pytest.mark.parametrize("periodic_x", [False, True])
def test_halo_sends_only_directions_crossing_the_face_from_one_node_layer(periodic_x):
    shape = (18, 7, 6)  # all fluid, y and z periodic
    lat = get_lattice("D3Q19")
    tiling = Tiling.build(np.zeros(shape, bool), 4, (0, 0, 0))
    dec = decompose(tiling, 2, axis=0)
    cut = dec.bounds[1] * 4  # first node of rank 1
    periodic = (periodic_x, True, True)
    (lay0, plan0), (lay1, plan1) = (build_rank(tiling, dec, lat, periodic, r) for r in (0, 1))
    layer = shape[1] * shape[2]
    i, xyz = _exchanged(lay0, plan0, 1, lat.q, "send")
    right = xyz[:, 0] == cut - 1
    assert set(i[right]) == set(crossing_directions(lat, 0, +1))
    assert right.sum() == 5 * layer  # every node of the layer, each crossing direction once
    i_recv, xyz_recv = _exchanged(lay1, plan1, 0, lat.q, "recv")
    assert np.array_equal(i_recv, i) and np.array_equal(xyz_recv, xyz)  # buffers line up
    if periodic_x:  # the wrap face: c_x < 0 from x = 0 to the last node layer of rank 1
        assert set(i[~right]) == set(crossing_directions(lat, 0, -1))
        assert np.all(xyz[~right, 0] == 0) and (~right).sum() == 5 * layer
    else:
        assert right.all()
    i, xyz = _exchanged(lay0, plan0, 1, lat.q, "recv")  # what rank 0 pulls across its face
    assert set(i[xyz[:, 0] == cut]) == set(crossing_directions(lat, 0, -1))
    assert lay0.n_halo == (2 if periodic_x else 1) * 2 * 2  # one tile layer per face
    assert plan0.values_sent() == plan1.values_sent()


def test_plan_check_catches_a_missing_halo_value():
    solid = porous()
    problem = Problem.from_config(solid, config())
    dec = decompose(problem.tiling, 2)
    solver = RankSolver(problem, dec, 0, NumpyBackend(threads=1),
                        lambda plan, stepper: LoopbackHub().exchange(0, plan, stepper))
    plan = solver.plan
    peer = plan.peers[0]
    short = HaloPlan(plan.send, {**plan.recv, peer: plan.recv[peer][1:]})
    check_plan_covers(solver.problem.pull_table, plan, solver.layout, problem.lattice.q)
    with pytest.raises(RuntimeError, match="halo values"):
        check_plan_covers(solver.problem.pull_table, short, solver.layout, problem.lattice.q)


def test_owned_mask_limits_the_pull_table_and_fluid_count():
    problem = Problem.from_config(porous(), config())
    owned = np.arange(problem.tiling.n_tiles) < 40
    from dataclasses import replace

    part = replace(problem, owned=owned)
    assert part.n_fluid == (~problem.tiling.solid[:40]).sum() < problem.n_fluid
    table = part.pull_table
    assert table.n_fluid == part.n_fluid and np.all(table.tile < 40)
    full = problem.pull_table
    assert np.array_equal(table.src, full.src[:, : table.n_fluid])


def test_phases_cover_the_owned_tiles_boundary_first():
    problem = Problem.from_config(porous(), config())
    layout, _ = build_rank(problem.tiling, decompose(problem.tiling, 2, 0), problem.lattice,
                           problem.periodic, 0)
    assert 0 < layout.n_boundary < layout.n_owned
    ranges = tile_pieces(layout, 4)
    assert ranges[0] == (0, layout.n_boundary) and ranges[-1][1] == layout.n_owned
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    fluid = (~layout.tiling.solid).sum(axis=1)
    pieces = [fluid[lo:hi].sum() for lo, hi in ranges[1:]]
    assert len(pieces) == 4 and max(pieces) - min(pieces) <= 2 * fluid.max()


# -- bitwise equality, one process (loopback) -------------------------------------------------
@pytest.mark.parametrize("lattice,precision", [("D3Q19", "float64"), ("D3Q27", "float32"),
                                               ("D2Q9", "float64")])
def test_loopback_ranks_match_one_process_bitwise(lattice, precision):
    d = 2 if lattice == "D2Q9" else 3
    shape = (45, 21) if d == 2 else SHAPE
    solid = porous(shape[:2] + (1,), seed=3)[..., 0] if d == 2 else porous()
    force = FORCE[:2] + (0.0,) if d == 2 else FORCE
    cfg = config(lattice=lattice, precision=precision, body_force=force)
    problem = Problem.from_config(solid, cfg)
    f0 = noisy_start(problem)
    expected = reference(solid, cfg, f0, 10)
    for axis in range(d):
        # Up to 4 ranks: some slabs are one tile layer thick (no interior tiles).
        for n in sorted({2, min(4, problem.tiling.tile_map.shape[axis])}):
            dec = decompose(problem.tiling, n, axis)
            hub = LoopbackHub()
            ranks = [RankSolver(problem, dec, r, NumpyBackend(threads=1),
                                lambda plan, s, r=r, hub=hub: hub.exchange(r, plan, s))
                     for r in range(n)]
            for rank in ranks:
                rank.backend.set_populations(rank.state, f0[rank.layout.global_tiles])
            step_together(ranks, 10)
            got = np.full_like(expected, np.nan)
            for rank in ranks:
                got[rank.layout.global_tiles[: rank.n_owned]] = rank.owned_populations()
            assert np.array_equal(got, expected), (lattice, axis, n)


# Measured over 2, 3 and 4 ranks on each axis, float64 and float32 storage: largest relative
# difference 7e-15 (rank partial sums added in rank order instead of one process's order).
HEALTH_RTOL = 1e-12



def _plain_and_loopback_ranks(cfg, n: int, axis: int, steps: int = 6):
    """One plain NumPy process and ``n`` loopback ranks (slabs along ``axis``) of the
    :func:`porous` pack from the same noisy start, each stepped ``steps`` times."""
    solid = porous()
    problem = Problem.from_config(solid, cfg)
    f0 = noisy_start(problem)
    plain = Simulation(solid, cfg, backend=NumpyBackend(threads=1))
    plain.allocate()
    plain.backend.set_populations(plain.state, f0)
    plain.step(steps)
    hub, dec = LoopbackHub(), decompose(problem.tiling, n, axis)
    ranks = [RankSolver(problem, dec, r, NumpyBackend(threads=1),
                        lambda plan, s, r=r, hub=hub: hub.exchange(r, plan, s))
             for r in range(n)]
    for rank in ranks:
        rank.backend.set_populations(rank.state, f0[rank.layout.global_tiles])
    step_together(ranks, steps)
    return plain, ranks

def _same_health(got: dict, want: dict, rtol: float = HEALTH_RTOL) -> None:
    """Health numbers equal to ``rtol`` (finite and the layer count exactly)."""
    assert got["finite"] == want["finite"]
    for key in ("max_speed", "mean_velocity", "mean_momentum"):
        np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=0, err_msg=key)
    assert (got["layer_density"] is None) == (want["layer_density"] is None)
    if want["layer_density"] is not None:
        np.testing.assert_allclose(got["layer_density"], want["layer_density"], rtol=rtol,
                                   atol=0)


@pytest.mark.parametrize("n", [2, 3])
def test_health_reduced_on_loopback_ranks_matches_one_process(n):
    """Each rank's health partials over its owned tiles (:mod:`solver.distributed.reductions`),
    combined in rank order, equal one process's health check to HEALTH_RTOL: finite, max
    speed, mean velocity and momentum, and the end layers' densities of a walled flow axis."""
    from solver.distributed.reductions import combine_health, owned_health, owned_layers
    from solver.readout import Readout

    cfg = config(x_min="wall", x_max="wall")  # flow along x, not periodic: end layers read
    plain, ranks = _plain_and_loopback_ranks(cfg, n, axis=2)
    reader = Readout(plain.problem, plain.backend, plain.state, 0)
    want = reader.health()[0]
    assert want["layer_density"] is not None and want["finite"]
    parts = [owned_health(rank, owned_layers(rank, 0)) for rank in ranks]
    got = reader._numbers(combine_health(parts, 3))
    _same_health(got, want)
    # Slabs across the flow axis: every rank holds part of both end layers.
    assert all(part[-1] > 0 and part[-3] > 0 for part in parts)


@pytest.mark.parametrize("walls,window", [(False, (0, SHAPE[0])), (False, (3, 20)),
                                          (True, (2, 24))])
def test_k_check_reduced_on_loopback_ranks_matches_one_process(walls, window):
    """A permeability run's check (:class:`solver.rock.check.KCheck`) reduced on 3 ranks
    (:func:`~solver.distributed.reductions.owned_k_check`, combined in rank order) equals one
    process's to HEALTH_RTOL: health, flow tortuosity and k over a whole periodic axis, a
    window of it, and a window of a walled axis (end-layer densities)."""
    from solver.distributed.reductions import combine_partials, owned_k_check
    from solver.rock.check import KCheck

    cfg = config(**({"x_min": "wall", "x_max": "wall"} if walls else {}))
    # slabs along the window's axis: some ranks outside it
    plain, ranks = _plain_and_loopback_ranks(cfg, 3, axis=0)
    check = KCheck(plain, 0, window, 1e-6)
    health, k = check.read()
    got, k_got = check._result(combine_partials([owned_k_check(r, 0, window) for r in ranks]))
    assert got["finite"] and got.keys() == health.keys()
    for key in ("max_speed", "flow_tortuosity"):
        np.testing.assert_allclose(got[key], health[key], rtol=HEALTH_RTOL, atol=0)
    for key in ("lattice", "gradient", "superficial_velocity", "m2"):
        np.testing.assert_allclose(getattr(k_got, key), getattr(k, key), rtol=HEALTH_RTOL,
                                   atol=0, err_msg=key)


def _same(a, b) -> None:
    """``a`` equals ``b`` bit for bit (NaN equal to NaN), through dicts, lists, tuples and
    dataclasses."""
    if dataclasses.is_dataclass(a):
        _same(vars(a), vars(b))
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif a is None or isinstance(a, str | bool | int):
        assert a == b
    else:
        assert np.array_equal(a, b, equal_nan=True), (a, b)


def test_outputs_read_over_ranks_never_gather_the_whole_state():
    """Health checks, fields, a cut, the live view, probes and wall shear stress on a
    DistributedBackend equal one plain process's bit for bit, and none gathers the whole state
    to rank 0 (moments and shear vectors are computed on the ranks, a cut's and the probes'
    nodes travel alone): one rank, in process."""
    pytest.importorskip("mpi4py")
    from solver.distributed import DistributedBackend
    from solver.probes import Line, Probe, ProbeSet

    solid, cfg = porous(), config()
    probes = ProbeSet((Probe("a", (20, 7, 12)),), (Line("l", (0, 3, 3), (25, 3, 20)),))
    plain = Simulation(solid, cfg, backend=NumpyBackend(threads=1))
    with DistributedBackend("numpy") as backend:
        whole = []
        gather = backend._gather
        backend._gather = lambda dtype: (whole.append(dtype), gather(dtype))[1]
        asked = []  # every "moments" command: all nodes' moments sent to rank 0
        moments = backend._moments
        backend._moments = lambda tiles: (asked.append(tiles), moments(tiles))[1]
        sim = Simulation(solid, cfg, backend=backend)
        for s in (plain, sim):
            s.step(7)
        # A health check reduces on the ranks: no moments travel, a live view's cut alone.
        sim.health()
        sim.view(1, 6, "pressure", health=True, probes=probes)
        from solver.rock.check import KCheck  # a permeability run's check: numbers alone

        _same(KCheck(sim, 0, (3, 20), None).read(), KCheck(plain, 0, (3, 20), None).read())
        assert asked == []
        reads = [lambda s: s.health(), lambda s: s.fields(), lambda s: s.slice(2, 11, "ux"),
                 lambda s: s.view(1, 6, "pressure", health=True, probes=probes),
                 lambda s: s.sample(probes), lambda s: vars(s.coarse_flow()) | {"read_at": 0},
                 # Wall shear stress: each rank its own wall nodes, only the vectors travel.
                 lambda s: s.wall_shear_stress(), lambda s: s.wall_shear_vectors()[1]]
        for read in reads:
            _same(read(sim), read(plain))
        assert whole == []
        assert len(asked) == 1 and asked[0] is None  # fields() alone reads every node
        sim.close()


def test_pieces_place_values_given_at_voxels_without_a_whole_grid(tmp_path):
    """``write_vti_pieces`` with an extra array given as (voxels, values), as ``solver run``
    gives wall shear stress and the shear indices over ranks: the .pvti holds it on the grid,
    NaN elsewhere, bit for bit the whole grid it replaces (one rank, in process)."""
    pytest.importorskip("mpi4py")
    pv = pytest.importorskip("pyvista")
    from solver.distributed import DistributedBackend

    solid = porous()
    voxels, values = np.argwhere(~solid)[::7], np.linspace(0.5, 2.5, (~solid).sum())[::7]
    grid = np.full(solid.shape, np.nan)
    grid[tuple(voxels.T)] = values
    with DistributedBackend("numpy") as backend:
        sim = Simulation(solid, config(), backend=backend)
        sim.allocate()
        path = backend.write_vti_pieces(sim.state, tmp_path / "f.pvti", None, None,
                                        {"whole": grid, "at": (voxels, values)})
        sim.close()
    image = pv.read(path)
    assert np.array_equal(image.cell_data["at"], image.cell_data["whole"], equal_nan=True)
    assert image.cell_data["at"].dtype == np.float64


def test_float32_populations_are_scattered_in_their_dtype():
    """``set_populations`` of a float32 array (a coarse start's, a float32 checkpoint's) sends
    float32 rows and each rank widens them: the run equals one process's bit for bit."""
    pytest.importorskip("mpi4py")
    from solver.distributed import DistributedBackend

    solid, cfg = porous(), config(precision="float32")
    f0 = noisy_start(Problem.from_config(solid, cfg)).astype(np.float32)
    plain = Simulation(solid, cfg, backend=NumpyBackend(threads=1))
    with DistributedBackend("numpy") as backend:
        sim = Simulation(solid, cfg, backend=backend)
        for s in (plain, sim):
            s.allocate()
            s.backend.set_populations(s.state, f0)
            s.step(3)
        assert np.array_equal(sim.populations(), plain.populations())
        sim.close()


def test_launched_size_reads_the_launcher_environment():
    assert launched_size({}) == 1
    assert launched_size({"PMI_SIZE": "3"}) == 3
    assert launched_size({"OMPI_COMM_WORLD_SIZE": "2", "PMI_SIZE": ""}) == 2


# -- bitwise equality over MPI -----------------------------------------------------------------
MPI_OK, MPI_WHY = mpi_available()
needs_mpi = pytest.mark.skipif(not MPI_OK or find_mpirun() is None,
                               reason=f"MPI test skipped: {MPI_WHY if not MPI_OK else ''}"
                                      f"{'' if find_mpirun() else 'no mpirun on PATH'}")


@needs_mpi
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
@pytest.mark.parametrize("n_ranks,axis,precision", [(2, "longest", "float64"),
                                                     (3, "1", "float32")])
def test_mpirun_matches_one_process_bitwise(tmp_path, n_ranks, axis, precision):
    """Populations and fields (float32: gathered as float32 rows, cast on each rank)."""
    solid = porous()
    cfg = config(precision=precision)
    problem = Problem.from_config(solid, cfg)
    assert problem.n_fluid % CHUNK_NODES != 1  # see the solver.distributed.stepper doc
    f0 = noisy_start(problem)
    np.save(tmp_path / "solid.npy", solid)
    np.save(tmp_path / "f0.npy", f0)
    settings_ = [f"precision={precision}", "collision=TRT", "tau=0.7",
                 f"body_force={list(FORCE)}", "y_min=wall", "y_max=wall"]
    cmd = [find_mpirun(), "-n", str(n_ranks), sys.executable, "-m", "solver.distributed",
           str(tmp_path / "solid.npy"), "--steps", "12", "--axis", axis,
           "--initial", str(tmp_path / "f0.npy"), "--save", str(tmp_path / "out.npz")]
    for item in settings_:
        cmd += ["--set", item]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = np.load(tmp_path / "out.npz")
    assert int(out["ranks"]) == n_ranks and len(out["tiles_per_rank"]) == n_ranks
    sim = Simulation(solid, cfg, backend=NumpyBackend(threads=1))
    sim.allocate()
    sim.backend.set_populations(sim.state, f0)
    sim.step(12)
    assert np.array_equal(out["populations"], sim.populations())
    fields = sim.fields()
    assert np.array_equal(out["u"], fields["u"], equal_nan=True)
    assert np.array_equal(out["rho"], fields["rho"], equal_nan=True)
    # The health check is reduced on the ranks: equal to rounding (float32 storage too: the
    # moments and sums are float64).
    health = sim.health()
    got = {"finite": bool(out["health_finite"]), "max_speed": float(out["health_max_speed"]),
           "mean_velocity": out["health_mean_velocity"],
           "mean_momentum": out["health_mean_momentum"],
           "layer_density": tuple(out["health_layer_density"]) or None}
    _same_health(got, health)


def _mpirun(n: int, path: Path, out: Path, *extra: str, cwd: Path, ok: bool = True
            ) -> subprocess.CompletedProcess:
    """``mpirun -n n python -m solver run path --output out ...`` (or one plain process)."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    launcher = [find_mpirun(), "-n", str(n)] if n > 1 else []
    done = subprocess.run([*launcher, sys.executable, "-m", "solver", "run", str(path),
                           "--output", str(out), "--quiet", *extra], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert (done.returncode == 0) == ok, done.stderr[-3000:]
    return done



def _pack_case(tmp_path: Path, run: dict, probes: list | None = None, solid=None,
               walls: bool = True) -> Path:
    """``pack.npy`` (``solid``, default :func:`porous`) and the case ``pack.yaml`` running it
    on NumPy in float64 (y walls unless ``walls`` is False) with ``run`` and ``probes``."""
    import yaml

    np.save(tmp_path / "pack.npy", porous() if solid is None else solid)
    config = {"precision": "float64", "tau": 0.7, "body_force": list(FORCE), "backend": "numpy"}
    if walls:
        config.update(y_min="wall", y_max="wall")
    case = {"name": "pack", "geometry": {"file": "pack.npy"}, "config": config,
            "run": {"convergence": 0, **run}}
    if probes:
        case["probes"] = probes
    path = tmp_path / "pack.yaml"
    path.write_text(yaml.safe_dump(case))
    return path

def _populations(folder: Path) -> np.ndarray:
    """The populations of the checkpoint in ``folder``, either format."""
    from solver.io import read_checkpoint

    checkpoint = read_checkpoint(folder / "checkpoint.npz")
    return checkpoint.populations if checkpoint.parts is None else checkpoint.parts.assemble()


@needs_mpi
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
def test_solver_run_under_mpirun_writes_and_resumes_like_one_process(tmp_path):
    """``mpirun -n 2 python -m solver run`` to a checkpoint (per-rank parts and a manifest),
    resumed to the end on 3 ranks and in one plain process; and an old gathered checkpoint of
    one process resumed on 2 ranks: checkpoints, CSV probes and .vti equal one uninterrupted
    process's bit for bit, the CSV health numbers (reduced on the ranks) to HEALTH_RTOL."""
    pytest.importorskip("geometries.loaders", reason="case files load geometries via geometries")
    pv = pytest.importorskip("pyvista")
    import shutil

    from solver.__main__ import main
    from solver.io import read_checkpoint

    path = _pack_case(tmp_path, {"max_steps": 40, "output_interval": 20, "check_interval": 10,
                                 "checkpoint_interval": 20},
                      [{"name": "a", "at": [20, 7, 12]}, {"name": "b", "at": [3, 12, 20]}])
    assert main(["run", str(path), "--output", str(tmp_path / "one"), "--quiet"]) == 0

    done = _mpirun(2, path, tmp_path / "mpi", "--max-steps", "20", cwd=tmp_path)
    # The .npy image is tiled by the ranks from their own slabs: rank 0 never reads it whole.
    assert "The ranks tiled the image by slabs (pack.npy)" in done.stderr, done.stderr[-2000:]
    written = read_checkpoint(tmp_path / "mpi" / "checkpoint.npz")
    assert written.populations is None and written.parts.n_parts == 2 and written.step == 20
    # Two writes at step 20 (the interval, the end): only the last one's files are left.
    assert sorted(p.name.split(".", 1)[1] for p in written.parts.folder.iterdir()) == \
        ["r00000.populations.npy", "r00000.tiles.npy", "r00001.populations.npy",
         "r00001.tiles.npy"]
    shutil.copytree(tmp_path / "mpi", tmp_path / "plain")
    _mpirun(3, path, tmp_path / "mpi", "--resume", str(tmp_path / "mpi" / "checkpoint.npz"),
            cwd=tmp_path)
    _mpirun(1, path, tmp_path / "plain", "--resume",
            str(tmp_path / "plain" / "checkpoint.npz"), cwd=tmp_path)
    # An old gathered checkpoint (one process, the single-process format) resumed on 2 ranks.
    assert main(["run", str(path), "--output", str(tmp_path / "old"), "--quiet",
                 "--max-steps", "20"]) == 0
    assert read_checkpoint(tmp_path / "old" / "checkpoint.npz").parts is None
    _mpirun(2, path, tmp_path / "old", "--resume", str(tmp_path / "old" / "checkpoint.npz"),
            cwd=tmp_path)
    one = tmp_path / "one"
    assert read_checkpoint(tmp_path / "plain" / "checkpoint.npz").parts is None
    assert read_checkpoint(tmp_path / "mpi" / "checkpoint.npz").parts.n_parts == 3
    for folder in (tmp_path / "mpi", tmp_path / "plain", tmp_path / "old"):
        assert read_checkpoint(folder / "checkpoint.npz").step == 40
        assert np.array_equal(_populations(one), _populations(folder)), folder.name
        rows = [np.genfromtxt(d / "history.csv", delimiter=",", names=True)
                for d in (one, folder)]
        assert np.array_equal(rows[0]["step"], rows[1]["step"]), folder.name
        # Health numbers are reduced on the ranks (sums in rank order): equal to rounding.
        for column in ("u_mean_x", "u_mean_y", "u_mean_z", "permeability", "u_max"):
            np.testing.assert_allclose(rows[1][column], rows[0][column], rtol=HEALTH_RTOL,
                                       atol=0, err_msg=f"{folder.name} {column}")
        probes = [(d / "probes.csv").read_text() for d in (one, folder)]
        assert probes[0] == probes[1], folder.name
        # Over ranks a .pvti of per-rank pieces (3 ranks: mpi, 2: old), one process a .vti:
        # the same image, every array (names, dtypes, NaN in solid, the solid array) bit for bit.
        parallel = folder.name != "plain"
        grids = [pv.read(one / "fields_00000040.vti"),
                 pv.read(folder / f"fields_00000040.{'pvti' if parallel else 'vti'}")]
        assert not (folder / f"fields_00000040.{'vti' if parallel else 'pvti'}").exists()
        assert grids[0].extent == grids[1].extent
        assert list(grids[0].cell_data) == list(grids[1].cell_data) == ["rho", "u", "solid"]
        for name in grids[0].cell_data:
            a, b = grids[0].cell_data[name], grids[1].cell_data[name]
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), name
        if parallel:
            pieces = sorted(p.name for p in (folder / "fields_00000040").iterdir())
            ranks = 3 if folder.name == "mpi" else 2
            assert pieces == [f"rank_{r:04d}.vti" for r in range(ranks)], pieces
        summary = json.loads((folder / "summary.json").read_text())
        assert summary["fields_format"] == ("pvti" if parallel else "vti")
    mpi = tmp_path / "mpi"
    # A part missing: every rank learns it before the halo exchange; a clear error, no hang.
    read_checkpoint(mpi / "checkpoint.npz").parts.paths(2)[1].unlink()
    done = _mpirun(2, path, tmp_path / "broken", "--resume", str(mpi / "checkpoint.npz"),
                   cwd=tmp_path, ok=False)
    assert "r00002.populations.npy is missing" in done.stderr, done.stderr[-3000:]
    # A part that cannot be written (its folder is a file): the run's output error, no hang.
    (tmp_path / "unwritable").mkdir()
    (tmp_path / "unwritable" / "checkpoint.parts").write_text("not a folder")
    done = _mpirun(2, path, tmp_path / "unwritable", "--max-steps", "10", cwd=tmp_path,
                   ok=False)
    assert done.returncode == EXIT_OUTPUT, done.stderr[-3000:]
    assert "Writing the checkpoint's per-rank parts failed: rank 0" in done.stderr
    summary = json.loads((mpi / "summary.json").read_text())
    assert summary["device"].endswith("x 3 MPI ranks")
    split = summary["decomposition"]
    assert split["ranks"] == 3 and sum(split["fluid_nodes_per_rank"]) == summary["fluid_nodes"]
    held = split["host_tiles_per_rank"]  # rank 0 the whole problem, the others their part
    assert held[0] == sum(split["tiles_per_rank"]) and max(held[1:]) < held[0]
    tiles = np.array(split["tiles_per_rank"])
    assert split["load_imbalance_tiles"] == pytest.approx(tiles.max() / tiles.mean())
    assert split["load_imbalance_fluid"] >= 1.0


def test_rank0_run_keeps_the_tiling_not_the_voxel_mask(tmp_path, monkeypatch):
    """Rank 0 of ``solver run`` over two or more ranks drops the voxel image once set up
    (``keeps_voxel_mask`` False; forced here on one in-process rank): nothing references the
    geometry's mask afterwards, the mask made again from the tiling is the image's, and every
    output that reads it (.vti fields with their NaN and solid arrays, the checkpoint's mask
    hash, probes, the summary's porosity) equals one plain process's, bit for bit; the
    checkpoint resumes on a run that kept the mask."""
    pytest.importorskip("mpi4py")
    pv = pytest.importorskip("pyvista")
    import gc
    import weakref

    from solver.case import load_case, load_geometry
    from solver.distributed import DistributedBackend
    from solver.io import read_checkpoint
    from solver.run import HeadlessRun

    _pack_case(tmp_path, {"max_steps": 12, "output_interval": 6, "check_interval": 6,
                          "checkpoint_interval": 12}, [{"name": "a", "at": [20, 7, 12]}])
    case = load_case(tmp_path / "pack.yaml")
    plain = HeadlessRun(case, out=tmp_path / "plain", backend=NumpyBackend(threads=1))
    assert plain.execute(progress=False).exit_code == 0
    monkeypatch.setattr(DistributedBackend, "keeps_voxel_mask", property(lambda self: False))
    geometry = load_geometry(case.geometry)
    image = weakref.ref(geometry.solid)
    with DistributedBackend("numpy") as backend:
        run = HeadlessRun(load_case(tmp_path / "pack.yaml"), out=tmp_path / "lean",
                          geometry=geometry, backend=backend)
        del geometry
        gc.collect()
        assert image() is None  # the Simulation, its problem and the run hold only the tiling
        assert np.array_equal(run.sim.solid, porous()) and run.sim.shape == SHAPE
        assert np.array_equal(run.geometry.solid, porous())
        # What a 3D frame reads of the geometry (the solid surface, the streamlines' seeds).
        from solver.flow_meshes import seed_points
        from solver.scene_frames import is_vessel

        whole = load_geometry(case.geometry)
        assert not is_vessel(run.geometry) and run.geometry.openings == whole.openings
        assert np.array_equal(seed_points(run.geometry, "slice plane", 20, 2, 11),
                              seed_points(whole, "slice plane", 20, 2, 11))
        del whole
        assert run.execute(progress=False).exit_code == 0
    one, lean = tmp_path / "plain", tmp_path / "lean"
    for folder in (one, lean):
        assert read_checkpoint(folder / "checkpoint.npz").step == 12
    assert read_checkpoint(lean / "checkpoint.npz").mask_sha256 == \
        read_checkpoint(one / "checkpoint.npz").mask_sha256
    assert np.array_equal(_populations(one), _populations(lean))
    assert (one / "probes.csv").read_text() == (lean / "probes.csv").read_text()
    for step in (6, 12):
        grids = [pv.read(d / f"fields_{step:08d}.vti") for d in (one, lean)]
        assert sorted(grids[0].cell_data) == sorted(grids[1].cell_data)
        for name in grids[0].cell_data:
            assert np.array_equal(grids[0].cell_data[name], grids[1].cell_data[name],
                                  equal_nan=True), name
    summaries = [json.loads((d / "summary.json").read_text()) for d in (one, lean)]
    for key in ("shape", "porosity", "fluid_nodes", "n_tiles"):
        assert summaries[0][key] == summaries[1][key], key
    resumed = HeadlessRun(case, out=tmp_path / "resumed", backend=NumpyBackend(threads=1))
    resumed.resume(lean / "checkpoint.npz")  # the hash made before the release is the mask's
    assert resumed.sim.time_step == 12


def test_rank0_run_tiles_an_image_file_by_slabs_without_reading_it_whole(tmp_path,
                                                                          monkeypatch, caplog):
    """Over ranks (forced here on one in-process rank) ``solver run`` of a ``.npy`` image has
    the ranks tile their own slabs (solver.distributed.region_tiling): the whole-image loader
    is never called and no voxel mask is made on rank 0, yet the tiling (offset searched),
    checkpoint and its mask hash, probes, .vti fields and summary equal one plain process's,
    bit for bit. A generated geometry keeps the whole-image path and the log says why."""
    pytest.importorskip("mpi4py")
    pv = pytest.importorskip("pyvista")
    import logging

    import solver.run as run_module
    from solver.case import load_case
    from solver.distributed import DistributedBackend
    from solver.io import read_checkpoint
    from solver.problem import TiledGeometry
    from solver.run import HeadlessRun
    from solver.tiling import Tiling

    path = _pack_case(tmp_path, {"max_steps": 12, "output_interval": 6, "check_interval": 6,
                                 "checkpoint_interval": 12}, [{"name": "a", "at": [20, 7, 12]}])
    plain = HeadlessRun(load_case(path), out=tmp_path / "plain",
                        backend=NumpyBackend(threads=1))
    assert plain.execute(progress=False).exit_code == 0
    monkeypatch.setattr(DistributedBackend, "keeps_voxel_mask", property(lambda self: False))

    def no_whole_read(spec):
        raise AssertionError("the whole image was loaded")

    monkeypatch.setattr(run_module, "load_geometry", no_whole_read)
    mask = Tiling.mask
    monkeypatch.setattr(Tiling, "mask", lambda self: (_ for _ in ()).throw(
        AssertionError("the whole mask was made")))
    with DistributedBackend("numpy") as backend:
        run = HeadlessRun(load_case(path), out=tmp_path / "slabs", backend=backend)
        monkeypatch.setattr(Tiling, "mask", mask)  # one rank writes a whole .vti: it may
        assert isinstance(run.geometry, TiledGeometry) and run.sim._solid is None
        want = plain.sim.tiling
        assert run.sim.tiling.offset == want.offset and run.sim.tiling.searched == want.searched
        for name in ("tiles", "solid", "tile_map"):
            assert np.array_equal(getattr(run.sim.tiling, name), getattr(want, name)), name
        assert run.execute(progress=False).exit_code == 0
    monkeypatch.undo()
    one, slabs = tmp_path / "plain", tmp_path / "slabs"
    assert read_checkpoint(slabs / "checkpoint.npz").mask_sha256 == \
        read_checkpoint(one / "checkpoint.npz").mask_sha256
    assert np.array_equal(_populations(one), _populations(slabs))
    assert (one / "probes.csv").read_text() == (slabs / "probes.csv").read_text()
    assert (one / "history.csv").read_text().count("\n") == \
        (slabs / "history.csv").read_text().count("\n")
    grids = [pv.read(d / "fields_00000012.vti") for d in (one, slabs)]
    for name in grids[0].cell_data:
        assert np.array_equal(grids[0].cell_data[name], grids[1].cell_data[name],
                              equal_nan=True), name
    summaries = [json.loads((d / "summary.json").read_text()) for d in (one, slabs)]
    for key in ("shape", "porosity", "fluid_nodes", "n_tiles"):
        assert summaries[0][key] == summaries[1][key], key
    # A generator's geometry is made whole in memory: the whole-image path, said once.
    case = load_case(path)
    case.geometry = type(case.geometry)("generator", "channel", {"shape": [24, 12, 16]})
    monkeypatch.setattr(DistributedBackend, "keeps_voxel_mask", property(lambda self: False))
    caplog.set_level(logging.INFO, logger="solver.run")
    with DistributedBackend("numpy") as backend:
        HeadlessRun(case, out=tmp_path / "generated", backend=backend)
    assert "reads the whole voxel image: a generator geometry is made whole in memory" in \
        caplog.text


def test_vessel_fields_over_ranks_are_a_pvti_equal_to_one_process_vti(tmp_path, monkeypatch,
                                                                      caplog):
    """The parallel-image path of ``solver run`` in process (one rank that writes pieces, as
    two or more do): a vessel's .pvti (rho, u, solid from the rank's tiles; wall shear stress
    in lattice units and Pa sent from rank 0 as slabs) reads back as one process's .vti, every
    array bit for bit, NaN in solid; the log and the summary say the fields are a .pvti."""
    pytest.importorskip("mpi4py")
    pv = pytest.importorskip("pyvista")
    import logging

    from solver.distributed import DistributedBackend
    from solver.run import HeadlessRun

    from .test_iolets import tube
    from .test_opening_specs import case_with

    case = case_with([{"id": 1, "kind": "velocity", "flow_rate": 2e-9},
                      {"id": 2, "kind": "pressure"}], vti=True, max_steps=20,
                     output_interval=20)
    plain = HeadlessRun(case, out=tmp_path / "plain", geometry=tube(),
                        backend=NumpyBackend(threads=1))
    assert plain.execute(progress=False).exit_code == 0
    monkeypatch.setattr(DistributedBackend, "writes_parts", property(lambda self: True))
    with DistributedBackend("numpy") as backend, caplog.at_level(logging.INFO, "solver.run"):
        run = HeadlessRun(case, out=tmp_path / "ranks", geometry=tube(), backend=backend)
        assert run.execute(progress=False).exit_code == 0
    assert "fields go to fields_STEP.pvti" in caplog.text
    assert json.loads((tmp_path / "ranks" / "summary.json").read_text())["fields_format"] == \
        "pvti"
    assert not (tmp_path / "ranks" / "fields_00000020.vti").exists()
    one = pv.read(tmp_path / "plain" / "fields_00000020.vti")
    ranks = pv.read(tmp_path / "ranks" / "fields_00000020.pvti")
    assert list(one.cell_data) == list(ranks.cell_data) == \
        ["rho", "u", "solid", "wall_shear_stress", "wall_shear_stress_Pa"]
    assert one.extent == ranks.extent and np.allclose(one.origin, ranks.origin)
    for name in one.cell_data:
        a, b = one.cell_data[name], ranks.cell_data[name]
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), name
    assert np.isnan(ranks.cell_data["rho"][ranks.cell_data["solid"] == 1]).all()
    # A piece that cannot be written (its folder is a file): an OSError after every rank is
    # done (the CLI's output error), no rank aborted.
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "fields_00000020").write_text("not a folder")
    with DistributedBackend("numpy") as backend:
        run = HeadlessRun(case, out=tmp_path / "broken", geometry=tube(), backend=backend)
        with pytest.raises(OSError, match=r"Writing the .vti pieces failed: rank 0: "):
            run.execute(progress=False)


@needs_mpi
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
def test_mpirun_vessel_fields_are_a_pvti_equal_to_one_process_vti(tmp_path):
    """``mpirun -n 2 python -m solver run`` of the shipped vessel: each rank's piece (its
    slab, wall shear stress sent from rank 0) and the .pvti read back as one process's .vti."""
    pytest.importorskip("geometries.loaders", reason="case files load geometries via geometries")
    pv = pytest.importorskip("pyvista")
    import yaml

    case = yaml.safe_load((REPO / "examples" / "vessel_bifurcation.yaml").read_text())
    case["config"]["backend"] = "numpy"
    case["run"].update(max_steps=10, output_interval=10, vti=True)
    path = tmp_path / "vessel.yaml"
    path.write_text(yaml.safe_dump(case))
    _mpirun(1, path, tmp_path / "one", cwd=tmp_path)
    done = _mpirun(2, path, tmp_path / "two", cwd=tmp_path)
    assert "fields go to fields_STEP.pvti" in done.stderr
    one = pv.read(tmp_path / "one" / "fields_00000010.vti")
    two = pv.read(tmp_path / "two" / "fields_00000010.pvti")
    assert list(one.cell_data) == list(two.cell_data)
    assert "wall_shear_stress_Pa" in two.cell_data and one.extent == two.extent
    for name in one.cell_data:
        a, b = one.cell_data[name], two.cell_data[name]
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), name
    assert sorted(p.name for p in (tmp_path / "two" / "fields_00000010").iterdir()) == \
        ["rank_0000.vti", "rank_0001.vti"]


@needs_mpi
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
def test_mpirun_tiles_a_z_long_image_by_slabs_like_one_process(tmp_path):
    """A .npy box longest along z on 3 ranks: the ranks tile their z slabs, rank 0 places
    them in order as they arrive (no reordering), and at the allocation each serving rank
    tiles its own part again (its slab and halo layers, numbered from the survey's counts)
    instead of receiving it from rank 0; the checkpoint and probes equal one process's bit
    for bit."""
    pytest.importorskip("geometries.loaders", reason="case files load geometries via geometries")
    solid = porous((11, 10, 30), seed=4)
    path = _pack_case(tmp_path, {"max_steps": 8, "output_interval": 8, "check_interval": 8,
                                 "checkpoint_interval": 8, "vti": False},
                      [{"name": "a", "at": [5, 5, 25]}], solid=solid)
    _mpirun(1, path, tmp_path / "one", cwd=tmp_path)
    done = _mpirun(3, path, tmp_path / "three", cwd=tmp_path)
    assert "The ranks tiled the image by slabs (pack.npy)" in done.stderr, done.stderr[-2000:]
    assert "Each rank tiles its own part from its slab" in done.stderr  # none cut on rank 0
    assert np.array_equal(_populations(tmp_path / "one"), _populations(tmp_path / "three"))
    assert (tmp_path / "one" / "probes.csv").read_text() == \
        (tmp_path / "three" / "probes.csv").read_text()
    split = json.loads((tmp_path / "three" / "summary.json").read_text())["decomposition"]
    assert split["axis"] == "z" and split["ranks"] == 3


@needs_mpi
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
def test_mpirun_fields_in_y_slabs_are_a_pvti_equal_to_one_process_vti(tmp_path):
    """A box longest along y is cut into y slabs (3 ranks): the pieces' extents differ in y
    alone, sharing their boundary points, and the .pvti reads back as one process's .vti."""
    pytest.importorskip("geometries.loaders", reason="case files load geometries via geometries")
    pv = pytest.importorskip("pyvista")
    import xml.etree.ElementTree as ET


    path = _pack_case(tmp_path, {"max_steps": 6, "output_interval": 6, "check_interval": 6,
                                 "checkpoint_interval": 0},
                      solid=porous((14, 30, 11), seed=2), walls=False)
    _mpirun(1, path, tmp_path / "one", cwd=tmp_path)
    _mpirun(3, path, tmp_path / "three", cwd=tmp_path)
    pvti = tmp_path / "three" / "fields_00000006.pvti"
    extents = [[int(v) for v in piece.get("Extent").split()]
               for piece in ET.parse(pvti).getroot().iter("Piece")]
    assert len(extents) == 3
    for lower, upper in zip(extents[:-1], extents[1:], strict=True):
        assert lower[3] == upper[2]  # one shared layer of points along y
        assert lower[:2] == upper[:2] == [0, 14] and lower[4:] == upper[4:] == [0, 11]
    assert extents[0][2] == 0 and extents[-1][3] == 30
    one, three = pv.read(tmp_path / "one" / "fields_00000006.vti"), pv.read(pvti)
    assert list(one.cell_data) == list(three.cell_data) and one.extent == three.extent
    for name in one.cell_data:
        a, b = one.cell_data[name], three.cell_data[name]
        assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True), name
