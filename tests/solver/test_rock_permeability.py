"""Permeability protocols on the NumPy backend: analytic duct k, tensor, speed-up, preview."""

from __future__ import annotations

import numpy as np
import pytest

from geometries import GeometryError, VoxelGeometry
from geometries.generators import random_sphere_pack
from solver.config import SimulationConfig
from solver.rock import PermeabilitySettings, preview_choices, run_study, setup_protocol
from solver.rock.protocol import estimated_steps

#: Square-duct permeability k / a² = Q mu / (G a^4) (series solution, e.g. White, Viscous Fluid
#: Flow, eq. 3-48), superficial over the duct's cross-section.
SQUARE_DUCT = 0.0351443


def _config() -> SimulationConfig:
    return SimulationConfig(precision="float64", tau=1.0)


def test_duct_gives_analytic_k_under_both_protocols():
    a = 8
    duct = VoxelGeometry(np.zeros((10, a, a), bool), voxel_size=1e-5)  # sealed sides = walls
    settings = PermeabilitySettings(protocol="both", accelerate=False, check_interval=100,
                                    buffer_layers=4)
    study = run_study(duct, _config(), settings)
    assert study.converged and len(study.results) == 2
    exact = SQUARE_DUCT * a * a
    for r in study.results:
        assert r.k_lattice == pytest.approx(exact, rel=0.03), r.protocol
        assert r.k_m2 == pytest.approx(r.k_lattice * 1e-10)
        assert r.k_mD == pytest.approx(r.k_m2 / 9.869233e-13 * 1e3)
    assert abs(study.protocol_difference()["x"]) < 0.01
    summary = study.as_dict()
    assert summary["units"]["k_mD"] == "millidarcy" and summary["tensor_mD"]["pressure"]["x"]
    assert any("pressure vs mirrored differ by" in line for line in study.lines())


def test_pressure_protocol_adds_buffers_and_measures_between_them():
    duct = VoxelGeometry(np.zeros((10, 6, 6), bool))
    setup = setup_protocol(duct, _config(), 0, "pressure", PermeabilitySettings(buffer_layers=3))
    assert setup.geometry.shape == (16, 6, 6)
    assert setup.window == (2, 14)  # the buffer layer either side of the sample
    assert setup.config.x_min == setup.config.x_max == "pressure"
    assert setup.config.x_min_value > setup.config.x_max_value
    assert setup.config.y_min == "wall" and setup.config.body_force == (0.0, 0.0, 0.0)
    mirrored = setup_protocol(duct, _config(), 0, "mirrored", PermeabilitySettings())
    assert mirrored.geometry.shape == (20, 6, 6) and mirrored.config.x_min == "periodic"
    assert mirrored.config.body_force[0] > 0


def test_sample_without_path_is_refused_before_running():
    solid = np.zeros((8, 6, 6), bool)
    solid[4] = True
    with pytest.raises(GeometryError, match="No connected pore path joins the two faces along x"):
        run_study(VoxelGeometry(solid), _config(), PermeabilitySettings())


def test_acceleration_cuts_steps_and_keeps_k():
    pack = random_sphere_pack((24, 24, 24), 0.3, diameter=10, seed=1)
    runs = {}
    for fast in (False, True):
        settings = PermeabilitySettings(accelerate=fast, check_interval=50)
        runs[fast] = run_study(pack, _config(), settings).results[0]
        assert runs[fast].converged
    assert runs[True].tau == 0.6 and runs[False].tau == 1.0
    assert runs[True].coarse_steps > 0 and runs[False].coarse_steps == 0
    # measured (KConvergence, 1000-step window, on the step-pair means): 1951 steps from rest
    # at tau 1; 1501 (+ 1201 coarse) at tau 0.6 = 1660 fine-step equivalents. The fast run's
    # k at its first checks (100-450) swings by 5 %, and the test compares with k 1000 steps
    # earlier: with even steps only it happened to pass at 1100 (1260 equivalents; k of the
    # two runs 2e-6 apart). Every run needs at least one window, which caps the gain on so
    # small a sample (3.2x at 40³, benchmarks/rock_time_to_answer/results).
    assert runs[True].work_steps < 0.9 * runs[False].work_steps
    assert runs[True].steps < 0.8 * runs[False].steps
    assert runs[True].k_lattice == pytest.approx(runs[False].k_lattice, rel=0.005)
    # The preview's step estimate (twice the pressure-diffusion time) matches the run from rest.
    assert estimated_steps(pack, 0, (1.0 - 0.5) / 3, 48) == pytest.approx(runs[False].steps,
                                                                           rel=0.3)


