"""Streamlines and an isosurface of the run, built with PyVista from its coarse flow.

The runner publishes a :class:`solver.coarse_flow.CoarseFlow` (every few voxels, at most 64
nodes along the longest edge, gathered on the device); these functions turn it into meshes in
node coordinates (lattice units), the 3D view's frame: streamlines from seeds on the slice
plane, an opening or a line, integrated both ways through the normalised velocity (a bounded
number of steps), and the contour of the chosen scalar at a level.
"""

from __future__ import annotations

import numpy as np
import pyvista as pv

from .opening_kinds import OPENING_KIND_REGISTRY, SPEED, opening_kind
from .probes import line_nodes

__all__ = ["coarse_grid", "seed_points", "streamlines", "isosurface", "auto_level",
           "SEED_SOURCES"]

#: Where streamlines start.
SEED_SOURCES = ("slice plane", "inlet opening", "probe line")
#: Integration steps per streamline (bounds the cost of a refresh).
MAX_STEPS = 1500


def coarse_grid(flow) -> pv.ImageData:
    """An ImageData of a CoarseFlow: point arrays ``u`` (velocity over its largest speed,
    zero in solids), ``speed`` and ``s`` (the scalar, 0 in solids), node coordinates."""
    shape = flow.scalar.shape
    grid = pv.ImageData(dimensions=shape, spacing=(flow.stride,) * 3, origin=(0.0, 0.0, 0.0))
    u = np.nan_to_num(np.asarray(flow.velocity, dtype=np.float64))
    speed = np.sqrt((u * u).sum(axis=0))
    top = float(speed.max()) if speed.size else 0.0
    grid.point_data["u"] = (u / (top if top > 0 else 1.0)).reshape(3, -1, order="F").T
    grid.point_data["speed"] = speed.ravel(order="F")
    grid.point_data["s"] = np.nan_to_num(np.asarray(flow.scalar, dtype=np.float64)
                                         ).ravel(order="F")
    return grid


def seed_points(geometry, source: str, count: int, axis: int, index: int, probes=None,
                openings: dict | None = None, seed: int = 0) -> np.ndarray:
    """Up to ``count`` fluid voxel centres (n, 3) where streamlines start: on the cut normal to
    ``axis`` at ``index``, on the inlet opening (the first velocity-driven one in
    ``openings``, else the largest), or along the first line of ``probes``; the slice plane
    when the source has no nodes."""
    solid = np.asarray(geometry.solid, dtype=bool)
    nodes = np.zeros((0, 3), dtype=np.int64)
    if source == "inlet opening" and geometry.openings:
        kinds = {i: spec.get("kind") for i, spec in (openings or {}).items()}
        # A speed-driven opening is an inlet; the registry says which kinds are (issue 27).
        inlets = [o for o in geometry.openings if kinds.get(o.id) in OPENING_KIND_REGISTRY
                  and opening_kind(kinds[o.id]).quantity == SPEED]
        opening = inlets[0] if inlets else max(geometry.openings, key=lambda o: len(o.nodes))
        nodes = np.asarray(opening.nodes, dtype=np.int64)
    elif source == "probe line" and probes is not None and probes.lines:
        nodes = line_nodes(probes.lines[0])
        nodes = nodes[~solid[tuple(nodes.T)]]
    if not len(nodes):
        layer = np.argwhere(~np.take(solid, index, axis=axis))
        nodes = np.insert(layer, axis, index, axis=1)
    if len(nodes) > count:
        nodes = nodes[np.random.default_rng(seed).choice(len(nodes), count, replace=False)]
    return nodes.astype(np.float64)


def streamlines(grid: pv.ImageData, seeds: np.ndarray) -> pv.PolyData:
    """Streamlines (lines with point array ``speed``) through ``grid``'s velocity from
    ``seeds`` (n, 3), both directions, at most MAX_STEPS steps each; empty without flow."""
    if not len(seeds) or not grid.point_data["speed"].max() > 0:
        return pv.PolyData()
    extent = float(max(grid.bounds[1], grid.bounds[3], grid.bounds[5]))
    lines = grid.streamlines_from_source(
        pv.PolyData(seeds), vectors="u", integration_direction="both",
        initial_step_length=0.5, step_unit="cl", max_steps=MAX_STEPS,
        max_length=4.0 * max(extent, 1.0), terminal_speed=1e-4, compute_vorticity=False)
    return lines if lines.n_points else pv.PolyData()


def auto_level(values: np.ndarray, name: str) -> float:
    """A level that shows something: half the largest value over the fluid (for Q, a tenth of
    the largest positive value: vortex cores)."""
    finite = np.asarray(values, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        return 0.0
    top = float(finite.max())
    return 0.1 * top if name == "qcrit" else 0.5 * top


def isosurface(grid: pv.ImageData, level: float) -> pv.PolyData:
    """The surface where ``grid``'s scalar ``s`` equals ``level``; empty if it never does."""
    values = grid.point_data["s"]
    if not values.size or not values.min() < level < values.max():
        return pv.PolyData()
    surface = grid.contour([level], scalars="s")
    return surface if surface.n_points else pv.PolyData()
