"""The coarse start of the mirrored permeability over ranks: the one-GPU start, slab by slab.

On one device (:mod:`solver.rock.initial`, ``PermeabilitySettings.coarse_levels``) the protocol
first runs on the sample coarsened by 2 (or a chain: by 4 from rest, then by 2), prolongates
that flow to the fine grid and starts the fine run from its equilibrium. Here every level runs
over the same ranks as the fine run, and no rank holds more than its slabs:

- **Geometry.** Level ``l`` is the sample coarsened by 2, ``l`` times
  (:class:`geometries.regions.CoarsenedRegions`, :func:`~geometries.preprocess.downsample`'s
  majority vote, ties fluid), mirrored along the flow axis as the fine box is
  (:class:`~geometries.regions.MirroredRegions`; the sample's length is even at every level,
  so this is the coarsened mirrored box, as :func:`~solver.rock.initial.coarse_setup` builds it
  from the sample half). A coarse layer is made from its own 2 fine layers and nothing else,
  so a rank reads exactly the fine layers under its coarse slab (and halo): **no overlap or
  fine halo is needed to coarsen consistently**; the price is that every level reads the fine
  image again through the region source (a generated image is stamped again).
- **Slabs.** The fine slab bounds are cut on multiples of ``2^L`` tile layers
  (:meth:`~solver.distributed.local_setup.SlabSummary.bounds`; at most ``2^L - 1`` layers from
  the balanced cut) and level ``l`` takes them divided by ``2^l``: a rank's coarse slab is the
  coarsening of its fine slab, so the prolongation reads only the rank's own coarse tiles and
  nothing crosses between ranks but one ``allgather`` of the mean density. The coarse levels
  are balanced as the fine run (their tile counts per layer follow the fine ones).
- **Runs.** Every level is the fine protocol's config with the body force times ``2^l`` (the
  same pressure drop per sample, :func:`~solver.rock.initial.coarse_setup`'s scaling), the
  tile grid at the origin, stepped by the ranks with k checked from reduced numbers (as the
  fine run, :mod:`solver.distributed.mirrored`) to
  :func:`~solver.rock.measure.level_tolerance` (the one-GPU rule: ``coarse_tolerance_factor``
  times the tolerance, the coarsest of a chain to the tolerance itself).
- **Prolongation.** The coarse moments of a rank's owned tiles (a readout chunk at a time)
  become a :class:`~solver.rock.initial.CoarseTable`, and
  :func:`~solver.rock.initial.prolonged_populations` builds the fine owned tiles' equilibria
  a chunk at a time, written with ``set_populations(..., tiles=)`` (at 1600³ a whole float32
  copy would be 63 GB beside the 63 GB state), then the fine halo is exchanged. Fine nodes
  whose coarse node is solid get the mean coarse density over all ranks, as on one device.

What differs from one device: the pores not joining the faces are kept at every level (as in the
fine distributed run; finding them needs the whole image), so the comparison with the one-device
start is made on samples without such pores. Memory: two neighbouring levels at a time; the
level coarsened by 2 holds about 1/8 of the fine state, its moment table 32 bytes per coarse
tile node. Lattice units.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from geometries.regions import CachedRegions, CoarsenedRegions, MirroredRegions, RegionSource

from ..config import SimulationConfig
from ..fields import tile_moments
from ..rock.initial import FACTOR, PLAIN, CoarseTable, StartScale, prolonged_populations
from ..rock.measure import level_tolerance
from ..rock.settings import PermeabilitySettings
from .local_setup import SlabSummary, summarize
from .rank import RankSolver
from .reductions import READ_TILES

__all__ = ["CoarseLevel", "chain_scale", "feasible_levels", "coarse_levels", "release_levels",
           "coarse_table", "prolong_owned", "prolong_ranks", "run_levels"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CoarseLevel:
    """Level ``level`` (1: coarsened by 2) of a coarse start: its mirrored ``box``, the
    ``summary`` of it, its ``config`` and the slab ``bounds`` (tile layers)."""

    level: int
    box: RegionSource
    summary: SlabSummary
    config: SimulationConfig
    bounds: np.ndarray

    @property
    def scale(self) -> int:
        """Fine voxels per coarse voxel along an axis."""
        return FACTOR**self.level


def feasible_levels(sample_shape: tuple[int, ...], axis: int, a: int, wanted: int) -> int:
    """How many of ``wanted`` levels the sample allows: at every level each axis even and at
    least 8 voxels before it is halved (:func:`~solver.rock.initial.coarse_setup`'s rule), and
    the mirrored box's tile layers divisible by ``2^levels`` (the slabs halve exactly)."""
    levels = 0
    while levels < wanted:
        n = levels + 1
        shape = [s // FACTOR**levels for s in sample_shape]
        if any(s % FACTOR or s < 4 * FACTOR for s in shape):
            break
        if (2 * sample_shape[axis]) % (a * FACTOR**n):
            break
        levels = n
    return levels


def coarse_levels(sample: RegionSource, axis: int, config: SimulationConfig, levels: int,
                  fine_bounds: np.ndarray, a: int, comm: Any) -> list[CoarseLevel]:
    """The levels 1..``levels`` of the start of the fine run (``config``, slab ``bounds`` on
    multiples of ``2^levels`` tile layers of edge ``a``), finest first (collective: each is
    summarised by the ranks); fewer where a level leaves a rank without fluid tiles."""
    out: list[CoarseLevel] = []
    current = sample
    values = {k: v for k, v in config.param.values().items() if k != "name"}
    for level in range(1, levels + 1):
        # Kept as coarsened (1/8 of the layers below, a few per cent of the fine slab): the
        # level's summary and its slab read the same layers, and the next level reads them
        # again; uncached, a level-3 slab coarsened the fine layers through all three levels
        # once for its summary and once for its slab.
        current = CachedRegions(CoarsenedRegions(current, FACTOR), axis)
        box = MirroredRegions(current, axis)
        summary = summarize(box, axis, a, comm)
        bounds = np.asarray(fine_bounds, dtype=np.int64) // FACTOR**level
        per_rank = np.add.reduceat(summary.tiles, bounds[:-1])
        if bounds[-1] != len(summary.tiles) or (per_rank == 0).any():
            log.info("coarse level %d leaves a rank without fluid tiles; %d level(s).",
                     level, level - 1)
            break
        cfg = SimulationConfig(**{**values, "tile_offset": "origin", "body_force": tuple(
            FACTOR**level * f for f in config.body_force)})
        out.append(CoarseLevel(level, box, summary, cfg, bounds))
    return out


def release_levels(levels: list[CoarseLevel]) -> None:
    """Drop the coarsened layers the levels' boxes keep (:func:`coarse_levels`)."""
    for level in levels:
        cached = getattr(level.box, "source", None)
        if isinstance(cached, CachedRegions):
            cached.clear()


def prolong_ranks(fine: RankSolver, coarse: RankSolver, comm: Any,
                  scale: StartScale = PLAIN) -> None:
    """Start ``fine``'s owned tiles from the equilibrium of ``coarse``'s flow (the level
    coarsened by 2 of the same ranks, slabs aligned: :func:`coarse_levels`; ``scale``: the
    start's rescale, :class:`~solver.rock.initial.StartScale`) and exchange the fine halo
    (collective: the mean coarse density over all ranks, then the halo)."""
    table, mine = coarse_table(coarse, scale.velocity)
    parts = comm.allgather(mine)
    count = sum(c for _, c in parts)
    prolong_owned(fine, table, sum(s for s, _ in parts) / count if count else 1.0,
                  scale=scale)
    fine.refresh_halo()


def coarse_table(coarse: RankSolver, velocity: float = 1.0
                 ) -> tuple[CoarseTable, tuple[float, int]]:
    """The :class:`~solver.rock.initial.CoarseTable` of ``coarse``'s owned tiles (velocity
    times 2 and ``velocity``; moments read a
    readout chunk at a time; solid nodes and the last slot still to be given the mean density,
    :func:`prolong_owned`) and this rank's (sum of the fluid densities, fluid nodes)."""
    cb, xp = coarse.backend, coarse.backend.xp
    cp_, ct, n = coarse.problem, coarse.problem.tiling, coarse.n_owned
    coarse.stepper.idle()
    rho_c = xp.empty((n, ct.nodes_per_tile))
    u_c = xp.empty((ct.ndim, n, ct.nodes_per_tile))
    per = max(1, min(READ_TILES, int(cb.readout_tiles(coarse.state))))
    for lo in range(0, n, per):
        hi = min(n, lo + per)
        f = cb.device_populations(coarse.state, slice(lo, hi))
        rho_c[lo:hi], u_c[:, lo:hi] = tile_moments(f, cp_.lattice, cp_.force,
                                                   cp_.incompressible, xp)
        del f
    fluid_c = xp.asarray(~ct.solid[:n])
    mine = (float(cb.to_host(rho_c[fluid_c].sum())), int(np.count_nonzero(~ct.solid[:n])))
    # NaN marks the nodes that take the mean, known only once every rank has summed.
    table = CoarseTable.build(ct, rho_c, u_c, fluid_c, xp.asarray(np.nan), xp, velocity)
    return table, mine


def prolong_owned(fine: RankSolver, table: CoarseTable, mean_rho: float,
                  chunk: int = 1 << 16, scale: StartScale = PLAIN) -> None:
    """Write ``fine``'s owned tiles from ``table`` (:func:`coarse_table`), ``mean_rho`` where
    it has no fluid coarse node, the density's deviation from it times ``scale.density``,
    ``chunk`` tiles at a time (no collective; the halo is stale until
    :meth:`RankSolver.refresh_halo`)."""
    xp = fine.backend.xp
    rho = table.rho
    rho[xp.isnan(rho)] = mean_rho
    table.scale_density(mean_rho, scale)
    p = fine.problem
    dtype = xp.float64 if p.dtype == np.float64 else xp.float32
    fine.stepper.idle()
    for lo in range(0, fine.n_owned, chunk):
        hi = min(fine.n_owned, lo + chunk)
        fine.backend.set_populations(fine.state, prolonged_populations(p, table, lo, hi,
                                                                        dtype, xp),
                                     tiles=slice(lo, hi))


def run_levels(levels: list[CoarseLevel], settings: PermeabilitySettings,
               build: Callable[[CoarseLevel], RankSolver],
               run: Callable[[RankSolver, CoarseLevel, float], dict], comm: Any
               ) -> tuple[RankSolver | None, list[dict]]:
    """Run the levels coarsest first, each started from the one below it (the coarsest from
    rest): ``build`` makes a level's solver, ``run(solver, level, tolerance)`` steps it and
    returns its record (its k in fine voxel² as ``k``). Returns the finest level's solver
    (still allocated: the fine run is prolongated from it, :func:`chain_scale`, then releases
    it) and one record per level, finest first (``start_scale``: the velocity factor of the
    prolongation into it, ``settings.start_rescale``)."""
    records: list[dict] = []
    below: RankSolver | None = None
    for level in reversed(levels):
        tic = time.perf_counter()
        solver = build(level)
        built = time.perf_counter() - tic
        scale = chain_scale(settings, records)
        if below is not None:
            tic = time.perf_counter()
            prolong_ranks(solver, below, comm, scale)
            below.release()
            built += time.perf_counter() - tic
        tolerance = level_tolerance(settings, level.level - 1, len(levels))
        record = run(solver, level, tolerance)
        record.update(start_scale=scale.velocity if below is not None else None,
                      start_density_scale=scale.density if below is not None else None,
                      level=level.level, scale=level.scale, shape=list(level.summary.shape),
                      fluid_nodes=level.summary.n_fluid, tolerance=tolerance,
                      setup_seconds=built)
        records.insert(0, record)
        below = solver
    return below, records


def chain_scale(settings: PermeabilitySettings, records: list[dict]) -> StartScale:
    """The rescale of the prolongation from the finest of the levels run so far (``records``,
    finest first, :func:`run_levels`) into the next finer one
    (:meth:`~solver.rock.initial.StartScale.from_chain`)."""
    return StartScale.from_chain(settings.start_rescale,
                                 [float("nan") if r.get("k") is None else r["k"]
                                  for r in reversed(records)], settings.start_estimate,
                                 settings.start_density_gain)
