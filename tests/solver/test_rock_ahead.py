"""A rock study builds each run's allocation tables and k-check flags ahead (issue 29, 1000³
tensor): beside the previous run's steps instead of between two runs. What is made ahead must
be what the allocation and the check would build themselves (the same k and steps as runs set
up on the spot), and its host memory must go with the run or the sample it was made for."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from geometries.generators import random_sphere_pack
from solver.backends.cuda.tables import TablesAhead, device_tables
from solver.config import SimulationConfig
from solver.observables import darcy_window
from solver.rock import PermeabilitySettings, setup_protocol
from solver.rock import measure as rock_measure
from solver.rock.check import check_ahead, node_flags
from solver.simulation import Simulation
from solver.tiling import Tiling

from .porous_cases import make_problem


def _same_tables(a: dict, b: dict) -> None:
    assert list(a) == list(b)  # kernel-argument order
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_tables_made_ahead_are_the_allocations_own_and_taken_once():
    problem = make_problem("D3Q19", "float32", "TRT")
    ahead = TablesAhead()
    ahead.put(problem, ("tiled", "none"), device_tables(problem, "none"))
    assert len(ahead) == 1
    assert ahead.take(problem, ("tiled", "halfway")) is None  # for other kernels: built anew
    assert len(ahead) == 0
    ahead.put(problem, ("tiled", "none"), device_tables(problem, "none"))
    _same_tables(ahead.take(problem, ("tiled", "none")), device_tables(problem, "none"))
    assert len(ahead) == 0  # the allocation holds them now
    assert ahead.take(problem, ("tiled", "none")) is None


def test_tables_made_ahead_go_with_their_problem():
    """A run stopped before its allocation (or a sample changed) leaves nothing behind."""
    ahead = TablesAhead()
    kept = make_problem("D3Q19", "float32", "TRT", seed=1)
    dropped = make_problem("D3Q19", "float32", "TRT", seed=2)
    for problem in (kept, dropped):
        ahead.put(problem, ("tiled", "none"), device_tables(problem, "none"))
    assert len(ahead) == 2
    del problem, dropped
    gc.collect()
    assert len(ahead) == 1
    _same_tables(ahead.take(kept, ("tiled", "none")), device_tables(kept, "none"))


def test_a_compact_run_takes_its_host_tables_made_ahead():
    """A compact run (host arrays) built from its tables made ahead holds what it builds
    itself; tables of another storage are not used."""
    from solver.backends.cuda.compact_run import CompactRun, compact_host

    problem = make_problem("D3Q19", "float32", "TRT", tile_storage="compact")
    host = compact_host(problem, 1)
    fresh, ahead = CompactRun(problem, 1, xp=np), CompactRun(problem, 1, xp=np, host=host)
    assert ahead.compact is host.compact
    for a, b in zip(ahead.edge, fresh.edge, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ahead.starts, fresh.starts)
    for a, b in zip(ahead.tables, fresh.tables, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(ahead.f[0], fresh.f[0])
    assert not host.fits(problem, 2, False)  # another pad: the run builds its own
    assert CompactRun(problem, 2, xp=np, host=host).compact is not host.compact


def test_fluid_count_is_made_once_per_solid_mask():
    solid = np.zeros((8, 8, 8), dtype=bool)
    solid[:3] = True
    tiling = Tiling.build(solid, 4, (0, 0, 0))
    assert tiling.n_fluid == 5 * 64
    tiling.solid = np.ones_like(tiling.solid)  # a new mask is counted again
    assert tiling.n_fluid == 0


class _FusedChecks:
    """A NumPy backend named as the one whose checks are fused (CuPy): check_ahead then makes
    the fused check's node flags, which need no device."""

    def __init__(self, backend) -> None:
        self._backend = backend

    name = "cupy"

    def __getattr__(self, name):
        return getattr(self._backend, name)


