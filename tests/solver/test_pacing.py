"""Pacer: chunk sizes, the publish clock and the health-check schedule of the runner."""

from __future__ import annotations

import pytest

from solver.pacing import CHUNK_SECONDS, HEALTH_SHARE, Pacer


def test_chunks_grow_at_most_twofold_towards_the_target_duration():
    pacer = Pacer(1.0)
    pacer.published(0.0, 0.0, health=False)  # the next publish is a second away
    sizes = []
    for _ in range(8):
        n = pacer.steps(0.0)
        pacer.stepped(n, n * 1e-3)  # 1 ms per step
        sizes.append(pacer.chunk)
    assert sizes[:5] == [2, 4, 8, 16, 32]
    assert sizes[-1] == round(CHUNK_SECONDS / 1e-3)


def test_the_chunk_before_a_publish_ends_on_the_clock():
    pacer = Pacer(0.1)
    pacer.published(0.0, 0.002, health=False)  # next publish at t = 0.1
    pacer.chunk = 35
    pacer.stepped(35, 0.035)  # 1 ms per step
    assert pacer.steps(0.037) == 35
    assert pacer.steps(0.072) == 28, "shortened to end at the publish time"
    assert pacer.chunk == 35
    pacer.stepped(28, 0.028)
    assert pacer.chunk == 35, "a shortened chunk does not resize the chunks"
    assert not pacer.publish_due(0.098) and pacer.publish_due(0.1)
    # A publish 5 ms late keeps the rate: the next one is due at 0.2, not 0.205.
    pacer.published(0.105, 0.107, health=False)
    assert pacer.publish_due(0.2) and not pacer.publish_due(0.198)


def test_slow_publishes_stretch_the_period_to_three_times_their_cost():
    pacer = Pacer(0.1)
    pacer.published(0.0, 0.2, health=False)  # a 0.2 s publish: 0.6 s of steps before the next
    assert not pacer.publish_due(0.79) and pacer.publish_due(0.8)


@pytest.mark.parametrize("cost", [0.001, 0.05])
def test_health_checks_take_at_most_their_share(cost):
    pacer = Pacer(0.1)
    assert pacer.health_due(0.0)
    pacer.published(0.0, cost, health=True)
    wait = max(0.1, cost / HEALTH_SHARE)
    assert not pacer.health_due(0.99 * wait) and pacer.health_due(wait)
    # A health check does not count as the publish cost that sets the clock.
    assert pacer.publish_due(cost + 0.1)


def test_a_new_run_checks_at_its_first_publish():
    pacer = Pacer(0.1)
    pacer.published(0.0, 0.05, health=True)
    assert not pacer.health_due(1.0)
    pacer.check_next()
    assert pacer.health_due(1.0)
