"""Boundary conditions on a geometry's openings ("iolets"): per-link host tables and the NumPy pass.

Every lattice link that crosses an opening (:func:`solver.opening_links.crossing_links`) is a
link from a fluid node ``x`` in an outgoing direction ``j`` to a node beyond the opening plane,
which halfway bounce-back would send back as ``f_opp(j)(x) = f*_j(x)``. Each opening kind
(:mod:`solver.opening_kinds`) replaces that one bounced population by its registered link rule
(:mod:`solver.link_rules`; this module calls the rules and names no kind), with the wall
half-way along the link:

- ``velocity``: bounce-back with Ladd's momentum term, ``f_opp(j)(x) = f*_j(x) - 6 w_j rho_w
  c_j.u_w`` (Ladd, J. Fluid Mech. 271, 285 (1994)), ``u_w`` the wall velocity into the fluid
  (uniform, or ``2 U (1 - r^2/R^2)`` with ``R`` the opening's equivalent radius). This is the
  velocity "iolet" of HemeLB, compared with other inlet schemes by Nash et al., Phys. Rev. E 89,
  023303 (2014). The profile is rescaled so that the discrete net mass flux over the opening's
  links is exactly ``rho_w U A`` (the staircase of an oblique opening otherwise misses it).
- ``pressure``: anti-bounce-back, ``f_opp(j)(x) = -f*_j(x) + 2 w_j rho_w [1 + 4.5 (c_j.u)^2 -
  1.5 u.u]`` with ``u`` the node's velocity from its own post-collision populations (Ginzburg,
  Verhaeghe & d'Humieres, Commun. Comput. Phys. 3, 427 (2008); Izquierdo & Fueyo, Phys. Rev. E
  78, 046707 (2008)); incompressible model: ``2 w_j [rho_w + 4.5 (c_j.u)^2 - 1.5 u.u]``.
- ``outflow`` (zero gradient): the population that the inward neighbour ``y = x + c_k``
  (``c_k`` the lattice direction closest to ``-normal``) receives in the same direction. It
  sets no pressure and, copying whole populations, also holds the pressure gradient near zero
  at the outlet, which a developed (Poiseuille) flow cannot have: in slow flows it passes
  little (measured: velocity inlet + outflow in a tube, the density rose while 44 % of the
  inflow left; a pressure-driven tube stopped; in the bifurcation next to a pressure outlet
  it carried 0.1 % of the flow). Variants tried and dropped because they diverged on oblique
  openings: linear extrapolation of the populations from two inward nodes, anti-bounce-back
  with the node's own or an extrapolated density. Use pressure outlets for vessels; outflow
  suits fast flows leaving through a long straight segment.
- ``closed``: not in the tables; the link keeps its bounce-back.

Why these: each rule acts on one link, so it works for an opening at any angle to the grid
(Zou-He needs an axis-aligned plane and a whole node's unknowns), needs no extrapolation of
whole node states, and the mass a link adds per step is exactly ``written - f*_j(x)``, so the
flow rate of an opening is known exactly, step by step.

How it runs without touching the main kernels: before each step the pass rewrites, in the
stored populations, the slot the step will read as the bounced population of each crossing
link. In pull streaming (and in both phases of the in-place AA pattern) that slot is ``(x, j)``
and only ``x`` reads it. The pass first computes every new value from the unchanged state, then
writes them all, so the order of links does not matter. Addresses per layout and AA phase come
from :meth:`IoletTables.addresses`; the NumPy backend calls :func:`apply_iolets`, the CuPy
backend a generated kernel with the same arithmetic in the same order. Lattice units throughout.

Soft start (:mod:`solver.soft_start`): over the first ``IoletTables.ramp_steps`` steps the pass
applies ``s U`` (velocity) and ``rho0 + s (rho_w - rho0)`` (pressure) with the smoothstep
factor ``s`` of the step count, computed by the same double arithmetic on both backends.

Pulsatile inlets (:mod:`solver.waveform`): a velocity opening with a waveform adds to its links'
steady Ladd term ``value`` the harmonics ``sum_k (A_k cos theta_k + B_k sin theta_k)``, the
per-link coefficients ``wave`` (2K, m) precomputed here from each harmonic's (Womersley)
profile, each rescaled (complex) so the links' net flux is exactly ``rho_w A Re(c_k e^{i
theta_k})``; ``theta_k`` comes from the step count (:func:`solver.waveform.harmonic_phases`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .face_kinds import face_kind
from .lattice import Lattice
from .link_rules import LinkInputs, LinkSite
from .opening_kinds import DENSITY, OpeningCondition, link_code, links_by_kind, opening_kind
from .soft_start import ramp_factor, resolve_ramp_steps
from .values import ConfigError
from .waveform import harmonic_phases

__all__ = ["IoletTables", "IoletAddresses", "build_iolets", "apply_iolets",
           "iolet_values", "ramp_factor"]


@dataclass(frozen=True)
class IoletAddresses:
    """Flat slot addresses of one layout and AA phase (int64): ``write`` (m,), the node's
    post-collision populations ``own`` (q, m), the outflow ``donor`` (m,)."""

    write: np.ndarray
    own: np.ndarray
    donor: np.ndarray


@dataclass(frozen=True, eq=False)
class IoletTables:
    """Per-link tables of the driven openings (m links), lattice units.

    ``ids``/``kinds``: the driven openings in order; ``opening`` (m,) index into them; ``code``
    (m,) the link's kind (:func:`solver.opening_kinds.link_code`); ``tile``, ``node``,
    ``direction`` (m,): the link's source node and outgoing direction ``j``; ``value`` (m,):
    Ladd's term (velocity), ``rho_w`` (pressure), 0 (outflow); ``rho_ref``: the density that
    turns mass flux into volume flux.
    ``mean_nodes``: per listed opening (id -> (tile, node) arrays) of its node set.
    ``ramp_steps``: steps of the soft start (0: impulsive); ``rho0``: the density a pressure
    opening ramps from (:mod:`solver.soft_start`). ``wave`` (2K, m) float64: per link the
    cosine then sine coefficients of the K harmonics of waveform inlets (zero rows for other
    links), ``wave_period`` their period (steps); K = 0 without a waveform.
    """

    ids: tuple[int, ...]
    kinds: tuple[str, ...]
    opening: np.ndarray
    code: np.ndarray
    tile: np.ndarray
    node: np.ndarray
    direction: np.ndarray
    value: np.ndarray
    rho_ref: float
    # Per parity (AA phase) 0/1: location triples (tile, direction, node), each (q, m) / (m,).
    _own: tuple = field(repr=False)
    _donor: tuple = field(repr=False)
    mean_nodes: dict = field(default_factory=dict, repr=False)
    ramp_steps: int = 0
    rho0: float = 1.0
    wave: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    wave_period: float = 1.0

    @property
    def harmonics(self) -> int:
        """Number K of waveform harmonics the pass sums (0: steady openings only)."""
        return int(self.wave.shape[0] // 2)

    def wave_sum(self, step: int) -> np.ndarray:
        """The harmonics' part of each link's value before step ``step`` (m,), float64, in the
        order the CUDA pass adds them."""
        k = self.harmonics
        total = np.zeros(self.n_links)
        if k == 0:
            return total
        theta = harmonic_phases(step, self.wave_period, k)
        for h in range(k):
            total = total + self.wave[h] * np.cos(theta[h])
            total = total + self.wave[k + h] * np.sin(theta[h])
        return total

    def density_links(self, opening_id: int) -> np.ndarray:
        """Indices of the links of driven opening ``opening_id`` when its kind holds a density
        (a pressure opening; Windkessel outlets set it), else empty. ValueError when the
        opening is not driven."""
        if opening_id not in self.ids:
            raise ValueError(f"Opening {opening_id} is not a driven opening of this run.")
        index = self.ids.index(opening_id)
        if opening_kind(self.kinds[index]).quantity != DENSITY:
            return np.empty(0, dtype=np.int64)
        return np.flatnonzero(self.opening == index)

    def ramp(self, step: int) -> float:
        """Fraction of the target values applied before step ``step`` (0-based)."""
        return ramp_factor(step, self.ramp_steps)

    @property
    def n_links(self) -> int:
        """Number of rewritten links."""
        return int(self.tile.size)

    def addresses(self, q: int, nodes_per_tile: int, slots: np.ndarray | None = None,
                  parity: int = 0) -> IoletAddresses:
        """Flat addresses ``(tile q + i) a^d + slots[i, node]`` (identity ``slots`` = XYZ)."""
        def addr(tile, direction, node):
            local = node if slots is None else slots[direction, node]
            return (tile.astype(np.int64) * q + direction) * nodes_per_tile + local

        write = addr(self.tile, self.direction, self.node)
        return IoletAddresses(write=write, own=addr(*self._own[parity]),
                              donor=addr(*self._donor[parity]))

    def flows(self, flux: np.ndarray) -> np.ndarray:
        """Volumetric flow rate into the fluid per driven opening (nodes^3/step) from the
        per-link mass flux ``flux`` (m,) of one step."""
        total = np.bincount(self.opening, weights=np.asarray(flux, dtype=np.float64),
                            minlength=len(self.ids))
        return total / self.rho_ref


def _locate(tiling: Any, coords: np.ndarray, periodic: tuple[bool, ...]
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fluid?, tile, node) of domain coordinates (..., d), wrapping periodic axes."""
    coords = coords.copy()
    shape = np.asarray(tiling.shape)
    outside = np.zeros(coords.shape[:-1], dtype=bool)
    for ax, is_periodic in enumerate(periodic):
        if is_periodic:
            coords[..., ax] %= shape[ax]
        else:
            outside |= (coords[..., ax] < 0) | (coords[..., ax] >= shape[ax])
    safe = np.where(outside[..., None], 0, coords)
    tile, node = tiling.locate(safe)
    fluid = ~outside & (tile >= 0)
    fluid[fluid] = ~tiling.solid[tile[fluid], node[fluid]]
    return fluid, np.where(fluid, tile, -1), np.where(fluid, node, -1)


