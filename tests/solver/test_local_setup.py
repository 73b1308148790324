"""Distributed runs whose ranks build only their own slab: region sources, the global summary,
local tilings stepping like the whole problem, and the mirrored permeability over MPI ranks
against the single-process protocol.

The MPI test runs ``mpirun -n 2 python -m solver.distributed.mirrored`` on CPU ranks (skipped
with the reason when mpi4py or mpirun is missing), as tests/solver/test_distributed.py does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from geometries import VoxelGeometry
from geometries.preprocess import keep_connected
from geometries.regions import ArrayRegions, GrainRegions, MirroredRegions
from solver import observables
from solver.backends.numpy_backend import NumpyBackend
from solver.config import SimulationConfig
from solver.distributed import LoopbackHub, RankSolver, decompose, mpi_available, step_together
from solver.distributed.comm import find_mpirun
from solver.distributed.decomposition import layer_counts
from solver.distributed.local_setup import local_part, rank_layers, slab_tiling, summarize
from solver.distributed.mirrored import mirrored_config
from solver.distributed.reductions import combine, owned_numbers
from solver.lattice import get_lattice
from solver.problem import Problem
from solver.rock.protocol import setup_protocol
from solver.rock.settings import PermeabilitySettings
from solver.rock.uncertainty import StepPair, alternation_residual
from solver.simulation import Simulation
from solver.tiling import Tiling

from .porous_cases import noisy_start

REPO = Path(__file__).resolve().parents[2]


def mirrored_over_two_ranks(tmp_path: Path, *flags: str, ranks: int = 2) -> dict:
    """``mpirun -n 2 python -m solver.distributed.mirrored`` on tmp_path/sample.npy along x in
    float64 with the given flags (``ranks``: another number of ranks); its JSON summary."""
    cmd = [find_mpirun(), "-n", str(ranks), sys.executable, "-m", "solver.distributed.mirrored",
           str(tmp_path / "sample.npy"), "--axis", "0", *flags, "--set", "precision=float64",
           "--json", str(tmp_path / "out.json")]
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp_path / "out.json").read_text())


# As tests/solver/test_distributed.py (not imported: it needs hypothesis, the GPU box may not).
MPI_OK, MPI_WHY = mpi_available()
needs_mpi = pytest.mark.skipif(not MPI_OK or find_mpirun() is None,
                               reason=f"MPI test skipped: {MPI_WHY if not MPI_OK else ''}"
                                      f"{'' if find_mpirun() else 'no mpirun on PATH'}")


def grains(shape=(26, 15, 22), seed=2) -> GrainRegions:
    """A small rock-like grain pack (porosity ~0.35), no axis a multiple of the tile edge 4
    except the last."""
    return GrainRegions(shape, 0.35, 7, seed=seed)


@pytest.mark.parametrize("mirror_axis,axis", [(0, 0), (0, 1), (2, 2), (None, 0)])
def test_summary_and_slabs_match_the_whole_tiling(mirror_axis, axis):
    """The chunked summary counts what the whole image's tiling counts; its cuts are
    decompose()'s; every rank's local tiling holds exactly the global tiles of its layers,
    in the global order."""
    source = grains(shape=(26, 15, 24))
    if mirror_axis is not None:
        source = MirroredRegions(source, mirror_axis)
    whole = source.slab(0, 0, source.shape[0])
    tiling = Tiling.build(whole, 4, (0, 0, 0))
    summary = summarize(source, axis, 4, chunk=3)
    assert np.array_equal(summary.tiles, layer_counts(tiling, axis))
    assert summary.n_fluid == int((~whole).sum())
    assert summary.faces == sum(int(np.count_nonzero(np.diff(whole, axis=a))) for a in range(3))
    for n in (1, 2, 3):
        bounds = summary.bounds(n)
        assert tuple(bounds) == decompose(tiling, n, axis).bounds
        for rank in range(n):
            local = slab_tiling(source, axis, 4, rank_layers(bounds, rank, periodic=True))
            index = tiling.tile_map[tuple(local.tiles.T)]
            assert (index >= 0).all() and (np.diff(index) > 0).all()
            assert np.array_equal(local.solid, tiling.solid[index])
            layers = np.unique(local.tiles[:, axis])
            expected = set(range(bounds[rank], bounds[rank + 1]))
            if n > 1:
                expected |= {(bounds[rank] - 1) % bounds[-1], bounds[rank + 1] % bounds[-1]}
            assert set(layers.tolist()) <= expected


def config(**kw) -> SimulationConfig:
    base = dict(lattice="D3Q19", collision="TRT", precision="float64", tau=0.7,
                body_force=(2e-5, -1e-5, 5e-6), y_min="wall", y_max="wall", backend="numpy",
                tile_offset="origin")
    base.update(kw)
    return SimulationConfig(**base)


@pytest.mark.parametrize("n_ranks,axis", [(2, 2), (3, 0)])
def test_ranks_built_from_their_slabs_step_like_one_process(n_ranks, axis):
    """Ranks that read only their slab (loopback exchange) step bit for bit as one process,
    and their device-reduced numbers give the one process's k and layer fluxes."""
    source = grains()
    solid = source.slab(0, 0, source.shape[0])
    cfg = config()
    whole = Problem.from_config(solid, cfg)
    f0 = noisy_start(whole)
    sim = Simulation(solid, cfg, backend=NumpyBackend(threads=1))
    sim.allocate()
    sim.backend.set_populations(sim.state, f0)
    sim.step(6)
    summary = summarize(source, axis, 4)
    hub, ranks = LoopbackHub(), []
    for r in range(n_ranks):
        problem, dec = local_part(source, cfg, summary, n_ranks, r)
        ranks.append(RankSolver(problem, dec, r, NumpyBackend(threads=1),
                                lambda plan, s, r=r, hub=hub: hub.exchange(r, plan, s)))
    for rank in ranks:
        index = whole.tiling.tile_map[tuple(rank.layout.tiling.tiles.T)]
        rank.backend.set_populations(rank.state, f0[index])
    step_together(ranks, 6)
    expected = sim.populations()
    for rank in ranks:
        owned = rank.layout.tiling.tiles[: rank.n_owned]
        index = whole.tiling.tile_map[tuple(owned.T)]
        assert np.array_equal(rank.owned_populations(), expected[index])
    numbers = [owned_numbers(rank, 0) for rank in ranks]
    total = numbers[0]
    for more in numbers[1:]:
        total = combine_pair(total, more)
    fields = sim.fields()
    k = observables.permeability(sim.problem, fields, 0)
    mean = total.momentum / solid.size
    assert observables.darcy_permeability(sim.problem, mean, 0).lattice == \
        pytest.approx(k.lattice, rel=1e-12)
    j = observables.momentum_density(sim.problem, fields["rho"], fields["u"][0])
    flux = np.nansum(j, axis=(1, 2))
    np.testing.assert_allclose(total.plane_flux, flux, rtol=1e-11, atol=1e-15)
    assert total.fluid == whole.n_fluid and total.finite
    speed = np.sqrt(np.nansum(fields["u"] ** 2, axis=0))
    assert total.max_speed == pytest.approx(np.nanmax(speed), rel=1e-12)


