"""An interval for each measured k: convergence remainder, what is left of the period-2
alternation, discretisation and protocol spread.

Four estimates, each a relative half-width, from what a study already computes (and the
alternation itself, reported beside them):

``remainder``
    How far k may still move after the run stopped. Model: the changes of k between checks
    (``history``, equally spaced) are a sum of decaying modes of one sign,
    ``c_n = sum_i a_i r_i^n`` with all ``a_i`` of one sign and ``0 < r_i < 1``, the slowest
    ratio ``r_1`` at most :data:`RATIO_CAP` per :data:`RATIO_CAP_STEPS` steps (scaled to the
    check spacing). Then the ratio of successive changes rises towards ``r_1`` as the slow
    mode takes over, and for any ``rho >= r_1`` the rest of the series is at most
    ``|last change| rho / (1 - rho)``. ``rho`` is the largest of the last
    :data:`DECAY_CHECKS` ratios plus :data:`RATIO_RISE` times their spread (how far they
    still rose, or scattered, over those checks), capped: for a clean geometric decay the
    spread is 0 and this is the exact tail; while the ratio still rises it extrapolates the
    rise. Without such a decaying series (too few checks, a ratio outside (0, 1): a change of
    sign, noise) the term is the sum of the absolute values of the same last changes
    (:data:`DECAY_CHECKS` + 1) times :func:`window_factor` at the cap, and at least the last
    change's own tail at the cap, ``|last change| cap / (1 - cap)``: changes that grew come
    from no decaying tail (modes of one sign only shrink), as when the default mirrored start
    leaves a slow mode of the other sign and the window rule stops in its lull.
    Coverage, against the k of the same run continued to 1e-5 (GPU) or 1e-6 (CPU) per 1000
    steps (``benchmarks/rock_time_to_answer``: ``deep_compare.py``, ``stop_rule.py
    --coverage``; the history of the constants is in its README): with the default start it
    holds that k in all 21 H200 runs of the generated sandstone-like images (200³, 300³, 400³
    both protocols, every axis; 1000³ mirrored), at 1.1-4.2x the distance where that was above
    1e-4 of k (median 1.4x), and in 25 of 26 CPU runs (32³-48³ packs, φ 0.15-0.30; the miss at
    6e-6 of k). :data:`RATIO_RISE` 6 and :data:`RATIO_CAP` 0.97 were chosen on those runs (3
    and 0.95 held 13 of 21 and 22 of 26: at 400³ the ratios still rose slowly at the stop,
    0.91-0.92 per check where the tail needed 0.94-0.96). On 12 H200 runs of two images they
    were not chosen on (256³ at φ 0.15, 352³ at φ 0.28) it held 9; the other three were 3-10 %
    short of the distance (at most 6e-4 of k). So it is an estimate of the distance, not a
    bound. What it does not cover: a mode slower than the cap, a change still growing after
    the stop, or a slow mode whose share is still too small to raise the ratios when the run
    stops.
``alternation``
    The period-2 part of k, reported as information, not in the interval. A converged run's
    k alternates between even and odd steps, and so does the whole domain's mean velocity: the
    alternation is in the populations, not in the readout. The difference of consecutive
    steps' k relative to k: mirrored runs 2.6e-3 on a 24³ pack, 1.5e-3 at 96³, 7.6e-5 at 200³,
    barely decaying (H200, float32; 2.6e-3 at 24³ with NumPy, float64); pressure-driven runs
    started at rest (the default) 5.3e-3 on a 16³ pack and 6.4e-3 at 24³ where they stopped
    converged (NumPy, float64, coarse start), from the density ramp (``pressure_start: ramp``)
    only 3e-6 on the 24³ pack after 4000 steps; at 200³ (H200, float32) the pressure runs'
    half-difference was 1.4-2 % of k at 3600-5000 steps. So a run reads k at every check
    ``n`` and one step later (:class:`StepPair`; the last one past ``max_steps`` when it stops
    there): its k and its history, which the convergence test judges, are the means of the
    two consecutive steps, in which the period-2 part cancels. ``alternation`` is half the
    last pair's difference, how far one step's k is from that mean.
``alternation_residual``
    What of the period-2 part is left in the mean (:func:`alternation_residual`), the term the
    interval holds. Model: ``k(t) = K(t) + a r^t (-1)^t``, a smooth part ``K`` and a mode of
    per-step factor ``r`` (decaying for r < 1). The pair at a check ``n`` then has the half
    difference ``h_n = (k(n) - k(n+1)) / 2 = (-1)^n a r^n (1 + r) / 2`` (after removing the
    smooth change over the step, ``K(n+1) - K(n)``, taken from the slope of the pair means
    between the last two checks) and its mean is off by ``(-1)^n a r^n (1 - r) / 2``, that is
    by ``|h_n| |1 - r| / (1 + r)``. ``r`` comes from the signed amplitudes
    ``(-1)^n h_n`` of the last two checks, ``Δ`` steps apart: ``r = (A_last / A_prev)^(1/Δ)``.
    A mode that keeps its amplitude (the mirrored runs) is cancelled exactly; one decaying by
    half per 1000 steps leaves 3.5e-4 of its half difference. Floored at
    :data:`RESIDUAL_FLOOR` (the resolution of a float32 run's k: a ratio measured as 1 does not
    prove an exact cancellation below it). Without two pairs, or where the amplitude changed
    sign between them (no single geometric mode: several modes, or the drift dominating), the
    residual is not estimated and the half difference itself is taken (the previous, larger
    term: a bound on the mean's error as long as the mode does not grow). An oscillation
    whose period is near but not exactly 2 steps is not cancelled by the pair; its amplitude
    at successive checks then beats, and a sign change falls back to the half difference. The
    model is checked on the CPU: a pressure-driven 24³ pack from rest (NumPy, float64) stopped
    at 1601 steps with a half difference of 0.13 and a residual of 2.2e-5; its k was 2.6e-4
    below a 13401-step run's, which remainder + residual (6.0e-4, the remainder as it was
    then) held. One definition for the one-device runs (:mod:`solver.rock.measure`) and the
    runs over MPI ranks (:mod:`solver.distributed.mirrored`).
``discretisation``
    Richardson-style, from the coarse start (the same protocol on the sample coarsened by 2,
    :mod:`solver.rock.initial`) and the fine run: with an assumed order of convergence
    ``p`` = :data:`ASSUMED_ORDER` (halfway bounce-back is second order for smooth walls), the
    error of the fine k is about ``|k_fine - k_coarse| / (2**p - 1)``. Only two levels are
    solved, so the order is assumed, not observed (a third, coarser level would give the
    observed order ``log2(|k_c2 - k_c| / |k_c - k_f|)``); voxelised grains converge
    irregularly, so this is an estimate of the size of the grid error, not a bound. The coarse
    run stopped at a 10x looser tolerance, which this term includes.
``protocol_spread``
    Half the difference between the mirrored and pressure-driven k of the same axis, when both
    ran: how much the choice of boundary set-up moves k.

The interval is ``k (1 ± (remainder + alternation_residual + discretisation +
protocol_spread))``: the terms are added, not combined in quadrature, because they are not
independent random errors. It does not cover the image itself: segmentation (which voxels
are grain), resolution below the voxel (the sub-voxel throats no grid resolves), nor whether
the sample is a representative volume (see the REV curve, :mod:`solver.rock.rev`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

__all__ = ["ASSUMED_ORDER", "KInterval", "RATIO_CAP", "RESIDUAL_FLOOR", "StepPair",
           "alternation_residual", "convergence_remainder", "discretisation_error", "interval",
           "window_factor"]

#: Assumed order of convergence of k with the voxel size (Richardson estimate).
ASSUMED_ORDER = 2.0
#: Ratios of successive changes of k (between checks) the remainder's tail is fitted to.
DECAY_CHECKS = 3
#: The remainder's ratio: the largest of the last ratios plus this times their spread.
RATIO_RISE = 6.0
#: Largest ratio of successive changes the remainder assumes, per :data:`RATIO_CAP_STEPS`.
RATIO_CAP = 0.97
#: Steps between the checks :data:`RATIO_CAP` is stated for (the default check interval).
RATIO_CAP_STEPS = 200
#: Smallest relative residual of the period-2 part in a pair's mean (float32's 2^-23).
RESIDUAL_FLOOR = 2.0**-23


@dataclass(frozen=True)
class KInterval:
    """k (voxel²) with relative half-widths of each term and the stated interval (voxel²)."""

    k: float
    remainder: float
    discretisation: float | None
    protocol_spread: float | None
    alternation: float | None = None  # the last pair's half difference (information only)
    alternation_residual: float | None = None  # what of it is left in the mean (in the interval)
    assumed_order: float = ASSUMED_ORDER

    @property
    def relative(self) -> float:
        """Relative half-width of the interval (sum of the terms present; the alternation
        through its residual only)."""
        return (self.remainder + (self.alternation_residual or 0.0)
                + (self.discretisation or 0.0) + (self.protocol_spread or 0.0))

    @property
    def low(self) -> float:
        """Lower end of the interval, voxel²."""
        return self.k * (1.0 - self.relative)

    @property
    def high(self) -> float:
        """Upper end of the interval, voxel²."""
        return self.k * (1.0 + self.relative)

    def as_dict(self) -> dict:
        """JSON-ready, the interval ends and its relative half-width included."""
        return {**asdict(self), "relative": self.relative, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class StepPair:
    """k (voxel²) read at a check, step ``step``, and one step later: the k of the check is
    their mean and half their difference its period-2 alternation (see module)."""

    step: int
    k_first: float  # at step ``step``
    k_next: float  # at step ``step + 1``

    @property
    def k(self) -> float:
        """The k a run reports: the mean of the two steps' k, voxel²."""
        return 0.5 * (self.k_first + self.k_next)

    @property
    def alternation(self) -> float:
        """Relative half-difference ``|k(n + 1) - k(n)| / 2 / |k|`` (inf when k is 0)."""
        if not self.k:
            return math.inf
        return abs(self.k_next - self.k_first) / 2.0 / abs(self.k)


