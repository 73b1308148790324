"""The mirrored permeability's coarse start over ranks (issue 33,
:mod:`solver.distributed.coarse_start`): coarsened slabs, aligned slab bounds, the prolongation
of ranks equal to the one-device start, and ``mpirun -n 2 python -m solver.distributed.mirrored``
with its coarse start equal to the one-device pieces run in one process (NumPy, float64).

The MPI test is skipped with the reason when mpi4py or mpirun is missing, as
tests/solver/test_local_setup.py does.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from geometries import VoxelGeometry
from geometries.preprocess import downsample, keep_connected
from geometries.regions import ArrayRegions, CoarsenedRegions, GrainRegions, MirroredRegions
from solver import observables
from solver.backends.numpy_backend import NumpyBackend
from solver.config import SimulationConfig
from solver.distributed import LoopbackHub, RankSolver, mpi_available, step_together
from solver.distributed.coarse_start import coarse_table, feasible_levels, prolong_owned
from solver.distributed.comm import find_mpirun
from solver.distributed.local_setup import local_part, summarize
from solver.lattice import get_lattice
from solver.problem import Problem
from solver.rock.initial import PLAIN, StartScale, coarse_setup, start_on_device
from solver.rock.protocol import setup_protocol
from solver.rock.settings import PermeabilitySettings
from solver.simulation import Simulation

from .porous_cases import noisy_start
from .solo_comm import SoloComm
from .test_local_setup import mirrored_over_two_ranks

REPO = Path(__file__).resolve().parents[2]
MPI_OK, MPI_WHY = mpi_available()
needs_mpi = pytest.mark.skipif(not MPI_OK or find_mpirun() is None,
                               reason=f"MPI test skipped: {MPI_WHY if not MPI_OK else ''}"
                                      f"{'' if find_mpirun() else 'no mpirun on PATH'}")


def test_coarsened_slabs_are_the_downsampled_mirrored_box():
    """Any slab of the coarsened (twice) mirrored sample is that slab of the whole box
    downsampled as the one-device start does, so ranks coarsen without overlap."""
    sample = GrainRegions((32, 16, 24), 0.35, 6, seed=4)
    whole = VoxelGeometry(MirroredRegions(sample, 0).slab(0, 0, 64))
    once = downsample(whole, 2)
    twice = downsample(once, 2)
    box1 = MirroredRegions(CoarsenedRegions(sample), 0)
    box2 = MirroredRegions(CoarsenedRegions(CoarsenedRegions(sample)), 0)
    assert box1.shape == once.shape and box2.shape == twice.shape
    assert np.array_equal(box1.slab(0, 0, 32), once.solid)
    assert np.array_equal(box2.slab(0, 0, 16), twice.solid)
    for start, stop in ((0, 5), (5, 17), (17, 32)):
        assert np.array_equal(box1.slab(0, start, stop), once.solid[start:stop])
    assert np.array_equal(box1.slab(2, 3, 9), once.solid[:, :, 3:9])


def test_slab_bounds_on_multiples_and_feasible_levels():
    """Cut on multiples of 2^L tile layers, every rank keeps tiles; the levels a shape allows."""
    summary = summarize(MirroredRegions(GrainRegions((48, 16, 16), 0.35, 6, seed=1), 0), 0, 4)
    for multiple in (1, 2, 4):
        bounds = summary.bounds(3, multiple)
        assert bounds[0] == 0 and bounds[-1] == len(summary.tiles)
        assert all(b % multiple == 0 for b in bounds) and (np.diff(bounds) > 0).all()
    assert feasible_levels((48, 32, 32), 0, 4, 3) == 3  # 96 / 4 = 24 layers: 8 | 24
    assert feasible_levels((48, 32, 32), 0, 4, 4) == 3  # 24 layers: 16 does not divide
    assert feasible_levels((48, 16, 16), 0, 4, 3) == 2  # 16 -> 8 -> 4: 4 < 8 voxels to halve
    assert feasible_levels((20, 16, 16), 0, 4, 2) == 1  # 40 / 4 = 10 layers: 4 does not divide
    assert feasible_levels((26, 16, 16), 0, 4, 1) == 0  # 52 / 4 = 13 layers: odd


def config(force=(3e-5, 0.0, 0.0), **kw) -> SimulationConfig:
    base = dict(lattice="D3Q19", collision="TRT", precision="float64", tau=0.7,
                body_force=force, backend="numpy", tile_offset="origin")
    base.update(kw)
    return SimulationConfig(**base)


def ranks_of(source, cfg, summary, bounds, hub, backend) -> list[RankSolver]:
    """Ranks built from their slabs with the given bounds (loopback exchange)."""
    out = []
    for r in range(len(bounds) - 1):
        problem, dec = local_part(source, cfg, summary, len(bounds) - 1, r, bounds)
        out.append(RankSolver(problem, dec, r, backend,
                              lambda plan, s, r=r, hub=hub: hub.exchange(r, plan, s)))
    return out


CASES = [
    pytest.param(1, "numpy", {}, 1e-14, PLAIN, id="numpy-1"),
    pytest.param(3, "numpy", {}, 1e-14, PLAIN, id="numpy-3"),
    # float32 arithmetic: one GPU prolongates in its fused kernels, the ranks in CuPy
    # operations (the same map, rounding apart); float16 storage rounds by node numbers.
    pytest.param(2, "cupy", {"precision": "float32"}, 1e-6, PLAIN, marks=pytest.mark.gpu,
                 id="cupy-float32-tiled"),
    pytest.param(2, "cupy", {"precision": "float32", "tile_storage": "compact"}, 1e-6, PLAIN,
                 marks=pytest.mark.gpu, id="cupy-float32-compact"),
    pytest.param(2, "cupy", {"precision": "float32", "storage": "float16"}, 2e-3, PLAIN,
                 marks=pytest.mark.gpu, id="cupy-float16-tiled"),
    # the rescaled start (issue 29): velocity and density deviation times s over ranks too
    pytest.param(3, "numpy", {}, 1e-14, StartScale(0.7, 0.7), id="numpy-3-rescaled"),
    pytest.param(2, "cupy", {"precision": "float32"}, 1e-6, StartScale(0.7, 0.7),
                 marks=pytest.mark.gpu, id="cupy-float32-tiled-rescaled"),
]


@pytest.mark.parametrize("n_ranks,backend_name,extra,rtol,scale", CASES)
def test_ranks_prolongate_as_one_device(n_ranks, backend_name, extra, rtol, scale):
    """Coarse ranks stepped from a noisy start, prolongated rank by rank into fine ranks
    whose slabs are twice theirs: every owned fine tile is the one-device start's
    (start_on_device; NumPy: bit for bit but the mean density, summed over the ranks), with
    the start's rescale ``scale`` alike."""
    from solver.backends import get_backend

    backend = NumpyBackend(threads=1) if backend_name == "numpy" else get_backend(backend_name)
    sample = GrainRegions((32, 16, 16), 0.35, 6, seed=2)
    fine_box = MirroredRegions(sample, 0)
    coarse_box = MirroredRegions(CoarsenedRegions(sample), 0)
    fine_cfg = config(backend=backend_name, **extra)
    coarse_cfg = config(force=(6e-5, 0.0, 0.0), backend=backend_name, **extra)
    coarse_solid = coarse_box.slab(0, 0, coarse_box.shape[0])
    whole_c = Problem.from_config(coarse_solid, coarse_cfg)
    f0 = noisy_start(whole_c)
    coarse_sim = Simulation(coarse_solid, coarse_cfg, backend=backend)
    coarse_sim.allocate()
    coarse_sim.backend.set_populations(coarse_sim.state, f0)
    coarse_sim.step(5)
    fine_sim = Simulation(fine_box.slab(0, 0, 64), fine_cfg, backend=backend)
    start_on_device(fine_sim, coarse_sim, scale=scale)
    expected = fine_sim.populations()

    fine_summary = summarize(fine_box, 0, 4)
    bounds = fine_summary.bounds(n_ranks, 2)
    coarse = ranks_of(coarse_box, coarse_cfg, summarize(coarse_box, 0, 4), bounds // 2,
                      LoopbackHub(), backend)
    for rank in coarse:
        index = whole_c.tiling.tile_map[tuple(rank.layout.tiling.tiles.T)]
        rank.backend.set_populations(rank.state, f0[index])
    step_together(coarse, 5)
    fine = ranks_of(fine_box, fine_cfg, fine_summary, bounds, LoopbackHub(), backend)
    tables = [coarse_table(rank, scale.velocity) for rank in coarse]
    total = sum(s for _, (s, _) in tables) / sum(c for _, (_, c) in tables)
    for rank, (table, _) in zip(fine, tables, strict=True):
        prolong_owned(rank, table, total, scale=scale)
        owned = rank.layout.tiling.tiles[: rank.n_owned]
        index = fine_sim.tiling.tile_map[tuple(owned.T)]
        np.testing.assert_allclose(rank.owned_populations(), expected[index], rtol=rtol,
                                   atol=0)


