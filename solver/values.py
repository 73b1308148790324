"""How a configured value is checked: :class:`ConfigError`, the Mach limit and the parsing of
numbers and velocity vectors (lattice units), shared by the configuration and the face kinds."""

from __future__ import annotations

import math
import numbers

from .lattice import CS2

__all__ = ["ConfigError", "MAX_MACH", "PROFILE_PEAK", "mean_speed_limit", "is_number",
           "velocity_vector"]

#: Above this lattice Mach number |u|/c_s compressibility errors dominate; the run is refused.
MAX_MACH = 0.3
#: Peak over mean speed of each inlet profile of an opening: the Mach limit holds for the peak.
PROFILE_PEAK = {"uniform": 1.0, "poiseuille": 2.0}


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which and what to use instead."""


def is_number(value) -> bool:
    """Whether ``value`` is a real number (bool excluded)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def velocity_vector(value, ndim: int, what: str) -> tuple[float, float, float]:
    """A velocity given as (ux, uy[, uz]) padded to 3 components; ConfigError otherwise."""
    try:
        vec = [float(v) for v in value]
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a velocity tuple (ux, uy{', uz' * (ndim == 3)}) in "
                          f"lattice units, got {value!r}.") from None
    if len(vec) not in (ndim, 3) or (len(vec) == 3 and ndim == 2 and vec[2] != 0.0):
        raise ConfigError(f"{what} needs {ndim} components for a {ndim}D lattice, got {value!r}.")
    vec = (vec + [0.0, 0.0])[:3]
    speed = math.sqrt(sum(v * v for v in vec))
    if not math.isfinite(speed) or speed > MAX_MACH * math.sqrt(CS2):
        raise ConfigError(f"{what} = {value!r} has |u| = {speed:.3g}, above Mach {MAX_MACH} "
                          f"(|u| <= {MAX_MACH * math.sqrt(CS2):.3f} in lattice units); lower "
                          "the velocity and raise the resolution or tau instead.")
    return (vec[0], vec[1], vec[2])


def mean_speed_limit(profile: str = "uniform", mach: float = MAX_MACH) -> float:
    """Largest mean inlet speed (lattice units) whose profile peak stays at Mach ``mach``: the one
    limit of an opening's speed, for case files, the dashboard and the Python API alike."""
    if profile not in PROFILE_PEAK:
        raise ConfigError(f"profile {profile!r} is not one of {tuple(PROFILE_PEAK)}.")
    return mach * math.sqrt(CS2) / PROFILE_PEAK[profile]
