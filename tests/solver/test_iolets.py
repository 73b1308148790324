"""Boundary conditions on openings (solver.iolets): exact inlet flux, mass balance, pressure
and outflow kinds, refusals, in-place addressing, and the CUDA kernel text against NumPy."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache

import numpy as np
import pytest

from solver.backends.cuda.iolets import NVCC_OPTIONS, iolet_source
from solver.config import ConfigError, SimulationConfig
from solver.iolets import apply_iolets, build_iolets
from solver.simulation import Simulation
from solver.validation.vessels import tube_geometry
from solver.vessel import mass_balance, pressure_drop

from .iolet_emulator import emulated_pass

TRT = dict(lattice="D3Q19", collision="TRT", trt_magic=3 / 16, tau=0.8)


@cache
def tube(radius: float = 4, angle: float = 30.0):
    """A small tube at an angle, open at both ends (cached: voxelising costs a second)."""
    return tube_geometry(radius, angle)


def run(openings: dict, steps: int, angle: float = 30.0, **extra) -> Simulation:
    sim = Simulation(tube(4, angle), SimulationConfig(**TRT, precision="float64",
                                                      openings=openings, **extra))
    sim.step(steps)
    return sim


def inlet_area(sim: Simulation) -> float:
    opening = next(o for o in sim.geometry.openings if o.id == 1)
    return opening.area / sim.geometry.voxel_size**2


@pytest.mark.parametrize("profile", ["uniform", "poiseuille"])
def test_velocity_inlet_flow_rate_is_exact_from_the_first_step(profile):
    sim = run({1: {"kind": "velocity", "value": 0.02, "profile": profile}, 2: "pressure"}, 1,
              ramp_steps=0)  # impulsive start: the full rate at once
    first = sim.opening_flows()[0]
    assert first.kind == "velocity"
    assert first.flow_rate == pytest.approx(0.02 * inlet_area(sim), rel=1e-12)
    sim.step(20)
    assert sim.opening_flows()[0].flow_rate == pytest.approx(first.flow_rate, rel=1e-12)


def test_velocity_inlet_and_pressure_outlet_balance_at_steady_state():
    sim = run({1: {"kind": "velocity", "value": 0.02, "profile": "poiseuille"},
               2: {"kind": "pressure", "value": 1.0}}, 1500)
    flows = sim.opening_flows()
    assert flows[1].flow_rate < 0 < flows[0].flow_rate  # in at 1, out at 2
    assert abs(mass_balance(flows)) < 2e-4
    assert flows[1].mean_density == pytest.approx(1.0, abs=2e-3)  # held at the outlet
    assert pressure_drop(flows) > 0.05  # the viscous drop along the tube
    u = sim.fields()["u"]
    assert np.nanmax(np.linalg.norm(u, axis=0)) < 0.1  # no blow-up near the oblique planes


def test_pressure_difference_drives_flow_from_high_to_low():
    sim = run({1: {"kind": "pressure", "value": 1.01}, 2: {"kind": "pressure", "value": 1.0}},
              1500)
    flows = sim.opening_flows()
    assert flows[0].flow_rate > 0 > flows[1].flow_rate
    assert abs(mass_balance(flows)) < 1e-4
    assert flows[0].mean_density == pytest.approx(1.01, abs=1e-3)


def test_outflow_lets_fluid_leave_and_stays_stable_at_an_angle():
    # Zero gradient sets no pressure: the density level drifts with a velocity inlet alone
    # (solver.iolets), but fluid leaves through the outflow and the run stays finite.
    sim = run({1: {"kind": "velocity", "value": 0.02}, 2: "outflow"}, 600)
    inflow, outflow = (f.flow_rate for f in sim.opening_flows())
    assert outflow < -0.2 * inflow
    assert np.isfinite(sim.fields()["rho"][~sim.solid]).all()


def test_unknown_opening_id_is_refused_with_the_ids_the_geometry_has():
    with pytest.raises(ConfigError, match=r"openings \[7\] are not openings.*\[1, 2\]"):
        Simulation(tube(), SimulationConfig(**TRT, openings={7: "pressure"}))


def test_closed_openings_keep_bounce_back_and_conserve_mass():
    sim = run({1: "closed", 2: "closed"}, 30)
    assert sim.problem.iolets is None
    assert np.nansum(sim.fields()["rho"]) == pytest.approx(float((~sim.solid).sum()),
                                                           rel=1e-12)
    assert [f.flow_rate for f in sim.opening_flows()] == [0.0, 0.0]


def test_distributed_problem_with_driven_openings_is_refused():
    sim = Simulation(tube(), SimulationConfig(**TRT, openings={1: "pressure", 2: "pressure"}))
    problem = sim.problem
    problem.owned = np.ones(problem.tiling.n_tiles, dtype=bool)
    with pytest.raises(ConfigError, match="distributed"):
        build_iolets(problem)


# ------------------------------------------------- the pass itself: layouts and the CUDA text
ALL_KINDS = {1: {"kind": "velocity", "value": 0.02, "profile": "poiseuille"}, 2: "outflow"}


def noisy_state(openings: dict, **extra) -> Simulation:
    """A tube after a few steps, populations perturbed so every term of the pass matters."""
    sim = Simulation(tube(3, 45.0), SimulationConfig(**TRT, openings=openings, **extra),
                     backend="numpy")
    sim.step(3)
    f = sim.populations()
    f *= 1.0 + 0.01 * np.random.default_rng(1).standard_normal(f.shape)
    sim.backend.set_populations(sim.state, f)
    return sim


def streamed_layout(problem, natural: np.ndarray) -> np.ndarray:
    """The AA phase-1 layout of natural populations (n_tiles, q, a^d): the two slots of every
    fluid-fluid link exchanged, (x, i) <-> (x + c_i, opp(i))."""
    out = natural.copy()
    tiling, lat = problem.tiling, problem.lattice
    tile, node = np.nonzero(~tiling.solid)
    coords = tiling.node_coordinates()[tile, node]
    shape = np.asarray(tiling.shape)
    for i in range(lat.q):
        nb = coords + lat.c[i]
        inside = np.all((nb >= 0) & (nb < shape), axis=1)
        nt, nn = tiling.locate(np.where(inside[:, None], nb, 0))
        ok = inside & (nt >= 0)
        ok[ok] &= ~tiling.solid[nt[ok], nn[ok]]
        out[tile[ok], i, node[ok]] = natural[nt[ok], lat.opposite[i], nn[ok]]
    return out


@pytest.mark.parametrize("openings", [ALL_KINDS, {1: "pressure", 2: {"kind": "pressure",
                                                                       "value": 0.99}}])
def test_in_place_phase_addresses_give_the_two_copy_values(openings):
    sim = noisy_state(openings, precision="float64")
    p, tables = sim.problem, sim.problem.iolets
    natural = sim.populations()
    q, npt = p.lattice.q, p.tiling.nodes_per_tile
    a = natural.reshape(-1).copy()
    flux0 = apply_iolets(a, tables.addresses(q, npt, None, 0), tables, p.storage, p.lattice,
                         p.force, p.incompressible)
    b = streamed_layout(p, natural).reshape(-1)
    flux1 = apply_iolets(b, tables.addresses(q, npt, None, 1), tables, p.storage, p.lattice,
                         p.force, p.incompressible)
    np.testing.assert_array_equal(flux1, flux0)
    write = tables.addresses(q, npt).write
    np.testing.assert_array_equal(b[write], a[write])  # the same slot (x, j) in both phases


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("openings", [ALL_KINDS, {1: {"kind": "pressure", "value": 1.01},
                                                  2: "pressure"}])
@pytest.mark.parametrize("parity", [0, 1])
def test_cuda_kernel_text_matches_the_numpy_pass_in_float64(openings, parity):
    sim = noisy_state(openings, precision="float64", body_force=(1e-5, 0.0, 2e-6))
    p, tables = sim.problem, sim.problem.iolets
    q, npt = p.lattice.q, p.tiling.nodes_per_tile
    start = sim.populations().reshape(-1)
    ref = start.copy()
    flux = apply_iolets(ref, tables.addresses(q, npt, None, parity), tables, p.storage,
                        p.lattice, p.force, p.incompressible)
    emu = start.copy()
    flux_emu = emulated_pass(p, emu, parity)
    assert np.abs(emu - ref).max() <= 1e-12
    assert np.abs(flux_emu - flux).max() <= 1e-12
    assert np.abs(flux).max() > 1e-4  # the pass changed something


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_cuda_kernel_text_matches_the_numpy_pass_with_float16_storage():
    sim = noisy_state(ALL_KINDS, precision="float32", storage="float16", fluid_model=
                      "incompressible")
    p, tables = sim.problem, sim.problem.iolets
    q, npt = p.lattice.q, p.tiling.nodes_per_tile
    start = sim.state.f[sim.state.current].reshape(-1)
    ref = start.copy()
    flux = apply_iolets(ref, tables.addresses(q, npt), tables, p.storage, p.lattice, p.force,
                        p.incompressible)
    emu = start.copy()
    flux_emu = emulated_pass(p, emu)
    np.testing.assert_array_equal(emu.view(np.uint16), ref.view(np.uint16))
    np.testing.assert_allclose(flux_emu, flux, rtol=0, atol=1e-6)


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="needs nvcc")
def test_cuda_kernel_sources_compile_with_nvcc(tmp_path):
    sources = [iolet_source("D3Q19", prec, half, inc, (1e-5, 0.0, 0.0))
               for prec, half, inc in (("float64", False, False), ("float32", False, True),
                                       ("float32", True, False))]
    sources += [iolet_source(lat, "float64", False, True, (0.0,) * d)
                for lat, d in (("D2Q9", 2), ("D3Q13", 3), ("D3Q27", 3))]
    sources += [iolet_source("D3Q19", "float32", True, False, (0.0,) * 3, 1.0, 10)]  # waveform
    for k, source in enumerate(sources):
        path = tmp_path / f"iolets{k}.cu"
        path.write_text(source)
        done = subprocess.run([NVCC, *NVCC_OPTIONS, "-arch=sm_90", "-c", "-o",
                               str(tmp_path / f"iolets{k}.o"), str(path)],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


@pytest.mark.timeout(120)
def test_runner_snapshots_carry_the_openings_flows_and_mass_balance():
    from solver.runner import SimulationRunner

    cfg = SimulationConfig(**TRT, backend="numpy", precision="float64",
                           openings={1: {"kind": "velocity", "value": 0.02}, 2: "pressure"})
    runner = SimulationRunner(tube(), cfg)
    try:
        # A fixed number of steps, not a free run: a loaded machine published a free run's
        # first snapshot with both openings only at step 909, past the soft start (CI).
        runner.step(120)
        snap = runner.wait_for(lambda s: s.step >= 120 and len(s.openings) == 2, timeout=60)
    finally:
        runner.stop()
    inlet, outlet = snap.openings
    assert (inlet.id, inlet.kind, outlet.kind) == (1, "velocity", "pressure")
    # The runner steps through the default soft start (400 steps here) like every other way.
    ramp = Simulation(tube(), cfg).problem.iolets.ramp_steps
    assert snap.step == 120 < ramp
    from solver.soft_start import ramp_factor

    assert inlet.flow_rate == pytest.approx(
        0.02 * inlet_area_of(tube()) * ramp_factor(snap.step - 1, ramp), rel=1e-9)
    assert outlet.flow_rate < 0
    assert snap.mass_balance == pytest.approx(mass_balance(snap.openings))


def inlet_area_of(geometry) -> float:
    opening = next(o for o in geometry.openings if o.id == 1)
    return opening.area / geometry.voxel_size**2


def test_distributed_backend_on_one_rank_drives_openings_like_one_process():
    pytest.importorskip("mpi4py")
    from solver.distributed import DistributedBackend

    cfg = SimulationConfig(**TRT, openings={1: "pressure", 2: {"kind": "pressure",
                                                               "value": 0.99}})
    plain = Simulation(tube(), cfg, backend="numpy")
    plain.step(5)
    with DistributedBackend("numpy") as backend:
        sim = Simulation(tube(), cfg, backend=backend)
        sim.step(5)
        assert sim.opening_flows() == plain.opening_flows()
        assert np.array_equal(sim.populations(), plain.populations())
        sim.close()


def face_channel():
    """A 2D channel whose two x faces are openings (face patches of a voxel image)."""
    from geometries import VoxelGeometry
    from geometries.openings import face_openings

    solid = np.zeros((40, 12), dtype=bool)
    solid[:, 0] = solid[:, -1] = True
    plain = VoxelGeometry(solid, flow_axis=0)
    return VoxelGeometry(solid, flow_axis=0, openings=face_openings(plain, (0,)))


@pytest.mark.parametrize("faces, kind", [({}, "'periodic'"),
                                         ({"x_min": "pressure", "x_max": "pressure"},
                                          "'pressure'")])
def test_openings_on_faces_that_are_not_walls_are_refused(faces, kind):
    # Periodic x faces once wrapped a velocity inlet at x = 0 onto the x = nx-1 column.
    cfg = SimulationConfig(lattice="D2Q9", openings={1: "pressure", 2: "pressure"}, **faces)
    with pytest.raises(ConfigError, match=f"x_min face of the box, which is {kind}: set x_min"):
        Simulation(face_channel(), cfg)


def test_face_openings_with_wall_faces_drive_the_channel():
    g = face_channel()
    inlet = min(g.openings, key=lambda o: o.centre[0]).id
    outlet = max(g.openings, key=lambda o: o.centre[0]).id
    cfg = SimulationConfig(lattice="D2Q9", collision="TRT", trt_magic=3 / 16, tau=0.8,
                           precision="float64", x_min="wall", x_max="wall",
                           openings={inlet: {"kind": "velocity", "value": 0.02},
                                     outlet: "pressure"})
    sim = Simulation(g, cfg, backend="numpy")
    sim.step(3000)
    flows = {f.id: f for f in sim.opening_flows()}
    assert flows[inlet].flow_rate == pytest.approx(0.02 * 10, rel=1e-12)
    assert abs(mass_balance(tuple(flows.values()))) < 1e-3
    ux = sim.fields()["u"][0]
    assert np.all(ux[20, 1:-1] > 0)  # flowing from the inlet at x = 0 towards x = nx - 1


# ------------------------------------------------------------------ soft start (issue 28 item 3)
def test_soft_start_flow_rate_follows_the_smoothstep_and_then_holds():
    from solver.soft_start import ramp_factor

    ramp = 40
    sim = run({1: {"kind": "velocity", "value": 0.02, "profile": "poiseuille"}, 2: "pressure"},
              0, ramp_steps=ramp)
    assert sim.problem.iolets.ramp_steps == ramp
    target = 0.02 * inlet_area(sim)
    rates = []
    for _ in range(ramp + 5):
        sim.step(1)
        rates.append(sim.opening_flows()[0].flow_rate)
    x = np.minimum(np.arange(1, ramp + 6) / ramp, 1.0)
    expected = target * x * x * (3 - 2 * x)  # the stated curve: cubic smoothstep
    np.testing.assert_allclose(rates, expected, rtol=1e-12, atol=1e-15)
    assert rates[0] < 0.01 * target and rates[ramp - 1] == pytest.approx(target, rel=1e-12)
    assert np.all(np.diff(rates[:ramp]) > 0)
    assert ramp_factor(0, 0) == 1.0 and ramp_factor(ramp - 1, ramp) == 1.0


def test_soft_start_ramps_a_pressure_difference_from_the_initial_density():
    sim = run({1: {"kind": "pressure", "value": 1.01}, 2: {"kind": "pressure", "value": 1.0}},
              0, ramp_steps=100)
    tables = sim.problem.iolets
    p = sim.problem
    q, npt = p.lattice.q, p.tiling.nodes_per_tile
    rest = sim.populations().reshape(-1)
    # At rest every pressure link writes 2 w_j rho_w - f*_j: its flux is 2 w_j (rho_w - rho0),
    # so the ramp shows as the inlet's flux scaled by s while the outlet (rho_w = rho0) has none.
    full = apply_iolets(rest.copy(), tables.addresses(q, npt), tables, p.storage, p.lattice,
                        p.force, p.incompressible)
    half = apply_iolets(rest.copy(), tables.addresses(q, npt), tables, p.storage, p.lattice,
                        p.force, p.incompressible, step=49)
    inlet = tables.opening == 0
    np.testing.assert_allclose(half[inlet], 0.5 * full[inlet], rtol=1e-9, atol=1e-15)
    assert np.abs(full[inlet]).max() > 1e-4


def test_default_soft_start_is_one_inlet_diameter_over_the_mean_speed():
    sim = run({1: {"kind": "velocity", "value": 0.02}, 2: "pressure"}, 0)
    opening = next(o for o in sim.geometry.openings if o.id == 1)
    expected = int(np.ceil(opening.diameter / sim.geometry.voxel_size / 0.02))
    assert sim.problem.iolets.ramp_steps == expected
    impulsive = run({1: {"kind": "velocity", "value": 0.02}, 2: "pressure"}, 0, ramp_steps=0)
    assert impulsive.problem.iolets.ramp_steps == 0


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("step", [0, 17, 59, 60])
def test_cuda_kernel_text_ramps_like_the_numpy_pass(step):
    openings = {1: {"kind": "velocity", "value": 0.02, "profile": "poiseuille"},
                2: {"kind": "pressure", "value": 0.995}}
    sim = noisy_state(openings, precision="float64", ramp_steps=60)
    p, tables = sim.problem, sim.problem.iolets
    q, npt = p.lattice.q, p.tiling.nodes_per_tile
    start = sim.populations().reshape(-1)
    ref = start.copy()
    flux = apply_iolets(ref, tables.addresses(q, npt), tables, p.storage, p.lattice, p.force,
                        p.incompressible, step=step)
    emu = start.copy()
    flux_emu = emulated_pass(p, emu, 0, step=step)
    assert np.abs(emu - ref).max() <= 1e-12
    assert np.abs(flux_emu - flux).max() <= 1e-12
