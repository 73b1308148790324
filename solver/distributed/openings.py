"""Driven openings over MPI ranks: each opening link belongs to the rank that owns its node.

The openings' pass (:mod:`solver.iolets`) rewrites, before each step, the slot ``(x, j)`` of
every link that crosses an opening, from values of the copy the step reads: the node's own
post-collision populations (slots of ``x``, always in the tile of ``x``) and, for ``outflow``
links, a donor slot near ``x`` that may lie in a tile another rank owns. So:

- the global per-link tables are built once from the global problem (the profile's rescaling
  to the exact flow rate sums over all links of an opening, whichever rank holds them), and
  :func:`rank_tables` keeps the links whose node lies in the rank's owned tiles, with their
  tile numbers made local and their global link numbers kept (``links``);
- :func:`pass_reads` lists the slots each link's pass reads, by reading rank; the halo plan
  (:func:`solver.distributed.halo.build_rank`) adds those held by another rank to what that
  rank sends every step (after its boundary tiles, like the pulled values), so the pass reads
  the same values as in one process;
- the per-link mass flux of the last step is gathered to rank 0 in global link order, where
  :func:`solver.vessel.flow_rates` sums it per opening exactly as one process does (the same
  per-link values added in the same order: flow rates and mass balance are bit for bit
  those of one process).

In place (one copy, AA pattern) the pass reads the layout of the phase the step starts from
(:meth:`~solver.iolets.IoletTables.addresses` per parity), so each phase has its reads:

- phase 0 (natural layout, filled by the exchange after a phase-1 step): as two copies, the
  donor slots, held by the owner of their tile;
- phase 1 (streamed layout, filled by the exchange after a phase-0 step): slot ``(z, k)``
  then holds what the neighbour step of node ``z + c_k`` wrote there (of ``z`` itself where
  ``z + c_k`` is no fluid node), which is the node of the link's phase-0 location of the same
  read (own: ``x``; donor: ``y + c_j`` or ``y``). So the rank *owning that writer* has the value
  right after its step, in an owned or a halo slot, and sends it
  (:func:`~solver.distributed.halo.build_rank`'s ``streamed_reads``); the own reads are
  written by ``x`` itself and never travel.

:func:`rank_tables` keeps both phases' locations of an in-place rank's links (local tiles).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..iolets import IoletTables
from .decomposition import SlabDecomposition

__all__ = ["pass_reads", "rank_tables"]


def pass_reads(tables: IoletTables | None, dec: SlabDecomposition, q: int,
               nodes_per_tile: int, parity: int = 0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(reading rank, global XYZ flat index ``(tile q + i) a^d + node``, global tile whose
    node writes the value in the step before) of every slot the openings' pass reads in AA
    phase ``parity`` (two copies: 0), int64; empty without driven openings.

    Phase 0 (and two copies): the donors, each written by its own node (the slot's tile); the
    own populations sit in the link's own tile. Phase 1: the own and donor slots of the
    streamed layout, each written by the node of the same read's phase-0 location (see the
    module docstring)."""
    empty = np.empty(0, np.int64)
    if tables is None or tables.n_links == 0:
        return empty, empty, empty
    block = q * nodes_per_tile
    reader = dec.owner[tables.tile].astype(np.int64)
    if parity == 0:
        donor = tables.addresses(q, nodes_per_tile).donor.astype(np.int64)
        return reader, donor, donor // block
    streamed = tables.addresses(q, nodes_per_tile, parity=1)
    writers = tables.addresses(q, nodes_per_tile, parity=0)
    flat = np.concatenate([streamed.own.ravel(), streamed.donor]).astype(np.int64)
    writer = np.concatenate([writers.own.ravel(), writers.donor]).astype(np.int64) // block
    readers = np.concatenate([np.broadcast_to(reader, streamed.own.shape).ravel(), reader])
    return readers, flat, writer


def _local(tiles: np.ndarray, local_of: np.ndarray) -> np.ndarray:
    out = local_of[tiles]
    if np.any(out < 0):
        raise RuntimeError("An opening link reads a tile this rank does not hold; the halo "
                           "plan must carry the openings' reads (solver.distributed.openings).")
    return out


def rank_tables(tables: IoletTables | None, global_tiles: np.ndarray, n_owned: int,
                n_tiles: int, in_place: bool = False) -> tuple[IoletTables | None, np.ndarray]:
    """(the links of the rank holding ``global_tiles`` (its first ``n_owned`` owned) with
    local tile numbers, or None where it holds none; their global link numbers, int64).
    ``in_place``: keep the phase-1 locations too (else phase 0's stand for both)."""
    if tables is None:
        return None, np.empty(0, np.int64)
    local_of = np.full(n_tiles, -1, dtype=np.int64)
    local_of[global_tiles] = np.arange(len(global_tiles))
    owned = np.zeros(n_tiles, dtype=bool)
    owned[global_tiles[:n_owned]] = True
    links = np.flatnonzero(owned[tables.tile]).astype(np.int64)
    if links.size == 0:
        return None, links

    def where(triple: tuple) -> tuple:
        tile, direction, node = (np.asarray(a)[..., links] for a in triple)
        return _local(tile, local_of), direction, node

    own, donor = where(tables._own[0]), where(tables._donor[0])
    own1, donor1 = (where(tables._own[1]), where(tables._donor[1])) if in_place else (own, donor)
    local = dataclasses.replace(
        tables, opening=tables.opening[links], code=tables.code[links],
        tile=_local(tables.tile[links], local_of), node=tables.node[links],
        direction=tables.direction[links], value=tables.value[links].copy(),
        _own=(own, own1), _donor=(donor, donor1), mean_nodes={},
        wave=tables.wave[:, links] if tables.harmonics else tables.wave)
    return local, links
