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

Only two copies are supported with openings (:func:`~solver.backends.plan.distributed_refusal`
refuses in-place streaming with them): the in-place phase-1 addresses are not kept.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..iolets import IoletTables
from .decomposition import SlabDecomposition

__all__ = ["pass_reads", "rank_tables"]


def pass_reads(tables: IoletTables | None, dec: SlabDecomposition, q: int,
               nodes_per_tile: int) -> tuple[np.ndarray, np.ndarray]:
    """(reading rank, global XYZ flat index ``(tile q + i) a^d + node``) of every slot the
    openings' pass reads (two copies), int64; empty without driven openings."""
    if tables is None or tables.n_links == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    addr = tables.addresses(q, nodes_per_tile)
    reader = dec.owner[tables.tile].astype(np.int64)
    # The own populations sit in the link's own tile; only the donor may be elsewhere.
    return reader, addr.donor.astype(np.int64)


def _local(tiles: np.ndarray, local_of: np.ndarray) -> np.ndarray:
    out = local_of[tiles]
    if np.any(out < 0):
        raise RuntimeError("An opening link reads a tile this rank does not hold; the halo "
                           "plan must carry the openings' reads (solver.distributed.openings).")
    return out


def rank_tables(tables: IoletTables | None, global_tiles: np.ndarray, n_owned: int,
                n_tiles: int) -> tuple[IoletTables | None, np.ndarray]:
    """(the links of the rank holding ``global_tiles`` (its first ``n_owned`` owned) with
    local tile numbers, or None where it holds none; their global link numbers, int64)."""
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
    local = dataclasses.replace(
        tables, opening=tables.opening[links], code=tables.code[links],
        tile=_local(tables.tile[links], local_of), node=tables.node[links],
        direction=tables.direction[links], value=tables.value[links].copy(),
        _own=(own, own), _donor=(donor, donor), mean_nodes={},
        wave=tables.wave[:, links] if tables.harmonics else tables.wave)
    return local, links