@needs_mpi
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
@pytest.mark.parametrize("n,seed,levels,rescale", [(24, 5, 1, "none"), (32, 4, 2, "none"),
                                                   (32, 4, 2, "velocity+density")])
def test_coarse_start_over_mpi_ranks_matches_the_one_device_start(tmp_path, n, seed, levels,
                                                                  rescale):
    """``mpirun -n 2 python -m solver.distributed.mirrored --coarse-levels L`` with 41 steps at
    every level (checks at 20 and 40, each read one step later too: k is the mean of steps 40
    and 41): each level's k and the fine k equal those of the one-device pieces
    (coarse_setup's runs, start_on_device, the fine run) in one process, to rounding; with
    ``--start-rescale`` each prolongation scaled by the chain's factor alike."""
    lattice = get_lattice("D3Q19")
    sample = GrainRegions((n, 16, 16), 0.35, 6, seed=seed).slab(0, 0, n)
    kept, _ = keep_connected(VoxelGeometry(sample), 0, lattice.c)
    np.save(tmp_path / "sample.npy", kept.solid)
    out = mirrored_over_two_ranks(tmp_path, "--steps", "41", "--check", "20",
                                  "--coarse-levels", str(levels), "--start-rescale", rescale,
                                  "--start-density-gain", "1.1")
    assert out["coarse_levels"] == levels and [c["steps"] for c in out["coarse"]] == [41] * levels
    assert all(b % 2**levels == 0 for b in out["slab_bounds"])

    base = SimulationConfig(precision="float64", backend="numpy", tile_offset="origin")
    setups = [setup_protocol(kept, base, 0, "mirrored", PermeabilitySettings())]
    source = ArrayRegions(kept.solid)
    for _ in range(levels):
        setups.append(coarse_setup(setups[-1]))
        source = CoarsenedRegions(source)
        # The ranks keep every pore of a coarse box; these samples' have none to drop.
        box = MirroredRegions(source, 0)
        assert np.array_equal(setups[-1].geometry.solid, box.slab(0, 0, box.shape[0]))
    below, chain, scales = None, [], []  # chain: each level's k, fine voxel², coarsest first
    for level in range(levels, -1, -1):  # coarsest first, as both run them
        sim = Simulation(setups[level].geometry, setups[level].config,
                         backend=NumpyBackend(threads=1))
        if below is not None:
            scale = StartScale.from_chain(rescale, chain, density_gain=1.1)
            scales.insert(0, scale.velocity)
            start_on_device(sim, below, scale=scale)
        sim.step(40)
        k_first = observables.permeability(sim.problem, sim.fields(), 0).lattice
        sim.step(1)
        k = (k_first + observables.permeability(sim.problem, sim.fields(), 0).lattice) / 2
        if level:
            assert out["coarse"][level - 1]["k"] == pytest.approx(4**level * k, rel=1e-10)
        chain.append(4**level * k)
        below = sim
    assert out["start_scale"] == pytest.approx(scales[0], rel=1e-9)
    assert out["start_density_scale"] == pytest.approx(
        1.1 * (scales[0] if rescale == "velocity+density" else 1.0), rel=1e-9)
    assert [c["start_scale"] for c in out["coarse"]] == pytest.approx(scales[1:] + [None])
    assert (scales[0] < 1.0) == (rescale != "none")
    assert out["k"] == pytest.approx(k, rel=1e-10)
    assert out["work_steps"] > out["steps"]


