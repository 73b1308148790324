"""Simple bounded flows: channels, ducts, pipes, a cylinder or a sphere as obstacle, cavities.

Walls are solid voxels inside the returned box. Continuous positions (centres, diameters) are in
voxels with the box spanning [0, n) along each axis, so voxel ``i`` has its centre at ``i + 0.5``;
a voxel is inside a round shape when its centre is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import GeometryError
from ..voxel import VoxelGeometry
from .balls import ball_region
from .checks import check_axis, check_int, check_positive, check_shape, check_size

__all__ = [
    "channel",
    "circular_pipe",
    "cylinder_in_channel",
    "lid_cavity",
    "sphere_in_pipe",
    "square_duct",
]


def channel(shape: Sequence[int], wall_axis: int = 1, flow_axis: int = 0) -> VoxelGeometry:
    """Return plates: one solid layer at both ends of ``wall_axis``; shape in voxels."""
    dims = check_shape(shape)
    wall = check_axis(wall_axis, len(dims), "wall_axis")
    flow = check_axis(flow_axis, len(dims), "flow_axis")
    if wall == flow:
        raise GeometryError("wall_axis and flow_axis must differ; the flow runs between plates.")
    if dims[wall] < 3:
        raise GeometryError(f"shape[{wall}] must be ≥ 3 (two walls and fluid), got {dims[wall]}.")
    solid = np.zeros(dims, dtype=bool)
    _wall_layers(solid, wall)
    return VoxelGeometry(solid, flow_axis=flow, name=f"channel {dims}, walls on axis {wall}")


def square_duct(length: int, width: int, axis: int = 0) -> VoxelGeometry:
    """Return a 3D duct of ``width``² fluid cross-section plus one wall layer per side (voxels)."""
    n = check_int(length, "length")
    w = check_int(width, "width")
    flow = check_axis(axis, 3)
    dims = [w + 2] * 3
    dims[flow] = n
    solid = np.zeros(check_size(dims), dtype=bool)
    for a in range(3):
        if a != flow:
            _wall_layers(solid, a)
    return VoxelGeometry(solid, flow_axis=flow, name=f"square duct {w}×{w}, length {n}")


def circular_pipe(length: int, diameter: float, axis: int = 0) -> VoxelGeometry:
    """Return a 3D pipe: fluid within ``diameter``/2 of the axis, solid around it (voxels)."""
    n = check_int(length, "length")
    d = check_positive(diameter, "diameter", minimum=1.0)
    flow = check_axis(axis, 3)
    cross = int(np.ceil(d)) + 2
    check_size((n, cross, cross))
    disc = _disc((cross, cross), (cross / 2, cross / 2), d / 2)
    solid = np.expand_dims(~disc, flow).repeat(n, axis=flow)
    return VoxelGeometry(solid, flow_axis=flow, name=f"circular pipe d={d:g}, length {n}")


def cylinder_in_channel(
    shape: Sequence[int], diameter: float, center: Sequence[float] | None = None
) -> VoxelGeometry:
    """Return flow along x past a cylinder (axis along z) between walls at both y ends; voxels.

    ``center`` = (cx, cy) in voxels, default (nx / 4, ny / 2). The cylinder has label id 1.
    """
    dims = check_shape(shape, minimum=3)
    r = check_positive(diameter, "diameter") / 2
    cx, cy = _center2(center, (dims[0] / 4, dims[1] / 2))
    if not (1 + r < cy < dims[1] - 1 - r and r < cx < dims[0] - r):
        raise GeometryError(
            f"A cylinder of diameter {2 * r:g} at ({cx:g}, {cy:g}) does not fit between the "
            f"walls of a {dims[0]}×{dims[1]} channel. Use a smaller diameter or move center=."
        )
    disc = _disc(dims[:2], (cx, cy), r)
    body = disc if len(dims) == 2 else np.repeat(disc[:, :, None], dims[2], axis=2)
    solid = body.copy()
    _wall_layers(solid, 1)
    return VoxelGeometry(
        solid,
        labels=body.astype(np.int32),
        name=f"cylinder d={2 * r:g} in channel {dims}",
    )


def sphere_in_pipe(
    length: int, pipe_diameter: float, sphere_diameter: float, position: float | None = None
) -> VoxelGeometry:
    """Return a sphere (label 1) on the axis of a pipe along x; ``position`` = its x (voxels)."""
    pipe = circular_pipe(length, pipe_diameter)
    d = check_positive(sphere_diameter, "sphere_diameter")
    if d >= pipe_diameter:
        raise GeometryError(
            f"sphere_diameter {d:g} must be smaller than pipe_diameter {pipe_diameter:g}."
        )
    x = pipe.shape[0] / 2 if position is None else check_positive(position, "position")
    if not d / 2 <= x <= pipe.shape[0] - d / 2:
        raise GeometryError(
            f"A sphere of diameter {d:g} at x = {x:g} sticks out of a pipe of length "
            f"{pipe.shape[0]}. Choose position between {d / 2:g} and {pipe.shape[0] - d / 2:g}."
        )
    cross = pipe.shape[1]
    index, mask = ball_region((x, cross / 2, cross / 2), d / 2, pipe.shape, periodic=False)
    labels = np.zeros(pipe.shape, dtype=np.int32)
    labels[index] = mask
    return VoxelGeometry(
        pipe.solid | (labels > 0),
        labels=labels,
        name=f"sphere d={d:g} in pipe d={pipe_diameter:g}, length {pipe.shape[0]}",
    )


def lid_cavity(n: int, ndim: int = 2) -> VoxelGeometry:
    """Return an n^ndim fluid cavity enclosed by one solid layer on every face (voxels).

    The lid is the whole +y face (index -1 along axis 1, corners included): a solid layer like
    the other walls, which the solver turns into a moving wall.
    """
    size = check_int(n, "n")
    if ndim not in (2, 3):
        raise GeometryError(f"ndim must be 2 or 3, got {ndim!r}.")
    solid = np.zeros(check_size((size + 2,) * ndim), dtype=bool)
    for a in range(ndim):
        _wall_layers(solid, a)
    return VoxelGeometry(solid, name=f"lid-driven cavity {size}^{ndim} (lid at +y)")


def _wall_layers(solid: np.ndarray, axis: int) -> None:
    """Set the first and last layer along ``axis`` solid, in place."""
    view = np.moveaxis(solid, axis, 0)
    view[0] = True
    view[-1] = True


def _disc(shape: Sequence[int], center: Sequence[float], radius: float) -> np.ndarray:
    """Return a bool (nx, ny) disc of voxel centres within ``radius`` of ``center``."""
    x = np.arange(shape[0]) + 0.5 - center[0]
    y = np.arange(shape[1]) + 0.5 - center[1]
    return np.add.outer(x * x, y * y) <= radius * radius


def _center2(center: Sequence[float] | None, default: tuple[float, float]) -> tuple[float, float]:
    """Return a 2D centre (voxels) or raise GeometryError."""
    if center is None:
        return default
    try:
        cx, cy = (float(c) for c in center)
    except (TypeError, ValueError) as exc:
        raise GeometryError(
            f"center must be two numbers (cx, cy) in voxels, got {center!r}."
        ) from exc
    return cx, cy
