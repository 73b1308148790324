"""benchmarks/scaling/halo_model.py: the step model's limits and its fit recover known overheads."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "scaling"))

import halo_model  # noqa: E402
from halo_model import Case, Machine, Point, efficiency, fit, step_seconds  # noqa: E402

WEAK = Case("weak", (384, 384, 384), 0.2, True)
STRONG = Case("strong", (768, 768, 768), 0.2, False)


def test_a_hidden_halo_costs_nothing_and_thin_slabs_expose_it() -> None:
    ideal = Machine(rate=17e9)
    assert efficiency(WEAK, ideal, 4) == 1.0  # the chain hides behind the interior
    assert efficiency(STRONG, ideal, 4) == 1.0
    assert efficiency(STRONG, ideal, 64) < 0.5  # 12-node slabs: all boundary, halo exposed
    lossy = replace(ideal, exposed=0.5)  # half the chain not hidden: the network face costs
    assert efficiency(STRONG, lossy, 16) < efficiency(STRONG, replace(lossy, gpus_per_node=16),
                                                      16) < 1.0


def test_fit_recovers_the_overheads_it_was_given() -> None:
    truth = Machine(rate=17e9, fixed=5e-6, per_peer=20e-6, exposed=0.3)
    small = Case("small", (192, 192, 96), 0.8, True)
    points = [Point(c, n, step_seconds(c, truth, n)) for c in (WEAK, STRONG, small)
              for n in (1, 2, 4, 8)]
    got = fit(points, Machine(rate=17e9))
    assert abs(got.fixed - truth.fixed) < 1e-9 and abs(got.per_peer - truth.per_peer) < 1e-9
    assert abs(got.exposed - truth.exposed) < 1e-6


def test_the_issue_fit_reproduces_the_measured_points_roughly() -> None:
    machine = fit(halo_model.ISSUE_POINTS, Machine(rate=17.2e9))
    for p in halo_model.ISSUE_POINTS:
        assert abs(step_seconds(p.case, machine, p.ranks) / p.seconds - 1) < 0.15