def test_tensor_reports_every_axis_and_the_anisotropy():
    # Layers: an open slab along x and y, crossed along z only by a narrow chimney.
    solid = np.ones((8, 8, 8), bool)
    solid[:, :, 2:6] = False
    solid[3:5, 3:5, :] = False
    geom = VoxelGeometry(solid, voxel_size=1e-6)
    settings = PermeabilitySettings(axes=["x", "y", "z"], check_interval=100, sides="periodic")
    study = run_study(geom, _config(), settings)
    k = study.k("mirrored", "lattice")
    assert set(k) == {"x", "y", "z"}
    assert k["x"] == pytest.approx(k["y"], rel=0.02)
    assert k["z"] < 0.5 * k["x"]
    assert study.anisotropy("mirrored") == pytest.approx(max(k.values()) / min(k.values()))
    assert study.as_dict()["anisotropy_max_over_min"]["mirrored"] > 2


def test_preview_prices_downsampled_choices():
    pack = random_sphere_pack((32, 32, 32), 0.4, diameter=12, seed=2)
    choices = preview_choices(pack, SimulationConfig(), factors=(1, 2), crops=(16,))
    assert [c.label for c in choices] == ["full", "downsample x2", "crop 16³"]
    full, half, cropped = choices
    assert half.geometry.shape == (16, 16, 16) and cropped.geometry.shape == (16, 16, 16)
    assert half.memory_bytes < full.memory_bytes / 4
    assert half.steps == pytest.approx(full.steps, rel=0.5)  # L/2 and k/4 in voxels²
    assert half.seconds < full.seconds / 5  # 8x fewer nodes
    assert 0 < half.eta_t <= 1


def test_start_from_a_steady_field_stays_steady():
    from solver.rock.initial import coarse_setup, prolongate, start_from
    from solver.simulation import Simulation

    duct = VoxelGeometry(np.zeros((8, 8, 8), bool))
    setup = setup_protocol(duct, _config(), 0, "mirrored",
                           PermeabilitySettings(accelerate=False))  # tau 1: steady by 1500
    sim = Simulation(setup.geometry, setup.config)
    sim.step(1500)
    steady, k = sim.fields(), sim.permeability(0).lattice
    fresh, rest = (Simulation(setup.geometry, setup.config) for _ in range(2))
    start_from(fresh, steady, chunk=3)  # several chunks of tiles
    fresh.step(30)
    rest.step(30)
    assert fresh.permeability(0).lattice == pytest.approx(k, rel=0.02)
    assert rest.permeability(0).lattice < 0.8 * k
    coarse = coarse_setup(setup)
    assert coarse.geometry.shape == (8, 4, 4) and coarse.config.body_force[0] == pytest.approx(
        2 * setup.config.body_force[0])
    fine = prolongate({"rho": np.ones((8, 3, 3)), "u": np.ones((3, 8, 3, 3))}, (16, 6, 6))
    assert fine["rho"].shape == (16, 6, 6) and np.all(fine["u"] == 2.0)