def alternation_residual(last: StepPair, previous: StepPair | None = None) -> float:
    """Relative error of ``last.k`` (the mean of its pair) from the period-2 part, estimated
    from its decay since the ``previous`` check's pair (see module); without a previous pair
    or a measurable geometric decay, ``last.alternation`` (inf when k is 0)."""
    if not last.k:
        return math.inf
    if previous is None or previous.step >= last.step or not previous.k:
        return last.alternation
    steps = last.step - previous.step
    slope = (last.k - previous.k) / steps  # the smooth change per step, from the means

    def amplitude(pair: StepPair) -> float:  # (-1)^n h_n, the smooth change removed
        return (-1) ** (pair.step % 2) * (pair.k_first - pair.k_next + slope) / 2.0

    now, before = amplitude(last), amplitude(previous)
    if not now or not before or now / before <= 0.0 or not math.isfinite(now / before):
        return last.alternation
    r = (now / before) ** (1.0 / steps)
    return max(abs(now) * abs(1.0 - r) / (1.0 + r) / abs(last.k), RESIDUAL_FLOOR)


def convergence_remainder(history: list[tuple[int, float]]) -> float:
    """Relative change still to come after the last (step, k) of ``history``: the
    geometric-tail bound of the slowest decay the last checks allow (see module)."""
    if len(history) < 2 or not history[-1][1]:
        return math.inf
    k_last = history[-1][1]
    changes = [b[1] - a[1] for a, b in zip(history[:-1], history[1:], strict=True)]
    cap = _ratio_cap(history[-1][0] - history[-2][0])
    tail = changes[-(DECAY_CHECKS + 1):]
    ratios = [b / a for a, b in zip(tail[:-1], tail[1:], strict=True) if a]
    if len(ratios) == DECAY_CHECKS and all(0.0 < r < 1.0 for r in ratios):
        # The ratio still rises while a slower mode takes over: take the largest seen plus
        # RATIO_RISE times the spread of the last ones, never above the cap.
        r = min(max(ratios) + RATIO_RISE * (max(ratios) - min(ratios)), cap)
        return abs(changes[-1]) * r / (1.0 - r) / abs(k_last)
    # No clean geometric decay: what the last changes (their absolute sum, as signs may
    # differ) leave at most for a geometric tail of a ratio up to the cap; and at least the
    # tail of the last change at the cap, as changes that grew (a slow mode of the other
    # sign taking over) come from no decaying tail and the sum then understates it.
    variation = window_factor(cap, len(tail)) * sum(abs(c) for c in tail)
    return max(variation, abs(changes[-1]) * cap / (1.0 - cap)) / abs(k_last)


