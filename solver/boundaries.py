"""Boundary conditions: node classification, per-face/per-group tables, Zou-He and Ladd.

Built once per geometry. What a kernel needs is in :class:`BoundaryTables`: a
:class:`~solver.node_types.NodeType` and a wall-velocity group per node, plus small tables per
domain face and per group (never a value per node). The operations, in the order of one step:

1. Pull streaming with halfway bounce-back (``solver.streaming``). A link whose source node is
   solid gets Ladd's moving-wall term ``+6 w_i rho_w c_i . u_w`` (= ``-2 w_i rho_w c_i' . u_w /
   c_s^2`` for the outgoing direction ``i'``); ``u_w`` is the velocity of group
   ``wall_group[node]`` when the source is a solid node of the domain, and of the crossed face
   when the source is outside the domain. ``rho_w`` is 1 (incompressible) or ``rho0``.
2. Zou-He reconstruction at velocity/pressure nodes (:func:`zou_he`), before collision.
3. Collision.

Rules where faces meet (documented for the GPU port, ``templates/PHYSICS_FOR_GPU.md``):

- Rank of a face: ``8 * priority(kind) + (7 - face_index)`` with priority velocity 4 >
  moving_wall 3 > pressure 2 > wall 1 > periodic 0 (ties: x_min first).
- A fluid node on several Zou-He faces is a Zou-He node of the highest-ranked one; the other
  faces' links into it bounce back.
- A link that leaves the domain through several faces at once (an edge or corner) bounces back
  with the velocity of the highest-ranked crossed face (the lid wins in a lid-driven cavity).
- Solid nodes on an inlet/outlet face stay solid; a Zou-He node's known populations may come
  from bounce-back at solid neighbours. All unknown populations of a Zou-He node come from
  outside the domain, so no solid neighbour is ever overwritten.
- One wall velocity per fluid node: a fluid node whose solid neighbours belong to different
  wall groups (a moving object touching a resting one) is refused with a ConfigError.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .face_kinds import FACE_TYPES, FaceCondition, face_kind
from .lattice import Lattice
from .node_types import FACE_NAMES, NodeType, face_axis_side, zou_he_type
from .tiling import Tiling
from .values import ConfigError

__all__ = ["BoundaryTables", "build_tables", "FACE_KINDS", "face_ranks", "ZouHeFace",
           "zou_he_faces", "zou_he", "crossed_face"]

#: Face kinds in the order of their ``face_kind`` code (the registry's order).
FACE_KINDS = FACE_TYPES


@dataclass(frozen=True)
class BoundaryTables:
    """Per-node codes and per-face / per-group parameters of one run (lattice units).

    Attributes
    ----------
    node_type : uint8 (n_tiles, a**d), :class:`NodeType` per node (SOLID outside the domain).
    wall_group : uint8 (n_tiles, a**d), wall-velocity group of the solid neighbours inside the
        domain of each fluid node (0 = at rest); for solid nodes, their own group.
    wall_velocity : float64 (n_groups, 3), velocity of each group; row 0 is zero.
    face_kind : uint8 (6,), index into :data:`FACE_KINDS` per face (x_min ... z_max).
    face_velocity : float64 (6, 3), inlet or wall velocity of each face (zero otherwise).
    face_density : float64 (6,), outlet density of pressure faces (NaN otherwise).
    face_rank : int16 (6,), precedence where faces meet (-1 for faces of a missing axis).
    rho_wall : density in Ladd's term, 1 (incompressible) or rho0.
    object_groups : {label: group} for labelled moving objects.
    """

    node_type: np.ndarray = field(repr=False)
    wall_group: np.ndarray = field(repr=False)
    wall_velocity: np.ndarray
    face_kind: np.ndarray
    face_velocity: np.ndarray
    face_density: np.ndarray
    face_rank: np.ndarray
    rho_wall: float
    object_groups: dict[int, int]

    @property
    def has_moving_walls(self) -> bool:
        """Whether any link needs Ladd's term."""
        return bool(np.any(self.wall_velocity != 0) or np.any(self.face_velocity != 0))

    @property
    def needs_boundary_kernel(self) -> bool:
        """Whether a run needs more than fluid/solid bounce-back (Zou-He nodes or Ladd)."""
        return bool(np.any(self.node_type > NodeType.FLUID) or self.has_moving_walls)


