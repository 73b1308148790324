"""Boundary conditions: face options, node classification, Zou-He and Ladd moving walls."""

import numpy as np
import pytest

from solver.boundaries import ZouHeFace, zou_he, zou_he_faces
from solver.collision import equilibrium
from solver.config import ConfigError, SimulationConfig
from solver.face_kinds import face_kind
from solver.io import config_from_values, config_values
from solver.lattice import get_lattice
from solver.node_types import NodeType, face_of, is_pressure, is_velocity, zou_he_type
from solver.simulation import Simulation


def config(**kw) -> SimulationConfig:
    base = dict(lattice="D2Q9", collision="TRT", precision="float64", tau=0.8, backend="numpy")
    base.update(kw)
    return SimulationConfig(**base)


# --- options and their errors -------------------------------------------------------------

def test_velocity_face_needs_a_value_and_a_non_periodic_axis():
    with pytest.raises(ConfigError, match="x_min_value"):
        config(x_min="velocity", x_max="pressure").check(2)
    with pytest.raises(ConfigError, match="neither"):
        config(x_min="velocity", x_min_value=0.01).check(2)


@pytest.mark.parametrize("value, message", [
    ((0.01, 0.0, 0.0, 0.0), "components"),
    ("fast", "velocity tuple"),
    ((0.5, 0.0), "Mach"),
])
def test_bad_inlet_values_are_explained(value, message):
    with pytest.raises(ConfigError, match=message):
        config(x_min="velocity", x_min_value=value, x_max="pressure").check(2)


def test_moving_wall_must_slide_along_its_face():
    with pytest.raises(ConfigError, match="tangential"):
        config(y_min="wall", y_max="moving_wall", y_max_value=0.1).check(2)
    with pytest.raises(ConfigError, match="set component 1 to 0"):
        config(y_min="wall", y_max="moving_wall", y_max_value=(0.1, 0.01)).check(2)


def test_pressure_face_defaults_to_initial_density_and_refuses_nonsense():
    faces = config(x_min="velocity", x_min_value=0.02, x_max="pressure",
                   initial_density=1.2).face_conditions()
    assert faces["x_max"].density == 1.2
    assert faces["x_min"].velocity == (0.02, 0.0, 0.0)
    with pytest.raises(ConfigError, match="positive density"):
        config(x_min="pressure", x_max="pressure", x_max_value=-1.0).check(2)


def test_scalar_velocity_is_the_component_along_the_face_axis():
    faces = config(lattice="D3Q19", z_min="velocity", z_min_value=-0.01, z_max="velocity",
                   z_max_value=-0.01).face_conditions()
    assert faces["z_min"].velocity == faces["z_max"].velocity == (0.0, 0.0, -0.01)


def test_object_velocities_need_labels_and_integer_keys():
    with pytest.raises(ConfigError, match="labels"):
        Simulation(np.pad(np.zeros((4, 4), bool), 1, constant_values=True),
                   config(object_velocities={1: (0.01, 0.0)}))
    with pytest.raises(ConfigError, match="integers >= 1"):
        config(object_velocities={"sphere": (0.01, 0.0)}).check(2)


# --- node classification -----------------------------------------------------------------

def test_node_type_codes_round_trip():
    for kind, check in (("velocity", is_velocity), ("pressure", is_pressure)):
        for face in range(6):
            t = zou_he_type(face_kind(kind).node_type, face)
            assert check(t) and face_of(t) == face
    assert not is_velocity(NodeType.FLUID) and not is_pressure(NodeType.SOLID)


