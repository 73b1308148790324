"""Is the sample large enough? k, porosity and F on nested sub-volumes (the REV curve).

Centred sub-volumes of :data:`FRACTIONS` of the sample's volume (each edge scaled by the cube
root of the fraction, rounded to an even number of voxels so the coarse start applies) are
measured like the whole sample: k by the mirrored protocol (:mod:`solver.rock.measure`, the
study's settings), the porosity and the formation factor (:mod:`solver.rock.conduction`). The
curve reports each quantity and its relative change from the next smaller sub-volume; when k
and F still change by more than a few % from half the volume to the whole, the sample is not a
representative elementary volume (REV) for them (Bear, Dynamics of Fluids in Porous Media,
1972, sec. 1.3). A sub-volume without a connected pore path gets no k (its ``message`` says so).
Lengths in voxels, k in voxel² (and mD with the sample's voxel size).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from geometries import VoxelGeometry
from geometries.errors import GeometryError
from geometries.preprocess import crop

from .conduction import formation_factor
from .settings import AXIS_NAMES

#: What a REV point needs from a k run: k (voxel²), k (mD or None), seconds, converged.
Measured = tuple[float, float | None, float, bool]

__all__ = ["FRACTIONS", "RevPoint", "rev_curve", "sub_volume"]

#: Sub-volume fractions of the sample's volume, smallest first; 1 = the whole sample.
FRACTIONS = (1 / 8, 1 / 4, 1 / 2, 1.0)
#: Smallest sub-volume edge, voxels.
MIN_EDGE = 8


@dataclass(frozen=True)
class RevPoint:
    """One sub-volume: the fraction of the sample's volume it holds and its shape, porosity,
    k and F, and their relative changes from the previous (smaller) point (None for the first
    or where undefined)."""

    fraction: float
    shape: tuple[int, ...]
    porosity: float
    k_lattice: float | None
    k_mD: float | None
    formation_factor: float | None
    seconds: float
    change_k: float | None = None
    change_porosity: float | None = None
    change_formation_factor: float | None = None
    message: str = ""

    def as_dict(self) -> dict:
        """JSON-ready."""
        return dataclasses.asdict(self)


def sub_volume(sample: VoxelGeometry, fraction: float) -> VoxelGeometry:
    """The centred sub-volume holding ``fraction`` of ``sample``'s voxels (even edges)."""
    if fraction >= 1.0:
        return sample
    scale = fraction ** (1.0 / sample.ndim)
    edges = [min(n, max(MIN_EDGE, 2 * round(n * scale / 2))) for n in sample.shape]
    lo = [(n - e) // 2 for n, e in zip(sample.shape, edges, strict=True)]
    hi = [a + e for a, e in zip(lo, edges, strict=True)]
    return crop(sample, lo, hi)


def _change(now: float | None, before: float | None) -> float | None:
    if now is None or before is None or not before or not math.isfinite(before):
        return None
    return (now - before) / before


def rev_curve(sample: VoxelGeometry, axis: int, sides: str, xp: Any,
              measure: Callable[[VoxelGeometry], Measured], whole: Measured | None = None,
              whole_f: float | None = None, fractions: tuple[float, ...] = FRACTIONS,
              on_point: Callable[[RevPoint], None] | None = None) -> list[RevPoint]:
    """The REV curve along ``axis``: ``measure`` runs k on a sub-volume (the mirrored protocol
    of :mod:`solver.rock.measure`, :func:`~solver.rock.measure.rev_measure`), F is solved with
    ``sides`` in the array module ``xp``; ``whole`` / ``whole_f``: the whole sample's k and F
    when the study has them already (not measured again); ``on_point`` gets each point."""
    points: list[RevPoint] = []
    for fraction in fractions:
        sub = sub_volume(sample, fraction)
        k = k_mD = f = None
        message, seconds = "", 0.0
        try:
            found = whole if fraction >= 1.0 and whole is not None else measure(sub)
            k, k_mD, seconds, converged = found
            if not converged:
                message = "k not converged"
        except (GeometryError, ValueError) as exc:
            message = str(exc)
        if fraction >= 1.0 and whole_f is not None:
            f = whole_f
        else:
            try:
                f = formation_factor(sub.solid, axis, sides, xp).formation_factor
            except ValueError as exc:
                message = message or str(exc)
        before = points[-1] if points else None
        # The fraction the sub-volume holds: even edges make 12³ of 20³ 0.216, not 1/4.
        held = sub.solid.size / sample.solid.size
        point = RevPoint(held, tuple(sub.shape), sub.porosity, k, k_mD, f, seconds,
                         _change(k, before and before.k_lattice),
                         _change(sub.porosity, before and before.porosity),
                         _change(f, before and before.formation_factor), message)
        points.append(point)
        if on_point is not None:
            on_point(point)
    return points


def rev_lines(points: list[RevPoint], axis: int) -> list[str]:
    """Human-readable REV lines (units stated)."""
    out = [f"REV along {AXIS_NAMES[axis]} (centred sub-volumes; change from the previous one):"]
    for p in points:
        k = "-" if p.k_lattice is None else f"{p.k_lattice:.4g} voxel²"
        change = "" if p.change_k is None else f" ({100 * p.change_k:+.1f} %)"
        f = "-" if p.formation_factor is None else f"{p.formation_factor:.4g}"
        f_change = "" if p.change_formation_factor is None else \
            f" ({100 * p.change_formation_factor:+.1f} %)"
        shape = "x".join(str(n) for n in p.shape)
        out.append(f"  {p.fraction:.3g} of the volume ({shape}): φ = {p.porosity:.4f}, "
                   f"k = {k}{change}, F = {f}{f_change}" + (f" [{p.message}]" if p.message
                                                            else ""))
    return out
