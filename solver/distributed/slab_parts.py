"""Rank 0 cuts each serving rank's part out of the whole problem: a serving rank holds its slab.

:class:`~solver.distributed.backend.DistributedBackend` drives an ordinary
:class:`~solver.simulation.Simulation` on rank 0, which holds the whole problem (its outputs
gather whole fields). The other ranks need only what their
:class:`~solver.distributed.rank.RankSolver` reads, so rank 0 cuts for rank ``r``
(:func:`rank_part`) and sends it alone:

- the tiles of the tile layers ``r`` reads, its slab and one layer each side (wrapped on a
  periodic axis, :func:`~solver.distributed.decomposition.rank_layers`), numbered in ascending
  global order: two ranks then number the tiles both hold in the same relative order, which is
  all the halo plan (:func:`~solver.distributed.halo.build_rank`) needs to match buffers;
- the decomposition's owner of each of those tiles;
- the opening links whose pass ``r`` runs or feeds: those of its owned tiles and those whose
  donor (the node whose value another rank's pass reads, in either AA phase) it owns, with
  every tile they address (added to the part where beyond the halo layers), their tables in
  the part's tile numbers, and their global link numbers (the order of the gathered flux).

A rank's solver over its part equals its solver over the whole problem: the same local tiles
in the same order, the same halo plan and the same opening links (tests/solver/
test_slab_parts.py). Lengths in nodes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..iolets import IoletTables
from ..problem import Problem
from ..tiling import Tiling
from .decomposition import SlabDecomposition, rank_layers

__all__ = ["RankPart", "rank_part"]


@dataclass(frozen=True)
class RankPart:
    """What a serving rank builds its solver from: ``problem`` over the part's tiles,
    ``decomposition`` (the owner of each), ``tiles`` their global numbers (int64) and
    ``links`` the global numbers of ``problem.iolets``' links (int64)."""

    problem: Problem
    decomposition: SlabDecomposition
    tiles: np.ndarray
    links: np.ndarray

    def global_tiles(self, local: np.ndarray) -> np.ndarray:
        """Global numbers of the part's tiles ``local`` (int64)."""
        return self.tiles[np.asarray(local, dtype=np.int64)]


def _layer_tiles(tiling: Tiling, dec: SlabDecomposition, rank: int, periodic: bool
                 ) -> np.ndarray:
    """Global tiles of the layers ``rank`` reads (its slab and the halo layers), bool."""
    layer = tiling.tiles[:, dec.axis]
    keep = np.zeros(tiling.n_tiles, dtype=bool)
    for first, end in rank_layers(np.asarray(dec.bounds), rank, periodic):
        keep |= (layer >= first) & (layer < end)
    return keep


def _kept_links(tables: IoletTables, owner: np.ndarray, rank: int) -> np.ndarray:
    """Links whose pass ``rank`` runs (their node's tile is its own) or whose donor value it
    sends (the donor's phase-0 tile: also the writer of the phase-1 donor slot)."""
    return np.flatnonzero((owner[tables.tile] == rank) | (owner[tables._donor[0][0]] == rank))


def _addressed_tiles(tables: IoletTables, links: np.ndarray) -> np.ndarray:
    """Every global tile the links ``links`` address in either phase (int64)."""
    parts = [tables.tile[links]]
    for phase in (0, 1):
        parts += [np.asarray(tables._own[phase][0])[..., links].ravel(),
                  np.asarray(tables._donor[phase][0])[links]]
    return np.unique(np.concatenate(parts).astype(np.int64))


def _cut_tables(tables: IoletTables, links: np.ndarray, part_of: np.ndarray) -> IoletTables:
    """``tables`` of the links ``links`` with tile numbers of the part (``part_of`` maps a
    global tile to it)."""

    def where(triple: tuple) -> tuple:
        tile, direction, node = (np.asarray(a)[..., links] for a in triple)
        return part_of[tile], direction, node

    return dataclasses.replace(
        tables, opening=tables.opening[links], code=tables.code[links],
        tile=part_of[tables.tile[links]], node=tables.node[links],
        direction=tables.direction[links], value=tables.value[links].copy(),
        _own=tuple(where(t) for t in tables._own),
        _donor=tuple(where(t) for t in tables._donor), mean_nodes={},
        wave=tables.wave[:, links] if tables.harmonics else tables.wave)


def rank_part(problem: Problem, dec: SlabDecomposition, rank: int) -> RankPart:
    """The part of the whole ``problem`` that ``rank`` of ``dec`` builds its solver from."""
    tiling, tables = problem.tiling, problem.iolets
    keep = _layer_tiles(tiling, dec, rank, problem.periodic[dec.axis])
    links = np.empty(0, dtype=np.int64)
    if tables is not None:
        links = _kept_links(tables, dec.owner, rank)
        keep[_addressed_tiles(tables, links)] = True
    tiles = np.flatnonzero(keep).astype(np.int64)
    part_of = np.full(tiling.n_tiles, -1, dtype=np.int64)
    part_of[tiles] = np.arange(tiles.size)
    tile_map = np.full(tiling.tile_map.shape, -1, dtype=np.int32)
    tile_map[tuple(tiling.tiles[tiles].T)] = np.arange(tiles.size, dtype=np.int32)
    local = Tiling(tiling.shape, tiling.a, tiling.offset, tile_map, tiling.tiles[tiles],
                   tiling.solid[tiles])
    part_tables = None if tables is None or links.size == 0 else \
        _cut_tables(tables, links, part_of)
    cut = dataclasses.replace(problem, tiling=local, owned=None).use_iolets(part_tables)
    decomposition = dataclasses.replace(dec, owner=dec.owner[tiles])
    return RankPart(cut, decomposition, tiles, links)