def test_zou_he_layers_solids_stay_solid_and_velocity_wins_corners():
    solid = np.zeros((6, 5), bool)
    solid[0, 2] = True  # a solid touching the inlet face
    cfg = config(x_min="velocity", x_min_value=0.01, x_max="pressure", y_min="pressure",
                 y_max="wall")
    sim = Simulation(solid, cfg)
    types = sim.tiling.scatter(sim.problem.boundary.node_type[..., None], fill=255)[..., 0]
    assert types[0, 2] == NodeType.SOLID
    assert types[0, 1] == NodeType.VELOCITY_X_MIN
    assert types[0, 0] == NodeType.VELOCITY_X_MIN  # velocity outranks the y_min pressure face
    assert types[3, 0] == NodeType.PRESSURE_Y_MIN
    assert types[5, 0] == NodeType.PRESSURE_X_MAX  # equal kinds: x faces come first
    assert types[5, 4] == NodeType.PRESSURE_X_MAX
    assert types[2, 2] == NodeType.FLUID


def test_touching_objects_with_different_velocities_are_refused():
    solid = np.zeros((8, 8), bool)
    labels = np.zeros((8, 8), np.int32)
    solid[2:4, 3:5] = True
    labels[2:4, 3:5] = 1
    solid[5:7, 3:5] = True  # unlabelled resting solid one fluid node away
    geometry = type("G", (), {"solid": solid, "labels": labels})()
    with pytest.raises(ConfigError, match="different wall velocities"):
        Simulation(geometry, config(object_velocities={1: (0.01, 0.0)})).allocate()


# --- Zou-He reconstruction ----------------------------------------------------------------

def _random_state(lattice, n=40, seed=0):
    rng = np.random.default_rng(seed)
    rho = 1 + 0.02 * rng.standard_normal(n)
    u = 0.03 * rng.standard_normal((lattice.d, n))
    return equilibrium(rho, u, lattice, False) * (1 + 0.02 * rng.random((lattice.q, n)))


def _face(lattice, face, kind, velocity=None, density=1.0):
    axis, side = face // 2, face % 2
    normal = np.zeros(lattice.d)
    normal[axis] = 1.0 if side == 0 else -1.0
    cn = lattice.c @ normal
    vel = np.zeros(lattice.d) if velocity is None else np.asarray(velocity, float)
    return ZouHeFace(face, kind, normal, np.flatnonzero(cn > 0), np.flatnonzero(cn == 0),
                     np.flatnonzero(cn < 0), vel, density)


