"""Signs that a previewed geometry was mis-read or cannot carry flow, in the user's words."""

from __future__ import annotations

import numpy as np
import scipy.ndimage as ndi

from geometries import VoxelGeometry
from geometries.openings import Opening
from solver.opening_kinds import opening_kind

__all__ = ["geometry_doubts", "LOW_POROSITY"]

#: Below this pore fraction an image is more likely mis-read (label, voxel type) than real.
LOW_POROSITY = 0.01


def geometry_doubts(geometry: VoxelGeometry, openings: dict[int, dict] | None = None
                    ) -> list[str]:
    """Signs that a geometry was mis-read: implausible porosity, no fluid path along the flow
    (between the driven ``openings`` (``SimulationConfig.openings``) when it has any, else
    between the two box ends along the flow axis)."""
    doubts = []
    axis, name = geometry.flow_axis, "xyz"[geometry.flow_axis]
    if geometry.porosity < LOW_POROSITY:
        doubts.append(
            f"Check the geometry: its porosity is {geometry.porosity:.3g}, implausibly low; is "
            "the pore label right (Pore label), or the RAW shape and voxel type?")
    # Face-connected fluid clusters; one touching both ends along the flow carries flow.
    labels = ndi.label(~np.asarray(geometry.solid, dtype=bool))[0]
    driven = {o.id: o for o in geometry.openings
              if opening_kind((openings or {}).get(o.id, {}).get("kind", "closed")).flux}
    if driven:
        # A vessel is driven through its openings: the box ends along x are walls then.
        clusters = {i: set(np.unique(labels[tuple(o.nodes.T)]).tolist()) - {0}
                    for i, o in driven.items()}
        if not any(clusters[i] & clusters[j] for i in clusters for j in clusters
                   if i < j and _apart(driven[i], driven[j], geometry.voxel_size or 1.0)):
            doubts.append(
                "Check the geometry: no fluid path connects two of its open openings "
                f"({', '.join(map(str, sorted(driven)))}), so no flow can pass. Check the STL's "
                "units and resolution, or close the openings that lead nowhere.")
        return doubts
    inlet = np.unique(np.take(labels, 0, axis=axis))
    outlet = np.unique(np.take(labels, -1, axis=axis))
    if not np.intersect1d(inlet[inlet > 0], outlet[outlet > 0]).size:
        doubts.append(
            f"Check the geometry: no fluid path connects the two {name} ends (the flow axis), "
            "so the flow and the permeability will be zero. Check the pore label, RAW shape "
            "and voxel type, or the STL's Encloses option.")
    return doubts


def _apart(a: Opening, b: Opening, voxel_size: float) -> bool:
    """Whether two openings lie on different planes (patches of one box face do not)."""
    offset = np.asarray(b.centre) - np.asarray(a.centre)
    return (not np.allclose(a.normal, b.normal)
            or abs(float(np.dot(offset, a.normal))) > voxel_size)
