"""What users measure: forces on objects, permeability, porosity, tortuosity, convergence, fluxes.

Everything here works on host arrays (the stored post-collision populations or the fields of
:meth:`solver.simulation.Simulation.fields`) and a :class:`~solver.problem.Problem`, so it is
the same for every backend. Results are in lattice units unless a name says otherwise.

Momentum exchange (Ladd 1994; Tolke & Krafczyk 2008, eqs. 10-11): with pull streaming and
halfway bounce-back, the post-collision population ``f*_i(x)`` heading into a solid node
``x + c_i`` comes back as ``f*_i(x) - 6 w_i rho_w c_i . u_w``, so the link hands the solid the
momentum ``c_i (2 f*_i(x) - 6 w_i rho_w c_i . u_w)`` per time step. Summed per label of the
solid node it gives the force on each object. Links that leave the domain (face walls) are not
objects and are not counted. The scheme keeps a tiny period-2 (staggered) oscillation of the
momentum once excited, so precise balances average the forces of two successive steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .face_kinds import face_kind
from .lattice import CS2
from .node_types import FACE_NAMES
from .problem import Problem

__all__ = ["ObjectForce", "forces", "Permeability", "permeability", "darcy_permeability",
           "DarcyWindow", "darcy_window", "darcy_sums", "window_permeability",
           "momentum_density", "residual", "porosity", "tortuosity",
           "ConvergenceMonitor", "face_fluxes", "flow_axis", "DARCY_M2"]

#: One darcy in m^2.
DARCY_M2 = 9.869233e-13


@dataclass(frozen=True)
class ObjectForce:
    """Force (d,) on one labelled object, its drag along the flow axis and its lift.

    ``lift`` is the signed component along the other axis in 2D and the magnitude of the
    component normal to the flow axis in 3D; lattice units (mass * node / step^2).
    """

    label: int
    force: np.ndarray
    drag: float
    lift: float


@dataclass(frozen=True)
class _SolidLinks:
    """Links from fluid nodes into solid nodes of the domain (flat population index)."""

    index: np.ndarray = field(repr=False)
    direction: np.ndarray = field(repr=False)
    label: np.ndarray = field(repr=False)
    ladd: np.ndarray = field(repr=False)


def _solid_links(problem: Problem) -> _SolidLinks:
    """Build (once per problem) the list of fluid-to-solid links and their object labels."""
    cached = problem.extras.get("solid_links")
    if cached is not None:
        return cached
    tiling, lattice, tables = problem.tiling, problem.lattice, problem.boundary
    q, n_node = lattice.q, tiling.nodes_per_tile
    shape = np.array(tiling.shape)
    tile, node = np.nonzero(~tiling.solid)
    x = tiling.node_coordinates()[tile, node]
    solid_grid = tiling.scatter(tiling.solid[..., None], fill=True)[..., 0]
    labels = problem.labels
    wall_u = tables.wall_velocity[tables.wall_group[tile, node], : lattice.d]
    parts: list[list[np.ndarray]] = [[], [], [], []]
    for i, c in enumerate(lattice.c):
        target = x + c
        ok = np.ones(len(x), dtype=bool)
        for ax, per in enumerate(problem.periodic):
            if per:
                target[:, ax] %= shape[ax]
            else:
                ok &= (target[:, ax] >= 0) & (target[:, ax] < shape[ax])
        target = np.where(ok[:, None], target, x)
        hit = np.flatnonzero(ok & solid_grid[tuple(target.T)])
        where = tuple(target[hit].T)
        parts[0].append((tile[hit].astype(np.int64) * q + i) * n_node + node[hit])
        parts[1].append(np.full(hit.size, i))
        parts[2].append(np.zeros(hit.size, np.int64) if labels is None else labels[where])
        parts[3].append(6.0 * lattice.w[i] * tables.rho_wall * (wall_u[hit] @ c))
    links = _SolidLinks(*(np.concatenate(p) for p in parts))
    problem.extras["solid_links"] = links
    return links


def flow_axis(problem: Problem, default: int | None = None) -> int:
    """Main flow axis: ``default`` if given, else the body force's or the inlet faces' axis."""
    if default is not None:
        return int(default)
    if np.any(problem.force != 0):
        return int(np.argmax(np.abs(problem.force)))
    for name, face in problem.faces.items():
        if face_kind(face.kind).flux:
            return FACE_NAMES.index(name) // 2
    return 0


def forces(problem: Problem, f: np.ndarray, axis: int | None = None) -> dict[int, ObjectForce]:
    """Momentum-exchange force on every solid label (0 = unlabelled solid) from host f.

    ``f`` is the stored post-collision population array (n_tiles, q, a**d); ``axis`` the flow
    axis (default :func:`flow_axis`).
    """
    links = _solid_links(problem)
    axis = flow_axis(problem, axis)
    c = problem.lattice.c[links.direction].astype(np.float64)
    momentum = c * (2.0 * f.reshape(-1)[links.index] - links.ladd)[:, None]
    out = {}
    for label in np.unique(links.label):
        sel = links.label == label
        total = momentum[sel].sum(axis=0)
        normal = np.delete(total, axis)
        lift = float(normal[0]) if normal.size == 1 else float(np.linalg.norm(normal))
        out[int(label)] = ObjectForce(int(label), total, float(total[axis]), lift)
    return out


@dataclass(frozen=True)
class Permeability:
    """Darcy permeability in lattice units (node spacing^2) and, with a voxel size, physical.

    ``gradient`` is the driving force per volume (body force + pressure drop / length) and
    ``superficial_velocity`` the Darcy velocity, both in lattice units.
    """

    lattice: float
    gradient: float
    superficial_velocity: float
    m2: float | None = None

    @property
    def darcy(self) -> float | None:
        """Permeability in darcy (None without a voxel size)."""
        return None if self.m2 is None else self.m2 / DARCY_M2

    @property
    def millidarcy(self) -> float | None:
        """Permeability in millidarcy (None without a voxel size)."""
        return None if self.m2 is None else 1e3 * self.m2 / DARCY_M2


def permeability(problem: Problem, fields: dict[str, np.ndarray], axis: int | None = None,
                 voxel_size: float | None = None) -> Permeability:
    """Darcy permeability from steady host fields (see :func:`darcy_permeability`).

    ``<j_axis>`` is the momentum averaged over the whole box (solids count as zero); on a
    non-periodic axis the densities of the first and last layers are the mean over their fluid
    nodes.
    """
    axis = flow_axis(problem, axis)
    rho, u = fields["rho"], fields["u"][axis]
    j = u if problem.incompressible else rho * u
    mean_j = float(np.nansum(j) / j.size)
    layers = None
    if not problem.periodic[axis]:
        layers = (float(np.nanmean(np.take(rho, 0, axis=axis))),
                  float(np.nanmean(np.take(rho, rho.shape[axis] - 1, axis=axis))))
    return darcy_permeability(problem, mean_j, axis, layers, voxel_size,
                              length=rho.shape[axis])


def momentum_density(problem: Problem, rho, u):
    """The momentum density j whose box mean enters Darcy's law (lattice units).

    Incompressible (He-Luo) model: the reference density is 1 whatever ``initial_density``
    (pressure p = c_s^2 rho acts per unit reference density and the body force is an
    acceleration of u), so j = u and k = nu <u> / G. Quasi-compressible model: the force acts on
    rho u and the dynamic viscosity is rho nu, so j = rho u and k = nu <rho u> / G, which is
    rho0 nu <u> / G up to the small density variations. Works for NumPy and CuPy arrays.
    """
    return u if problem.incompressible else rho * u


def darcy_permeability(problem: Problem, mean_momentum: float, axis: int,
                       layer_density: tuple[float, float] | None = None,
                       voxel_size: float | None = None,
                       length: int | None = None) -> Permeability:
    """THE Darcy permeability ``k = nu <j_axis> / G`` (lattice units; m^2 with ``voxel_size``).

    ``mean_momentum`` is the box mean of :func:`momentum_density` along ``axis`` (solids count
    as zero: the superficial, Darcy flux). ``G`` is the body force along ``axis`` plus, on a
    non-periodic axis, ``c_s^2 (rho_first - rho_last) / (n - 1)`` from ``layer_density`` (mean
    density of the first and last fluid layers: pressure- or inlet-driven runs). ``voxel_size``
    in metres converts to m^2 (k is geometric: no physical viscosity needed). Every way of
    running (dashboard, CLI, validation) gets k from here. Raises ValueError without a drive.
    """
    gradient = float(problem.force[axis]) if axis < problem.force.size else 0.0
    if not problem.periodic[axis] and layer_density is not None:
        first, last = layer_density
        # ``length``: nodes from the first to the last layer (a window of the box, e.g. the
        # sample between buffer layers); the whole box by default.
        n = problem.tiling.shape[axis] if length is None else int(length)
        gradient += CS2 * float(first - last) / (n - 1)
    if gradient == 0.0:
        raise ValueError("No driving force along the flow axis: set a body force or "
                         "pressure/velocity faces on that axis.")
    k = problem.kinematic_viscosity * mean_momentum / gradient
    return Permeability(k, gradient,
                        mean_momentum / (1.0 if problem.incompressible else problem.rho0),
                        None if voxel_size is None else k * float(voxel_size) ** 2)


@dataclass(frozen=True)
class DarcyWindow:
    """Where :func:`permeability` reads Darcy's law, on the tiled node arrays of a run: the
    layers ``[lo, hi)`` along ``axis``. ``inside`` (T, N) marks the fluid nodes of the window
    (None: every fluid node, the whole box), ``ends`` the fluid nodes of its first and last
    layers on a non-periodic axis (empty on a periodic one), ``end_counts`` their numbers;
    masks are backend arrays, so the sums stay on the device."""

    axis: int
    lo: int
    hi: int
    volume: int  # nodes of the window, solids included (the superficial mean divides by it)
    inside: Any = field(repr=False)
    ends: tuple = field(repr=False)
    end_counts: tuple[int, ...] = ()

    def part(self, tiles: slice) -> DarcyWindow:
        """This window with its masks cut to the tiles ``tiles`` (a readout chunk)."""
        return DarcyWindow(self.axis, self.lo, self.hi, self.volume,
                           None if self.inside is None else self.inside[tiles],
                           tuple(e[tiles] for e in self.ends), self.end_counts)


def darcy_window(problem: Problem, axis: int, window: tuple[int, int] | None = None,
                 xp: Any = np) -> DarcyWindow:
    """The :class:`DarcyWindow` of layers ``window`` (default: all) along ``axis``."""
    tiling = problem.tiling
    n = tiling.shape[axis]
    lo, hi = (0, n) if window is None else (int(window[0]), int(window[1]))
    if not 0 <= lo < hi <= n:
        raise ValueError(f"Darcy window {lo}..{hi} is outside the {n} layers along axis {axis}.")
    whole, periodic = (lo, hi) == (0, n), problem.periodic[axis]
    volume = (hi - lo) * int(np.prod(tiling.shape)) // n
    inside, ends, counts = None, (), ()
    if whole and periodic:  # no mask: no pass over the 2e9 nodes of a 1000³ mirrored box
        return DarcyWindow(axis, lo, hi, volume, inside, ends, counts)
    fluid = ~tiling.solid
    # The axis coordinate of every tile node, (T, N): one int per node, not the (T, N, d) table.
    corner = tiling.tiles[:, axis].astype(np.int64) * tiling.a - tiling.offset[axis]
    coord = corner[:, None] + tiling.local_coordinates()[None, :, axis]
    inside = None if whole else xp.asarray(fluid & (coord >= lo) & (coord < hi))
    if not periodic:
        masks = [fluid & (coord == layer) for layer in (lo, hi - 1)]
        ends = tuple(xp.asarray(m) for m in masks)
        counts = tuple(int(np.count_nonzero(m)) for m in masks)
    return DarcyWindow(axis, lo, hi, volume, inside, ends, counts)


def darcy_sums(problem: Problem, window: DarcyWindow, fluid, rho, u, xp: Any = np):
    """Backend array (1 + len(ends),): the sum of :func:`momentum_density` along the axis over
    the window's fluid nodes and the density sums of its end layers, from tile moments
    ``rho`` (t, N), ``u`` (d, t, N) of tiles whose fluid mask is ``fluid`` (t, N) and whose
    window masks are ``window`` cut alike (:meth:`DarcyWindow.part`)."""
    mask = fluid if window.inside is None else window.inside
    j = momentum_density(problem, rho, u[window.axis])
    parts = [xp.where(mask, j, 0.0).sum().reshape(1)]
    parts += [xp.where(end, rho, 0.0).sum().reshape(1) for end in window.ends]
    return xp.concatenate(parts)


def window_permeability(problem: Problem, window: DarcyWindow, sums: np.ndarray,
                        voxel_size: float | None = None) -> Permeability:
    """k (:func:`darcy_permeability`) from the host totals of :func:`darcy_sums` over all
    tiles: the same quantity as :func:`permeability` of the window's fields."""
    layers = None
    if window.ends:
        layers = tuple(float(s) / c if c else math.nan
                       for s, c in zip(sums[1:], window.end_counts, strict=True))
    return darcy_permeability(problem, float(sums[0]) / window.volume, window.axis, layers,
                              voxel_size, length=window.hi - window.lo)


