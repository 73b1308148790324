"""The rescaled coarse start (issue 29, ``PermeabilitySettings.start_rescale``): the factor s
from the chain's k, the prolongated velocity (and density deviation) times exactly s, 'none'
bit-identical to the plain start, and the same converged k with every option."""

from __future__ import annotations

import numpy as np
import pytest

from geometries.generators import random_sphere_pack
from solver.config import SimulationConfig
from solver.rock import PermeabilitySettings, run_study, setup_protocol
from solver.rock.initial import (
    ESTIMATE_CHOICES,
    RESCALE_BOUNDS,
    RESCALE_CHOICES,
    StartScale,
    coarse_setup,
    prolongate,
    start_from,
    start_on_device,
)
from solver.simulation import Simulation


def test_the_factor_is_the_chains_geometric_estimate_over_its_last_k():
    """s = k_est / k_last with k_est = k_last² / k_previous (fine voxel², coarsest first),
    clamped to [0.5, 1]; 1 with one level, 'none', or a level without a positive k."""
    assert StartScale.from_chain("velocity", [0.5, 0.375]) == StartScale(0.75, 1.0)
    assert StartScale.from_chain("velocity+density", [0.9, 0.5, 0.375]) == StartScale(0.75, 0.75)
    assert StartScale.from_chain("velocity", [0.16]) == StartScale()  # one level: s = 1
    assert StartScale.from_chain("none", [0.2, 0.16]) == StartScale()
    assert StartScale.from_chain("velocity", [0.4, 0.1]).velocity == RESCALE_BOUNDS[0]
    assert StartScale.from_chain("velocity", [0.1, 0.2]).velocity == RESCALE_BOUNDS[1]
    assert StartScale.from_chain("velocity", [float("nan"), 0.2]) == StartScale()
    assert StartScale.from_chain("velocity", [-0.1, 0.2]) == StartScale()
    # the density gain: on the density deviation at every prolongation, whatever the mode
    assert StartScale.from_chain("none", [0.5], density_gain=1.15) == StartScale(1.0, 1.15)
    assert StartScale.from_chain("velocity", [0.5, 0.375], density_gain=1.2) == StartScale(
        0.75, 1.2)
    assert StartScale.from_chain("velocity+density", [0.5, 0.375],
                                 density_gain=1.2) == StartScale(0.75, 0.75 * 1.2)
    # Richardson (order 2): k_est = k_last - (k_previous - k_last) / 4
    assert StartScale.from_chain("velocity", [0.5, 0.25], "richardson") == StartScale(0.75, 1.0)
    assert StartScale.from_chain("velocity", [0.9, 0.2], "richardson").velocity == 0.5
    with pytest.raises(ValueError, match="start_estimate 'linear'"):
        StartScale.from_chain("velocity", [0.2, 0.1], "linear")
    with pytest.raises(ValueError, match="start_rescale 'fast'"):
        StartScale.from_chain("fast", [0.2, 0.1])
    assert list(PermeabilitySettings.param["start_rescale"].objects) == list(RESCALE_CHOICES)
    # the defaults, as measured (400³ and 1000³ on an H200: solver.rock.settings)
    assert PermeabilitySettings().start_rescale == "velocity"
    assert PermeabilitySettings().start_density_gain == 1.1
    assert list(PermeabilitySettings.param["start_estimate"].objects) == list(ESTIMATE_CHOICES)


def _moments(sim: Simulation) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Density, velocity (d, n) and the fluid mask of ``sim``'s populations (tile nodes;
    a start is an equilibrium, so these are the start's rho and u)."""
    f = sim.populations()  # (tiles, q, N)
    c = sim.problem.lattice.c
    rho = f.sum(axis=1)
    j = np.einsum("tqn,qd->dtn", f, c)
    u = j if sim.problem.incompressible else j / rho  # the equilibrium's momentum
    return rho, u, ~sim.tiling.solid


@pytest.fixture(scope="module")
def coarse_flow():
    """A 16³ pack's mirrored set-up and its coarse run, stepped away from rest."""
    pack = random_sphere_pack((16, 16, 16), 0.35, diameter=8, seed=3)
    config = SimulationConfig(precision="float64", tau=1.0)
    setup = setup_protocol(pack, config, 0, "mirrored", PermeabilitySettings())
    coarse = coarse_setup(setup)
    coarse_sim = Simulation(coarse.geometry, coarse.config)
    coarse_sim.step(60)
    return setup, coarse_sim


def _start(setup, coarse_sim, scale=None) -> Simulation:
    sim = Simulation(setup.geometry, setup.config)
    if scale is None:
        start_on_device(sim, coarse_sim, chunk=5)
    else:
        start_on_device(sim, coarse_sim, chunk=5, scale=scale)
    return sim


