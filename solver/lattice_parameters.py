"""SI in, lattice parameters out: the relaxation time and time step of a flow through openings.

A user of a vessel gives physical quantities only: the voxel size, the fluid's kinematic
viscosity and density, and what drives the flow (an inlet's mean speed or flow rate, or
pressures at the openings). :func:`choose_lattice` turns them into ``tau`` and the time step
``dt = (tau - 1/2) dx^2 / (3 nu)`` so that the EXPECTED PEAK lattice speed stays at a target
Mach number (:data:`MACH_TARGET`); the app, case files and the Python API all call it.

The expected peak speed (m/s, :func:`peak_speed`) is the larger of

- the main inlet's profile peak (Poiseuille: 2 x the mean; :data:`solver.values.PROFILE_PEAK`)
  times ``A_inlet / A_min``, the ratio of the inlet's cross-section to the narrowest one on the
  way to the outlets (:func:`narrowing`): the same flow through a narrower section is faster;
- for a pressure difference ``dp`` between openings, Bernoulli's ``sqrt(2 dp / rho)``, the
  speed an inviscid jet would reach; viscous losses only lower it.

Because the lattice speed is ``u dt / dx = u (tau - 1/2) dx / (3 nu)``, the largest ``tau`` that
keeps the peak at ``Ma = MACH_TARGET`` is ``1/2 + 3 nu Ma c_s / (u_peak dx)``; larger tau means
fewer, longer steps (cheaper), so that one is taken, capped at :data:`TAU_MAX` (beyond it
bounce-back walls and the TRT/MRT accuracy gain nothing). Where that tau lies below
:data:`solver.collisions.AUTO_TAU` (the default collision would be RR, whose walls at an angle
to the grid are far off) but AUTO_TAU keeps the peak at or below :data:`AUTO_MACH` (and a
pulsatile inflow's sound crossing within :data:`SOUND_CROSSING`), AUTO_TAU is taken instead
(TRT): a little more compressibility error for a much better wall. Below
:data:`TAU_MIN` no collision is trusted to stay stable; the run is then given TAU_MIN with a
warning while its peak stays under the hard limit :data:`solver.values.MAX_MACH`, and refused
above it, the message saying which voxel size (and how many voxels along the geometry) would
meet the target. A ``tau`` given by the user is honoured, with a warning when it breaks the
target.

The cost is stated before the run (:meth:`LatticeChoice.text`): tau, dt, the steps of one
flow-through (the geometry's longest side at the inlet's mean speed) and the wall time they
take at the backend's measured throughput (:data:`THROUGHPUT_MFLUPS`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .opening_kinds import DENSITY, SPEED, opening_kind
from .units import SOUND_SPEED, UnitSystem
from .values import MAX_MACH, PROFILE_PEAK, ConfigError

__all__ = ["MACH_TARGET", "AUTO_MACH", "TAU_MIN", "TAU_MAX", "THROUGHPUT_MFLUPS", "Narrowing",
           "narrowing", "FlowDemand", "peak_speed", "LatticeChoice", "choose_lattice",
           "demand_of_specs"]

#: Target Mach number |u|/c_s of the expected peak speed. 0.1 keeps the compressibility error
#: (~Ma^2) near 1 % and leaves a factor 3 to the refusal at MAX_MACH for jets faster than the
#: estimate.
MACH_TARGET = 0.1
#: Smallest relaxation time chosen: nu_lattice = 1/600. Runs through openings collide with RR
#: there ('auto', :data:`solver.collisions.AUTO_TAU`), which stays stable towards 1/2 (a shear
#: layer at tau 0.505 and U 0.2; a 75 % stenosis at throat Re 250, d = 7 and 12 voxels, and a
#: sudden expansion, at tau 0.505 on NumPy). 0.51 (nu 1/300) put every vessel benchmark of
#: issue 28 at Mach 0.15-0.26 where 0.505 halves it at the same grid: the compressibility
#: error (~Ma^2) then no longer changes with the resolution as much as the grid error does.
TAU_MIN = 0.505
#: Largest Mach number of the expected peak at which 'auto' is given tau AUTO_TAU (TRT) instead
#: of a smaller tau under the target (RR): the one place where the collision's accuracy and the
#: Mach target are traded. RR's halfway bounce-back walls at an angle to the grid are far off
#: (benchmarks/oblique_walls, NumPy float64, a tube at 45 degrees, pressure gradient against
#: Hagen-Poiseuille, the same Re: RR at tau 0.525, Mach 0.1, +40 % at 4 voxels radius and +21 %
#: at 8; TRT at 0.55, Mach 0.2, +4.1 % and +1.6 %). Along a grid axis (4 voxels, Re 28) TRT
#: gave -7.3 % at Mach 0.1 (tau 0.525) and at 0.2 (0.55), RR -2.5 %: the Mach number did not
#: move it. 0.2 leaves a factor 1.5 to MAX_MACH for jets faster than the estimate; stenoses
#: run at it with TRT converged (throat Re 20, d = 6 and Re 30, d = 10, NumPy).
AUTO_MACH = 0.2
#: Largest relaxation time chosen (the former default 0.8 and 1.0 are the well-tested range).
TAU_MAX = 1.0
#: Fluid-node updates per second assumed before a run has measured its own, millions, per
#: backend and precision: NumPy as the dashboard's rock panel assumes on a laptop core; CuPy the
#: vessel benchmark on an H100 (README "Performance": 16747 MFLUPS float32 with openings),
#: float64 half of it (the kernels are bandwidth-bound).
THROUGHPUT_MFLUPS = {("numpy", "float32"): 2.0, ("numpy", "float64"): 2.0,
                     ("cupy", "float32"): 16700.0, ("cupy", "float64"): 8400.0}
#: Grids with more voxels than this are subsampled for the narrowing estimate (it is coarse).
_NARROWING_VOXELS = 8_000_000


@dataclass(frozen=True)
class Narrowing:
    """Radii (nodes) of the inlet and of the narrowest section on the widest route from it to
    an outlet, and ``area_ratio`` = A_inlet / A_min (>= 1 in practice)."""

    inlet_radius: float
    throat_radius: float
    ndim: int

    @property
    def area_ratio(self) -> float:
        """A_inlet / A_min: (r_in / r_min)^2 in 3D, r_in / r_min in 2D."""
        ratio = self.inlet_radius / max(self.throat_radius, 0.5)
        return ratio ** (self.ndim - 1)


def _node_centre(opening: Any, voxel_size: float | None, origin: Sequence[float]) -> np.ndarray:
    h = voxel_size or 1.0
    o = np.asarray(origin if len(origin) else (0.0,) * len(opening.centre), dtype=float)
    return (np.asarray(opening.centre, dtype=float) - o) / h - 0.5


def _seed(edt: np.ndarray, centre: np.ndarray, reach: float) -> tuple[int, ...]:
    """The node of largest distance to the wall within ``reach`` nodes of ``centre``: the
    lumen's middle next to an opening (its own plane is closed, so the wall distance there is
    small)."""
    lo = np.maximum(np.floor(centre - reach).astype(int), 0)
    hi = np.minimum(np.ceil(centre + reach).astype(int) + 1, edt.shape)
    box = tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))
    grids = np.meshgrid(*(np.arange(a, b) for a, b in zip(lo, hi, strict=True)), indexing="ij")
    dist2 = sum((g - c) ** 2 for g, c in zip(grids, centre, strict=True))
    local = np.where(dist2 <= reach * reach, edt[box], 0.0)
    index = np.unravel_index(int(np.argmax(local)), local.shape)
    return tuple(int(i + a) for i, a in zip(index, lo, strict=True))


def narrowing(solid: np.ndarray, openings: Sequence[Any], inlet: int, outlets: Sequence[int],
              voxel_size: float | None = None, origin: Sequence[float] = ()) -> Narrowing:
    """The narrowest cross-section on the way from opening ``inlet`` to ``outlets``, from the
    voxels (True = solid).

    Estimate: the Euclidean distance of each fluid node to the nearest solid node is the local
    lumen radius (within a voxel; on voxelised tubes the area ratio comes out 5-15 % high, the
    safe side). The widest route from the inlet to any outlet is the path whose
    smallest radius is largest; that smallest radius (found by bisection: the largest ``r``
    for which the nodes with radius >= ``r`` still connect the inlet's middle to an outlet's)
    is the throat. Where the flow can reach an outlet through a wider branch, a narrower
    branch carries less of it, so the widest route's throat is the one that carries all of it.
    Costs a distance transform and about ten labellings; grids above 8 M voxels are
    subsampled first.
    """
    from scipy import ndimage

    solid = np.asarray(solid, dtype=bool)
    step = max(1, math.ceil((solid.size / _NARROWING_VOXELS) ** (1.0 / solid.ndim)))
    coarse = solid[(slice(None, None, step),) * solid.ndim]
    edt = ndimage.distance_transform_edt(~coarse)
    by_id = {o.id: o for o in openings}
    h = voxel_size or 1.0

    def seed(oid: int) -> tuple[int, ...]:
        o = by_id[oid]
        centre = _node_centre(o, voxel_size, origin) / step
        return _seed(edt, centre, max(o.diameter / h / step, 2.0))

    start = seed(inlet)
    ends = [seed(oid) for oid in outlets if oid in by_id and oid != inlet]
    r_in = float(edt[start])
    if not ends:
        return Narrowing(step * r_in, step * r_in, solid.ndim)
    lo, hi = 0.0, min(r_in, max(float(edt[e]) for e in ends))

    def connected(r: float) -> bool:
        labels, _ = ndimage.label(edt >= r)
        return labels[start] > 0 and any(labels[e] == labels[start] for e in ends)

    if connected(hi):
        lo = hi
    while hi - lo > 0.05:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if connected(mid) else (lo, mid)
    return Narrowing(step * r_in, step * max(lo, 0.5), solid.ndim)


@dataclass(frozen=True)
class FlowDemand:
    """What a run through openings asks of the lattice, in SI.

    ``voxel_size`` (m), ``viscosity`` (m^2/s), ``density`` (kg/m^3); ``inlet_speed`` the main
    inlet's mean speed (m/s, 0 without one) and its ``profile``; ``pressure_difference`` the
    largest minus the smallest pressure over the pressure openings (Pa); ``area_ratio``
    A_inlet / A_min (:func:`narrowing`); ``length`` the geometry's longest side (m) and
    ``n_fluid`` its fluid nodes, for the cost; ``period`` the shortest inflow waveform's
    period (s, 0 = steady inflow).
    """

    voxel_size: float
    viscosity: float
    density: float = 1000.0
    inlet_speed: float = 0.0
    profile: str = "uniform"
    pressure_difference: float = 0.0
    area_ratio: float = 1.0
    length: float = 0.0
    n_fluid: int = 0
    period: float = 0.0

    def __post_init__(self) -> None:
        for name in ("voxel_size", "viscosity", "density"):
            value = getattr(self, name)
            if not (value > 0 and math.isfinite(value)):
                raise ConfigError(f"{name} must be a positive number (SI), got {value!r}.")
        if self.profile not in PROFILE_PEAK:
            raise ConfigError(f"profile {self.profile!r} is not one of {tuple(PROFILE_PEAK)}.")


def peak_speed(demand: FlowDemand) -> float:
    """Expected peak speed of the flow, m/s (module text); 0 when nothing drives it."""
    inlet = abs(demand.inlet_speed) * PROFILE_PEAK[demand.profile] * max(demand.area_ratio, 1.0)
    jet = math.sqrt(2.0 * abs(demand.pressure_difference) / demand.density)
    return max(inlet, jet)


@dataclass(frozen=True)
class LatticeChoice:
    """The lattice parameters of a run and what they cost.

    ``tau``, ``dt`` (s), ``units``; ``peak`` the expected peak speed (m/s) and ``mach`` its
    lattice Mach number; ``steps_per_flow_through`` and ``wall_seconds`` of one flow-through
    at ``mflups`` on ``backend``; ``given``: tau was the user's; ``warnings``: what breaks the
    target and what would meet it.
    """

    tau: float
    dt: float
    units: UnitSystem
    peak: float
    mach: float
    mach_target: float
    area_ratio: float
    steps_per_flow_through: int | None
    wall_seconds: float | None
    mflups: float
    backend: str
    given: bool
    warnings: tuple[str, ...] = field(default_factory=tuple)
    #: The grid at which TAU_MIN keeps the expected peak at the target ("a voxel size of ...
    #: m or less (N voxels along ...)"), for advice after a divergence; "" when nothing drives.
    finer: str = ""

    def text(self) -> str:
        """One paragraph: the choice, its cost and any warning (SI)."""
        how = "given" if self.given else "chosen"
        parts = [f"tau {self.tau:.4g} ({how}), time step {self.dt:.3g} s: expected peak "
                 f"{self.peak:.3g} m/s (x{self.area_ratio:.2g} at the narrowest section) = "
                 f"Mach {self.mach:.3g} (target {self.mach_target:g})."]
        if self.steps_per_flow_through is not None:
            cost = (f" One flow-through: {self.steps_per_flow_through:,} steps, about "
                    f"{_duration(self.wall_seconds)} on {self.backend} at "
                    f"{self.mflups:g} MFLUPS.") if self.wall_seconds is not None else (
                f" One flow-through: {self.steps_per_flow_through:,} steps.")
            parts.append(cost)
        parts += [f" {w}" for w in self.warnings]
        return "".join(parts)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def _resolution(demand: FlowDemand, peak: float, target: float) -> str:
    """The voxel size (and voxels along the geometry) at which TAU_MIN meets ``target``."""
    dx = 3.0 * demand.viscosity * target * SOUND_SPEED / (peak * (TAU_MIN - 0.5))
    along = (f" ({math.ceil(demand.length / dx):,} voxels along the geometry's "
             f"{demand.length * 1e3:.3g} mm, now {round(demand.length / demand.voxel_size):,})"
             if demand.length > 0 else "")
    return f"a voxel size of {dx:.3g} m or less{along}"


def _round_down(length: float) -> float:
    """``length`` to three significant digits, rounded down (advice says "or less")."""
    step = 10.0 ** (math.floor(math.log10(length)) - 2)
    return math.floor(length / step * (1 + 1e-12)) * step


#: Largest share of the inflow's period that pressure waves may take to cross the geometry
#: without a warning. The lattice's sound speed is the flow's peak over its Mach number, far
#: below blood's: a Womersley tube (alpha 4, NumPy, the SI case-file path) was off its analytic
#: profile by 35 % of the peak where the crossing took 15 % of the period, by 7 % (at the wall
#: nodes; 1.8 % inside) where it took 3 %.
SOUND_CROSSING = 0.05


def _sound_warning(demand: FlowDemand, tau: float, dt: float) -> list[str]:
    """Where sound crosses the geometry in more than SOUND_CROSSING of a pulsatile inflow's
    period, say so and what gives a faster lattice sound (a smaller tau, else finer voxels)."""
    if demand.period <= 0 or demand.length <= 0:
        return []
    sound = demand.voxel_size / dt * SOUND_SPEED  # m/s
    share = demand.length / sound / demand.period
    if share <= SOUND_CROSSING:
        return []
    # The sound speed over the flow's scales as 1 / ((tau - 1/2) dx) at a given viscosity.
    ratio = SOUND_CROSSING / share
    smaller = math.floor((0.5 + (tau - 0.5) * ratio) * 1e4) / 1e4  # rounded down: "or less"
    advice = f"tau {smaller:.4f} (given as config.tau)"
    if smaller < TAU_MIN:
        dx = _round_down(demand.voxel_size * ratio * (tau - 0.5) / (TAU_MIN - 0.5))
        advice = (f"a voxel size of {dx:.3g} m or less "
                  f"({math.ceil(demand.length / dx):,} voxels along the geometry) at tau {TAU_MIN}")
    limit = f"{100 * SOUND_CROSSING:g} %"
    return [f"Pressure waves cross the geometry's {demand.length * 1e3:.3g} mm in "
            f"{100 * share:.2g} % of the inflow's period ({demand.period:.3g} s): the lattice's "
            f"sound speed is {sound:.3g} m/s. Above {limit} the pulsatile profiles lag and "
            f"overshoot (a Womersley tube: 35 % of the peak at 15 %); {advice} brings it to "
            f"{limit}."]


def _rr_warning(demand: FlowDemand, tau: float, collision: str, peak: float,
                u_target: float) -> list[str]:
    """Where 'auto' collides with RR (tau < AUTO_TAU: AUTO_TAU would exceed AUTO_MACH, or the
    tau was given), say that its walls at an angle to the grid are less accurate and which
    voxel size gives AUTO_TAU (TRT) at the same Mach number.

    Measured (NumPy float64, a tube at 45 degrees to the grid, 4 voxels radius, Re 10, the
    pressure gradient away from its ends against Hagen-Poiseuille): RR +51 % at tau 0.515, +34 %
    at 0.53 (+15 % at 8 voxels radius), +16 % at 0.6; TRT +4 % at 0.53; RR within 0.1 % along
    a grid axis at 0.53. RR resets the odd ghost moments every step, so its bounce-back wall
    does not sit where TRT's magic parameter puts it."""
    from .collisions import AUTO, AUTO_TAU

    if collision != AUTO or tau >= AUTO_TAU:
        return []
    mach_at_auto = peak * (AUTO_TAU - 0.5) * demand.voxel_size / (3.0 * demand.viscosity
                                                                   * SOUND_SPEED)
    why = (f"Tau {AUTO_TAU} (TRT) would put the expected peak at Mach {mach_at_auto:.2g}, "
           f"above {AUTO_MACH:g}. " if mach_at_auto > AUTO_MACH else "")
    # The voxel size whose chosen tau (peak at the target Mach) is AUTO_TAU.
    dx = _round_down(3.0 * demand.viscosity * u_target / (peak * (AUTO_TAU - 0.5)))
    along = (f" ({math.ceil(demand.length / dx):,} voxels along the geometry's "
             f"{demand.length * 1e3:.3g} mm)" if demand.length > 0 else "")
    return [f"At tau {tau:.4g} the run collides with RR (stable near tau 1/2), whose walls at "
            "an angle to the grid are less accurate than TRT's: a tube at 45 degrees gave a "
            "pressure drop 34 % high at 4 voxels radius and 15 % at 8 (tau 0.53; TRT: 4 % at 4). "
            f"{why}A voxel size of "
            f"{dx:.3g} m or less{along} gives tau {AUTO_TAU} and TRT at the same Mach number."]