def test_cached_slabs_are_the_source_slabs_read_once():
    """A cached source gives every slab of its source; layers read once are not read again,
    slabs across the cut axis pass through, and a kept block changed by a caller stays."""
    from geometries.regions import CachedRegions

    source = GrainRegions((40, 18, 16), 0.3, 6, seed=5)
    whole = source.slab(0, 0, 40)
    cached = CachedRegions(source, 0)
    rng = np.random.default_rng(1)
    for _ in range(60):
        lo = int(rng.integers(0, 40))
        hi = int(rng.integers(lo + 1, 41))
        part = cached.slab(0, lo, hi)
        assert np.array_equal(part, whole[lo:hi])
        part[...] = True  # the caller's copy
    assert np.array_equal(cached.slab(0, 0, 40), whole)
    assert cached.reads == 40  # every layer once
    assert np.array_equal(cached.slab(1, 2, 5), whole[:, 2:5])
    small = CachedRegions(source, 0, budget=0)
    assert np.array_equal(small.slab(0, 3, 9), whole[3:9]) and not small.blocks


#: The protocol choices ``python -m solver.distributed.mirrored`` shares with one device.
SHARED_CHOICES = ("coarse_start", "coarse_levels", "start_rescale", "start_estimate",
                  "start_density_gain", "tolerance", "coarse_tolerance_factor", "accelerate")


