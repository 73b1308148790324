"""The tiled NumPy backend: conservation, layout independence and a dense oracle."""

import numpy as np
import pytest

from solver.config import SimulationConfig
from solver.simulation import Simulation

from .dense_reference import dense_initial, dense_step, dense_velocity


def porous(shape, fraction=0.35, seed=0) -> np.ndarray:
    """Random solid mask with about ``fraction`` solid nodes, fluid left somewhere."""
    rng = np.random.default_rng(seed)
    return rng.random(shape) < fraction


def config(**kw) -> SimulationConfig:
    base = dict(lattice="D3Q19", collision="TRT", precision="float64", tau=0.7,
                body_force=(2e-5, -1e-5, 5e-6), backend="numpy")
    base.update(kw)
    return SimulationConfig(**base)


@pytest.mark.parametrize("lattice", ["D3Q19", "D3Q27"])
def test_mass_is_conserved_in_closed_periodic_box(backend_name, lattice):
    shape = (10, 9, 7)
    cfg = config(lattice=lattice, backend=backend_name, body_force=(0, 0, 0))
    sim = Simulation(porous(shape, 0.3, seed=3), cfg)
    sim.step(1)
    rng = np.random.default_rng(4)
    f = sim.populations()
    fluid = ~sim.tiling.solid
    f[fluid[:, None, :].repeat(f.shape[1], 1)] *= 1 + 0.05 * rng.standard_normal(
        fluid.sum() * f.shape[1])
    sim.backend.set_populations(sim.state, f)
    mass0 = sim.populations()[fluid[:, None, :].repeat(f.shape[1], 1)].sum()
    sim.step(1000)
    mass = sim.populations()[fluid[:, None, :].repeat(f.shape[1], 1)].sum()
    # Round-off of 1000 float64 steps: 1.1e-13 measured on the H100 once the kernel summed
    # the density per pair of opposite directions; a leak would be orders of magnitude more.
    assert mass == pytest.approx(mass0, rel=1e-12)