def _trt_instead(demand: FlowDemand, best: float, collision: str, mach_target: float) -> bool:
    """Whether 'auto' is given AUTO_TAU (TRT) instead of ``best`` < AUTO_TAU (RR): where the
    expected peak's Mach number at AUTO_TAU stays at most AUTO_MACH (:data:`AUTO_MACH`) and,
    for a pulsatile inflow, sound still crosses the geometry within SOUND_CROSSING of its
    period there (a larger tau is a slower lattice sound: the raise must not cause that
    warning)."""
    from .collisions import AUTO, AUTO_TAU

    if collision != AUTO or best >= AUTO_TAU:
        return False
    if mach_target * (AUTO_TAU - 0.5) / (best - 0.5) > AUTO_MACH * (1 + 1e-9):
        return False
    dt = (AUTO_TAU - 0.5) * demand.voxel_size**2 / (3.0 * demand.viscosity)
    return not _sound_warning(demand, AUTO_TAU, dt)


def choose_lattice(demand: FlowDemand, *, tau: float | None = None,
                   mach_target: float = MACH_TARGET, backend: str = "numpy",
                   precision: str = "float32", collision: str = "auto") -> LatticeChoice:
    """tau and the time step of ``demand`` (SI) under ``mach_target`` (module text); a given
    ``tau`` is kept and warned about; ``collision`` (the config's) says whether 'auto' will
    collide with RR there (:func:`_rr_warning`). ConfigError where even TAU_MIN exceeds
    MAX_MACH."""
    peak = peak_speed(demand)
    dx, nu = demand.voxel_size, demand.viscosity
    warnings: list[str] = []
    u_target = mach_target * SOUND_SPEED
    if tau is not None:
        chosen = float(tau)
    elif peak <= 0:
        chosen = TAU_MAX
    else:
        best = 0.5 + 3.0 * nu * u_target / (peak * dx)
        chosen = min(best, TAU_MAX)
        if _trt_instead(demand, best, collision, mach_target):
            from .collisions import AUTO_TAU

            chosen = AUTO_TAU
        elif best < TAU_MIN:
            chosen = TAU_MIN
            mach = peak * (TAU_MIN - 0.5) * dx / (3.0 * nu) / SOUND_SPEED
            needed = _resolution(demand, peak, mach_target)
            if mach > MAX_MACH:
                raise ConfigError(
                    f"This flow is too fast for this grid: its expected peak {peak:.3g} m/s "
                    f"reaches Mach {mach:.2f} even at the smallest stable tau {TAU_MIN} (the "
                    f"limit is {MAX_MACH}). Use {needed} for the target Mach {mach_target:g}, "
                    "or lower the inflow or pressure difference.")
            warnings.append(f"No tau >= {TAU_MIN} keeps Mach {mach_target:g} on this grid; "
                            f"tau {TAU_MIN} gives Mach {mach:.3g}. For the target use {needed}.")
    units = UnitSystem.from_viscosity(dx, nu, demand.density, chosen)
    mach = units.velocity_to_lattice(peak) / SOUND_SPEED
    if tau is not None and mach > mach_target:
        best = 0.5 + 3.0 * nu * u_target / (peak * dx)
        hint = (f"tau {best:.4g} would meet it" if best >= TAU_MIN
                else f"it needs {_resolution(demand, peak, mach_target)}")
        warnings.append(f"The given tau {chosen:g} puts the expected peak at Mach {mach:.3g}, "
                        f"above the target {mach_target:g}: {hint}.")
    if peak > 0:
        warnings += _rr_warning(demand, chosen, collision, peak, u_target)
        warnings += _sound_warning(demand, chosen, units.dt)
    mean = abs(demand.inlet_speed) or peak
    steps = (math.ceil(demand.length / (mean * units.dt)) if demand.length > 0 and mean > 0
             else None)
    mflups = THROUGHPUT_MFLUPS.get((backend, precision), THROUGHPUT_MFLUPS[("numpy",
                                                                             "float32")])
    wall = (steps * demand.n_fluid / (mflups * 1e6)
            if steps is not None and demand.n_fluid > 0 else None)
    return LatticeChoice(tau=chosen, dt=units.dt, units=units, peak=peak, mach=mach,
                         mach_target=mach_target, area_ratio=max(demand.area_ratio, 1.0),
                         steps_per_flow_through=steps, wall_seconds=wall, mflups=mflups,
                         backend=backend, given=tau is not None, warnings=tuple(warnings),
                         finer=_resolution(demand, peak, mach_target) if peak > 0 else "")


