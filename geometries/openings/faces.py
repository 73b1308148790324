"""Openings of voxel images: each connected fluid patch on a face of the box.

Assumes the image was cropped so that flow enters and leaves through the faces of the box. On the
face slice (the first or last layer of voxels along an axis) the fluid voxels are grouped into
connected patches with the full in-plane neighbourhood (8 neighbours in 3D, 2 in 2D), because the
D3Q19/D2Q9 lattices link in-plane diagonal neighbours, so two fluid voxels that touch at a corner
exchange populations and belong to the same opening. Each patch becomes one :class:`Opening`
(source ``"face-patch"``): its nodes are the patch's voxels, its plane passes through their
centres, its normal points out of the box, its area is the number of voxels times the voxel face
area. A fluid voxel on an edge of the box lies on two faces and so in two openings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import scipy.ndimage as ndi

from ..errors import GeometryError
from .opening import Opening

if TYPE_CHECKING:  # voxel.py imports this package: no import cycle at run time
    from ..voxel import VoxelGeometry

__all__ = ["face_openings"]


def face_openings(
    geometry: VoxelGeometry, axes: Sequence[int] | None = None, *, min_voxels: int = 1
) -> tuple[Opening, ...]:
    """Return one opening per connected fluid patch on the box faces normal to ``axes``.

    ``axes`` defaults to every axis (``(geometry.flow_axis,)`` gives the inlet and outlet faces
    of a sample); patches of fewer than ``min_voxels`` voxels are skipped. Openings are numbered
    from 1 by decreasing area; sizes are in metres (voxels when the voxel size is unknown).
    """
    ndim = geometry.ndim
    chosen = range(ndim) if axes is None else tuple(axes)
    for axis in chosen:
        if isinstance(axis, bool) or axis not in range(ndim):
            raise GeometryError(f"axes must hold axes 0..{ndim - 1}, got {axes!r}.")
    h = 1.0 if geometry.voxel_size is None else geometry.voxel_size
    origin = np.asarray(geometry.origin)
    structure = np.ones((3,) * (ndim - 1), dtype=bool)
    patches = []
    for axis in dict.fromkeys(chosen):
        for side in (0, geometry.shape[axis] - 1):
            fluid = ~np.take(geometry.solid, side, axis=axis)
            labels, count = ndi.label(fluid, structure=structure)
            if count == 0:
                continue
            # One sort groups the voxels of every patch (faster than a mask per patch).
            flat = labels.reshape(-1)
            order = np.argsort(flat, kind="stable")
            bounds = np.searchsorted(flat[order], np.arange(1, count + 2))
            in_face = np.stack(np.unravel_index(order, labels.shape), axis=1)
            for k in range(count):
                idx = in_face[bounds[k] : bounds[k + 1]]
                if len(idx) < min_voxels:
                    continue
                nodes = np.insert(idx, axis, side, axis=1)
                normal = np.zeros(ndim)
                normal[axis] = 1.0 if side else -1.0
                patches.append((nodes, normal))
    patches.sort(key=lambda p: -len(p[0]))
    openings = []
    for number, (nodes, normal) in enumerate(patches, start=1):
        area = len(nodes) * h ** (ndim - 1)
        diameter = area if ndim == 2 else 2.0 * np.sqrt(area / np.pi)
        openings.append(
            Opening(
                id=number,
                centre=tuple(origin + (nodes.mean(axis=0) + 0.5) * h),
                normal=tuple(normal),
                area=area,
                diameter=diameter,
                nodes=nodes,
                source="face-patch",
            )
        )
    return tuple(openings)