def face_ranks(faces: dict[str, FaceCondition]) -> np.ndarray:
    """Rank (6,) of each face; higher wins where faces meet, -1 for absent faces."""
    rank = np.full(6, -1, dtype=np.int16)
    for index, name in enumerate(FACE_NAMES):
        if name in faces:
            rank[index] = 8 * face_kind(faces[name].kind).priority + (7 - index)
    return rank


def _object_groups(objects: dict[int, tuple[float, float, float]]):
    """Group per label (moving objects only, equal velocities share one) and the table."""
    velocities = [(0.0, 0.0, 0.0)]
    groups = {}
    for label in sorted(objects):
        v = tuple(float(x) for x in objects[label])
        if v == (0.0, 0.0, 0.0):
            continue
        if v not in velocities:
            velocities.append(v)
        groups[label] = velocities.index(v)
    if len(velocities) > 255:
        raise ConfigError("More than 254 distinct object velocities; group objects that move "
                          "together under one label.")
    return groups, np.array(velocities, dtype=np.float64)


def _wall_groups(tiling: Tiling, lattice: Lattice, periodic, group_grid) -> np.ndarray:
    """Per-node wall group (n_tiles, a**d): solids their own, fluid that of solid neighbours."""
    shape = np.array(tiling.shape)
    coords = tiling.node_coordinates()
    inside = tiling.inside()
    out = np.zeros(tiling.solid.shape, dtype=np.uint8)
    out[inside] = group_grid[tuple(coords[inside].T)]
    fluid = ~tiling.solid
    x = coords[fluid]
    lo = np.full(len(x), 255, dtype=np.int16)
    hi = np.full(len(x), -1, dtype=np.int16)
    solid_grid = tiling.scatter(tiling.solid[..., None], fill=True)[..., 0]
    for c in lattice.c:
        src = x - c
        ok = np.ones(len(x), dtype=bool)
        for ax, per in enumerate(periodic):
            if per:
                src[:, ax] %= shape[ax]
            else:
                ok &= (src[:, ax] >= 0) & (src[:, ax] < shape[ax])
        src = np.where(ok[:, None], src, x)
        hit = ok & solid_grid[tuple(src.T)]
        g = group_grid[tuple(src.T)].astype(np.int16)
        lo = np.where(hit, np.minimum(lo, g), lo)
        hi = np.where(hit, np.maximum(hi, g), hi)
    clash = (hi >= 0) & (lo != hi)
    if clash.any():
        where = tuple(int(v) for v in x[np.argmax(clash)])
        raise ConfigError(
            f"Fluid node {where} touches solids of different wall velocities (a moving object "
            "next to a resting or differently moving solid); one wall velocity per fluid node "
            "is supported: leave at least one fluid node between them or give them one label."
        )
    out[fluid] = np.maximum(hi, 0).astype(np.uint8)
    return out


def _node_types(tiling: Tiling, faces: dict[str, FaceCondition], rank) -> np.ndarray:
    """NodeType per node (n_tiles, a**d): Zou-He faces claim their fluid layer by rank."""
    # The codes are the fluid mask's bytes (a bool is one byte, 0 or 1: SOLID 0, FLUID 1):
    # np.where of the enum values made 8 bytes per tile node, then a cast (1.3 s of a 300³
    # mirrored box's set-up on the 2-core CPU, about 20x this).
    assert NodeType.SOLID == 0 and NodeType.FLUID == 1
    node_type = np.logical_not(tiling.solid).view(np.uint8)
    zou = [i for i, n in enumerate(FACE_NAMES) if n in faces
           and face_kind(faces[n].kind).node_type is not None]
    fluid = ~tiling.solid if zou else None
    # Coordinates only where a face claims nodes: 24 bytes per tile node (20 GB for the
    # 2e9-voxel mirrored box of a 1000³ rock image, which has no such face).
    coords = tiling.node_coordinates() if zou else None
    for index in sorted(zou, key=lambda i: rank[i]):  # highest rank written last
        axis, side = face_axis_side(index)
        layer = 0 if side == 0 else tiling.shape[axis] - 1
        on_face = fluid & (coords[..., axis] == layer)
        kind = face_kind(faces[FACE_NAMES[index]].kind)
        node_type[on_face] = zou_he_type(kind.node_type, index)
    return node_type


