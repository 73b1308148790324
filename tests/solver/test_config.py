"""SimulationConfig validation: every bad value gets a message that says what to do."""

import numpy as np
import pytest

from solver.config import ConfigError, SimulationConfig
from solver.simulation import Simulation


@pytest.mark.parametrize("tau", [0.5, 0.3, -1.0])
def test_tau_must_exceed_one_half(tau):
    with pytest.raises(ConfigError, match=r"use tau > 0\.5"):
        SimulationConfig(tau=tau)


def test_tau_change_is_validated_too():
    cfg = SimulationConfig()
    with pytest.raises(ConfigError):
        cfg.tau = 0.5
    assert cfg.tau == 0.8


def test_unknown_option_names_the_choices():
    with pytest.raises(ValueError, match="BGK"):
        SimulationConfig(collision="LBGK")


def test_lattice_must_match_geometry_dimension():
    with pytest.raises(ConfigError, match="choose D2Q9"):
        Simulation(np.zeros((8, 8), bool), SimulationConfig(lattice="D3Q19", backend="numpy"))
    with pytest.raises(ConfigError, match="D3Q19 or D3Q27"):
        Simulation(np.zeros((8, 8, 8), bool), SimulationConfig(lattice="D2Q9", backend="numpy"))


def test_periodic_faces_come_in_pairs():
    with pytest.raises(ConfigError, match="make both periodic"):
        SimulationConfig(x_min="wall").check(3)


def test_geometry_without_fluid_or_of_wrong_type_is_refused():
    with pytest.raises(ConfigError, match="no fluid"):
        Simulation(np.ones((4, 4, 4), bool), SimulationConfig(backend="numpy"))
    with pytest.raises(ConfigError, match="boolean"):
        Simulation(np.zeros((4, 4, 4), np.uint8), SimulationConfig(backend="numpy"))


def test_viscosity_in_lattice_units():
    assert SimulationConfig(tau=1.1).viscosity == pytest.approx(0.2)