class _Frame:
    """What :func:`solver.opening_links.crossing_links` reads of a geometry."""

    def __init__(self, solid: np.ndarray, voxel_size: float | None, origin: tuple) -> None:
        self.solid, self.voxel_size = solid, voxel_size
        self.ndim, self.shape = solid.ndim, solid.shape
        self.origin = tuple(origin) if len(origin) == solid.ndim else (0.0,) * solid.ndim


def build_iolets(problem: Any) -> IoletTables | None:
    """Per-link tables of ``problem``'s driven openings, or None when nothing is driven.

    Raises :class:`ConfigError` for an opening id the geometry lacks or one without links.
    """
    conditions: dict[int, OpeningCondition] = problem.opening_conditions
    openings = {o.id: o for o in problem.openings}
    missing = sorted(set(conditions) - set(openings))
    if missing:
        have = sorted(openings) or "none"
        raise ConfigError(f"openings {missing} are not openings of this geometry (its openings: "
                          f"{have}); load the geometry with openings detected, or drop them.")
    driven = [k for k in sorted(conditions)
              if opening_kind(conditions[k].kind).link_rule is not None]
    if not driven:
        return None
    if problem.owned is not None:
        raise ConfigError("A distributed (MPI) rank's problem takes its share of the global "
                          "opening tables (solver.distributed.openings.rank_tables, "
                          "Problem.use_iolets); build them from the whole problem.")
    # Imported only for driven openings: the geometries package costs ~20 MB and 0.6 s.
    from .opening_links import crossing_links

    lattice: Lattice = problem.lattice
    tiling = problem.tiling
    solid = tiling.scatter(tiling.solid[..., None], fill=True)[..., 0]
    frame = _Frame(solid, problem.voxel_size, problem.origin)
    c = lattice.c.astype(np.int64)
    rho_ref = 1.0 if problem.incompressible else problem.rho0
    parts: dict[str, list] = {k: [] for k in ("opening", "code", "src", "dir", "value", "donor")}
    waves: list = []  # (link offset, rows (2K, m_o), period) of waveform openings
    offset = 0
    for index, oid in enumerate(driven):
        opening, cond = openings[oid], conditions[oid]
        src, direction = crossing_links(frame, opening, c)
        if len(src) == 0:
            raise ConfigError(f"Opening {oid} has no lattice link crossing it on this grid; "
                              "re-detect the openings after changing the grid.")
        _check_faces(oid, src + c[direction], frame.shape, problem.faces)
        site = LinkSite(src, c[direction], direction, opening, cond, frame, lattice, rho_ref,
                        problem.kinematic_viscosity)
        value, rows = opening_kind(cond.kind).link_rule.values(site)
        if rows is not None:
            waves.append((offset, rows, cond.waveform.period))
        inward = int(np.argmax(-(c @ np.asarray(opening.normal))
                               / np.maximum(np.linalg.norm(c, axis=1), 1e-30)))
        parts["opening"].append(np.full(len(src), index))
        parts["code"].append(np.full(len(src), link_code(cond.kind)))
        parts["src"].append(src)
        parts["dir"].append(direction)
        parts["value"].append(value)
        parts["donor"].append(src + c[inward])
        offset += len(src)
    src = np.concatenate(parts["src"])
    j = np.concatenate(parts["dir"])
    fluid, tile, node = _locate(tiling, src, problem.periodic)
    assert fluid.all(), "crossing links start at fluid nodes"
    own0, own1 = _own_locations(tiling, lattice, problem.periodic, src, tile, node)
    donor0, donor1 = _donor_locations(tiling, lattice, problem.periodic,
                                      np.concatenate(parts["donor"]), j, tile, node)
    mean_nodes = {}
    for oid in conditions:
        f_, t_, n_ = _locate(tiling, openings[oid].nodes, problem.periodic)
        mean_nodes[oid] = (t_[f_], n_[f_])
    return IoletTables(
        ids=tuple(driven), kinds=tuple(conditions[k].kind for k in driven),
        opening=np.concatenate(parts["opening"]).astype(np.int64),
        code=np.concatenate(parts["code"]).astype(np.int8), tile=tile, node=node, direction=j,
        value=np.concatenate(parts["value"]).astype(np.float64), rho_ref=float(rho_ref),
        _own=(own0, own1), _donor=(donor0, donor1), mean_nodes=mean_nodes,
        ramp_steps=resolve_ramp_steps(getattr(problem, "ramp_steps", None), conditions,
                                      problem.openings, problem.voxel_size,
                                      problem.tiling.shape),
        rho0=float(problem.rho0), **_wave_table(waves, offset))