def combine_pair(a, b):
    """:func:`combine` of two ranks' numbers without MPI."""

    class Pair:
        def allgather(self, _):
            return [a, b]

    return combine(a, Pair())


@needs_mpi
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
def test_mirrored_permeability_over_mpi_ranks_matches_one_process(tmp_path):
    """``mpirun -n 2 python -m solver.distributed.mirrored``: the protocol's drive and tau are
    the single-process protocol's, and k after 61 steps equals k of one process running the
    protocol's mirrored geometry (rounding of the sums only): checks at 30 and 60, each read
    one step later too; k is the mean of steps 60 and 61."""
    source = grains(shape=(24, 18, 16), seed=5)
    lattice = get_lattice("D3Q19")
    kept, _ = keep_connected(VoxelGeometry(source.slab(0, 0, 24)), 0, lattice.c)
    np.save(tmp_path / "sample.npy", kept.solid)
    out = mirrored_over_two_ranks(tmp_path, "--steps", "61", "--check", "30",
                                  "--coarse-levels", "0")
    # The last check at 60, its pair at 61 (solver.rock.uncertainty)
    assert out["ranks"] == 2 and out["steps"] == 61 and len(out["per_rank"]) == 2
    assert [h["step"] for h in out["history"]] == [30, 60]

    base = SimulationConfig(precision="float64", backend="numpy", tile_offset="origin")
    setup = setup_protocol(kept, base, 0, "mirrored", PermeabilitySettings())
    assert out["gradient"] == pytest.approx(setup.gradient, rel=1e-12)
    assert out["tau"] == setup.config.tau
    summary = summarize(MirroredRegions(ArrayRegions(kept.solid), 0), 0, 4)
    cfg, _ = mirrored_config(summary, base, PermeabilitySettings())
    assert cfg.body_force == setup.config.body_force
    sim = Simulation(setup.geometry, setup.config, backend=NumpyBackend(threads=1))
    sim.step(60)
    k = observables.permeability(sim.problem, sim.fields(), 0)
    sim.step(1)
    k_next = observables.permeability(sim.problem, sim.fields(), 0)
    assert out["k"] == pytest.approx((k.lattice + k_next.lattice) / 2, rel=1e-11)
    assert out["k_pair"]["k_first"] == pytest.approx(k.lattice, rel=1e-11)
    assert sum(r["fluid_nodes"] for r in out["per_rank"]) == sim.problem.n_fluid


