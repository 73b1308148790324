"""``benchmarks/scaling/start_defaults_ranks.py`` on CPU ranks: both starts run over 2 MPI ranks
(NumPy, a 24³ pack, 41 steps at each level), the plain one with the start's factors 1 and the
defaults with PermeabilitySettings' density gain, and the report is written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "scaling"))

import start_defaults_ranks  # noqa: E402

from ..solver.test_coarse_start_ranks import needs_mpi  # noqa: E402


@needs_mpi
@pytest.mark.serial  # MPI ranks poll: a second busy worker would starve them
def test_both_starts_run_over_ranks_and_are_reported(tmp_path):
    from solver.rock.settings import PermeabilitySettings

    argv = ["--size", "24", "--diameter", "7", "--porosity", "0.35", "--ranks", "2",
            "--backend", "numpy", "--precision", "float64", "--steps", "41", "--check", "20",
            "--out", str(tmp_path)]
    assert start_defaults_ranks.main(argv) == 0
    (json_path,) = tmp_path.glob("start-defaults-ranks-24-2x-cpu-*.json")
    plain, defaults = json.loads(json_path.read_text())["runs"]
    assert (plain["start"], defaults["start"]) == ("plain", "defaults")
    for run in (plain, defaults):
        assert run["steps"] == 41 and run["coarse_levels"] == 1 and run["coarse_steps"] == [41]
        assert run["wall_seconds"] > run["fine_step_seconds"] > 0
    assert (plain["start_scale"], plain["start_density_scale"]) == (1.0, 1.0)
    assert defaults["start_density_scale"] == pytest.approx(
        PermeabilitySettings().start_density_gain)
    assert defaults["k"] != plain["k"]  # the start differs, 41 steps do not forget it
    assert "| defaults | (none) | 41 |" in json_path.with_suffix(".md").read_text()