def porosity(solid: np.ndarray) -> float:
    """Fluid fraction of a solid mask (True = solid)."""
    return float(1.0 - np.count_nonzero(solid) / np.size(solid))


def tortuosity(fields: dict[str, np.ndarray], axis: int = 0) -> float:
    """Mean |u| over mean u_axis over fluid nodes (>= 1; 1 for straight flow)."""
    u = fields["u"]
    speed = np.sqrt(np.nansum(u * u, axis=0))
    along = np.nanmean(np.where(np.isnan(u[axis]), np.nan, u[axis]))
    return float(np.nanmean(np.where(np.isnan(u[axis]), np.nan, speed)) / along)


def residual(mean: np.ndarray, previous: np.ndarray | None, steps: int = 1) -> float:
    """THE residual: relative change of a mean flow vector per time step (dimensionless).

    ``|m - m_prev| / |m| / steps`` with ``m`` the superficial mean velocity (or, for closed
    flows, the mean speed) now and ``steps`` time steps earlier: inf without a previous value,
    0 for a fluid at rest that stays at rest. The change over an interval of N steps is
    ``N * residual``; the dashboard, the CLI and validation all use this one definition.
    """
    if previous is None:
        return math.inf
    mean = np.asarray(mean, dtype=np.float64)
    now = float(np.linalg.norm(mean))
    change = float(np.linalg.norm(mean - np.asarray(previous, dtype=np.float64)))
    if now == 0.0:
        return 0.0 if change == 0.0 else math.inf
    return change / now / max(int(steps), 1)


