"""The link rules of the opening kinds: how each kind rewrites the bounced population of every
lattice link crossing its opening (NumPy, lattice units).

A :class:`LinkRule` is part of an opening kind's registration (:mod:`solver.opening_kinds`);
the openings' pass (:mod:`solver.iolets`) and its CUDA twin
(:mod:`solver.backends.cuda.opening_kinds`) call the rule of each link's kind and decide
nothing by a kind's name or code. The physics of each rule (Ladd's velocity term,
anti-bounce-back, the zero-gradient copy) is described in :mod:`solver.iolets`.

A rule has three parts: ``values``, the per-link value fixed when the tables are built (and a
waveform's per-link harmonics); ``ramp``, how the soft start scales that value
(:mod:`solver.soft_start`; None: the value is unused); ``write``, the written population from
the link's inputs of one step (:class:`LinkInputs`). ``reads_velocity``: the rule reads the
source node's velocity (the CUDA pass then computes it once per node).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .waveform import womersley_shape

__all__ = ["LinkRule", "LinkSite", "LinkInputs", "LADD_VELOCITY", "ANTI_BOUNCE_BACK",
           "ZERO_GRADIENT"]


@dataclass(frozen=True)
class LinkSite:
    """One driven opening's crossing links while the tables are built (lattice units).

    ``src`` (m, d): source nodes (voxel indices); ``c`` (m, d): the links' integer vectors;
    ``direction`` (m,): their indices; ``opening``: the geometry's opening (metres, or voxels
    without a voxel size); ``condition``: its :class:`~solver.opening_kinds.OpeningCondition`;
    ``frame``: the solid and its placement (``voxel_size``, ``origin``, ``ndim``);
    ``rho_ref``: the density that turns a speed into a mass flux; ``viscosity``: the lattice
    kinematic viscosity (Womersley numbers of a waveform).
    """

    src: np.ndarray
    c: np.ndarray
    direction: np.ndarray
    opening: Any
    condition: Any
    frame: Any
    lattice: Any
    rho_ref: float
    viscosity: float

    @property
    def spacing(self) -> float:
        """Voxel size the opening's lengths are in (1: voxels)."""
        return 1.0 if self.frame.voxel_size is None else float(self.frame.voxel_size)

    @property
    def area(self) -> float:
        """The opening's area in nodes^(d-1)."""
        return self.opening.area / self.spacing ** (self.frame.ndim - 1)


@dataclass(frozen=True)
class LinkInputs:
    """What a rule reads in one pass, for its links only (m of them, arithmetic dtype).

    ``fj``: the population bounce-back would send back, ``f*_j(x)``; ``value``: the link's
    (ramped) value; ``donor``: the outflow donor's population; ``own`` (q, m): the node's
    post-collision populations; ``direction`` (m,); ``lattice``, ``force`` (lattice units),
    ``incompressible``.
    """

    fj: np.ndarray
    value: np.ndarray
    donor: np.ndarray
    own: np.ndarray
    direction: np.ndarray
    lattice: Any
    force: np.ndarray
    incompressible: bool


#: ``values(site)``: (per-link value (m,) float64, waveform rows (2K, m) or None).
ValuesFn = Callable[[LinkSite], "tuple[np.ndarray, np.ndarray | None]"]
#: ``ramp(value, s, rho0)``: the value applied at soft-start factor ``s`` (arithmetic dtype).
RampFn = Callable[[np.ndarray, Any, Any], np.ndarray]
#: ``write(inputs)``: the written population of each link (m,), arithmetic dtype.
WriteFn = Callable[[LinkInputs], np.ndarray]


@dataclass(frozen=True)
class LinkRule:
    """How an opening kind treats its crossing links (module text)."""

    name: str
    values: ValuesFn
    write: WriteFn
    ramp: RampFn | None = None
    reads_velocity: bool = False


# --------------------------------------------------------------------------- velocity (Ladd)
def _radii(site: LinkSite) -> np.ndarray:
    """``r / R`` of each link's crossing of the plane ``d = 1/2`` (``R`` the equivalent
    radius), unclipped."""
    h, opening = site.spacing, site.opening
    normal = np.asarray(opening.normal)
    centre = (np.asarray(opening.centre) - np.asarray(site.frame.origin)) / h - 0.5
    d = (site.src - centre) @ normal
    cn = site.c @ normal
    t = np.clip((0.5 - d) / cn, 0.0, 1.0)
    rel = site.src + t[:, None] * site.c - centre
    r2 = (rel * rel).sum(axis=1) - (rel @ normal) ** 2
    radius = 0.5 * opening.diameter / h
    return np.sqrt(np.maximum(r2, 0.0)) / radius