def test_coarse_start_of_a_mirrored_run_is_the_mirrored_coarse_sample():
    """The coarse box is built from the sample half (coarsened, filtered, then mirrored): the
    downsample of the whole doubled box, less fluid no path joins, and an odd sample still
    coarsens the doubled box."""
    from geometries.preprocess import downsample
    from solver.rock.initial import coarse_setup

    pack = random_sphere_pack((20, 16, 16), 0.3, diameter=8, seed=4)
    setup = setup_protocol(pack, _config(), 0, "mirrored", PermeabilitySettings())
    coarse_run = coarse_setup(setup)
    coarse = coarse_run.geometry
    assert coarse_run.config.tile_offset == "origin"  # a start: no offset search
    whole = downsample(setup.geometry, 2).solid
    assert coarse.shape == whole.shape == (20, 8, 8)
    np.testing.assert_array_equal(coarse.solid, np.concatenate(
        [coarse.solid[:10], coarse.solid[:10][::-1]]))  # mirror image of its first half
    assert np.all(coarse.solid >= whole) and (~coarse.solid).sum() > 0.9 * (~whole).sum()
    odd = random_sphere_pack((21, 16, 16), 0.3, diameter=8, seed=4)
    setup = setup_protocol(odd, _config(), 0, "mirrored", PermeabilitySettings())
    assert coarse_setup(setup).geometry.shape == (21, 8, 8)


class _DeviceOnly:
    """A backend wrapper that refuses every read-back to the host (counts attempts)."""

    def __init__(self, backend):
        self._backend, self.reads = backend, 0

    def __getattr__(self, name):
        if name in ("to_host", "populations"):
            self.reads += 1
            raise AssertionError(f"{name} called: the start must stay on the device")
        return getattr(self._backend, name)


@pytest.mark.parametrize("offset", ["origin", "best"])
def test_device_start_equals_the_host_prolongation(offset, backend_name):
    """start_on_device (backend arrays only, no read-back) builds the populations the host map
    builds; on a GPU machine also with CuPy."""
    from solver.backends import get_backend
    from solver.rock.initial import coarse_setup, prolongate, start_from, start_on_device
    from solver.simulation import Simulation

    pack = random_sphere_pack((16, 16, 16), 0.35, diameter=8, seed=3)
    config = SimulationConfig(precision="float64", tau=1.0, tile_offset=offset)
    setup = setup_protocol(pack, config, 0, "mirrored", PermeabilitySettings())
    coarse = coarse_setup(setup)
    backend = get_backend(backend_name)
    coarse_sim = Simulation(coarse.geometry, coarse.config, backend)
    coarse_sim.step(60)
    on_host = Simulation(setup.geometry, setup.config, backend)
    start_from(on_host, prolongate(coarse_sim.fields(), setup.geometry.shape), chunk=5)
    device_only = _DeviceOnly(backend)
    on_device = Simulation(setup.geometry, setup.config, device_only)
    coarse_sim.backend = device_only
    start_on_device(on_device, coarse_sim, chunk=5)
    assert device_only.reads == 0
    coarse_sim.backend = on_device.backend = backend
    host, device = on_host.populations(), on_device.populations()
    assert np.abs(host - device).max() < 1e-14
    # The start carries the coarse flow: fine momentum about the coarse one scaled by 2.
    assert on_device.health()["mean_velocity"][0] > 0


def test_runs_stop_where_the_monitor_says_converged():
    """One definition of converged: the run stops at the first check at which the monitor's
    KConvergence (0.1 % over 1000 steps, k > 0) says so, and not before. Every check reads k
    at its step and one step later and judges their mean (solver.rock.uncertainty)."""
    from solver.monitor import KConvergence
    from solver.rock import measure_axis

    duct = VoxelGeometry(np.zeros((12, 6, 6), bool))
    settings = PermeabilitySettings(accelerate=False, check_interval=100, tolerance=1e-6)
    setup = setup_protocol(duct, _config(), 0, "mirrored", settings)
    checks = []
    result = measure_axis(setup, settings, on_check=lambda s, k, c: checks.append((s, k, c)))
    # One step after the last check: k is the mean of the two (solver.rock.uncertainty).
    assert result.converged and result.steps == checks[-1][0] + 1
    assert [s for s, _, _ in checks] == list(range(100, checks[-1][0] + 1, 100))
    assert result.pair.step == checks[-1][0] and result.pair.k == checks[-1][1]
    assert result.k_lattice == checks[-1][1]
    test = KConvergence(1e-6, 1000)
    verdicts = [test.update(step, k)[1] and k > 0 for step, k, _ in checks]
    assert verdicts[-1] and not any(verdicts[:-1])
    assert result.change_per_1000 == pytest.approx(checks[-1][2]) and checks[-1][2] < 1e-6
    # A looser tolerance stops earlier, but never before a whole 1000-step window.
    settings.tolerance = 1e-3
    loose = measure_axis(setup, settings)
    assert 1000 <= loose.steps < result.steps and loose.converged
    # A step limit stops a run unconverged.
    settings.max_steps = 600
    capped = measure_axis(setup, settings)
    assert capped.steps == 601 and capped.history[-1][0] == 600 and not capped.converged


