"""The fused k check of compact runs (solver.backends.cuda.compact_check) against the chunked
readout of solver.rock.check: same health numbers and k. On the CPU the kernel text runs under
g++ (:mod:`.grid_stride_emulator`) on a CompactRun of NumPy arrays; ``-m gpu``: on CuPy."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from geometries import VoxelGeometry
from solver.backends.cuda import compact_check
from solver.backends.numpy_backend import NumpyBackend
from solver.config import SimulationConfig
from solver.rock import PermeabilitySettings, check
from solver.rock.protocol import setup_protocol
from solver.simulation import Simulation

from .grid_stride_emulator import compiler, launch_args, load, run_template
from .porous_cases import porous_solid
from .test_compact_readout import EmulatedCompactBackend

pytestmark = pytest.mark.skipif(compiler() is None, reason="g++ is not installed")

_PARAMS = ("const store_t* f, const int* at, const int* block, const int* slots, "
           "const unsigned char* flags, long long n, int tiled, int wide, double hfx, "
           "double hfy, double hfz, int axis, int incompressible, double* sums, "
           "unsigned long long* bits, const int* corner, double* layers, int n_layers, "
           "const int* where, int where_wide")
_ARGS = ("f, at, block, slots, flags, n, tiled, wide, hfx, hfy, hfz, axis, incompressible, "
         "sums, bits, corner, layers, n_layers, where, where_wide")
#: The host's binary16 conversion for float16 storage (the kernel's LBM_HOST_HALF branch).
_HOST_HALF = "#include <bit>\n#define LBM_HOST_HALF\n"


def _launch(source: str, blocks: int, threads: int, args: tuple) -> None:
    """The kernel under g++: at most 2 blocks of 64 threads (two warps: one tile each)."""
    lib = load(_HOST_HALF + source, run_template("darcy_check", _PARAMS, _ARGS), "darcy_check")
    lib.run_darcy_check(min(blocks, 2), 64, *launch_args(args))


def _host_window(sim, setup):
    from solver.observables import darcy_window

    return darcy_window(sim.problem, setup.axis, setup.window, np)


def _run(protocol: str, fluid_model: str, backend):
    solid = porous_solid((12, 12, 12), seed=2)
    sample = VoxelGeometry(solid, voxel_size=1e-6)
    config = SimulationConfig(precision="float64", collision="TRT", fluid_model=fluid_model)
    setup = setup_protocol(sample, config, 1, protocol, PermeabilitySettings(buffer_layers=2))
    sim = Simulation(setup.geometry, setup.config, backend)
    sim.allocate()
    rng = np.random.default_rng(5)
    f = sim.problem.initial_populations()
    f = f * (1.0 + 0.05 * rng.standard_normal(f.shape))
    sim.backend.set_populations(sim.state, f)
    return sim, setup


def test_fused_check_of_a_compact_run_reads_the_chunked_checks_numbers(monkeypatch):
    sim, setup = _run("mirrored", "incompressible", EmulatedCompactBackend())
    health, k = check.KCheck(sim, setup.axis, setup.window, 1e-6).read()
    monkeypatch.setattr(check, "_fused_flags",
                        lambda s, window: check.node_flags(s.problem, window, True))
    monkeypatch.setattr(compact_check, "_cupy_launch", _launch)
    monkeypatch.setattr(compact_check, "_cupy_blocks", lambda: 2)
    fused = check.KCheck(sim, setup.axis, setup.window, 1e-6)
    assert fused.flags is not None and fused.nodes is None
    health_f, k_f = fused.read()
    assert k_f.lattice == pytest.approx(k.lattice, rel=1e-12)
    assert health_f["max_speed"] == pytest.approx(health["max_speed"], rel=1e-14)
    assert health_f["flow_tortuosity"] == pytest.approx(health["flow_tortuosity"], rel=1e-12)


def test_fused_check_of_a_tiled_run_reads_the_chunked_checks_numbers():
    """A pressure-driven run (tiled: Zou-He faces), quasi-compressible, its values stored
    under a permuted slot table as a layout would store them."""
    sim, setup = _run("pressure", "quasi-compressible", NumpyBackend())
    health, k = check.KCheck(sim, setup.axis, setup.window, 1e-6).read()
    f = sim.populations()
    q, nodes = f.shape[1:]
    slots = np.stack([np.random.default_rng(i).permutation(nodes) for i in range(q)])
    stored = np.empty_like(f)
    stored[:, np.arange(q)[:, None], slots] = f
    flags = check.node_flags(sim.problem, _host_window(sim, setup), False)
    numbers = compact_check.darcy_check(SimpleNamespace(problem=sim.problem), flags, setup.axis,
                                        latest=stored, slots=slots.astype(np.int32),
                                        launch=_launch, max_blocks=2)
    fused = check.KCheck(sim, setup.axis, setup.window, 1e-6)
    health_f, k_f = fused._result(check.fused_numbers(numbers, len(fused.window.ends)))
    assert k_f.lattice == pytest.approx(k.lattice, rel=1e-12)
    assert health_f["max_speed"] == pytest.approx(health["max_speed"], rel=1e-14)
    assert health_f["flow_tortuosity"] == pytest.approx(health["flow_tortuosity"], rel=1e-12)


def test_whole_box_flags_of_a_tiled_run_mark_every_fluid_node():
    """A mirrored run's window is the whole periodic box: in a tiled state its flags are
    'in the window' and 'fluid' (9) at every fluid tile node, 0 at the solid ones."""
    sim, setup = _run("mirrored", "incompressible", NumpyBackend())
    window = _host_window(sim, setup)
    assert window.inside is None and not window.ends
    flags = check.node_flags(sim.problem, window, False)
    fluid = ~sim.problem.tiling.solid.reshape(-1)
    assert flags.dtype == np.uint8 and 0 < fluid.mean() < 1
    np.testing.assert_array_equal(flags, np.where(fluid, 9, 0))


def test_fused_check_reports_a_non_finite_state(monkeypatch):
    sim, setup = _run("mirrored", "incompressible", EmulatedCompactBackend())
    sim.state.f[sim.state.current][int(sim.state.edge[0][3])] = np.nan
    monkeypatch.setattr(compact_check, "_cupy_launch", _launch)
    monkeypatch.setattr(compact_check, "_cupy_blocks", lambda: 2)
    flags = check.node_flags(sim.problem, _host_window(sim, setup), True)
    numbers = compact_check.darcy_check(sim.state, flags, setup.axis)
    assert numbers[0] == 1.0


@pytest.mark.gpu
@pytest.mark.parametrize("protocol", ["mirrored", "pressure"])
def test_fused_check_on_the_gpu_matches_the_chunked_check(protocol, monkeypatch):
    """CuPy: a rock run's fused check (mirrored: compacted where the plan compacts it;
    pressure: tiled) equals the chunked readout's numbers."""
    from geometries.generators import random_sphere_pack
    from solver.backends import get_backend

    sample = random_sphere_pack((48, 48, 48), 0.2, diameter=16, seed=3)
    config = SimulationConfig(precision="float32", collision="TRT")
    setup = setup_protocol(sample, config, 0, protocol, PermeabilitySettings())
    sim = Simulation(setup.geometry, setup.config, get_backend("cupy"))
    sim.step(200)
    fused = check.KCheck(sim, setup.axis, setup.window, 1e-6)
    assert fused.flags is not None
    health_f, k_f = fused.read()
    monkeypatch.setattr(check, "_fused_flags", lambda s, window: None)
    health, k = check.KCheck(sim, setup.axis, setup.window, 1e-6).read()
    assert k_f.lattice == pytest.approx(k.lattice, rel=1e-9)
    assert health_f["max_speed"] == pytest.approx(health["max_speed"], rel=1e-12)
    assert health_f["flow_tortuosity"] == pytest.approx(health["flow_tortuosity"], rel=1e-9)