def _profile(site: LinkSite, alpha: float = 0.0) -> np.ndarray:
    """Shape of the inlet profile at each link's crossing: 1 (uniform), Poiseuille (>= 0,
    real) or, for ``alpha`` > 0, Womersley's (complex)."""
    if site.condition.profile == "uniform":
        return np.ones(len(site.src))
    rho = _radii(site)
    if alpha > 0.0:
        return np.where(rho < 1.0, womersley_shape(rho, alpha), 0.0)
    return np.maximum(1.0 - rho**2, 0.0)


def _weight(site: LinkSite, shape: np.ndarray) -> np.ndarray:
    """Ladd's ``6 w_j c_j.n`` times the profile's shape, per link."""
    cn = site.c @ np.asarray(site.opening.normal)
    return 6.0 * site.lattice.w[site.direction] * shape * cn


def _wave_rows(site: LinkSite) -> np.ndarray:
    """Cosine and sine coefficients (2K, m) of a waveform inlet's links, each harmonic's
    profile rescaled (complex) so the links' net flux is exactly ``rho_w A Re(c_k e^{i
    theta})``."""
    wave = site.condition.waveform
    k = wave.harmonics
    rows = np.zeros((2 * k, len(site.src)))
    radius = 0.5 * site.opening.diameter / site.spacing
    for h in range(1, k + 1):
        alpha = radius * np.sqrt(2.0 * np.pi * h / wave.period / site.viscosity)
        weight = _weight(site, _profile(site, alpha))
        v = site.rho_ref * wave.coefficients[h] * site.area * weight / weight.sum()
        rows[h - 1], rows[k + h - 1] = v.real, -v.imag
    return rows


def _velocity_values(site: LinkSite) -> tuple[np.ndarray, np.ndarray | None]:
    """Ladd's term per link, rescaled so the links' net mass flux is exactly ``rho_w U A``."""
    weight = _weight(site, _profile(site))
    value = site.rho_ref * site.condition.value * site.area * weight / weight.sum()
    wave = site.condition.waveform
    return value, (_wave_rows(site) if wave is not None and wave.harmonics else None)


def _velocity_write(x: LinkInputs) -> np.ndarray:
    return x.fj + x.value


def _scale(value: np.ndarray, s: Any, rho0: Any) -> np.ndarray:
    return s * value


LADD_VELOCITY = LinkRule("ladd velocity", _velocity_values, _velocity_write, _scale)


# ----------------------------------------------------------------- pressure (anti-bounce-back)
def _density_values(site: LinkSite) -> tuple[np.ndarray, None]:
    return np.full(len(site.src), float(site.condition.value)), None


def _quad(x: LinkInputs) -> np.ndarray:
    """``4.5 (c_j.u)^2 - 1.5 u.u`` with ``u`` the node's velocity from its post-collision
    populations (sequential sums: the order the CUDA pass adds in)."""
    lattice, own = x.lattice, x.own
    real = own.dtype
    m = own.shape[1]
    rho = np.zeros(m, dtype=real)
    mom = np.zeros((lattice.d, m), dtype=real)
    for i in range(lattice.q):
        rho += own[i]
        for a in range(lattice.d):
            if lattice.c[i, a] > 0:
                mom[a] += own[i]
            elif lattice.c[i, a] < 0:
                mom[a] -= own[i]
    u = np.empty_like(mom)
    for a in range(lattice.d):
        u[a] = mom[a] + real.type(0.5 * x.force[a]) if len(x.force) > a else mom[a]
        if not x.incompressible:
            u[a] = u[a] / rho
    cj = lattice.c[x.direction].astype(real)
    cu = np.zeros(m, dtype=real)
    uu = np.zeros(m, dtype=real)
    for a in range(lattice.d):
        cu += cj[:, a] * u[a]
        uu += u[a] * u[a]
    return real.type(4.5) * cu * cu - real.type(1.5) * uu


def _density_write(x: LinkInputs) -> np.ndarray:
    real = x.own.dtype
    w2 = 2.0 * np.asarray(x.lattice.w, dtype=np.float64)[x.direction].astype(real)
    quad = _quad(x)
    if x.incompressible:
        return w2 * (x.value + quad) - x.fj
    return w2 * x.value * (real.type(1.0) + quad) - x.fj


def _from_rest(value: np.ndarray, s: Any, rho0: Any) -> np.ndarray:
    return rho0 + s * (value - rho0)


ANTI_BOUNCE_BACK = LinkRule("anti-bounce-back", _density_values, _density_write, _from_rest,
                            reads_velocity=True)


# --------------------------------------------------------------- outflow (zero normal gradient)
def _no_values(site: LinkSite) -> tuple[np.ndarray, None]:
    return np.zeros(len(site.src)), None


def _donor_write(x: LinkInputs) -> np.ndarray:
    return x.donor


ZERO_GRADIENT = LinkRule("zero gradient", _no_values, _donor_write)