def _wave_table(waves: list, m: int) -> dict:
    """``wave`` (2K, m) and ``wave_period`` of the waveform openings (one common period)."""
    if not waves:
        return {}
    periods = {period for _, _, period in waves}
    if len(periods) > 1:
        raise ConfigError(f"Waveform inlets have different periods {sorted(periods)} (steps); "
                          "give every waveform the same heart period.")
    k = max(rows.shape[0] // 2 for _, rows, _ in waves)
    wave = np.zeros((2 * k, m))
    for start, rows, _ in waves:
        kk = rows.shape[0] // 2
        wave[:kk, start:start + rows.shape[1]] = rows[:kk]
        wave[k:k + kk, start:start + rows.shape[1]] = rows[kk:]
    return {"wave": wave, "wave_period": float(periods.pop())}


def _check_faces(oid: int, targets: np.ndarray, shape: tuple[int, ...], faces: dict) -> None:
    """Refuse an opening whose links leave the box through a face that is not a resting wall:
    a periodic face wraps them to the opposite face (the pull step would never read the
    opening's value there), a Zou-He face or a moving wall would act on the same links."""
    for ax in range(len(shape)):
        for side, out in (("min", targets[:, ax] < 0), ("max", targets[:, ax] >= shape[ax])):
            name = f"{'xyz'[ax]}_{side}"
            cond = faces.get(name)
            if cond is None or not np.any(out):
                continue
            kind = face_kind(cond.kind)
            if kind.periodic or kind.node_type is not None or any(cond.velocity):
                raise ConfigError(
                    f"Opening {oid} lies on the {name} face of the box, which is "
                    f"{cond.kind!r}: set {'xyz'[ax]}_min and {'xyz'[ax]}_max to 'wall' so that "
                    "fluid enters and leaves through the opening's own condition.")


def _own_locations(tiling, lattice, periodic, src, tile, node):
    """Where node x's post-collision f*_i(x) is stored, per AA phase: (tile, dir, node) (q, m).

    Phase 0 (and two copies): slot (x, i). Phase 1: slot (x + c_i, opp(i)) when that node is
    fluid, else (x, i) (:mod:`solver.backends.cuda.streaming`)."""
    q, m = lattice.q, len(src)
    dirs = np.repeat(np.arange(q)[:, None], m, axis=1)
    phase0 = (np.broadcast_to(tile, (q, m)), dirs, np.broadcast_to(node, (q, m)))
    nb = src[None, :, :] + lattice.c.astype(np.int64)[:, None, :]
    fluid, nt, nn = _locate(tiling, nb, periodic)
    opp = np.asarray(lattice.opposite)[:, None]
    phase1 = (np.where(fluid, nt, tile[None, :]), np.where(fluid, opp, dirs),
              np.where(fluid, nn, node[None, :]))
    return phase0, phase1


def _donor_locations(tiling, lattice, periodic, donor, j, tile, node):
    """Where the population y = donor receives in direction opp(j) is stored, per AA phase.

    Phase 0: f*_i(y - c_i) at slot (y + c_j, i), i = opp(j), or (y, j) when y + c_j is not
    fluid (bounce-back). Phase 1: slot (y, j). Without a fluid y the link keeps its own slot
    (x, j): plain bounce-back."""
    c = lattice.c.astype(np.int64)
    yf, yt, yn = _locate(tiling, donor, periodic)
    sf, st, sn = _locate(tiling, donor + c[j], periodic)
    i = np.asarray(lattice.opposite)[j]
    t0 = np.where(sf, st, yt)
    d0 = np.where(sf, i, j)
    n0 = np.where(sf, sn, yn)
    phase0 = (np.where(yf, t0, tile), np.where(yf, d0, j), np.where(yf, n0, node))
    phase1 = (np.where(yf, yt, tile), j.copy(), np.where(yf, yn, node))
    return phase0, phase1


def iolet_values(own: np.ndarray, donor: np.ndarray, tables: IoletTables, lattice: Lattice,
                 force: np.ndarray, incompressible: bool, ramp: float = 1.0,
                 wave: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(written values (m,), net mass flux into the fluid per link (m,)) in ``own``'s dtype.

    ``own`` (q, m): each link's node's post-collision populations; ``donor`` (m,): the
    outflow donors; ``ramp``: the soft start's factor (1: the target values); ``wave`` (m,):
    the waveform harmonics' part of the values this step (float64). Each link gets its kind's
    rule (:mod:`solver.link_rules`); the CUDA kernel (:mod:`solver.backends.cuda.iolets`)
    repeats this arithmetic.
    """
    real = own.dtype
    j = tables.direction
    fj = own[j, np.arange(own.shape[1])]
    value = tables.value.astype(real)
    if wave is not None and tables.harmonics:  # pulsatile: value + (real) sum of harmonics
        value = value + wave.astype(real)
    out = fj.copy()
    for kind, links in links_by_kind(tables.code):
        rule = kind.link_rule
        v = value[links]
        if ramp < 1.0 and rule.ramp is not None:  # soft start: the kernel's real products
            v = rule.ramp(v, real.type(ramp), real.type(tables.rho0))
        out[links] = rule.write(LinkInputs(fj[links], v, donor[links], own[:, links], j[links],
                                           lattice, force, incompressible))
    return out, (out - fj).astype(real)


def apply_iolets(flat: np.ndarray, addr: IoletAddresses, tables: IoletTables, storage: Any,
                 lattice: Lattice, force: np.ndarray, incompressible: bool,
                 step: int | None = None) -> np.ndarray:
    """Rewrite the crossing links' slots of one stored copy ``flat`` (1-D, in place) for the
    next step, number ``step`` (0-based; None: past the soft start); return the per-link mass
    flux (m,) in the arithmetic dtype."""
    own = _decode(storage, flat[addr.own], np.arange(lattice.q)[:, None])
    donor = _decode(storage, flat[addr.donor], tables.direction)
    ramp = 1.0 if step is None else tables.ramp(step)
    wave = tables.wave_sum(0 if step is None else step) if tables.harmonics else None
    out, flux = iolet_values(own, donor, tables, lattice, force, incompressible, ramp, wave)
    if storage.encoded:  # round to nearest, as the kernel's __float2half_rn
        shift = storage.shift[tables.direction]
        with np.errstate(over="ignore"):
            flat[addr.write] = ((out - shift) * storage.real.type(storage.scale)).astype(
                storage.dtype)
    else:
        flat[addr.write] = out
    return flux


def _decode(storage: Any, stored: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """Decoded values of stored slots whose directions are ``direction`` (broadcast)."""
    if not storage.encoded:
        return np.asarray(stored)
    inv = storage.real.type(1.0 / storage.scale)
    return stored.astype(storage.real) * inv + storage.shift[direction]
