"""The coarse start prolongated by the CUDA kernels (solver.backends.cuda.prolong) against the
array-module form of solver.rock.initial.start_on_device: the same fine populations. On the
CPU the kernel text runs under g++ (:mod:`.grid_stride_emulator`) on NumPy arrays: compact runs
(CompactRun on NumPy) and tiled ones (the NumPy backend's state, its slot table the identity)."""

from __future__ import annotations

import numpy as np
import pytest

from geometries.generators import random_sphere_pack
from solver.backends.cuda import prolong
from solver.backends.numpy_backend import NumpyBackend
from solver.config import SimulationConfig
from solver.rock import PermeabilitySettings, setup_protocol
from solver.rock.initial import StartScale, coarse_setup, start_on_device
from solver.simulation import Simulation

from .grid_stride_emulator import compiler, launch_args, load, run_template
from .test_compact_readout import EmulatedCompactBackend

pytestmark = pytest.mark.skipif(compiler() is None, reason="g++ is not installed")

_HEAD = ("store_t* f, const int* at, const int* block, const int* slots, "
         "const unsigned char* flags, const int* edge32, const long long* edge64, int wide, "
         "long long n, int tiled, ")
_HEAD_ARGS = "f, at, block, slots, flags, edge32, edge64, wide, n, tiled, "
_WRAPPERS = (
    run_template("coarse_moments", _HEAD + "double hfx, double hfy, double hfz, "
                 "int incompressible, long long m, moment_t* rho_out, moment_t* u_out, "
                 "double* total",
                 _HEAD_ARGS + "hfx, hfy, hfz, incompressible, m, rho_out, u_out, total")
    + run_template("prolong", _HEAD + "const int* geo, const int* tiles_f, const int* local, "
                   "const int* tile_map, const unsigned char* fluid_c, const moment_t* rho_c, "
                   "const moment_t* u_c, long long m, double mean_rho, const double* w, "
                   "int incompressible, double u_scale, double rho_scale",
                   _HEAD_ARGS + "geo, tiles_f, local, tile_map, fluid_c, rho_c, u_c, m, "
                   "mean_rho, w, incompressible, u_scale, rho_scale"))


def _launch(code: str, name: str, blocks: int, threads: int, args: tuple) -> None:
    lib = load(code, _WRAPPERS, "prolong")
    getattr(lib, "run_" + name)(blocks, threads, *launch_args(args))


def _access(sim):
    state = sim.state
    if getattr(state, "edge", None):
        return prolong.compact_access(state, np)
    q, nodes = sim.problem.lattice.q, sim.tiling.nodes_per_tile
    slots = np.tile(np.arange(nodes, dtype=np.int32), (q, 1))
    return prolong.tiled_access(sim.problem, state.f[state.current], slots, np)


@pytest.mark.parametrize("make_backend,offset,fluid_model,precision,tolerance,scale", [
    (EmulatedCompactBackend, "origin", "incompressible", "float64", 1e-14, StartScale()),
    (lambda: NumpyBackend(threads=1), "best", "quasi-compressible", "float64", 1e-14,
     StartScale()),
    # float32: the coarse moments are kept in float32, a rounding of the start's values.
    (EmulatedCompactBackend, "best", "quasi-compressible", "float32", 1e-6, StartScale()),
    # the rescaled start (issue 29): velocity and density deviation scaled alike
    (lambda: NumpyBackend(threads=1), "origin", "quasi-compressible", "float64", 1e-14,
     StartScale(0.7, 0.7))])
def test_kernels_write_the_array_module_start(make_backend, offset, fluid_model, precision,
                                              tolerance, scale):
    pack = random_sphere_pack((16, 16, 16), 0.35, diameter=8, seed=3)
    config = SimulationConfig(precision=precision, tau=1.0, tile_offset=offset,
                              fluid_model=fluid_model)
    setup = setup_protocol(pack, config, 0, "mirrored", PermeabilitySettings())
    coarse = coarse_setup(setup)
    backend = make_backend()
    coarse_sim = Simulation(coarse.geometry, coarse.config, backend)
    coarse_sim.step(3)
    reference = Simulation(setup.geometry, setup.config, backend)
    start_on_device(reference, coarse_sim, scale=scale)
    fused = Simulation(setup.geometry, setup.config, backend)
    fused.allocate()
    prolong.prolong(fused.problem, _access(fused), coarse_sim.problem, _access(coarse_sim), np,
                    launch=_launch, max_blocks=2, threads=64, scale=scale)
    expected, got = reference.populations(), fused.populations()
    assert np.abs(expected - got).max() < tolerance
    assert fused.health()["mean_velocity"][0] > 0