def build_tables(tiling: Tiling, lattice: Lattice, faces: dict[str, FaceCondition],
                 periodic: tuple[bool, ...], labels: np.ndarray | None = None,
                 objects: dict[int, tuple[float, float, float]] | None = None,
                 rho_wall: float = 1.0) -> BoundaryTables:
    """Classify the nodes of ``tiling`` and fill the per-face and per-group tables."""
    objects = objects or {}
    groups, velocities = _object_groups(objects)
    if groups and labels is None:
        raise ConfigError("object_velocities names labelled objects but the geometry has no "
                          "labels; give a VoxelGeometry with `labels` or drop the velocities.")
    rank = face_ranks(faces)
    kind = np.zeros(6, dtype=np.uint8)
    face_velocity = np.zeros((6, 3))
    density = np.full(6, np.nan)
    for index, name in enumerate(FACE_NAMES):
        if name in faces:
            kind[index] = FACE_KINDS.index(faces[name].kind)
            face_velocity[index] = faces[name].velocity
            if faces[name].density is not None:
                density[index] = faces[name].density
    if groups:
        lut = np.zeros(max(max(groups), int(labels.max())) + 1, dtype=np.uint8)
        for label, g in groups.items():
            lut[label] = g
        group_grid = lut[np.clip(labels, 0, None)]
        wall_group = _wall_groups(tiling, lattice, periodic, group_grid)
    else:
        wall_group = np.zeros(tiling.solid.shape, dtype=np.uint8)
    return BoundaryTables(
        node_type=_node_types(tiling, faces, rank), wall_group=wall_group,
        wall_velocity=velocities, face_kind=kind, face_velocity=face_velocity,
        face_density=density, face_rank=rank, rho_wall=float(rho_wall), object_groups=groups,
    )


def crossed_face(source: np.ndarray, shape, periodic, rank: np.ndarray) -> np.ndarray:
    """Face index (n,) a link from ``source`` (n, d) crosses into the domain, -1 if none.

    Where the link crosses several faces the highest-ranked one is returned.
    """
    best = np.full(len(source), -1, dtype=np.int64)
    best_rank = np.full(len(source), -2, dtype=np.int64)
    for ax, per in enumerate(periodic):
        if per:
            continue
        for side, out in ((0, source[:, ax] < 0), (1, source[:, ax] >= shape[ax])):
            face = 2 * ax + side
            better = out & (rank[face] > best_rank)
            best = np.where(better, face, best)
            best_rank = np.where(better, rank[face], best_rank)
    return best


@dataclass(frozen=True)
class ZouHeFace:
    """Direction sets and value of one Zou-He face (lattice units).

    ``unknown`` are the directions entering the domain (``c . n = +1`` for the inward normal
    ``n``), ``tangential`` have ``c . n = 0`` (rest included), ``outgoing`` ``c . n = -1``.
    """

    face: int
    kind: str
    normal: np.ndarray
    unknown: np.ndarray
    tangential: np.ndarray
    outgoing: np.ndarray
    velocity: np.ndarray
    density: float


def zou_he_faces(tables: BoundaryTables, lattice: Lattice) -> list[ZouHeFace]:
    """The velocity and pressure faces of a run, with their direction sets."""
    out = []
    for face in range(2 * lattice.d):
        kind = FACE_KINDS[tables.face_kind[face]]
        if face_kind(kind).closure is None:
            continue
        axis, side = face_axis_side(face)
        normal = np.zeros(lattice.d)
        normal[axis] = 1.0 if side == 0 else -1.0
        cn = lattice.c @ normal
        out.append(ZouHeFace(face, kind, normal, np.flatnonzero(cn > 0),
                             np.flatnonzero(cn == 0), np.flatnonzero(cn < 0),
                             tables.face_velocity[face, : lattice.d].copy(),
                             float(tables.face_density[face])))
    return out


