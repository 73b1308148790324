"""Checks that a run can work before it starts, and that it still works while it runs.

Before allocating, a case is refused when it cannot be stable or does not fit in memory, and
warned about when it is borderline. The velocity a body force will drive is estimated from the
plane Poiseuille solution ``u_max = F H^2 / (8 nu)`` with ``H`` the pore size: the mean fluid
chord length across the flow (the smallest over the axes perpendicular to the force). For plates
that is exact; for ducts, pipes and porous media it overestimates the peak a little, which is
the safe side. A run also cannot exceed ``F t`` after ``t`` steps from rest, so the estimate is
capped by that. While running, :mod:`solver.monitor` looks for NaN/Inf and an excessive
maximum speed. All quantities are in lattice units (node spacing 1, time step 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .collisions import AUTO, chosen_collision
from .config import MAX_MACH, ConfigError, SimulationConfig
from .memory import MemoryRefused, check_memory
from .streaming import pull_table_bytes  # re-exported: the NumPy backend's table

__all__ = [
    "CS", "MAX_MACH", "WARN_MACH", "WARN_TAU", "DivergenceError", "MemoryRefused",
    "StabilityReport", "chord_counts", "chord_mean", "mean_chord_length", "pore_size",
    "estimate_max_velocity", "assess",
    "check_stability", "pull_table_bytes", "check_memory",
]

#: Lattice speed of sound, 1/sqrt(3).
CS = 1.0 / math.sqrt(3.0)
#: Above this lattice Mach number a warning is issued (compressibility error grows as Ma^2).
WARN_MACH = 0.1
#: Below this relaxation time a warning is issued (BGK/TRT become fragile close to 1/2).
WARN_TAU = 0.55


class DivergenceError(RuntimeError):
    """The populations hold NaN/Inf or a speed above the limit; the message names likely causes."""


@dataclass
class StabilityReport:
    """Estimated peak speed and Mach number of a case, with refusals and warnings (text)."""

    pore_size: float
    u_estimate: float
    mach: float
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


#: Voxels per block of :func:`mean_chord_length` (its temporaries are a few bytes a voxel of
#: a block, not of the whole image: rank 0's set-up of a large image).
CHORD_BLOCK_VOXELS = 1 << 20


def chord_counts(solid: np.ndarray, axis: int, periodic: bool) -> tuple[int, int]:
    """Fluid runs along ``axis`` and the fluid nodes of the lines holding one (integers, so
    that the counts of slabs cut across ``axis`` add up to the whole image's)."""
    lines = np.moveaxis(np.asarray(solid, dtype=bool), axis, -1)
    per_row = max(1, int(np.prod(lines.shape[1:])))
    step = max(1, CHORD_BLOCK_VOXELS // per_row)
    n_runs = in_runs = 0  # integer counts summed block by block: the whole image's exactly
    for first in range(0, lines.shape[0], step):
        fluid = ~lines[first:first + step]
        previous = np.roll(fluid, 1, axis=-1)
        if not periodic:
            previous[..., 0] = False
        starts = fluid & ~previous
        n_runs += int(starts.sum())
        in_runs += int(fluid[starts.any(axis=-1)].sum())
    return n_runs, in_runs


def mean_chord_length(solid: np.ndarray, axis: int, periodic: bool) -> float:
    """Mean length in nodes of the fluid runs along ``axis``; inf if no run ends at a solid.

    A run along a periodic axis that never meets a solid has no end and is left out of the mean.
    """
    return chord_mean(*chord_counts(solid, axis, periodic))


def chord_mean(n_runs: int, in_runs: int) -> float:
    """Mean chord length (nodes) from :func:`chord_counts`; inf without any run."""
    if n_runs == 0:
        return math.inf
    return float(in_runs) / n_runs


def pore_size(solid: np.ndarray, flow_axis: int, periodic: tuple[bool, ...]) -> float:
    """Characteristic pore size H (nodes): smallest mean chord length across the flow axis."""
    others = [ax for ax in range(solid.ndim) if ax != flow_axis]
    return min(mean_chord_length(solid, ax, periodic[ax]) for ax in others)


def estimate_max_velocity(
    force: float, tau: float, size: float, steps: int | None = None
) -> float:
    """Peak speed estimate min(F H^2 / (8 nu), F t), lattice units; ``size`` = H in nodes."""
    nu = (tau - 0.5) / 3.0
    u = abs(force) * size * size / (8.0 * nu) if math.isfinite(size) else math.inf
    if steps is not None:
        u = min(u, abs(force) * steps)
    return u


def assess(
    config: SimulationConfig, solid: np.ndarray, steps: int | None = None,
    openings: bool = False, pore: float | None = None,
) -> StabilityReport:
    """Estimate the peak speed of ``config`` on ``solid`` (True = solid); list refusals/warnings.

    ``steps`` caps the estimate at ``F * steps`` (the flow starts from rest). Raises
    ConfigError if the config does not fit the geometry's dimension. A run driven through
    ``openings`` has its tau from the Mach target (:mod:`solver.lattice_parameters`): near 1/2
    it is warned only when it collides with another model than the one 'auto' chooses there.
    ``pore``: the pore size H (nodes) found already (ranks that read an image by slabs,
    :mod:`solver.distributed.region_tiling`); ``solid`` may then be the image's shape alone.
    """
    ndim = len(solid) if isinstance(solid, tuple) else np.ndim(solid)
    config.check(ndim)  # lattice dimension and face pairs first: the rest relies on them
    force = np.asarray(config.body_force[:ndim], dtype=float)
    flow_axis = int(np.argmax(np.abs(force)))
    size = pore_size(solid, flow_axis, config.periodic_axes()) if pore is None else pore
    scale = float(np.max(np.abs(force)))  # |F| without overflow: 1e308 gave inf, then nan
    magnitude = scale * float(np.linalg.norm(force / scale)) if scale else 0.0
    u = estimate_max_velocity(magnitude, config.tau, size, steps) if magnitude else 0.0
    report = StabilityReport(pore_size=size, u_estimate=u, mach=u / CS)
    if steps is not None and u == magnitude * steps:
        how = f"free acceleration F t over {steps} steps"
    else:
        how = f"Poiseuille F H^2/(8 nu), pore size H = {size:.3g} nodes"
    where = (f"estimated peak speed {u:.3g} ({how}, |F| = {magnitude:.3g}, "
             f"nu = {config.viscosity:.3g})")
    if report.mach > MAX_MACH:
        report.errors.append(
            f"Lattice Mach number {report.mach:.3g} > {MAX_MACH}: {where}. Reduce the body force "
            f"below {_below(magnitude, report.mach):.3g} or raise tau."
        )
    elif report.mach > WARN_MACH:
        report.warnings.append(
            f"Lattice Mach number {report.mach:.3g} > {WARN_MACH}: {where}; compressibility "
            "errors grow as Ma^2, consider a smaller body force."
        )
    if config.tau < WARN_TAU and openings:
        near = chosen_collision(AUTO, config.tau, True)
        if chosen_collision(config.collision, config.tau, True) is not near:
            report.warnings.append(
                f"tau = {config.tau} is close to 1/2, where {config.collision} is fragile: "
                f"collide with {near.name} (collision 'auto'); a larger tau at this voxel "
                "size would raise the lattice Mach number.")
    elif config.tau < WARN_TAU:
        report.warnings.append(
            f"tau = {config.tau} is close to 1/2: the run may be unstable; 0.6-1.0 is robust."
        )
    return report


def check_stability(
    config: SimulationConfig, solid: np.ndarray, steps: int | None = None,
    openings: bool = False, pore: float | None = None,
) -> list[str]:
    """Raise ConfigError if ``config`` cannot be stable on ``solid``; return warnings
    (``openings``: driven through openings; ``pore``: the pore size known already,
    :func:`assess`)."""
    report = assess(config, solid, steps, openings, pore)
    if report.errors:
        raise ConfigError(" ".join(report.errors))
    return report.warnings


def _below(magnitude: float, mach: float) -> float:
    """The body force (lattice units) that would give Mach MAX_MACH, for a message.

    Speed grows linearly with the force, so the scale is MAX_MACH / mach. Where the speed
    estimate overflowed (|F| = 1e308: the message read "below nan"), the typical upper end of
    forces, 1e-4, is given instead.
    """
    below = magnitude * MAX_MACH / mach if np.isfinite(mach) else 0.0
    return below if below > 0 and np.isfinite(below) else 1e-4