def _ratio_cap(steps: int) -> float:
    """The cap on the ratio of successive changes ``steps`` apart (:data:`RATIO_CAP` per
    :data:`RATIO_CAP_STEPS` steps)."""
    return RATIO_CAP ** (max(steps, 1) / RATIO_CAP_STEPS)


def window_factor(r: float, n: int) -> float:
    """Remainder of a geometric tail of ratio ``r`` per check over the sum of its last ``n``
    changes: ``r / (1 - r) / (1 + 1/r + ... + 1/r^(n-1))`` (grows with r)."""
    return r / (1.0 - r) / sum(r ** -j for j in range(max(n, 1)))


def discretisation_error(k_fine: float, k_coarse: float | None,
                         order: float = ASSUMED_ORDER) -> float | None:
    """Relative Richardson error estimate of ``k_fine`` from the k of the grid coarsened by 2
    (both in fine voxel²); None without a coarse k."""
    if k_coarse is None or not k_fine or not math.isfinite(k_coarse):
        return None
    return abs(k_fine - k_coarse) / (2.0**order - 1.0) / abs(k_fine)


def interval(k: float, history: list[tuple[int, float]], k_coarse: float | None,
             k_other_protocol: float | None, pair: StepPair | None = None,
             previous: StepPair | None = None) -> KInterval:
    """The :class:`KInterval` of one run: its history (the pair means), its coarse start's k
    (fine voxel²), the other protocol's k along the same axis (None when not run) and the
    pairs of its last two checks (``pair`` None: no alternation read)."""
    spread = None
    if k_other_protocol is not None and k:
        spread = abs(k - k_other_protocol) / 2.0 / abs(k)
    alternation = residual = None
    if pair is not None:
        alternation, residual = pair.alternation, alternation_residual(pair, previous)
    return KInterval(k, convergence_remainder(history), discretisation_error(k, k_coarse),
                     spread, alternation, residual)