@needs_mpi
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
@pytest.mark.parametrize("ranks", [1, 2])
def test_ranks_report_the_mean_of_k_at_two_consecutive_steps(tmp_path, ranks):
    """k alternates between even and odd steps (the populations do): over MPI ranks, as on one
    device (:class:`solver.rock.uncertainty.StepPair`), every check reads k once more one step
    later; the run reports the last mean, the two k, half their relative difference
    (``alternation``) and what the decay since the previous check leaves of it in the mean
    (``alternation_residual``); the history holds the means."""
    from .test_rock_uncertainty import alternating_pack, k_at

    kept = alternating_pack()
    np.save(tmp_path / "sample.npy", kept.solid)
    out = mirrored_over_two_ranks(tmp_path, "--steps", "400", "--check", "100",
                                  "--coarse-levels", "0", ranks=ranks)
    assert out["ranks"] == ranks and out["steps"] == 401
    assert [h["step"] for h in out["history"]] == [100, 200, 300, 400]
    base = SimulationConfig(precision="float64", backend="numpy", tile_offset="origin")
    k_n, k_next = k_at(setup_protocol(kept, base, 0, "mirrored", PermeabilitySettings()), 400)
    assert abs(k_next - k_n) / k_n > 5e-4  # measurably apart
    assert out["k_pair"] == {"step": 400, "k_first": pytest.approx(k_n, rel=1e-10),
                             "k_next": pytest.approx(k_next, rel=1e-10)}
    assert out["k"] == pytest.approx((k_n + k_next) / 2, rel=1e-10)
    assert out["alternation"] == pytest.approx(abs(k_next - k_n) / (k_n + k_next), rel=1e-8)
    k_300 = k_at(setup_protocol(kept, base, 0, "mirrored", PermeabilitySettings()), 300)
    assert out["history"][-2]["k"] == pytest.approx(sum(k_300) / 2, rel=1e-10)
    assert out["history"][-1]["k"] == out["k"]
    assert out["alternation_residual"] == pytest.approx(alternation_residual(
        StepPair(400, k_n, k_next), StepPair(300, *k_300)), rel=1e-6)
    assert out["alternation_residual"] < 0.1 * out["alternation"]