@pytest.mark.parametrize("name", ["D2Q9", "D3Q13", "D3Q19", "D3Q27"])
@pytest.mark.parametrize("face", range(4))
@pytest.mark.parametrize("incompressible", [True, False])
def test_zou_he_reproduces_the_prescribed_velocity_and_density(name, face, incompressible):
    lattice = get_lattice(name)
    force = 1e-4 * np.arange(1, lattice.d + 1)
    velocity = 0.04 * np.linspace(1, -0.5, lattice.d)
    g = _random_state(lattice)
    zou_he(g, _face(lattice, face, "velocity", velocity), lattice, force, incompressible)
    rho = g.sum(axis=0)
    u = (lattice.c.T @ g + force[:, None] / 2) / (1.0 if incompressible else rho)
    np.testing.assert_allclose(u, np.repeat(velocity[:, None], g.shape[1], 1), atol=1e-15)
    g = _random_state(lattice, seed=1)
    zou_he(g, _face(lattice, face, "pressure", density=1.013), lattice, force, incompressible)
    rho = g.sum(axis=0)
    u = (lattice.c.T @ g + force[:, None] / 2) / (1.0 if incompressible else rho)
    np.testing.assert_allclose(rho, 1.013, rtol=1e-14)
    tangential = [a for a in range(lattice.d) if a != face // 2]
    np.testing.assert_allclose(u[tangential], 0.0, atol=1e-15)


def test_zou_he_leaves_the_known_populations_alone():
    lattice = get_lattice("D3Q19")
    zf = _face(lattice, 0, "velocity", (0.02, 0.01, 0.0))
    g = _random_state(lattice)
    before = g.copy()
    zou_he(g, zf, lattice, np.zeros(3), True)
    known = np.setdiff1d(np.arange(lattice.q), zf.unknown)
    np.testing.assert_array_equal(g[known], before[known])


@pytest.mark.parametrize("lattice, collision, fluid_model", [
    ("D3Q19", "TRT", "incompressible"), ("D3Q19", "MRT", "quasi-compressible"),
    ("D3Q13", "MRT", "incompressible"), ("D3Q27", "BGK", "quasi-compressible"),
])
def test_inlet_and_outlet_nodes_hold_their_values_in_a_porous_run(lattice, collision,
                                                                  fluid_model):
    rng = np.random.default_rng(3)
    solid = rng.random((12, 9, 8)) < 0.25  # solids on the inlet and outlet faces too
    cfg = config(lattice=lattice, collision=collision, x_min="velocity",
                 x_min_value=(0.01, 0.002, 0.0),
                 x_max="pressure", x_max_value=0.998, y_min="wall", y_max="wall",
                 fluid_model=fluid_model)
    sim = Simulation(solid, cfg)
    sim.step(200)
    fields = sim.fields()
    inlet = ~solid[0]
    np.testing.assert_allclose(fields["u"][0][0][inlet], 0.01, atol=1e-14)
    np.testing.assert_allclose(fields["u"][1][0][inlet], 0.002, atol=1e-14)
    np.testing.assert_allclose(fields["rho"][-1][~solid[-1]], 0.998, rtol=1e-14)
    assert np.isnan(fields["rho"][solid]).all()
    assert np.isfinite(fields["u"][:, ~solid]).all()
    assert zou_he_faces(sim.problem.boundary, sim.problem.lattice)[0].face == 0


# --- moving walls ---------------------------------------------------------------------------

@pytest.mark.parametrize("lattice, collision", [("D2Q9", "BGK"), ("D3Q19", "TRT"),
                                                ("D3Q19", "MRT"), ("D3Q27", "BGK"),
                                                ("D3Q13", "MRT")])
def test_couette_flow_is_linear_between_a_resting_and_a_moving_wall(lattice, collision):
    h, speed = 12, 0.04
    d = get_lattice(lattice).d
    shape = (3, h) if d == 2 else (3, h, 2)
    cfg = config(lattice=lattice, collision=collision, tau=0.9, y_min="wall",
                 y_max="moving_wall", y_max_value=(speed, 0, 0)[:d])
    sim = Simulation(np.zeros(shape, bool), cfg)
    sim.step(4000)
    ux = sim.fields()["u"][0]
    profile = ux[1] if d == 2 else ux[1, :, 1]
    np.testing.assert_allclose(profile, speed * (np.arange(h) + 0.5) / h, atol=1e-9 * speed)


def test_moving_object_drags_fluid_like_a_moving_face():
    # A labelled solid layer sliding at U gives the same Couette flow as a moving_wall face.
    h, speed = 10, 0.03
    solid = np.zeros((3, h + 1), bool)
    solid[:, -1] = True
    labels = solid.astype(np.int32)
    geometry = type("G", (), {"solid": solid, "labels": labels})()
    sim = Simulation(geometry, config(y_min="wall", y_max="wall",
                                      object_velocities={1: (speed, 0.0)}))
    sim.step(4000)
    profile = sim.fields()["u"][0][1, :h]
    np.testing.assert_allclose(profile, speed * (np.arange(h) + 0.5) / h, atol=1e-9 * speed)


def test_face_values_survive_checkpoint_serialisation():
    cfg = config(collision="MRT", x_min="velocity", x_min_value=(0.01, 0.0), x_max="pressure",
                 x_max_value=0.999, y_min="wall", y_max="moving_wall", y_max_value=(0.02, 0.0),
                 object_velocities={1: (0.01, 0.0)}, mrt_rates={"e": 1.1})
    back = config_from_values(config_values(cfg))
    back.check(2)
    assert back.face_conditions() == cfg.face_conditions()
    assert back.check_objects() == cfg.check_objects() and back.mrt_rates == {"e": 1.1}
