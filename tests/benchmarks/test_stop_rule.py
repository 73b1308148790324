"""``benchmarks/rock_time_to_answer/stop_rule.py``: the stop rules it replays on a k history,
and one small deep run on the CPU writing its report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "rock_time_to_answer"))

import stop_rule  # noqa: E402


def geometric(ratio: float, first: float = 1e-2, checks: int = 30, every: int = 200):
    """(step, k) of k = 1 + first (1 - ratio^n) / (1 - ratio) at checks n = 1, 2, ...: changes
    falling by ``ratio`` per check towards the limit 1 + first / (1 - ratio)."""
    return [(every * n, 1.0 + first * (1.0 - ratio**n) / (1.0 - ratio))
            for n in range(1, checks + 1)]


def first_stop(history, rule):
    return next((history[i][0] for i in range(len(history)) if rule(history[: i + 1])), None)


def test_tail_rules_stop_sooner_on_a_fast_decay_and_later_on_a_slow_one():
    """Against the 1000-step window: with changes falling by 0.3 per check the tail's remainder
    passes the tolerance first; by 0.92 (a 400³ image's late checks) the window passes while
    the remainder (0.92 / 0.08 of the last change) is still above it."""
    rules = stop_rule.rules(1e-3)
    fast, slow = geometric(0.3), geometric(0.92, first=2e-3, checks=80)
    assert first_stop(fast, rules["tail3-spread0.05-half"]) < first_stop(fast, rules["window"])
    window = first_stop(slow, rules["window"])
    tail = first_stop(slow, rules["tail3-spread0.05-half"])
    assert window is not None and tail is not None and tail > window
    stop = next(i for i, p in enumerate(slow) if p[0] == window)
    remainder, ratio = stop_rule.tail_estimate(slow[: stop + 1])
    assert abs(ratio - 0.92) < 1e-9 and remainder > 1e-3
    assert first_stop(slow, rules["window-or-tail3-spread0.05-half"]) == window


def test_tail_rules_do_not_stop_on_an_inconsistent_ratio():
    """Changes alternating in ratio (0.2, 0.8, 0.2, ...) or in sign have no single geometric
    tail: the guarded rules wait; a change of sign stops every tail rule."""
    history, k, change = [], 1.0, 1e-4
    for n in range(1, 25):
        history.append((200 * n, k))
        change *= 0.2 if n % 2 else 0.8
        k += change
    rules = stop_rule.rules(1e-3)
    assert first_stop(history, rules["tail3-spread0.1"]) is None
    assert first_stop(history, rules["tail3-spread0.05-half"]) is None
    signs = [(200 * n, 1.0 + 1e-5 * (-1) ** n) for n in range(1, 25)]
    assert stop_rule.tail_estimate(signs) is None


def test_a_small_deep_run_replays_every_rule(tmp_path):
    """One 16³ mirrored pack on NumPy: the fine run goes on past the default stop, every rule
    stops within its history, near the reference, and the report is written."""
    case = ("tiny", 16, 6, 0.3, "mirrored", None, 1, "float64")
    stop_rule.CPU_CASES.append(case)
    try:
        assert stop_rule.main(["--cases", "tiny", "--backend", "numpy", "--max-steps", "4000",
                               "--out", str(tmp_path)]) == 0
    finally:
        stop_rule.CPU_CASES.remove(case)
    (json_path,) = tmp_path.glob("stop_rule-*.json")
    (row,) = json.loads(json_path.read_text())["cases"]
    window = row["rules"]["window"]
    assert window["stop_step"] < row["fine_steps"]
    assert abs(window["error"]) < 1e-3
    assert len(row["pairs"]) == len(row["history"])
    assert "| tiny | mirrored |" in json_path.with_suffix(".md").read_text()


def test_remainder_replay_covers_every_recorded_case():
    """The committed histories (23 CPU cases and 2 H200 ones, issue 29): at the window rule's
    stop the stated remainder holds the deep reference in every case, the previous estimator
    in 10; on
    synthetic two-mode approaches the new one holds more than the previous one."""
    report = stop_rule.replay_remainder(
        [stop_rule.RESULTS / name for name in stop_rule.REPLAY_REPORTS])
    rows = report["cases"]
    assert len(rows) == 25
    assert all(r["new_covers"] for r in rows)
    assert sum(r["previous_covers"] for r in rows) == 10
    two = report["two_mode"]
    assert two["new_covers"] > two["previous_covers"]
    md = stop_rule.replay_markdown(report)
    assert "25 of 25" in md and "10 of 25" in md


def test_remainder_covers_a_small_default_mirrored_run():
    """The default start (coarse start, its density deviation x 1.1) of a mirrored run on a
    12³ pack, continued to 1e-6 per 1000 steps: at the window rule's stop (1600 steps) the
    stated remainder holds the distance to the continued k (1.39e-6; a clean geometric
    approach, stated 1.40e-6), and with the period-2 residual it would even if the
    reference were off by its own remainder (1e-8); not an infinity."""
    sample = stop_rule.image(12, 5.345e-6, 0.3, 4.0, seed=2)
    row = stop_rule.cover_run(sample, "float64", "mirrored", 0, 0,
                              stop_rule.get_backend("numpy"), 60.0, 6000)
    assert row["start_density_scales"] == [1.1]
    assert row["stop_step"] is not None and row["stop_step"] < row["deep_steps"]
    assert row["deep_converged"]
    assert row["covers"], (row["distance"], row["remainder"])
    assert (row["remainder"] + row["residual"]
            >= row["distance"] + row["reference_remainder"])
    assert row["remainder"] < 1e-4


def test_coverage_replay_of_the_recorded_runs():
    """The committed CPU coverage report (default start, 32³-48³ packs, both protocols, every
    axis, 26 runs), judged again: the remainder holds the continued k in 25 (22 with the
    constants before RATIO_RISE 6 and RATIO_CAP 0.97, which the GPU runs asked for); the one
    miss is a pressure run whose k was 6e-6 from its continuation, 160x below the tolerance."""
    report = stop_rule.cover_replay([stop_rule.RESULTS / stop_rule.COVER_REPORT])
    runs = report["runs"]
    assert len(runs) == 26 and report["start_density_gain"] == 1.1
    assert all(r["stop_step"] is not None for r in runs)
    assert sum(r["covers"] for r in runs) == 25
    (miss,) = [r for r in runs if not r["covers"]]
    assert (miss["case"], miss["protocol"], miss["axis"]) == ("c32-g8-p30-s2", "pressure", "x")
    assert miss["distance"] < 1e-5
    assert "| all | 26 of 26 |" in stop_rule.cover_markdown(report)
