"""Stop rules for the k runs: the 1000-step window against the estimated remaining change.

Question (issue 29): the fine runs stop when k changed by less than the tolerance (0.1 %) over
the last 1000 steps (:class:`solver.monitor.KConvergence`, checked every 200 steps). The late
changes of k fall about geometrically, and :func:`solver.rock.uncertainty.convergence_remainder`
already extrapolates that tail. Would a rule "stop when the extrapolated remainder
``|K_inf - k_n| / k_n`` is below the tolerance" (with guards: enough checks, a consistent
ratio) stop sooner and still give k within the tolerance of a deeply converged run?

Method: each case is one run of :func:`solver.rock.measure_axis` along x with the default
settings (its coarse start as it is), except that the fine run goes on to a 100x tighter
window tolerance (:data:`DEEP_TOLERANCE`, or a step/time cap). The stop rules only decide
*when* a run stops, not its trajectory, so every rule is replayed on the one recorded history
of pair means (the k at each check and one step later, :class:`~solver.rock.uncertainty.
StepPair`): where it stops, its k there against the deep run's last k (the reference), and
whether the interval the run would state there (convergence remainder + period-2 residual;
the grid and protocol terms left out, as they are not about stopping) covers the reference.
Cases: both protocols, 24³-64³ sphere packs of several grain sizes and porosities, the
default tau and others, coarse_levels 1 and 3 (and no coarse start), float64 and float32.

CPU: ``python benchmarks/rock_time_to_answer/stop_rule.py --backend numpy`` (about 30 min on
2 shared cores; the slow cases' references are deeper with a larger ``--max-seconds``); a
subset with ``--cases NAME ...``; GPU (200³ and 400³ mirrored, float32; about 80 s on an H200):
``python benchmarks/rock_time_to_answer/stop_rule.py --gpu --max-seconds 25 --max-steps 20000``.
Writes ``stop_rule-<device>-<date><tag>.json`` and ``.md`` to ``--out``. Findings:
``benchmarks/rock_time_to_answer/README.md`` (the default stays the 1000-step window).

Replay of the interval's convergence remainder (no runs, seconds):
``python benchmarks/rock_time_to_answer/stop_rule.py --replay-remainder`` evaluates
:func:`~solver.rock.uncertainty.convergence_remainder` and the previous estimator
(:func:`previous_remainder`) at the window rule's stop of every case of the committed CPU
reports (:data:`REPLAY_REPORTS`, a later report's case replacing an earlier one of the same
name), on synthetic two-mode approaches and at the end of the 400³ H200 histories (no
reference there); writes ``remainder_replay-<date>.json`` and ``.md``.

Coverage of the remainder with the default start (issue 29, item 2): ``--coverage`` runs
every image of :data:`COVER_CPU` (with ``--gpu`` :data:`COVER_GPU`, the 200³ image, float32)
with both protocols along every axis and the default settings (the mirrored runs' coarse
start with ``start_rescale`` and ``start_density_gain`` as they are), each fine run continued
to :data:`COVER_TOLERANCE` per 1000 steps, and states per run, at the window rule's stop,
the distance of k from the continued run's k against the stated remainder; writes
``remainder_cover-<device>-<date><tag>.json`` and ``.md``. CPU: ``python
benchmarks/rock_time_to_answer/stop_rule.py --coverage --backend numpy`` (an hour or more on
2 shared cores; ``--cases`` for a subset); GPU (about 2 min on an H200): ``python
benchmarks/rock_time_to_answer/stop_rule.py --coverage --gpu --backend cupy --max-seconds 8
--max-steps 20000``. ``--coverage --markdown A.json,B.json`` judges recorded coverage runs
again with the estimator as it is now and writes them as one report (no runs).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rock_tensor import image  # noqa: E402

from solver.backends import get_backend  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.monitor import K_WINDOW, KConvergence  # noqa: E402
from solver.rock import PermeabilitySettings  # noqa: E402
from solver.rock import measure as rock_measure  # noqa: E402
from solver.rock.protocol import setup_protocol  # noqa: E402
from solver.rock.uncertainty import (  # noqa: E402
    DECAY_CHECKS,
    RATIO_CAP,
    RATIO_CAP_STEPS,
    StepPair,
    alternation_residual,
    convergence_remainder,
    window_factor,
)

log = logging.getLogger("stop_rule")

#: The fine runs' window tolerance for the reference (100x the default 1e-3 per 1000 steps).
DEEP_TOLERANCE = 1e-5
#: Seed of the CPU cases' packs.
SEED = 5
#: Default tolerance the rules are judged at (relative).
TOLERANCE = 1e-3

#: (name, size, grain, porosity, protocol, tau or None (the default), coarse levels
#: (0: no coarse start), precision); the packs' seed is :data:`SEED`, the GPU images' that of
#: ``rock_tensor.py`` (3), so they are the images of its and ``start_levels.py``'s reports.
CPU_CASES = [
    ("m24-g8", 24, 8, 0.25, "mirrored", None, 1, "float64"),
    ("m24-g8-tau0.6", 24, 8, 0.25, "mirrored", 0.6, 1, "float64"),
    ("m24-g8-tau1", 24, 8, 0.25, "mirrored", 1.0, 1, "float64"),
    ("m24-g8-L3", 24, 8, 0.25, "mirrored", None, 3, "float64"),
    ("m24-g8-rest", 24, 8, 0.25, "mirrored", None, 0, "float64"),
    ("m24-g8-f32", 24, 8, 0.25, "mirrored", None, 1, "float32"),
    ("m24-g6-p35", 24, 6, 0.35, "mirrored", None, 1, "float64"),
    ("m32-g8", 32, 8, 0.25, "mirrored", None, 1, "float64"),
    ("m32-g8-L3", 32, 8, 0.25, "mirrored", None, 3, "float64"),
    ("m32-g8-tau0.9-f32", 32, 8, 0.25, "mirrored", 0.9, 1, "float32"),
    ("m32-g12-p20", 32, 12, 0.20, "mirrored", None, 1, "float64"),
    ("m48-g12-p20", 48, 12, 0.20, "mirrored", None, 1, "float32"),
    ("p24-g6-p35", 24, 6, 0.35, "pressure", None, 1, "float64"),
    ("p24-g6-p35-tau1", 24, 6, 0.35, "pressure", 1.0, 1, "float64"),
    ("p24-g6-p35-L3", 24, 6, 0.35, "pressure", None, 3, "float64"),
    ("p24-g6-p35-rest", 24, 6, 0.35, "pressure", None, 0, "float64"),
    ("p24-g8-f32", 24, 8, 0.25, "pressure", None, 1, "float32"),
    ("p32-g8", 32, 8, 0.25, "pressure", None, 1, "float64"),
    ("m32-g8-tau0.6", 32, 8, 0.25, "mirrored", 0.6, 1, "float64"),
    ("m48-g8-L3", 48, 8, 0.25, "mirrored", None, 3, "float64"),
    ("m64-g16-p20-f32", 64, 16, 0.20, "mirrored", None, 1, "float32"),
    ("p32-g12-p20", 32, 12, 0.20, "pressure", None, 1, "float64"),
    ("p32-g8-tau1-f32", 32, 8, 0.25, "pressure", 1.0, 1, "float32"),
]
GPU_CASES = [
    ("m200-g20", 200, 20, 0.20, "mirrored", None, 1, "float32"),
    ("m400-g20-L3", 400, 20, 0.20, "mirrored", None, 3, "float32"),
]


# --- the candidate rules, replayed on a history of pair means ((step, k) per check) ---------

def tail_estimate(history: list[tuple[int, float]], ratios: int = 3,
                  spread: float | None = None) -> tuple[float, float] | None:
    """(relative remainder, ratio) of the geometric tail fitted to the last ``ratios`` + 1
    changes of k, or None where they do not decay geometrically: every ratio of successive
    changes in (0, 1) and, with ``spread``, the largest and smallest within ``spread`` of each
    other; the ratio taken is the largest (the slowest decay seen, the cautious choice)."""
    if len(history) < ratios + 2 or not history[-1][1]:
        return None
    ks = [k for _, k in history[-(ratios + 2):]]
    changes = [b - a for a, b in zip(ks[:-1], ks[1:], strict=True)]
    rs = [b / a if a else math.nan for a, b in zip(changes[:-1], changes[1:], strict=True)]
    if not all(0.0 < r < 1.0 for r in rs):
        return None
    if spread is not None and max(rs) - min(rs) > spread:
        return None
    r = max(rs)
    return abs(changes[-1]) * r / (1.0 - r) / abs(history[-1][1]), r


def rules(tolerance: float) -> dict:
    """name -> f(history) -> stop now? (the window rule as the runs use it, and candidates)."""
    def window(history):
        test = KConvergence(tolerance, K_WINDOW)
        calm = False
        for step, k in history:
            _, calm, _ = test.update(step, k)
        return calm and history[-1][1] > 0

    def tail(ratios, spread, safety, with_window=False):
        def stop(history):
            if with_window and window(history):
                return True
            fit = tail_estimate(history, ratios, spread)
            return fit is not None and fit[0] < safety * tolerance and history[-1][1] > 0
        return stop

    return {"window": window,
            "tail3": tail(3, None, 1.0),
            "tail3-spread0.1": tail(3, 0.1, 1.0),
            "tail3-spread0.05-half": tail(3, 0.05, 0.5),
            "tail4-spread0.05-half": tail(4, 0.05, 0.5),
            "window-or-tail3-spread0.05-half": tail(3, 0.05, 0.5, with_window=True)}


def replay(history: list[tuple[int, float]], pairs: list[StepPair], k_ref: float,
           tolerance: float) -> dict:
    """Per rule: where it stops on ``history`` (None: not within it), k there vs ``k_ref``,
    the stated convergence interval there and whether it covers ``k_ref``."""
    out = {}
    for name, stop in rules(tolerance).items():
        at = next((i for i in range(len(history)) if stop(history[: i + 1])), None)
        if at is None:
            out[name] = {"stop_step": None}
            continue
        k = history[at][1]
        remainder = convergence_remainder(history[: at + 1])
        residual = alternation_residual(pairs[at], pairs[at - 1] if at else None)
        half = remainder + residual
        fit = tail_estimate(history[: at + 1], 3, None)
        # The tail's limit (k plus the extrapolated remainder, in the direction k moves):
        # information only, the runs report k itself.
        limit = None
        if fit is not None and at:
            limit = k + math.copysign(fit[0] * abs(k), k - history[at - 1][1])
        out[name] = {"stop_step": history[at][0], "check": at, "k": k,
                     "error": k / k_ref - 1.0, "within_tolerance": abs(k / k_ref - 1.0)
                     < tolerance, "remainder": remainder, "residual": residual,
                     "covers_reference": abs(k_ref - k) <= half * abs(k),
                     "tail_ratio": None if fit is None else fit[1],
                     "extrapolated_error": None if limit is None else limit / k_ref - 1.0}
    return out


# --- replay of the interval's convergence remainder on recorded histories ------------------

RESULTS = Path(__file__).resolve().parent / "results"
#: The CPU reports replayed, in order (a later one's case replaces an earlier one's).
REPLAY_REPORTS = [f"stop_rule-CPU-2-cores-NumPy-2026-11-28{t}.json"
                  for t in ("", "-more", "-slow", "-64")] + [
    # H200, 745cacf: 200³ and 400³ (3 start levels) mirrored x runs with deep references, run
    # after the estimator's constants were chosen on the CPU cases: an independent check.
    "stop_rule-NVIDIA-H200-2026-11-28.json"]
#: H200 histories of the 400³ image that end at the window rule's stop (no deep reference).
REPLAY_GPU_HISTORIES = "start_levels-NVIDIA-H200-2026-11-28-400.json"


def previous_remainder(history: list[tuple[int, float]]) -> float:
    """The convergence remainder as the interval stated it before this replay (for the
    comparison only): the geometric tail at the last ratio of successive changes (their mean
    when not rising), else the net change over the last window, relative."""
    if len(history) < 2 or not history[-1][1]:
        return math.inf
    k_last = history[-1][1]
    changes = [b[1] - a[1] for a, b in zip(history[:-1], history[1:], strict=True)]
    tail = changes[-(DECAY_CHECKS + 1):]
    ratios = [b / a for a, b in zip(tail[:-1], tail[1:], strict=True) if a]
    if len(ratios) == DECAY_CHECKS and all(0.0 < r < 1.0 for r in ratios):
        slowing = all(b > a for a, b in zip(ratios[:-1], ratios[1:], strict=True))
        r = ratios[-1] if slowing else sum(ratios) / len(ratios)
        return abs(changes[-1]) * r / (1.0 - r) / abs(k_last)
    last_step = history[-1][0]
    ref = next((p for p in reversed(history) if p[0] <= last_step - K_WINDOW), history[0])
    return abs(k_last - ref[1]) / abs(k_last)


def replay_case(case: dict) -> dict:
    """Both remainders (and the period-2 residual) at the window rule's stop of one recorded
    case, against the distance of its k there from the deep reference (all relative)."""
    stop = case["rules"]["window"]
    at = stop["check"]
    history = [(int(s), float(k)) for s, k in case["history"][: at + 1]]
    pairs = [StepPair(int(s), a, b) for s, a, b in case["pairs"]]
    k = history[-1][1]
    distance = abs(case["k_reference"] - k) / abs(k)
    new, old = convergence_remainder(history), previous_remainder(history)
    residual = alternation_residual(pairs[at], pairs[at - 1] if at else None)
    return {"case": case["case"], "protocol": case["protocol"], "precision":
            case["precision"], "stop_step": history[-1][0], "distance": distance,
            "previous": old, "new": new, "residual": residual,
            "previous_covers": old >= distance, "new_covers": new >= distance,
            "previous_with_residual_covers": old + residual >= distance,
            "new_with_residual_covers": new + residual >= distance,
            "new_over_distance": new / distance if distance else math.inf}


def window_stop(history: list[tuple[int, float]], tolerance: float) -> int | None:
    """Index of the window rule's stop on ``history`` (None: it does not stop)."""
    window = rules(tolerance)["window"]
    return next((i for i in range(len(history)) if window(history[: i + 1])), None)