def test_the_rescaled_start_has_s_times_the_plain_starts_velocity(coarse_flow):
    """The prolongated start's velocity is s x the plain one's at every fluid node; with
    'velocity' the density is the plain one's, with 'velocity+density' its deviation from the
    mean coarse density is s x the plain one's; 'none' (s = 1) is bit-identical."""
    setup, coarse_sim = coarse_flow
    plain = _start(setup, coarse_sim)
    none = _start(setup, coarse_sim, StartScale.from_chain("none", [0.2, 0.1]))
    np.testing.assert_array_equal(none.populations(), plain.populations())
    rho0, u0, fluid = _moments(plain)
    s = 0.7
    velocity = _start(setup, coarse_sim, StartScale(s, 1.0))
    rho1, u1, _ = _moments(velocity)
    assert np.abs(u0[:, fluid]).max() > 1e-5  # the start carries flow
    np.testing.assert_allclose(u1[:, fluid], s * u0[:, fluid], rtol=0, atol=1e-15)
    np.testing.assert_allclose(rho1[fluid], rho0[fluid], rtol=0, atol=1e-15)
    both = _start(setup, coarse_sim, StartScale(s, s))
    rho2, u2, _ = _moments(both)
    coarse_rho = coarse_sim.fields()["rho"]
    mean = float(np.mean(coarse_rho[np.isfinite(coarse_rho)]))
    assert np.abs(rho0[fluid] - mean).max() > 1e-7  # the start has a density field
    np.testing.assert_allclose(rho2[fluid] - mean, s * (rho0[fluid] - mean), rtol=0,
                               atol=1e-14)
    np.testing.assert_allclose(u2[:, fluid], s * u0[:, fluid], rtol=0, atol=1e-15)


def test_the_host_prolongation_rescales_alike(coarse_flow):
    """prolongate + start_from (the host map) with a StartScale builds the device start's
    populations; its fields are s x the plain velocity and the scaled density deviation."""
    setup, coarse_sim = coarse_flow
    fields, shape = coarse_sim.fields(), setup.geometry.shape
    scale = StartScale(0.6, 0.6)
    plain, scaled = prolongate(fields, shape), prolongate(fields, shape, scale)
    np.testing.assert_array_equal(scaled["u"], 0.6 * plain["u"])
    mean = float(np.mean(plain["rho"][np.isfinite(fields["rho"]).repeat(2, 0).repeat(
        2, 1).repeat(2, 2)[:shape[0], :shape[1], :shape[2]]]))
    np.testing.assert_allclose(scaled["rho"] - mean, 0.6 * (plain["rho"] - mean), atol=1e-15)
    on_host = Simulation(setup.geometry, setup.config)
    start_from(on_host, scaled, chunk=5)
    device = _start(setup, coarse_sim, scale)
    assert np.abs(on_host.populations() - device.populations()).max() < 1e-14


def test_every_rescale_option_converges_to_the_same_k():
    """A 24³ mirrored pack (float64) from a two-level chain: the rescaled starts (s recorded
    per prolongation, from the chain's k as defined) and the density gain reach the plain
    start's k within the tolerance."""
    pack = random_sphere_pack((24, 24, 24), 0.35, diameter=6, seed=1)
    config = SimulationConfig(precision="float64", tau=1.0)
    runs = {}
    for mode in (*RESCALE_CHOICES, "none@1.15"):
        mode, _, gain = mode.partition("@")
        settings = PermeabilitySettings(coarse_levels=2, formation_factor=False,
                                        start_rescale=mode, start_density_gain=float(gain or 1))
        study = run_study(pack, config, settings)
        runs[mode + (f"@{gain}" if gain else "")] = r = study.results[0]
        assert study.as_dict()["runs"][0]["start_scales"] == r.start_scales  # in the JSON
        assert ("start rescaled" in study.lines()[0]) == (mode != "none" or bool(gain))
        assert r.converged and len(r.start_k_lattice) == 2 and len(r.start_scales) == 2
        # s into the 1/2 level: one level known (1); into the fine run: k_1/2 / k_1/4
        expected = StartScale.from_chain(mode, r.start_k_lattice[::-1], "geometric",
                                         float(gain or 1))
        assert r.start_scales == [pytest.approx(expected.velocity), 1.0]
        assert r.start_density_scales == [pytest.approx(expected.density),
                                          float(gain or 1)]
    plain = runs["none"]
    assert plain.start_scales == [1.0, 1.0]
    assert runs["velocity"].start_scales[0] < 1.0  # the coarse k is above the fine one
    for mode in (*RESCALE_CHOICES[1:], "none@1.15"):
        assert runs[mode].k_lattice == pytest.approx(plain.k_lattice, rel=1e-3), mode


def test_pressure_driven_runs_keep_the_plain_start():
    """The rescale and the density gain apply to mirrored runs only: a pressure-driven run's
    density field carries the imposed drop (its start's factors are recorded as 1)."""
    from solver.rock import measure_axis

    pack = random_sphere_pack((16, 16, 16), 0.35, diameter=8, seed=3)
    settings = PermeabilitySettings(protocol="pressure", start_rescale="velocity+density",
                                    start_density_gain=1.2, tolerance=1e-2, check_interval=100)
    config = SimulationConfig(precision="float64", tau=1.0)
    result = measure_axis(setup_protocol(pack, config, 0, "pressure", settings), settings)
    assert result.start_scales == [1.0] and result.start_density_scales == [1.0]