def zou_he(g, zf: ZouHeFace, lattice: Lattice, force, incompressible: bool, xp=np):
    """Overwrite the unknown populations of g (q, n) at Zou-He nodes of face ``zf``, in place.

    With ``K = sum_T g + 2 sum_O g`` and ``j' = rho u - F/2`` (``u - F/2`` incompressible) the
    density follows from ``rho - j'.n = K``; the unknowns are non-equilibrium bounce-back
    ``g_i = g_opp(i) + 6 w_i c_i . j'`` plus a tangential correction spread over the unknowns
    with ``c_it != 0`` so that ``sum_i c_i g_i = j'`` exactly (Zou & He 1997, Hecht & Harting
    2010, written for any of our lattices).
    """
    force = np.asarray(force, dtype=np.float64)
    n = zf.normal
    k = g[zf.tangential].sum(axis=0) + 2.0 * g[zf.outgoing].sum(axis=0)
    f_n = float(force @ n)
    half_f = xp.asarray(0.5 * force, dtype=g.dtype)[:, None]
    _, j = face_kind(zf.kind).closure(k, zf, f_n, half_f, incompressible, xp)
    c = lattice.c[zf.unknown].astype(np.float64)
    opp = lattice.opposite[zf.unknown]
    coef = xp.asarray(6.0 * lattice.w[zf.unknown, None] * c, dtype=g.dtype)
    g[zf.unknown] = g[opp] + coef @ j
    # Tangential momentum: spread the remainder over unknowns with c_t != 0.
    ct = xp.asarray(lattice.c.T, dtype=g.dtype)
    for t in np.flatnonzero(n == 0):
        share = c[:, t] / (c[:, t] ** 2).sum()
        delta = j[t] - ct[t] @ g
        g[zf.unknown] += xp.asarray(share, dtype=g.dtype)[:, None] * delta
    return g


@dataclass(frozen=True)
class LaddLinks:
    """Bounced links carrying Ladd's term: direction, fluid-node index (pull-table order) and
    the constant ``6 w_i rho_w c_i . u_w`` added to the pulled population (lattice units)."""

    direction: np.ndarray
    node: np.ndarray
    value: np.ndarray


def ladd_links(table, tiling: Tiling, lattice: Lattice, tables: BoundaryTables,
               periodic: tuple[bool, ...]) -> LaddLinks:
    """Ladd corrections of every bounced link of ``table`` (a :class:`PullTable`) that moves.

    Unknown populations of Zou-He nodes are skipped: :func:`zou_he` overwrites them.
    """
    coords = tiling.node_coordinates()[table.tile, table.node]
    node_type = tables.node_type[table.tile, table.node]
    wall_u = tables.wall_velocity[tables.wall_group[table.tile, table.node], : lattice.d]
    node_type = node_type.astype(np.int64)
    zou_faces = np.where(node_type >= NodeType.VELOCITY_X_MIN, (node_type - 2) % 6, -1)
    parts = ([], [], [])
    for i, c in enumerate(lattice.c):
        k = np.flatnonzero(table.bounce[i])
        source = coords[k] - c
        face = crossed_face(source, tiling.shape, periodic, tables.face_rank)
        u = np.where((face >= 0)[:, None], tables.face_velocity[face, : lattice.d], wall_u[k])
        # Zou-He unknowns: the link enters through the node's own Zou-He face.
        zf = zou_faces[k]
        axis, side = zf // 2, zf % 2
        inward = np.where(side == 0, 1, -1)
        unknown = (zf >= 0) & (np.take(c, np.clip(axis, 0, None)) * inward == 1)
        value = 6.0 * lattice.w[i] * tables.rho_wall * (u @ c.astype(np.float64))
        keep = (value != 0.0) & ~unknown
        parts[0].append(np.full(keep.sum(), i, dtype=np.int64))
        parts[1].append(k[keep])
        parts[2].append(value[keep])
    direction, node, value = (np.concatenate(p) for p in parts)
    order = np.argsort(node, kind="stable")
    return LaddLinks(direction[order], node[order], value[order])
