"""Price crop and downsample choices before a run: memory, tile utilisation and time."""

from __future__ import annotations

from dataclasses import dataclass

from geometries import VoxelGeometry
from geometries.pores import check_sample
from geometries.preprocess import crop, downsample

from .protocol import estimated_steps

__all__ = ["PreviewChoice", "preview_choices"]


@dataclass(frozen=True)
class PreviewChoice:
    """One candidate sample: its shape, memory (bytes), eta_t and estimated run time (s).

    ``problem`` says why a choice cannot run (no fluid left, no connected path); its numbers
    are then zero.
    """

    label: str
    geometry: VoxelGeometry
    memory_bytes: int
    eta_t: float
    fluid_nodes: int
    steps: int
    seconds: float
    problem: str = ""


def preview_choices(geom: VoxelGeometry, config, factors=(1, 2, 4), crops=(), mflups: float = 2.0,
                    steps: int | None = None) -> list[PreviewChoice]:
    """Price downsampling by each factor and each centred crop edge (voxels) of ``geom``.

    ``mflups`` is the expected throughput (million fluid-node updates per second; about 2 on
    the 2-core CPU with NumPy, 1000+ on a GPU); ``steps`` defaults to
    :func:`~solver.rock.protocol.estimated_steps` of the mirrored run from rest along the
    flow axis (about the same for every downsampling factor: the sample is shorter by the
    factor and k in voxels² smaller by its square). Memory and time are those of the mirrored
    protocol's doubled box.
    """
    from ..simulation import Simulation

    candidates = [(f"downsample x{f}" if f > 1 else "full", downsample(geom, f) if f > 1
                   else geom) for f in factors]
    for edge in crops:
        lo = [max(0, (n - edge) // 2) for n in geom.shape]
        hi = [min(n, lo_i + edge) for n, lo_i in zip(geom.shape, lo, strict=True)]
        candidates.append((f"crop {edge}³", crop(geom, lo, hi)))
    out = []
    for label, g in candidates:
        try:
            check_sample(g, g.flow_axis)
            sim = Simulation(g, config, "numpy")  # tiles on the host only; nothing allocated
        except ValueError as exc:  # coarsened to solid, or no path left along the flow axis
            out.append(PreviewChoice(label, g, 0, 0.0, 0, 0, 0.0, str(exc)))
            continue
        axis = g.flow_axis
        n_steps = steps or estimated_steps(g, axis, config.viscosity, 2 * g.shape[axis])
        fluid = 2 * sim.problem.n_fluid  # the mirrored protocol doubles the sample
        out.append(PreviewChoice(label, g, 2 * sim.memory_bytes(), sim.tiling.eta_t, fluid,
                                 n_steps, fluid * n_steps / (mflups * 1e6)))
    return out