def two_mode_sweep(tolerance: float = TOLERANCE) -> dict:
    """Synthetic approaches ``k_n = 1 - a r1^n - b r2^n`` (checks 200 steps apart, a = 1e-3,
    b/a from 1 to 1000, r2 < r1 per check) stopped by the window rule: how often each
    remainder holds the limit 1, the smallest stated/true there."""
    out = {"cases": 0, "previous_covers": 0, "new_covers": 0, "new_smallest_ratio": math.inf,
           "worst": None}
    for r1 in (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93):
        for r2 in [x for x in (0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9) if x < r1 - 0.02]:
            for weight in (1, 3, 10, 30, 100, 1000):
                history = [(200 * n, 1.0 - 1e-3 * (r1**n + weight * r2**n))
                           for n in range(120)]
                at = window_stop(history, tolerance)
                if at is None:
                    continue
                seen = history[: at + 1]
                distance = (1.0 - seen[-1][1]) / seen[-1][1]
                new = convergence_remainder(seen)
                out["cases"] += 1
                out["previous_covers"] += previous_remainder(seen) >= distance
                out["new_covers"] += new >= distance
                if new / distance < out["new_smallest_ratio"]:
                    out["new_smallest_ratio"] = new / distance
                    out["worst"] = {"r1": r1, "r2": r2, "b_over_a": weight,
                                    "stop_step": seen[-1][0]}
    return out