def test_default_fast_tau_is_chosen_by_the_sample():
    """tau 0.6 only for a short sample with wide throats (Kozeny-Carman k >= 0.05 voxel²);
    thin throats or more than 256 layers along the flow get 0.7; a set fast_tau wins."""
    from solver.rock.protocol import choose_fast_tau

    wide = random_sphere_pack((24, 24, 24), 0.3, diameter=10, seed=1)  # KC k 0.062 voxel²
    thin = random_sphere_pack((24, 24, 24), 0.22, diameter=8, seed=7)  # KC k 0.024 voxel²
    long = VoxelGeometry(np.concatenate([wide.solid] * 11, axis=0))  # 264 layers along x
    assert choose_fast_tau(wide, 0) == 0.6
    assert choose_fast_tau(thin, 0) == 0.7
    assert choose_fast_tau(long, 0) == 0.7 and choose_fast_tau(long, 1) == 0.6
    assert PermeabilitySettings().fast_tau is None
    for sample, tau in ((wide, 0.6), (thin, 0.7)):
        setup = setup_protocol(sample, _config(), 0, "mirrored", PermeabilitySettings())
        assert setup.config.tau == tau
    setup = setup_protocol(thin, _config(), 0, "mirrored", PermeabilitySettings(fast_tau=0.55))
    assert setup.config.tau == 0.55
    pressure = setup_protocol(thin, _config(), 0, "pressure", PermeabilitySettings())
    assert pressure.config.tau == _config().tau  # pressure runs keep the configured tau


def test_a_study_preparing_the_next_run_in_a_thread_gives_the_same_results(monkeypatch):
    """On a GPU a study tiles the next run (and builds the conduction systems) in a worker
    thread while the device steps the current one (issue 29): the results are the ones of the
    runs prepared in turn."""
    from concurrent.futures import ThreadPoolExecutor

    from solver.rock import measure

    pack = random_sphere_pack((12, 12, 12), 0.4, diameter=6, seed=3)
    settings = PermeabilitySettings(protocol="both", axes=["x"], tolerance=1e-2,
                                    check_interval=100, max_steps=1000)
    in_turn = run_study(pack, _config(), settings)
    monkeypatch.setattr(measure, "_host_worker", lambda backend: ThreadPoolExecutor(1))
    ahead = run_study(pack, _config(), settings)
    assert [(r.protocol, r.axis, r.k_lattice, r.steps, r.coarse_steps)
            for r in ahead.results] == [(r.protocol, r.axis, r.k_lattice, r.steps,
                                         r.coarse_steps) for r in in_turn.results]
    assert ahead.conduction == in_turn.conduction and set(ahead.conduction) == {"x"}


def test_start_levels_coarsen_the_mirrored_sample_again_and_again():
    """coarse_levels: each level is the protocol on the level above coarsened by 2 (shape
    halved, drive doubled, window and sample layers halved); fewer levels where the sample no
    longer coarsens."""
    from solver.rock.measure import start_levels

    pack = random_sphere_pack((32, 16, 16), 0.4, diameter=6, seed=3)
    setup = setup_protocol(pack, _config(), 0, "mirrored", PermeabilitySettings())
    levels = start_levels(setup, 4)
    assert [lv.geometry.shape for lv in levels] == [(32, 8, 8), (16, 4, 4)]  # 4³ is too small
    assert [lv.sample_layers for lv in levels] == [16, 8]
    assert [lv.window for lv in levels] == [(0, 32), (0, 16)]
    force = setup.config.body_force[0]
    assert [lv.config.body_force[0] for lv in levels] == pytest.approx([2 * force, 4 * force])
    assert [lv.geometry.shape for lv in start_levels(setup, 1)] == [(32, 8, 8)]
    # Stops: 10x the tolerance, but the coarsest run of a chain converges to the tolerance.
    from solver.rock.measure import level_tolerance

    settings = PermeabilitySettings(tolerance=1e-3)
    assert level_tolerance(settings, 0, 1) == pytest.approx(1e-2)
    assert [level_tolerance(settings, lv, 3) for lv in range(3)] == pytest.approx(
        [1e-2, 1e-2, 1e-3])