def test_auto_keeps_runs_past_the_32_bit_offsets_tiled_unless_a_rank_fits_only_compact(
        monkeypatch):
    """'auto' picks the compact storage for a rock-like pack; past the compact kernels' 32-bit
    offsets (a 1600³ rock over 2 ranks: 8e8 fluid nodes a rank) in place it keeps the tiled storage
    (faster than the 64-bit offsets), unless the tiled part does not fit the rank's device and
    the compact one does (the device's memory, which the ranks' agreed storage fills in):
    then every rank takes compact, also where another rank's part is the one that needs it."""
    from solver.backends import plan
    from solver.distributed.local_setup import agreed_storage

    source = grains(shape=(32, 32, 32))
    problem = Problem.from_config(source.slab(0, 0, 32),
                                  config(precision="float32", tile_storage="auto",
                                         streaming="in-place"))
    assert plan.plan_for(problem).tile_storage == "compact"
    assert not plan.plan_for(problem).wide
    monkeypatch.setattr(plan, "COMPACT",
                        replace(plan.COMPACT, value_limit=problem.lattice.q * problem.n_fluid))
    chosen = plan.plan_for(problem)
    assert chosen.tile_storage == "tiled" and "64-bit value offsets" in chosen.reason
    # with two copies the wide kernels are the faster arrangement (plan.WIDE_TWO_COPIES_FASTER)
    assert plan.plan_for(replace(problem, streaming="two-copy")).wide
    tiled = problem.tiled_state_bytes()
    compact = plan.compact_state_estimate(problem, plan.COMPACT_PAD)

    class Device:  # what agreed_storage asks of a CuPy backend
        def phase_stepper(self, problem, n_boundary, n_owned):
            raise AssertionError("agreed_storage plans the storage; it steps nothing")

        def __init__(self, capacity):
            self.capacity = capacity

        def memory_capacity(self):
            return self.capacity

    class Ranks:  # the other rank's (storage, needs compact for memory)
        def __init__(self, other):
            self.other = other

        def allgather(self, mine):
            return [mine, self.other]

    roomy, tight = Device(2 * tiled), Device(compact + plan.device_headroom(problem))
    assert agreed_storage(problem, roomy, None).tile_storage == "tiled"
    agreed = agreed_storage(problem, tight, None)
    assert agreed.tile_storage == "compact" and agreed.device_capacity == tight.capacity
    assert plan.plan_for(agreed).wide
    assert agreed_storage(problem, roomy, Ranks(("tiled", False))).tile_storage == "tiled"
    assert agreed_storage(problem, roomy, Ranks(("compact", True))).tile_storage == "compact"


@pytest.mark.gpu
@pytest.mark.parametrize("tile_storage", ["tiled", "compact"])
def test_cupy_ranks_from_slabs_match_one_gpu(tile_storage):
    """On the GPU (loopback exchange, one device): ranks built from their slabs of a mirrored
    grain pack step bit for bit as one GPU, and k, the largest speed and the layer fluxes
    reduced on the device are one GPU's."""
    from solver.backends import get_backend

    backend = get_backend("cupy")
    source = MirroredRegions(grains(shape=(24, 18, 16), seed=5), 0)
    solid = source.slab(0, 0, source.shape[0])
    cfg = config(precision="float32", backend="cupy", tile_storage=tile_storage,
                 body_force=(2e-5, 0.0, 0.0))
    sim = Simulation(solid, cfg, backend=backend)
    sim.step(30)
    expected = sim.populations()
    fields = sim.fields()
    k = observables.permeability(sim.problem, fields, 0)
    tiling = sim.problem.tiling
    summary = summarize(source, 0, 4)
    hub, ranks = LoopbackHub(), []
    for r in range(2):
        problem, dec = local_part(source, cfg, summary, 2, r)
        ranks.append(RankSolver(problem, dec, r, backend,
                                lambda plan, s, r=r, hub=hub: hub.exchange(r, plan, s)))
    step_together(ranks, 30)
    for rank in ranks:
        assert rank.problem.tile_storage == tile_storage
        owned = rank.layout.tiling.tiles[: rank.n_owned]
        index = tiling.tile_map[tuple(owned.T)]
        assert np.array_equal(rank.owned_populations(), expected[index])
    total = combine_pair(owned_numbers(ranks[0], 0), owned_numbers(ranks[1], 0))
    mean = total.momentum / solid.size
    assert observables.darcy_permeability(sim.problem, mean, 0).lattice == \
        pytest.approx(k.lattice, rel=1e-12)
    speed = np.sqrt(np.nansum(fields["u"] ** 2, axis=0))
    assert total.max_speed == pytest.approx(np.nanmax(speed), rel=1e-12)
    j = observables.momentum_density(sim.problem, fields["rho"], fields["u"][0])
    np.testing.assert_allclose(total.plane_flux, np.nansum(j, axis=(1, 2)), rtol=1e-10,
                               atol=1e-14)
    for rank in ranks:
        rank.release()
    sim.close()