def demand_of_specs(specs: Sequence[dict], geometry: Any, viscosity: float,
                    density: float, voxel_size: float | None = None,
                    cache: dict | None = None) -> FlowDemand:
    """The :class:`FlowDemand` of SI opening entries on a loaded geometry.

    ``specs``: ``{"id": opening id, "kind": ..., "mean_speed" (m/s) | "flow_rate" (m^3/s) |
    "pressure" (Pa), "profile": ...}`` (a case file's entries resolved to ids, or the app's
    table). The main inlet is the velocity opening with the largest flow into the fluid.
    ``voxel_size`` (m) stands in for a geometry without one (the dashboard's setting);
    ``cache`` keeps the area ratios measured on this geometry (the dashboard asks on each edit).
    """
    h = float(voxel_size or geometry.voxel_size or 0.0)
    if not h:
        raise ConfigError("Choosing tau from SI values needs the voxel size of the geometry "
                          "(metres); give one, or set tau.")
    by_id = {o.id: o for o in geometry.openings}
    solid = np.asarray(geometry.solid)
    inlets, pressures, driven, periods = [], [], [], []
    for spec in specs:
        opening = by_id[spec["id"]]
        kind = opening_kind(spec["kind"])
        if kind.quantity == SPEED:
            # m^2; a geometry without a voxel size has its openings in voxels
            area = opening.area * (1.0 if geometry.voxel_size else h ** (solid.ndim - 1))
            if "waveform" in spec:  # pulsatile: the cycle's peak mean speed sets the Mach
                from .waveform import si_peak_speed, si_period

                speed = si_peak_speed(spec["waveform"], area)
                periods.append(si_period(spec["waveform"], area))
            else:
                speed = (spec["mean_speed"] if "mean_speed" in spec
                         else spec["flow_rate"] / area)
            inlets.append((float(speed) * opening.area, float(speed), spec))
        elif kind.quantity == DENSITY:
            pressures.append(float(spec.get("pressure", 0.0)))
        if kind.flux:
            driven.append(opening.id)
    speed, profile, ratio = 0.0, "uniform", 1.0
    if inlets:
        _, speed, spec = max(inlets, key=lambda item: item[0])
        profile = spec.get("profile", "uniform")
        outlets = [oid for oid in driven if oid != spec["id"]]
        key = (spec["id"], tuple(sorted(outlets)))
        if outlets and cache is not None and key in cache:
            ratio = cache[key]
        elif outlets:
            ratio = narrowing(solid, geometry.openings, spec["id"], outlets,
                              geometry.voxel_size, tuple(geometry.origin or ())).area_ratio
            if cache is not None:
                cache[key] = ratio
    return FlowDemand(voxel_size=h, viscosity=viscosity, density=density, inlet_speed=speed,
                      profile=profile,
                      pressure_difference=(max(pressures) - min(pressures)) if pressures else 0.0,
                      area_ratio=max(ratio, 1.0), length=max(solid.shape) * h,
                      n_fluid=int(np.count_nonzero(~solid)), period=min(periods, default=0.0))