def test_a_two_level_start_gives_the_k_of_the_one_level_start():
    """coarse_levels 2 (the 1/2 run starts from the 1/4 run) changes the start, not the answer:
    k within 0.1 % of the single coarse start (measured 0.001 % on this 20³ pack)."""
    pack = random_sphere_pack((20, 20, 20), 0.4, diameter=6, seed=1)
    runs = {}
    for levels in (1, 2):
        settings = PermeabilitySettings(check_interval=100, coarse_levels=levels,
                                        formation_factor=False)
        runs[levels] = run_study(pack, _config(), settings).results[0]
        assert runs[levels].converged
    one, two = runs[1], runs[2]
    assert len(one.start_steps) == 1 and len(two.start_steps) == 2
    assert one.coarse_steps == one.start_steps[0] and two.coarse_steps == two.start_steps[0]
    assert two.k_lattice == pytest.approx(one.k_lattice, rel=1e-3)
    # Work: the fine steps plus each level's steps times its share of the fluid nodes.
    assert one.steps < two.work_steps < two.steps + sum(two.start_steps) / 4
    # The 1/2 run reaches its own k from either start (its loose 1 % tolerance).
    assert two.coarse_k_lattice == pytest.approx(one.coarse_k_lattice, rel=0.01)


def test_a_study_labels_the_pores_once_for_every_axis(monkeypatch):
    """The pore labelling is the same along every axis: a tensor study makes it once (two per
    axis before: a 1000³ image's first axis waited for both)."""
    from solver.rock import protocol

    calls = []
    original = protocol.pore_labels
    monkeypatch.setattr(protocol, "pore_labels", lambda *a: calls.append(1) or original(*a))
    pack = random_sphere_pack((12, 12, 12), 0.4, diameter=6, seed=3)
    settings = PermeabilitySettings(axes=["x", "y", "z"], tolerance=1e-2, check_interval=100,
                                    max_steps=200, accelerate=False, formation_factor=False)
    study = run_study(pack, _config(), settings)
    assert len(study.results) == 3 and len(calls) == 1


def test_start_levels_are_chosen_by_the_sample_size(monkeypatch):
    """coarse_levels 0 (the default): a chain of three start levels for mirrored runs of large
    samples (400³ voxels or more), one below that and for pressure-driven runs; a number set
    is kept. prepare_axis starts from that many levels."""
    from solver.rock import settings as settings_module
    from solver.rock.measure import prepare_axis

    by_size = PermeabilitySettings()
    assert by_size.coarse_levels == 0
    assert by_size.start_level_count("mirrored", 400**3) == 3
    assert by_size.start_level_count("mirrored", 300**3) == 1  # 200³ and 300³ as before
    assert by_size.start_level_count("pressure", 1000**3) == 1
    assert PermeabilitySettings(coarse_levels=2).start_level_count("pressure", 8) == 2
    pack = random_sphere_pack((32, 16, 16), 0.4, diameter=6, seed=3)
    setup = setup_protocol(pack, _config(), 0, "mirrored", by_size)
    assert len(prepare_axis(setup, by_size, "numpy").levels) == 1
    monkeypatch.setattr(settings_module, "LARGE_SAMPLE_VOXELS", 32 * 16 * 16)
    assert len(prepare_axis(setup, by_size, "numpy").levels) == 2  # 4-voxel levels: too small