class ConvergenceMonitor:
    """:func:`residual` between successive checks of host fields (steady-state test).

    ``measure='velocity'`` compares the mean velocity vector over fluid nodes (through-flows);
    ``'speed'`` the mean |u|, for closed flows whose mean velocity vanishes (cavities).
    :meth:`update` returns the change over one check interval (``steps`` = 1 per check).
    """

    def __init__(self, measure: str = "velocity") -> None:
        if measure not in ("velocity", "speed"):
            raise ValueError(f"measure must be 'velocity' or 'speed', got {measure!r}.")
        self.measure = measure
        self.previous: np.ndarray | None = None
        self.residual = math.inf

    def update(self, fields: dict[str, np.ndarray], steps: int = 1) -> float:
        """Record the fields of this check; return :func:`residual` over ``steps`` (inf first)."""
        u = fields["u"].reshape(fields["u"].shape[0], -1)
        if self.measure == "speed":
            mean = np.atleast_1d(np.nanmean(np.sqrt((u * u).sum(axis=0))))
        else:
            mean = np.nanmean(u, axis=1)
        if self.previous is not None:
            self.residual = residual(mean, self.previous, steps)
        self.previous = mean
        return self.residual


def face_fluxes(problem: Problem, fields: dict[str, np.ndarray]) -> dict[str, float]:
    """Mass flux (lattice mass / step) out of each open (velocity/pressure) face; < 0 = inflow.

    The flux is summed over the face's node layer, where the Zou-He nodes sit; walls let
    nothing through and periodic faces have no net flux, so neither is listed.
    """
    out = {}
    for name, face in problem.faces.items():
        if not face_kind(face.kind).flux:
            continue
        axis, side = FACE_NAMES.index(name) // 2, FACE_NAMES.index(name) % 2
        layer = 0 if side == 0 else fields["rho"].shape[axis] - 1
        rho = np.take(fields["rho"], layer, axis=axis)
        u = np.take(fields["u"][axis], layer, axis=axis)
        j = u * (1.0 if problem.incompressible else rho)
        out[name] = float(np.nansum(j)) * (-1.0 if side == 0 else 1.0)
    return out