def test_matches_dense_roll_reference():
    shape = (11, 6, 9)  # no axis divisible by the tile edge 4
    solid = porous(shape, 0.3, seed=5)
    cfg = config()
    sim = Simulation(solid, cfg)
    sim.step(50)
    p = sim.problem
    f = dense_initial(shape, p.lattice, p.incompressible)
    for _ in range(50):
        f = dense_step(f, solid, p.lattice, p.rates, p.force, p.incompressible)
    expected = dense_velocity(f, solid, p.lattice, p.force, p.incompressible)
    # u is a small difference of O(1) sums: compare at round-off of the populations.
    np.testing.assert_allclose(sim.fields()["u"], expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("collision", ["BGK", "TRT", "RR"])
@pytest.mark.parametrize("fluid_model", ["incompressible", "quasi-compressible"])
def test_results_do_not_depend_on_tile_offset_or_edge(collision, fluid_model):
    shape = (13, 10, 7)
    solid = porous(shape, 0.4, seed=6)
    results = []
    for edge, offset in [(4, "origin"), (4, "best"), (3, "origin"), (1, "origin")]:
        cfg = config(collision=collision, fluid_model=fluid_model, tile_edge=edge,
                     tile_offset=offset, y_min="wall", y_max="wall")
        sim = Simulation(solid, cfg)
        sim.step(30)
        results.append(sim.fields()["u"])
    for other in results[1:]:
        np.testing.assert_allclose(other, results[0], rtol=1e-13, atol=1e-17)


def test_two_dimensional_channel_runs_and_is_symmetric():
    solid = np.zeros((12, 10), bool)
    cfg = config(lattice="D2Q9", body_force=(1e-5, 0, 0), y_min="wall", y_max="wall")
    sim = Simulation(solid, cfg)
    sim.step(200)
    ux = sim.fields()["u"][0]
    np.testing.assert_allclose(ux, ux[:, ::-1], rtol=1e-12)
    assert (ux > 0).all()


def test_solid_nodes_report_nan_and_slices_have_the_right_shape():
    solid = porous((8, 9, 10), 0.3, seed=7)
    sim = Simulation(solid, config())
    sim.step(3)
    fields = sim.fields()
    assert np.isnan(fields["rho"][solid]).all()
    assert np.isfinite(fields["rho"][~solid]).all()
    assert sim.slice(2, 4, "umag").shape == (8, 9)
    assert sim.slice(0, 1, "uy").shape == (9, 10)
    with pytest.raises(ValueError, match="quantity"):
        sim.slice(0, 1, "enstrophy")  # not a field of solver.flow_fields
    with pytest.raises(ValueError, match="outside"):
        sim.slice(1, 9, "ux")


def test_metrics_count_fluid_nodes_only():
    solid = porous((8, 8, 8), 0.5, seed=8)
    sim = Simulation(solid, config())
    sim.step(4)
    m = sim.metrics
    assert m.fluid_nodes == (~solid).sum()
    assert m.steps == 4 and m.seconds > 0
    assert m.mflups == pytest.approx(m.fluid_nodes * 4 / m.seconds / 1e6)
    assert m.bytes_per_node_step == 2 * 19 * 8


@pytest.mark.parametrize("quantity", ["umag", "ux", "uy", "uz", "rho"])
def test_device_slice_equals_cut_of_full_fields(backend_name, quantity):
    solid = porous((9, 7, 6), 0.3, seed=9)
    sim = Simulation(solid, config(backend=backend_name, precision="float32"))
    sim.step(20)
    fields = sim.fields()
    full = (fields["rho"] if quantity == "rho" else
            np.sqrt((fields["u"] ** 2).sum(0)) if quantity == "umag" else
            fields["u"]["xyz".index(quantity[1])])
    for axis, index in [(0, 0), (1, 6), (2, 3)]:
        # Same values; the device may round its sum of squares differently (1 ulp on a GPU).
        np.testing.assert_allclose(sim.slice(axis, index, quantity),
                                   np.take(full, index, axis=axis), rtol=1e-14, atol=0)


def test_health_reports_speed_and_catches_nan(backend_name):
    solid = porous((8, 8, 8), 0.3, seed=10)
    sim = Simulation(solid, config(backend=backend_name))
    sim.step(10)
    health = sim.health()
    assert health["finite"]
    assert health["max_speed"] == pytest.approx(np.nanmax(np.sqrt((sim.fields()["u"] ** 2)
                                                                  .sum(0))))
    f = sim.populations()
    tile, node = np.argwhere(~sim.tiling.solid)[0]
    f[tile, 3, node] = np.nan
    sim.backend.set_populations(sim.state, f)
    broken = sim.health()
    assert not broken["finite"] and broken["max_speed"] == float("inf")


@pytest.mark.parametrize("shape", [(9, 7, 6), (11, 9)])
def test_view_gives_the_cut_and_health_of_one_moment_pass(backend_name, shape):
    solid = porous(shape, 0.3, seed=11)
    lattice = "D3Q19" if len(shape) == 3 else "D2Q9"
    sim = Simulation(solid, config(backend=backend_name, lattice=lattice,
                                   body_force=(2e-5, -1e-5, 0.0)))
    sim.step(20)
    fields = sim.fields()
    u = fields["u"]
    cuts = [(0, 0), (1, 6), (2, 3)] if len(shape) == 3 else [(2, 0)]
    for axis, index in cuts:
        in_plane = [a for a in range(3) if a != axis] if len(shape) == 3 else [0, 1]

        def cut(a, axis=axis, index=index):
            return np.take(a, index, axis=axis) if len(shape) == 3 else a
        for health in (True, False):
            look = sim.view(axis, index, "rho", health=health)
            assert look["axes"] == tuple("xyz"[a] for a in in_plane)
            np.testing.assert_allclose(look["plane"], cut(fields["rho"]), rtol=1e-14, atol=0)
            np.testing.assert_allclose(look["velocity"], np.stack([cut(u[a]) for a in in_plane]),
                                       rtol=1e-14, atol=0)
            # The cut-only pass (slice) reduces the same nodes as the full one.
            np.testing.assert_allclose(look["plane"], sim.slice(axis, index, "rho"), rtol=1e-14,
                                       atol=0)
            assert ("max_speed" in look) is health
    look = sim.view(*cuts[-1], "umag")
    health = sim.health()
    assert look["finite"] and look["max_speed"] == health["max_speed"]
    np.testing.assert_array_equal(look["mean_velocity"], health["mean_velocity"])
    np.testing.assert_allclose(look["mean_velocity"],
                               np.nansum(u.reshape(len(shape), -1), axis=1) / solid.size,
                               rtol=1e-12)
    if len(shape) == 2:  # the component a 2D lattice lacks is zero in the fluid
        uz = sim.view(2, 0, "uz", health=False)["plane"]
        assert (uz[~solid] == 0).all() and np.isnan(uz[solid]).all()


def test_a_cut_reduces_only_the_tiles_it_passes_through():
    from solver.fields import locate_cut

    sim = Simulation(np.zeros((16, 16, 16), dtype=bool), config())
    cut = locate_cut(sim.tiling, 2, 5)
    assert len(cut.tiles) == 16  # one layer of 4 x 4 tiles out of 64
    assert locate_cut(sim.tiling, 2, 5).local.max() < 16 * 64
    whole = Simulation(np.zeros((12, 10), dtype=bool),
                       config(lattice="D2Q9", body_force=(1e-5, 0.0, 0.0)))
    assert locate_cut(whole.tiling, 0, 0).tiles is None  # 2D: the cut is the whole field