def gpu_tails() -> list[dict]:
    """Both remainders at the end of the 400³ H200 histories (each ends at the window's
    stop; no reference, so no coverage)."""
    path = RESULTS / REPLAY_GPU_HISTORIES
    if not path.exists():
        return []
    report = json.loads(path.read_text())
    out = []
    for row in report["rows"]:
        for run in row.get("runs", []):
            history = [(int(s), float(k)) for s, k in run["history"]]
            label = {key: row[key] for key in ("levels", "factor", "tile_storage")
                     if key in row}
            out.append({"row": label, "stop_step": history[-1][0],
                        "previous": previous_remainder(history),
                        "new": convergence_remainder(history)})
    return out


def replay_remainder(paths: list[Path]) -> dict:
    """The remainder replay over the recorded reports ``paths`` (see module)."""
    cases: dict[str, dict] = {}
    for path in paths:
        for case in json.loads(path.read_text())["cases"]:
            cases[case["case"]] = case
    rows = [replay_case(c) for c in cases.values()]
    return {"date": date.today().isoformat(), "commit": git_commit(),
            "reports": [p.name for p in paths], "cases": rows, "two_mode": two_mode_sweep(),
            "gpu_400": gpu_tails()}


def replay_markdown(report: dict) -> str:
    """Coverage and width of both remainders per case and in sum."""
    rows = report["cases"]
    out = [f"# Convergence remainder of the k interval, replayed ({report['date']}, commit "
           f"{report['commit']})", "",
           "At the window rule's stop of each recorded CPU case (reports: "
           + ", ".join(report["reports"]) + "): the distance of k from the deep reference "
           "and the remainder each estimator states there (relative; 'c': covers it).", "",
           "| case | protocol | precision | stop step | distance | previous | new | "
           "new / distance | residual |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['case']} | {r['protocol']} | {r['precision']} | {r['stop_step']} | "
                   f"{r['distance']:.2e} | {r['previous']:.2e}"
                   f"{' c' if r['previous_covers'] else ''} | {r['new']:.2e}"
                   f"{' c' if r['new_covers'] else ''} | {r['new_over_distance']:.3g} | "
                   f"{r['residual']:.1e} |")
    n = len(rows)

    def mean(key: str, subset: list[dict]) -> float:
        return sum(r[key] for r in subset) / max(len(subset), 1)

    def short(key: str) -> str:
        gaps = [1.0 - r[key] / r["distance"] for r in rows if r[key] < r["distance"]]
        return f"{100 * min(gaps):.0f}-{100 * max(gaps):.0f} %" if gaps else "-"

    ratios = sorted(r["new_over_distance"] for r in rows)
    wider = sorted(r["new"] / r["previous"] for r in rows)
    out += ["", "| estimator | covers (remainder) | covers (+ residual) | short by | mean "
            "remainder | median remainder / distance |", "|---|---|---|---|---|---|"]
    for key, name in (("previous", "previous (last ratio)"), ("new", "new (rising ratio)")):
        median = sorted(r[key] / r["distance"] for r in rows)[n // 2]
        out.append(f"| {name} | {sum(r[key + '_covers'] for r in rows)} of {n} | "
                   f"{sum(r[key + '_with_residual_covers'] for r in rows)} of {n} | "
                   f"{short(key)} | {mean(key, rows):.2e} | {median:.3g} |")
    two = report["two_mode"]
    worst = two["worst"] or {}
    out += ["", f"new / distance: smallest {ratios[0]:.3g}, median {ratios[n // 2]:.3g}, "
            f"largest {ratios[-1]:.3g} (the largest on runs converged to noise, where the "
            "fallback term holds). new / previous: "
            f"smallest {wider[0]:.3g}, median {wider[n // 2]:.3g}, largest {wider[-1]:.3g}.",
            "",
            f"Synthetic two-mode approaches (k = 1 - 1e-3 (r1^n + w r2^n), window rule): "
            f"{two['cases']} stopped; previous covers {two['previous_covers']}, new "
            f"{two['new_covers']}; smallest new / distance {two['new_smallest_ratio']:.3g} "
            f"(r1 {worst.get('r1')}, r2 {worst.get('r2')}, w {worst.get('b_over_a')}).", ""]
    if report["gpu_400"]:
        out += ["400³ H200 histories (end at the window's stop; no reference):", "",
                "| start | stop step | previous | new |", "|---|---|---|---|"]
        for g in report["gpu_400"]:
            label = ", ".join(f"{k} {v}" for k, v in g["row"].items())
            out.append(f"| {label} | {g['stop_step']} | {g['previous']:.2e} | "
                       f"{g['new']:.2e} |")
        out.append("")
    return "\n".join(out)


def write_replay(report: dict, out: Path) -> tuple[Path, Path]:
    """Write the replay's JSON and Markdown; their paths."""
    return write_json_md(out, f"remainder_replay-{report['date']}", report,
                         replay_markdown(report), default=float)


# --- the runs -----------------------------------------------------------------------------

def deep_measure(setup, settings: PermeabilitySettings, backend, tolerance: float
                 ) -> tuple[object, list[StepPair]]:
    """:func:`solver.rock.measure_axis` of ``setup`` as it runs by default, except that its
    fine run goes on to ``tolerance`` per 1000 steps (or ``settings``' step/time limit): the
    result and the fine run's pairs. The stop rule only decides when a run stops, not its
    trajectory, so the default run is this run's history up to the window rule's stop."""
    pairs: dict[str, list[StepPair]] = {}
    original_run, original_pair = rock_measure._run, rock_measure._read_pair

    def deep_run(sim, setup, settings, level_tolerance, voxel_size, on_check, phases=None,
                 stage="fine", *rest):
        pairs[stage] = []  # the fine run's pairs (a coarse level's are overwritten)
        if stage == "fine":
            level_tolerance = tolerance
        return original_run(sim, setup, settings, level_tolerance, voxel_size, on_check,
                            phases, stage, *rest)

    def recorded_pair(sim, check, setup, phases, stage):
        out = original_pair(sim, check, setup, phases, stage)
        pairs[stage].append(out[0])
        return out

    rock_measure._run, rock_measure._read_pair = deep_run, recorded_pair
    try:
        result = rock_measure.measure_axis(setup, settings, backend)
    finally:
        rock_measure._run, rock_measure._read_pair = original_run, original_pair
    return result, pairs["fine"]


def run_case(case: tuple, backend, max_seconds: float, max_steps: int) -> dict:
    """One deep run of a case; its histories and the rules replayed on them."""
    name, size, grain, porosity, protocol, tau, levels, precision = case
    sample = image(size, 5.345e-6, porosity, float(grain), seed=SEED if size < 200 else 3)
    config = SimulationConfig(precision=precision, collision="TRT",
                              **({"tau": tau} if tau and protocol == "pressure" else {}))
    settings = PermeabilitySettings(
        protocol=protocol, axes=["x"], formation_factor=False, coarse_start=levels > 0,
        coarse_levels=max(levels, 1), fast_tau=tau if protocol == "mirrored" else None,
        max_seconds=max_seconds, max_steps=max_steps)
    setup = setup_protocol(sample, config, 0, protocol, settings)
    tic = time.perf_counter()
    result, pairs = deep_measure(setup, settings, backend, DEEP_TOLERANCE)
    seconds = time.perf_counter() - tic
    history = [(int(s), float(k)) for s, k in result.history]
    k_ref = history[-1][1]
    ref_remainder = convergence_remainder(history)
    ks = [k for _, k in history]
    changes = [b - a for a, b in zip(ks[:-1], ks[1:], strict=True)]
    return {"case": name, "size": size, "grain": grain, "porosity": sample.porosity,
            "protocol": protocol, "tau": setup.config.tau, "coarse_levels": levels,
            "precision": precision, "start_steps": result.start_steps,
            "fine_steps": result.steps, "deep_converged": result.converged,
            "deep_change_per_1000": result.change_per_1000, "k_reference": k_ref,
            "reference_remainder": ref_remainder, "seconds": seconds,
            "history": history, "pairs": [[p.step, p.k_first, p.k_next] for p in pairs],
            "ratios": [b / a if a else None for a, b in
                                           zip(changes[:-1], changes[1:], strict=True)],
            "rules": replay(history, pairs, k_ref, TOLERANCE)}


# --- coverage of the stated remainder with the default start (issue 29, item 2) ----------

#: The coverage check's reference: the fine run continued to this change of k per 1000 steps.
COVER_TOLERANCE = 1e-6
#: Coverage images: (name, size, grain, porosity, seed, coarse_levels (0: the default, by
#: size), precision). Each runs both protocols along every axis with the default settings
#: otherwise (the mirrored runs' start: ``start_rescale`` and ``start_density_gain`` as they
#: are); levels 3 gives a small image the chain (and its velocity rescale) that mirrored runs
#: of 400³ or more get by default, and runs the mirrored protocol only (pressure-driven runs
#: keep the plain start).
COVER_CPU = [
    ("c32-g8-p20-s1", 32, 8, 0.20, 1, 0, "float64"),
    ("c32-g8-p30-s2", 32, 8, 0.30, 2, 0, "float64"),
    ("c40-g10-p15-s3", 40, 10, 0.15, 3, 0, "float64"),
    ("c48-g12-p25-s4", 48, 12, 0.25, 4, 0, "float64"),
    ("c32-g8-p20-s1-f32", 32, 8, 0.20, 1, 0, "float32"),
    ("c48-g8-p20-s5-L3", 48, 8, 0.20, 5, 3, "float64"),
]
#: The committed CPU coverage report (the runs of :data:`COVER_CPU` that finished).
COVER_REPORT = "remainder_cover-CPU-2-cores-NumPy-2026-11-28.json"
#: The GPU check: the issue's 200³ image (the seed of ``rock_tensor.py``), float32.
COVER_GPU = [("c200-g20-p20", 200, 20, 0.20, 3, 0, "float32")]


def cover_run(sample, precision: str, protocol: str, axis: int, levels: int, backend,
              max_seconds: float, max_steps: int) -> dict:
    """One default run of ``protocol`` along ``axis`` continued to :data:`COVER_TOLERANCE`:
    at the window rule's stop, its stated convergence remainder (and the period-2 residual)
    against its distance from the continued run's last k (all relative)."""
    config = SimulationConfig(precision=precision, collision="TRT")
    settings = PermeabilitySettings(protocol=protocol, axes=["xyz"[axis]],
                                    formation_factor=False, coarse_levels=levels,
                                    max_seconds=max_seconds, max_steps=max_steps)
    setup = setup_protocol(sample, config, axis, protocol, settings)
    tic = time.perf_counter()
    result, pairs = deep_measure(setup, settings, backend, COVER_TOLERANCE)
    history = [(int(s), float(k)) for s, k in result.history]
    k_ref = history[-1][1]
    row = {"protocol": protocol, "axis": "xyz"[axis], "tau": setup.config.tau,
           "start_steps": result.start_steps, "start_scales": result.start_scales,
           "start_density_scales": result.start_density_scales,
           "deep_steps": result.steps, "deep_converged": result.converged,
           "deep_change_per_1000": result.change_per_1000, "k_reference": k_ref,
           "seconds": time.perf_counter() - tic, "history": history,
           "pairs": [[p.step, p.k_first, p.k_next] for p in pairs]}
    return {**row, **cover_verdict(history, pairs, settings.tolerance)}


def cover_verdict(history: list[tuple[int, float]], pairs: list[StepPair],
                  tolerance: float = TOLERANCE) -> dict:
    """At the window rule's stop on ``history`` (the pair means, continued far beyond it):
    the stated convergence remainder (and the period-2 residual; the remainder before the
    fallback's floor, :func:`unfloored_remainder`, for comparison) against the distance of
    k there from the history's last k, the reference (all relative)."""
    k_ref = history[-1][1]
    reference_remainder = convergence_remainder(history)
    at = window_stop(history, tolerance)
    if at is None:
        return {"stop_step": None, "reference_remainder": reference_remainder}
    seen, k = history[: at + 1], history[at][1]
    remainder = convergence_remainder(seen)
    residual = alternation_residual(pairs[at], pairs[at - 1] if at else None)
    distance = abs(k_ref - k) / abs(k)
    return {"stop_step": seen[-1][0], "k": k, "error": k / k_ref - 1.0,
            "within_tolerance": distance < tolerance, "distance": distance,
            "remainder": remainder, "residual": residual,
            "unfloored_remainder": unfloored_remainder(seen),
            "covers": remainder >= distance,
            "covers_with_residual": remainder + residual >= distance,
            "unfloored_covers": unfloored_remainder(seen) >= distance,
            # the reference is itself off by about its own remainder: a verdict within that
            # band is not decided by this reference
            "reference_remainder": reference_remainder,
            "decided": abs(remainder - distance) > reference_remainder,
            "stated_over_distance": remainder / distance if distance else math.inf}


def unfloored_remainder(history: list[tuple[int, float]]) -> float:
    """The convergence remainder as stated before its fallback was floored at the last
    change's tail at the cap (for the comparison only; same as the current one wherever the
    last ratios decay geometrically)."""
    changes = [b[1] - a[1] for a, b in zip(history[:-1], history[1:], strict=True)]
    tail = changes[-(DECAY_CHECKS + 1):]
    ratios = [b / a for a, b in zip(tail[:-1], tail[1:], strict=True) if a]
    if len(history) < 2 or (len(ratios) == DECAY_CHECKS and all(0 < r < 1 for r in ratios)):
        return convergence_remainder(history)
    cap = RATIO_CAP ** ((history[-1][0] - history[-2][0]) / RATIO_CAP_STEPS)
    return window_factor(cap, len(tail)) * sum(abs(c) for c in tail) / abs(history[-1][1])


def cover_replay(paths: list[Path]) -> dict:
    """The coverage report of the recorded runs in ``paths`` (their histories and pairs),
    judged with the estimator as it is now; the runs of all files in one report."""
    reports = [json.loads(p.read_text()) for p in paths]
    runs = []
    for report in reports:
        for row in report["runs"]:
            history = [(int(s), float(k)) for s, k in row["history"]]
            pairs = [StepPair(int(s), a, b) for s, a, b in row["pairs"]]
            runs.append({**row, **cover_verdict(history, pairs)})
    head = {k: reports[0][k] for k in ("device", "backend", "start_rescale",
                                       "start_density_gain")}
    return {**head, "date": date.today().isoformat(), "commit": git_commit(),
            "recorded": [f"{p.name} ({r['commit']})" for p, r in zip(paths, reports,
                                                                     strict=True)],
            "runs": runs}


def cover(cases: list[tuple], backend, max_seconds: float, max_steps: int,
          report: dict, out: Path, tag: str) -> dict:
    """Every case's image, both protocols along every axis (:func:`cover_run`); the report is
    written after every run (partial results survive)."""
    for name, size, grain, porosity, seed, levels, precision in cases:
        sample = image(size, 5.345e-6, porosity, float(grain), seed=seed)
        for protocol in ("mirrored",) if levels > 1 else ("mirrored", "pressure"):
            for axis in range(3):
                row = cover_run(sample, precision, protocol, axis, levels, backend,
                                max_seconds, max_steps)
                row.update({"case": name, "size": size, "grain": grain, "seed": seed,
                            "porosity": sample.porosity, "coarse_levels": levels,
                            "precision": precision})
                log.info("%s %s %s: stop %s, distance %.2e, stated %.2e (+%.1e), %.0f s",
                         name, protocol, row["axis"], row["stop_step"],
                         row.get("distance", math.nan), row.get("remainder", math.nan),
                         row.get("residual", math.nan), row["seconds"])
                report["runs"].append(row)
                write_cover(report, out, tag)
    return report


def cover_summary(runs: list[dict]) -> list[str]:
    """Coverage and tightness lines (Markdown) over ``runs`` that stopped."""
    out = ["| runs | stopped | k within the tolerance | remainder covers | + residual covers "
           "| before the floor covers | undecided by the reference | stated / distance (min, "
           "median, max) | short by |", "|---|---|---|---|---|---|---|---|---|"]
    groups = [("all", runs)] + [(p, [r for r in runs if r["protocol"] == p])
                                for p in ("mirrored", "pressure")]
    for label, group in groups:
        done = [r for r in group if r.get("stop_step") is not None]
        if not done:
            continue
        ratios = sorted(r["stated_over_distance"] for r in done)
        gaps = [1.0 - r["remainder"] / r["distance"] for r in done if not r["covers"]]
        short = ", ".join(f"{100 * g:.2g} %" for g in sorted(gaps)) if gaps else "-"
        out.append(f"| {label} | {len(done)} of {len(group)} | "
                   f"{sum(r['within_tolerance'] for r in done)} | "
                   f"{sum(r['covers'] for r in done)} | "
                   f"{sum(r['covers_with_residual'] for r in done)} | "
                   f"{sum(r['unfloored_covers'] for r in done)} | "
                   f"{sum(not r['decided'] for r in done)} | {ratios[0]:.3g}, "
                   f"{ratios[len(ratios) // 2]:.3g}, {ratios[-1]:.3g} | {short} |")
    return out


def cover_markdown(report: dict) -> str:
    """Per run: the stop, its distance from the reference, the stated remainder; the sums."""
    out = [f"# Convergence remainder with the default start ({report['device']}, "
           f"{report['date']}, commit {report['commit']}; reference: the fine run continued "
           f"to {COVER_TOLERANCE:g} per 1000 steps)", "",
           "Each run with the default settings (start_rescale "
           f"{report['start_rescale']}, start_density_gain {report['start_density_gain']}), "
           "stopped by the window rule (tolerance 1e-3 per 1000 steps); distance: |k - k_ref| "
           "/ k there; remainder: the interval's convergence remainder there (before the "
           "floor: without its fallback's floor at the last change's tail at the cap); "
           "residual: the period-2 residual ('c': the remainder alone covers the distance; "
           "'?': the difference is within the reference's own remainder).", "",
           "| image | φ | precision | protocol | axis | start steps (velocity, density "
           "scales) | stop | distance | remainder | before the floor | residual | remainder / "
           "distance | ref steps (remainder) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        start = f"{r['start_steps']} ({r['start_scales']}, {r['start_density_scales']})"
        ref = f"{r['deep_steps']} ({r['reference_remainder']:.1e})"
        if r.get("stop_step") is None:
            out.append(f"| {r['case']} | {r['porosity']:.3f} | {r['precision']} | "
                       f"{r['protocol']} | {r['axis']} | {start} | no stop | - | - | - | - | "
                       f"- | {ref} |")
            continue
        flag = (" c" if r["covers"] else "") + ("" if r["decided"] else " ?")
        out.append(f"| {r['case']} | {r['porosity']:.3f} | {r['precision']} | "
                   f"{r['protocol']} | {r['axis']} | {start} | {r['stop_step']} | "
                   f"{r['distance']:.2e} | {r['remainder']:.2e}{flag} | "
                   f"{r['unfloored_remainder']:.2e} | {r['residual']:.1e} "
                   f"| {r['stated_over_distance']:.3g} | {ref} |")
    return "\n".join(out + [""] + cover_summary(report["runs"]) + [""])


def write_cover(report: dict, out: Path, tag: str) -> tuple[Path, Path]:
    """Write the coverage report's JSON and Markdown; their paths."""
    device = re.sub(r"[^A-Za-z0-9]+", "-", str(report["device"] or report["backend"])).strip("-")
    stem = Path(f"remainder_cover-{device}-{report['date']}{tag}").with_suffix("").name
    return write_json_md(out, stem, report, cover_markdown(report), default=float)


def markdown(report: dict) -> str:
    """Per case and rule: fine steps to the stop, error vs the reference, coverage."""
    names = list(rules(TOLERANCE))
    out = [f"# Stop rules of the k runs ({report['device']}, {report['date']}, commit "
           f"{report['commit']}; tolerance {TOLERANCE:g}, reference: the fine run continued "
           f"to {DEEP_TOLERANCE:g} per 1000 steps)", "",
           "Per rule: fine steps at the stop / k vs the reference (%) / 'c' where the "
           "stated convergence interval (remainder + period-2 residual) covers it.", "",
           "| case | protocol | tau | levels | precision | ref steps (remainder) | ratio | "
           + " | ".join(names) + " | tail limit at the window's stop |",
           "|" + "---|" * (8 + len(names))]
    for c in report["cases"]:
        window = c["rules"]["window"]
        ratio = window.get("tail_ratio")
        ratio = "-" if ratio is None else f"{ratio:.2f}"
        limit = window.get("extrapolated_error")
        limit = "-" if limit is None else f"{100 * limit:+.3f}"
        cells = []
        for n in names:
            r = c["rules"][n]
            if r["stop_step"] is None:
                cells.append("no stop")
                continue
            flag = "" if r["within_tolerance"] else " **>tol**"
            cells.append(f"{r['stop_step']} / {100 * r['error']:+.3f}{flag}"
                         f"{' c' if r['covers_reference'] else ''}")
        out.append(f"| {c['case']} | {c['protocol']} | {c['tau']:g} | {c['coarse_levels']} | "
                   f"{c['precision']} | {c['fine_steps']} ({c['reference_remainder']:.1e}) | "
                   f"{ratio} | " + " | ".join(cells) + f" | {limit} |")
    out += ["", "| rule | cases stopped | within the tolerance | interval covers | fine steps "
            "vs window (sum; fewest, most) |", "|---|---|---|---|---|"]
    for n in names:
        stops = [(c["rules"][n], c["rules"]["window"]) for c in report["cases"]]
        done = [(r, w) for r, w in stops if r["stop_step"] is not None]
        saved = [r["stop_step"] - w["stop_step"] for r, w in done if w["stop_step"] is not None]
        out.append(f"| {n} | {len(done)} of {len(stops)} | "
                   f"{sum(r['within_tolerance'] for r, _ in done)} | "
                   f"{sum(r['covers_reference'] for r, _ in done)} | "
                   + (f"{sum(saved):+d}; {min(saved):+d}, {max(saved):+d} |" if saved else "- |"))
    out += ["", "ref steps: the deep run's fine steps (its own estimated remainder); ratio: "
            "of successive k changes (200 steps apart) at the window rule's stop, the largest "
            "of the last three (- where they do not decay geometrically); tail limit: k plus "
            "the geometric tail's remainder at the window rule's stop, vs the reference (%; "
            "information only: the runs report k). Rules: window, the runs' test (k changed "
            "by < tolerance over 1000 steps); tailN: the tail fitted to the last N ratios of "
            "successive changes (all in (0, 1), the largest taken) says the remainder is below "
            "the tolerance; -spreadS: and those ratios are within S of each other; -half: "
            "below half the tolerance; window-or-...: whichever stops first.", ""]
    return "\n".join(out)


def write(report: dict, out: Path, tag: str) -> tuple[Path, Path]:
    """Write the JSON and Markdown reports; their paths."""
    device = re.sub(r"[^A-Za-z0-9]+", "-", str(report["device"] or report["backend"])).strip("-")
    # with_suffix("") as ever: a dot in the tag ends the file name there
    stem = Path(f"stop_rule-{device}-{report['date']}{tag}").with_suffix("").name
    return write_json_md(out, stem, report, markdown(report), default=float)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", default=None, help="case names (default: all)")
    p.add_argument("--gpu", action="store_true", help="the GPU cases (200³, 400³)")
    p.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    p.add_argument("--max-seconds", type=float, default=150.0,
                   help="wall limit of each run (each start level and the fine run), s")
    p.add_argument("--max-steps", type=int, default=12000)
    p.add_argument("--tag", default="", help="suffix of the report's file names")
    p.add_argument("--markdown", default=None,
                   help="only rewrite the Markdown of this JSON report (no runs); with "
                        "--coverage: comma-separated coverage reports, judged again and "
                        "written as one")
    p.add_argument("--replay-remainder", action="store_true",
                   help="replay the interval's convergence remainder on the committed reports")
    p.add_argument("--coverage", action="store_true",
                   help="the remainder's coverage with the default start (COVER_CPU, with "
                        "--gpu COVER_GPU; --cases picks among them)")
    p.add_argument("--out", default="benchmarks/rock_time_to_answer/results")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the cases, write and print the report."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse(argv)
    if args.markdown and not args.coverage:
        path = Path(args.markdown)
        path.with_suffix(".md").write_text(markdown(json.loads(path.read_text())))
        return 0
    if args.replay_remainder:
        report = replay_remainder([RESULTS / name for name in REPLAY_REPORTS])
        paths = write_replay(report, Path(args.out))
        print(replay_markdown(report))
        print(f"wrote {paths[0]} and {paths[1]}")
        return 0
    backend = get_backend(args.backend)
    if args.coverage:
        defaults = PermeabilitySettings()
        report = {"device": backend.device_info().get("name"), "backend": backend.name,
                  "date": date.today().isoformat(), "commit": git_commit(),
                  "start_rescale": defaults.start_rescale,
                  "start_density_gain": defaults.start_density_gain, "runs": []}
        cases = COVER_GPU if args.gpu else COVER_CPU
        if args.cases:
            cases = [c for c in COVER_CPU + COVER_GPU if c[0] in args.cases]
        if args.markdown:  # recorded coverage runs, judged again (no runs)
            report = cover_replay([Path(p) for p in args.markdown.split(",")])
            paths = write_cover(report, Path(args.out), args.tag)
            print(cover_markdown(report))
            print(f"wrote {paths[0]} and {paths[1]}")
            return 0
        cover(cases, backend, args.max_seconds, args.max_steps, report, Path(args.out),
              args.tag)
        json_path, md_path = write_cover(report, Path(args.out), args.tag)
        print(cover_markdown(report))
        print(f"wrote {json_path} and {md_path}")
        return 0
    cases = GPU_CASES if args.gpu else CPU_CASES
    if args.cases:
        cases = [c for c in CPU_CASES + GPU_CASES if c[0] in args.cases]
    report = {"device": backend.device_info().get("name"), "backend": backend.name,
              "date": date.today().isoformat(), "commit": git_commit(), "cases": []}
    for case in cases:
        row = run_case(case, backend, args.max_seconds, args.max_steps)
        log.info("%s: %d fine steps, %.1f s; %s", case[0], row["fine_steps"], row["seconds"],
                 {n: r["stop_step"] for n, r in row["rules"].items()})
        report["cases"].append(row)
        write(report, Path(args.out), args.tag)  # after every case: partial results survive
    json_path, md_path = write(report, Path(args.out), args.tag)
    print(markdown(report))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
