"""What one rank holds and what it exchanges: owned tiles, halo tiles and the halo plan.

A rank steps the fluid nodes of its owned tiles. A fused pull step at node ``x`` reads
``f_i(x - c_i)``, so the nodes in the first and last owned tile layer read from the
neighbouring slabs; the tiles they read from (periodic wrap included) are the rank's *halo*,
held read-only. Everything stays in GLOBAL domain coordinates: a rank's local :class:`Tiling`
has the global shape, offset and tile grid, and its ``tile_map`` lists only the local tiles
(every other tile reads as solid, and is never read). Periodic wrap, walls and domain sizes that
are not multiples of the tile edge therefore behave exactly as in one process.

Local tile order is ``[boundary owned | interior owned | halo]``, each part in global tile order:
*boundary* tiles hold a node another rank pulls from, so a step computes them first, sends them,
and computes the interior while the messages travel.

The exchange moves only what is read: the ``f_i`` of fluid nodes ``y`` that a fluid node
``x = y + c_i`` of another rank pulls. These are the directions that cross the slab face
(across the face on the ``+axis`` side of a slab only ``f_i`` with ``c_i[axis] > 0`` travel, see
:func:`crossing_directions`), and only from the node layer next to the face. Sender and
receiver enumerate the same links from their two ends and sort them by the sender's global
index, so the plan needs no communication to set up and matching buffers line up element for
element.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..lattice import Lattice
from ..streaming import PullTable
from ..tiling import Tiling
from .decomposition import SlabDecomposition

__all__ = ["crossing_directions", "RankLayout", "HaloPlan", "build_rank", "check_plan_covers",
           "in_place_plans"]


def crossing_directions(lattice: Lattice, axis: int, side: int) -> np.ndarray:
    """Directions that leave a slab through its face on ``side`` (+1 or -1) of ``axis``."""
    if side not in (1, -1):
        raise ValueError(f"side must be +1 or -1, got {side}.")
    return np.flatnonzero(lattice.c[:, axis] * side > 0)


@dataclass(frozen=True)
class RankLayout:
    """The tiles of one rank: ``global_tiles`` (int64, n_local) in the order boundary owned,
    interior owned, halo; ``tiling`` is the local tiling in global coordinates."""

    rank: int
    global_tiles: np.ndarray
    n_boundary: int
    n_owned: int
    tiling: Tiling

    @property
    def n_halo(self) -> int:
        """Read-only neighbour tiles."""
        return len(self.global_tiles) - self.n_owned

    @property
    def owned(self) -> np.ndarray:
        """Bool (n_local,): the tile is stepped by this rank."""
        return np.arange(len(self.global_tiles)) < self.n_owned


@dataclass(frozen=True)
class HaloPlan:
    """Per peer rank, flat indices ``(tile * q + i) * a**d + node`` into one local copy of f:
    ``send`` (owned values to pack) and ``recv`` (halo slots to fill), int64, matched in order."""

    send: dict[int, np.ndarray]
    recv: dict[int, np.ndarray]
    #: In place with reads besides the pulls (the openings' pass): the exchange after a
    #: phase-0 step, built with the plan (:func:`in_place_plans`); None: this plan reversed.
    after_neighbour: HaloPlan | None = None

    @property
    def peers(self) -> tuple[int, ...]:
        """Ranks this rank exchanges with."""
        return tuple(sorted(set(self.send) | set(self.recv)))

    def values_sent(self) -> int:
        """Populations sent per step."""
        return int(sum(v.size for v in self.send.values()))

    def reversed(self) -> HaloPlan:
        """The plan with ``send`` and ``recv`` exchanged: halo slots go back to their owners
        (in-place streaming after its neighbour step, :func:`in_place_plans`)."""
        return HaloPlan(dict(self.recv), dict(self.send))


def in_place_plans(plan: HaloPlan) -> tuple[HaloPlan, HaloPlan]:
    """The halo plans of in-place streaming (AA pattern, :mod:`solver.backends.cuda.streaming`)
    by the phase a step starts from: ``(after phase 0, after phase 1)``.

    Why, for one fluid-fluid link between node ``y`` of rank P and ``x = y + c_i`` of rank R
    (the two-copy ``plan`` moves slot ``(y, i)`` from P's owned tile to R's halo tile):

    - phase 0 (natural layout, slot ``(z, j)`` holds ``f*_j(z)``). The neighbour step at ``x``
      reads ``(x - c_j, j)`` for every j, so it needs the halo slot ``(y, i)`` = ``f*_i(y)``:
      what the two-copy plan fills. It then writes ``f*_opp(i)(x)`` back into the slot it read,
      ``(y, i)`` (the AA pattern writes each value where its opposite came from). One process
      has that value in slot ``(y, i)`` of the streamed layout, but on P slot ``(y, i)`` is owned
      and no node of P writes it (only x does, on R). So after a phase-0 step the exchange is
      the two-copy plan reversed: R's halo slot ``(y, i)`` goes to P's owned slot ``(y, i)``.
      Every other slot a phase-0 step of P writes belongs to P's own nodes or to links inside P.
    - phase 1 (streamed layout). The local step reads and writes the slots of its own node
      only, so it needs no halo, and leaves the natural layout: the next (phase-0) step needs
      the halo slots ``(y, i)`` = ``f*_i(y)`` again, which P's local step has just written into
      its owned slot ``(y, i)``. So after a phase-1 step the exchange is the two-copy plan.

    Neither exchange writes a slot that the other tile range of the same step touches: the
    owned slots ``(y, i)`` filled after phase 0 are read and written only by ``x`` (on R), and
    halo slots by no owned interior node; the packed values are written by the boundary tiles
    (their nodes are the ends of the cross-rank links), so the two-copy overlap of boundary
    tiles, messages and interior holds for both phases. A 'swap' decoding of phase 1 on every
    rank at once (a collective readout) leaves each halo slot ``(y, i)`` holding ``f*_i(y)``
    of phase 0: it exchanges the owned slot ``(x, opp(i))`` (filled by the reversed exchange)
    with it, as one process would.

    Values read besides the pulls (the openings' pass, :mod:`solver.distributed.openings`)
    are not reversed: ``plan`` carries those of phase 0 (sent by the owner of their tile, as
    two copies), and ``plan.after_neighbour`` (:func:`build_rank`'s ``streamed_reads``) the
    pulls' reverse with those of phase 1, each sent by the rank whose node wrote it in the
    phase-0 step. That writer is a boundary tile of its rank, so the overlap holds too."""
    after0 = plan.after_neighbour if plan.after_neighbour is not None else plan.reversed()
    return after0, plan


def _edge_nodes(tiling: Tiling, dec: SlabDecomposition, rank: int, lattice: Lattice,
                periodic: tuple[bool, ...]):
    """Global tile and node of the fluid nodes in the first and last owned tile layer that
    have a neighbour within the lattice's reach along the axis (wrapped where periodic) in a
    tile layer outside the slab: the only nodes a link to another rank can start from (a 4³
    tile layer's inner node layers cannot; all of them were enumerated, 4 times the work)."""
    axis, a = dec.axis, tiling.a
    layer = tiling.tiles[:, axis]
    lo, hi = dec.bounds[rank], dec.bounds[rank + 1] - 1
    tiles = np.flatnonzero((dec.owner == rank) & ((layer == lo) | (layer == hi)))
    t, node = np.nonzero(~tiling.solid[tiles])
    x = (layer[tiles[t]].astype(np.int64) * a - tiling.offset[axis]
         + tiling.local_coordinates()[node, axis])
    n = tiling.shape[axis]
    near = np.zeros(len(x), dtype=bool)
    for step in range(1, int(np.abs(lattice.c[:, axis]).max()) + 1):
        for other in (x - step, x + step):
            inside = np.ones(len(x), dtype=bool) if periodic[axis] else (other >= 0) & (other < n)
            other_layer = (other % n + tiling.offset[axis]) // a
            near |= inside & ((other_layer < lo) | (other_layer > hi))
    return tiles[t[near]], node[near]


def _links(tiling: Tiling, dec: SlabDecomposition, rank: int, lattice: Lattice,
           periodic: tuple[bool, ...], sign: int):
    """Pull links between edge nodes ``y`` of ``rank`` and fluid nodes ``y + sign c_i`` of
    other ranks: (peer, flat global index of the pulled value, tile of the other node)."""
    all_tiles, all_nodes = _edge_nodes(tiling, dec, rank, lattice, periodic)
    q, n_node, axis = lattice.q, tiling.nodes_per_tile, dec.axis
    corner = tiling.tiles[all_tiles].astype(np.int64) * tiling.a - np.array(tiling.offset)
    all_coords = corner + tiling.local_coordinates()[all_nodes]
    shape = np.array(tiling.shape)
    lo, hi = dec.bounds[rank], dec.bounds[rank + 1] - 1
    peers, flats, others = [], [], []
    for i in range(q):
        # Only the nodes whose neighbour along c_i lies in a tile layer outside the slab
        # (another rank's: the slabs own whole tile layers); c_i across the axis never leaves.
        step = sign * int(lattice.c[i, axis])
        if step == 0:
            continue
        y = all_coords[:, axis] + step
        inside = np.ones(len(y), dtype=bool) if periodic[axis] else (y >= 0) & (y < shape[axis])
        layer = (y % shape[axis] + tiling.offset[axis]) // tiling.a
        pick = np.flatnonzero(inside & ((layer < lo) | (layer > hi)))
        tile, node, coords = all_tiles[pick], all_nodes[pick], all_coords[pick]
        other = coords + sign * lattice.c[i]
        outside = np.zeros(len(other), dtype=bool)
        for ax, is_periodic in enumerate(periodic):
            if is_periodic:
                other[:, ax] %= shape[ax]
            else:
                outside |= (other[:, ax] < 0) | (other[:, ax] >= shape[ax])
        o_tile, o_node = tiling.locate(np.where(outside[:, None], coords, other))
        keep = ~outside & (o_tile >= 0)
        keep[keep] = ~tiling.solid[o_tile[keep], o_node[keep]]
        keep[keep] = dec.owner[o_tile[keep]] != rank
        # The pulled value lives at the source end: the other node when sign < 0, else y.
        src_tile, src_node = (o_tile, o_node) if sign < 0 else (tile, node)
        peers.append(dec.owner[o_tile[keep]])
        flats.append((src_tile[keep].astype(np.int64) * q + i) * n_node + src_node[keep])
        others.append(o_tile[keep])
    return (np.concatenate(peers + [np.empty(0, dec.owner.dtype)]),
            np.concatenate(flats + [np.empty(0, np.int64)]),
            np.concatenate(others + [np.empty(0, tiling.tile_map.dtype)]))


def _local_flat(flat: np.ndarray, local_of: np.ndarray, block: int) -> np.ndarray:
    """Global flat index -> local flat index, with ``local_of`` mapping global -> local tile."""
    local = local_of[flat // block]
    if np.any(local < 0):
        raise RuntimeError("The halo plan moves a value of a tile this rank does not hold "
                           "(solver/distributed/halo.py).")
    return local * block + flat % block


def _split_reads(reads, owner: np.ndarray, block: int, rank: int):
    """(peer, global flat, tile) of the values ``rank`` receives and (peer, global flat) of
    those it sends, of ``reads`` = (reading rank, global flat[, global tile whose node writes
    the value: its owner sends it; default the value's own tile])."""
    empty = np.empty(0, np.int64)
    if reads is None or not len(reads[0]):
        return (empty, empty, empty), (empty, empty)
    reader, flat = np.asarray(reads[0], np.int64), np.asarray(reads[1], np.int64)
    writer = flat // block if len(reads) < 3 else np.asarray(reads[2], np.int64)
    sender = owner[writer].astype(np.int64)
    mine = (reader == rank) & (sender != rank)
    theirs = (sender == rank) & (reader != rank)
    return (sender[mine], flat[mine], flat[mine] // block), (reader[theirs], flat[theirs])


def _per_peer(peer: np.ndarray, flat: np.ndarray, local_of: np.ndarray, block: int
              ) -> dict[int, np.ndarray]:
    """Local flat indices per peer, each peer's in ascending global order (both ends of a
    message enumerate the same values in the same order)."""
    return {int(p): _local_flat(_sorted_unique(flat[peer == p]), local_of, block)
            for p in _sorted_unique(peer)}


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` by one sort (np.unique's hash pass cost as much again)."""
    out = np.sort(values)
    return out[np.concatenate([[True], out[1:] != out[:-1]])] if out.size else out


def _marked(n: int, *indices: np.ndarray) -> np.ndarray:
    """Bool (n,): True at every index of ``indices``."""
    mask = np.zeros(n, dtype=bool)
    for index in indices:
        mask[index] = True
    return mask


def build_rank(tiling: Tiling, dec: SlabDecomposition, lattice: Lattice,
               periodic: tuple[bool, ...], rank: int,
               reads: tuple[np.ndarray, ...] | None = None,
               streamed_reads: tuple[np.ndarray, ...] | None = None
               ) -> tuple[RankLayout, HaloPlan]:
    """Layout and halo plan of ``rank`` (pure host computation, no communication).

    ``reads``: (reading rank, global flat index[, global tile whose node writes the value])
    of values read besides the pulls, e.g. the openings' pass
    (:func:`solver.distributed.openings.pass_reads`), the same on every rank; those another
    rank's node writes travel with the halo, sent by that rank. ``streamed_reads``: in place,
    the same for the reads before a phase-1 step; the plan's ``after_neighbour`` then holds the
    exchange after a phase-0 step (:func:`in_place_plans`)."""
    block = lattice.q * tiling.nodes_per_tile
    empty = np.empty(0, np.int64)
    pull_in = pull_out = (empty, empty, empty)
    if dec.n_ranks > 1:
        pull_in = _links(tiling, dec, rank, lattice, periodic, -1)
        out_peer, out_flat, _ = _links(tiling, dec, rank, lattice, periodic, +1)
        pull_out = (out_peer, out_flat, out_flat // block)
    (r_peer, r_flat, r_tile), (s_peer, s_flat) = _split_reads(
        reads if dec.n_ranks > 1 else None, dec.owner, block, rank)
    in_peer = np.concatenate([pull_in[0], r_peer])
    in_flat = np.concatenate([pull_in[1], r_flat])
    in_tile = np.concatenate([pull_in[2], r_tile])
    out_peer = np.concatenate([pull_out[0], s_peer])
    out_flat = np.concatenate([pull_out[1], s_flat])
    sent_by = [out_flat // block]  # tiles whose nodes write what this rank sends
    streamed = None
    if streamed_reads is not None and dec.n_ranks > 1:
        (t_peer, t_flat, t_tile), (u_peer, u_flat) = _split_reads(
            streamed_reads, dec.owner, block, rank)
        streamed = (t_peer, t_flat, u_peer, u_flat)
        in_tile = np.concatenate([in_tile, t_tile])
        reader = np.asarray(streamed_reads[0], np.int64)
        writer = np.asarray(streamed_reads[2], np.int64)
        sent_by.append(writer[(dec.owner[writer] == rank) & (reader != rank)])
    # Sorted tile sets by masks over the tiles: one pass each, no sort of the owned tiles.
    is_owned = dec.owner == rank
    sends = _marked(tiling.n_tiles, *sent_by)
    boundary = np.flatnonzero(sends & is_owned)
    interior = np.flatnonzero(is_owned & ~sends)
    halo = np.flatnonzero(_marked(tiling.n_tiles, in_tile) & ~is_owned)
    global_tiles = np.concatenate([boundary, interior, halo]).astype(np.int64)
    local_of = np.full(tiling.n_tiles, -1, dtype=np.int64)
    local_of[global_tiles] = np.arange(len(global_tiles))
    tile_map = np.full(tiling.tile_map.shape, -1, dtype=np.int32)
    tile_map[tuple(tiling.tiles[global_tiles].T)] = np.arange(len(global_tiles), dtype=np.int32)
    local = Tiling(tiling.shape, tiling.a, tiling.offset, tile_map,
                   tiling.tiles[global_tiles], tiling.solid[global_tiles])
    layout = RankLayout(rank, global_tiles, len(boundary), len(boundary) + len(interior), local)
    after_neighbour = None
    if streamed is not None:
        # The pulls' reverse (halo slots back to their owners) with the phase-1 reads.
        t_peer, t_flat, u_peer, u_flat = streamed
        after_neighbour = HaloPlan(
            _per_peer(np.concatenate([pull_in[0], u_peer]),
                      np.concatenate([pull_in[1], u_flat]), local_of, block),
            _per_peer(np.concatenate([pull_out[0], t_peer]),
                      np.concatenate([pull_out[1], t_flat]), local_of, block))
    plan = HaloPlan(_per_peer(out_peer, out_flat, local_of, block),
                    _per_peer(in_peer, in_flat, local_of, block), after_neighbour)
    return layout, plan


def check_plan_covers(table: PullTable, plan: HaloPlan, layout: RankLayout, q: int) -> None:
    """Raise RuntimeError if the pull table reads a halo value that the plan does not fill."""
    block = q * layout.tiling.nodes_per_tile
    src = table.src.ravel().astype(np.int64)
    reads = np.unique(src[src // block >= layout.n_owned])
    filled = np.concatenate([np.empty(0, np.int64), *plan.recv.values()])
    missing = np.setdiff1d(reads, filled)
    if missing.size:
        raise RuntimeError(f"Rank {layout.rank}: the streaming step reads {missing.size} halo "
                           "values that no neighbour sends; the halo plan assumes pulls from "
                           "nearest neighbours only (solver/distributed/halo.py).")
