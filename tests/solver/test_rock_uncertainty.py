"""The interval of a measured k (solver.rock.uncertainty)."""

from __future__ import annotations

import math

import pytest

from solver.rock.uncertainty import convergence_remainder, discretisation_error, interval


def test_remainder_of_a_geometric_approach_is_the_rest_of_the_series():
    k_inf, a, r = 2.0, 0.1, 0.8
    history = [(200 * i, k_inf - a * r**i) for i in range(12)]
    # k_inf - k_last = a r^11: exactly the tail |last change| r / (1 - r).
    assert convergence_remainder(history) == pytest.approx(a * r**11 / history[-1][1], rel=1e-9)


def test_remainder_of_a_slowing_decay_uses_the_latest_ratio():
    # Changes 8, 4, 2.4, 1.68 (ratios 0.5, 0.6, 0.7): the tail is at least as slow as 0.7.
    ks = [1.0]
    for change in (8e-3, 4e-3, 2.4e-3, 1.68e-3):
        ks.append(ks[-1] - change)
    history = list(enumerate(ks))
    expected = 1.68e-3 * 0.7 / 0.3 / ks[-1]
    assert convergence_remainder(history) == pytest.approx(expected, rel=1e-9)


def test_remainder_without_decay_is_the_change_over_the_last_window():
    history = [(0, 1.0), (500, 1.02), (1000, 1.01), (1500, 1.015)]
    assert convergence_remainder(history) == pytest.approx(abs(1.015 - 1.02) / 1.015)
    assert math.isinf(convergence_remainder([(100, 1.0)]))


def test_richardson_estimate_with_second_order_recovers_the_exact_error():
    # k(h) = k0 + C h²: fine h = 1, coarse h = 2; the fine error is C = (k_c - k_f) / 3.
    k0, c = 1.0, 0.01
    fine, coarse = k0 + c, k0 + 4 * c
    assert discretisation_error(fine, coarse) == pytest.approx(c / fine)
    assert discretisation_error(fine, None) is None


def test_interval_adds_the_terms_and_the_protocol_spread():
    history = [(0, 1.0), (1000, 1.0)]
    i = interval(1.0, history, 1.03, 0.96)
    assert i.remainder == 0.0
    assert i.discretisation == pytest.approx(0.01)
    assert i.protocol_spread == pytest.approx(0.02)
    assert (i.low, i.high) == pytest.approx((0.97, 1.03))
    assert i.as_dict()["relative"] == pytest.approx(0.03)