@pytest.mark.parametrize("protocol", ["mirrored", "pressure"])
def test_check_flags_made_ahead_are_the_checks_own(protocol):
    from solver.backends import get_backend
    from solver.backends.plan import plan_for

    pack = random_sphere_pack((16, 16, 16), 0.35, diameter=8, seed=3)
    config = SimulationConfig(precision="float32", collision="TRT")
    setup = setup_protocol(pack, config, 1, protocol, PermeabilitySettings())
    sim = Simulation(setup.geometry, setup.config, _FusedChecks(get_backend("numpy")))
    ahead = check_ahead(sim, setup.axis, setup.window)
    fresh = darcy_window(sim.problem, setup.axis, setup.window, np)
    assert ahead.compact == plan_for(sim.problem).compact
    if ahead.compact and protocol == "mirrored":  # the whole box: filled on the device
        assert ahead.flags is None  # (test_whole_box_flags_of_a_compact_run_...)
        return
    np.testing.assert_array_equal(ahead.flags, node_flags(sim.problem, fresh, ahead.compact))
    assert ahead.flags.max() & 8  # fluid nodes flagged


def _study_and_fresh_runs(backend_name: str, monkeypatch, size: int = 16,
                          max_steps: int = 1000, **options):
    """k and steps of a 3-axis mirrored study (set-ups made ahead) and of the same runs with
    nothing made ahead (as before: tables and flags built at allocation); ``options`` of the
    configuration."""
    from solver.backends import get_backend

    pack = random_sphere_pack((size,) * 3, 0.35, diameter=8, seed=5)
    config = SimulationConfig(precision="float32", collision="TRT", **options)
    settings = PermeabilitySettings(axes=["x", "y", "z"], formation_factor=False,
                                    max_steps=max_steps, check_interval=100)
    backend = get_backend(backend_name)
    study = rock_measure.run_study(pack, config, settings, backend)
    ahead = [(r.axis, r.k_lattice, r.steps, r.start_steps) for r in study.results]
    with monkeypatch.context() as m:  # nothing made ahead
        m.setattr(rock_measure, "_host_tables", lambda sim, setup, checks: None)
        fresh = []
        for axis in range(3):
            setup = setup_protocol(pack, config, axis, "mirrored", settings)
            r = rock_measure.measure_axis(setup, settings, backend)
            fresh.append((r.axis, r.k_lattice, r.steps, r.start_steps))
    return backend, ahead, fresh


@pytest.mark.parametrize("worker", ["caller", "thread"])
def test_a_study_with_set_ups_made_ahead_gives_fresh_runs_k_and_steps(monkeypatch, worker):
    """NumPy: the study's k and steps per axis, bit for bit, as runs set up on the spot; with
    the set-ups made in the caller (NumPy's way) or in a worker thread (a GPU's: the next
    run's set-up and the fine run's tables beside the steps)."""
    from concurrent.futures import ThreadPoolExecutor

    if worker == "thread":
        monkeypatch.setattr(rock_measure, "_host_worker",
                            lambda backend: ThreadPoolExecutor(max_workers=1))
    _, ahead, fresh = _study_and_fresh_runs("numpy", monkeypatch)
    assert ahead == fresh


@pytest.mark.gpu
@pytest.mark.parametrize("size, storage", [(32, {"tile_storage": "tiled",
                                                 "streaming": "in-place"}),
                                           (24, {})])
def test_a_cupy_study_with_tables_made_ahead_gives_fresh_runs_k_and_steps(monkeypatch, size,
                                                                        storage):
    """CuPy, tiled in place as the 1000³ fine runs, and as the plan stores a small pack
    (compact): the same steps and k per axis with the tables and flags made ahead, and
    nothing left held on the host after the study. k to 1e-12, not bits: the fused check
    adds its per-block sums atomically (in float64), in whatever order the blocks finish."""
    backend, ahead, fresh = _study_and_fresh_runs("cupy", monkeypatch, size, 6000, **storage)
    assert [(a, n, s) for a, _, n, s in ahead] == [(a, n, s) for a, _, n, s in fresh]
    for (_, k, _, _), (_, k_fresh, _, _) in zip(ahead, fresh, strict=True):
        assert k == pytest.approx(k_fresh, rel=1e-12)
    assert len(backend.tables_ahead) == 0