def test_command_line_defaults_are_the_permeability_settings():
    """The multi-rank command line without flags asks for PermeabilitySettings' choices
    (decided there once: coarse levels by size, the start rescaled by the velocity with
    density gain 1.1, the tolerance, the steps and check interval), and its help names
    where each default comes from."""
    from solver.distributed.mirrored import build_parser, settings_from

    defaults = PermeabilitySettings()
    assert defaults.start_rescale != "none" and defaults.start_density_gain != 1.0
    args = build_parser().parse_args(["sample.npy"])
    settings = settings_from(args)
    for name in SHARED_CHOICES:
        assert getattr(settings, name) == getattr(defaults, name), name
    assert (args.steps, args.check) == (defaults.max_steps, defaults.check_interval)
    text = " ".join(build_parser().format_help().split())
    for name in ("max_steps", "check_interval", "tolerance", "coarse_levels", "start_rescale",
                 "start_estimate", "start_density_gain"):
        assert f"default: PermeabilitySettings.{name}" in text, name
    # flags still choose: 0 levels is from rest, as before
    rest = settings_from(build_parser().parse_args(["s.npy", "--coarse-levels", "0",
                                                    "--start-rescale", "none"]))
    assert not rest.coarse_start and rest.start_rescale == "none"


def test_runner_without_settings_starts_as_one_device():
    """``run_mirrored`` without settings: the coarse levels by the sample's size (1 below
    400³; it started from rest before), the prolongation's density times the default gain."""
    from solver.distributed.mirrored import run_mirrored

    out = run_mirrored(GrainRegions((16, 16, 16), 0.35, 6, seed=2),
                       config(force=(0.0, 0.0, 0.0)), 0, SoloComm(), NumpyBackend(threads=1),
                       21, 10)
    assert out["coarse_levels_asked"] == 1 and out["coarse_levels"] == 1
    assert out["start_scale"] == 1.0  # one level: no k ratio to rescale by
    assert out["start_density_scale"] == pytest.approx(PermeabilitySettings().start_density_gain)


@needs_mpi
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
def test_mpi_ranks_with_the_default_flags_take_the_rescaled_start(tmp_path):
    """``mpirun -n 2 python -m solver.distributed.mirrored --coarse-levels 2`` with no start
    flags: the fine run starts from the chain's prolongation rescaled by the velocity (s = the
    ratio of the two levels' k, below 1) with the density gain 1.1, each level's records
    alike (the 1/4 -> 1/2 prolongation: gain only, one k so far)."""
    lattice = get_lattice("D3Q19")
    sample = GrainRegions((32, 16, 16), 0.35, 6, seed=4).slab(0, 0, 32)
    kept, _ = keep_connected(VoxelGeometry(sample), 0, lattice.c)
    np.save(tmp_path / "sample.npy", kept.solid)
    out = mirrored_over_two_ranks(tmp_path, "--steps", "41", "--check", "20",
                                  "--coarse-levels", "2")
    defaults = PermeabilitySettings()
    assert defaults.start_rescale == "velocity"
    half, quarter = out["coarse"]
    expected = StartScale.from_chain("velocity", [quarter["k"], half["k"]],
                                     defaults.start_estimate, defaults.start_density_gain)
    assert out["start_scale"] == pytest.approx(expected.velocity, rel=1e-12)
    assert out["start_scale"] < 1.0
    assert out["start_density_scale"] == pytest.approx(defaults.start_density_gain)
    assert half["start_scale"] == 1.0
    assert half["start_density_scale"] == pytest.approx(defaults.start_density_gain)