@pytest.mark.gpu
def test_a_tiled_run_uploads_the_tables_made_ahead():
    import cupy as cp

    from solver.backends import get_backend
    from solver.backends.cuda.kernels import KernelVariant

    backend = get_backend("cupy")
    problem = make_problem("D3Q19", "float32", "TRT")
    backend.prepare(problem)
    assert len(backend.tables_ahead) == 1
    run = backend.allocate(problem)
    assert len(backend.tables_ahead) == 0
    host = device_tables(problem, KernelVariant.for_problem(problem).boundary)
    for name, table in run.tables.items():
        np.testing.assert_array_equal(cp.asnumpy(table), host[name], err_msg=name)
    backend.release(run)


def test_a_fused_check_reads_with_its_flags_made_ahead(monkeypatch):
    """The fused check's kernel (g++ emulation, a compact run of host arrays) reads the same
    health and k with the flags made ahead as with the ones it makes itself, and makes none."""
    from solver.backends.cuda import compact_check
    from solver.rock import check

    from .grid_stride_emulator import compiler
    from .test_compact_readout import EmulatedCompactBackend
    from .test_rock_check_kernel import _launch, _run

    if compiler() is None:
        pytest.skip("g++ is not installed")
    monkeypatch.setattr(compact_check, "_cupy_launch", _launch)
    monkeypatch.setattr(compact_check, "_cupy_blocks", lambda: 2)
    monkeypatch.setattr(check, "_fuses", lambda sim: True)  # the emulated run as CuPy's
    sim, setup = _run("mirrored", "incompressible", EmulatedCompactBackend())
    own = check.KCheck(sim, setup.axis, setup.window, 1e-6)
    ahead = check.check_ahead(sim, setup.axis, setup.window)
    assert ahead.compact  # what the plan stores, as the allocation did

    def refused(*args):
        raise AssertionError("node flags made again")

    monkeypatch.setattr(check, "node_flags", refused)
    made_ahead = check.KCheck(sim, setup.axis, setup.window, 1e-6, ahead)
    np.testing.assert_array_equal(made_ahead.flags, own.flags)
    (health, k), (health_a, k_a) = own.read(), made_ahead.read()
    assert k_a.lattice == pytest.approx(k.lattice, rel=1e-12)  # block sums: any order
    assert health_a["max_speed"] == health["max_speed"]


def test_whole_box_flags_of_a_compact_run_are_made_where_the_check_runs(monkeypatch):
    """A mirrored (whole-box) compact run's flags, one value per fluid node, are not made
    ahead on the host: its check fills them on its device, the values node_flags makes."""
    from solver.observables import darcy_window
    from solver.rock import check

    from .test_compact_readout import EmulatedCompactBackend
    from .test_rock_check_kernel import _run

    monkeypatch.setattr(check, "_fuses", lambda sim: True)  # the emulated run as CuPy's
    sim, setup = _run("mirrored", "incompressible", EmulatedCompactBackend())
    window = darcy_window(sim.problem, setup.axis, setup.window, np)
    expected = check.node_flags(sim.problem, window, True)
    ahead = check.check_ahead(sim, setup.axis, setup.window)
    assert ahead.compact and ahead.flags is None

    def refused(*args):
        raise AssertionError("whole-box flags made on the host")

    monkeypatch.setattr(check, "node_flags", refused)
    flags = check.KCheck(sim, setup.axis, setup.window, 1e-6, ahead).flags
    assert flags.dtype == np.uint8
    np.testing.assert_array_equal(flags, expected)
