"""Soft start of a flow through openings: inflow and pressure differences ramp up smoothly.

A velocity inlet switched on at full speed, or a pressure difference applied at once, sends a
pressure wave through the vessel that takes many sound crossings to die out (the browser test of
the vessel sample had to wait for it). Instead every driven opening's value is ramped from the
rest state to its target over ``R`` steps by the cubic smoothstep

    s(n) = x^2 (3 - 2 x),   x = min((n + 1) / R, 1),

where ``n`` is the number of steps already done when the openings' pass runs (the first step has
n = 0). ``s`` rises from 0 to 1 with zero slope at both ends (no jump in the acceleration of the
inflow), and the step ``n = R - 1`` already runs at the full value. A velocity opening applies
``s U``; a pressure opening ``rho0 + s (rho_w - rho0)`` (``rho0`` the initial density); outflow
openings have no value. With ``R = 0`` (or once ``x = 1``) the target value itself is applied,
bit for bit the impulsive start.

The arithmetic is plain IEEE double (no transcendental function), so the CUDA pass
(:mod:`solver.backends.cuda.iolets`, compiled without FMA contraction) computes, with its
device step counter, the same ``s`` as NumPy does with the host's: CuPy == NumPy through the ramp.

``R`` is ``SimulationConfig.ramp_steps``; None (the default) is one characteristic time of the
flow (:func:`characteristic_steps`): ``D / U`` of the velocity opening carrying the largest flow
(``D`` its equivalent diameter in nodes, ``U`` its mean speed), or, without a velocity opening,
one sound crossing ``L / c_s`` of the box's longest side ``L`` (nodes). Lattice units throughout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .opening_kinds import SPEED, opening_kind
from .units import SOUND_SPEED

__all__ = ["ramp_factor", "characteristic_steps", "resolve_ramp_steps"]


def ramp_factor(step: int, ramp_steps: int) -> float:
    """Fraction (0..1] of the openings' target values applied by the pass before step ``step``
    (0-based) of a ramp over ``ramp_steps`` steps (0: impulsive, always 1)."""
    if ramp_steps <= 0:
        return 1.0
    x = float(step + 1) / float(ramp_steps)
    if x >= 1.0:
        return 1.0
    return x * x * (3.0 - 2.0 * x)


def characteristic_steps(conditions: Mapping[int, Any], openings: Sequence[Any],
                         voxel_size: float | None, shape: Sequence[int]) -> int:
    """One characteristic time of a flow through openings, in steps (see the module text).

    ``conditions``: {id: OpeningCondition} (lattice units); ``openings``: the geometry's
    :class:`~geometries.openings.Opening` s (metres, or voxels when ``voxel_size`` is None).
    """
    h = 1.0 if voxel_size is None else float(voxel_size)
    by_id = {o.id: o for o in openings}
    inlets = [(abs(c.value) * by_id[oid].area, by_id[oid], abs(c.value))
              for oid, c in conditions.items()
              if opening_kind(c.kind).quantity == SPEED and c.value and oid in by_id]
    if inlets:
        _, opening, speed = max(inlets, key=lambda item: item[0])
        return max(1, int(math.ceil(opening.diameter / h / speed)))
    return max(1, int(math.ceil(max(shape) / SOUND_SPEED)))


def resolve_ramp_steps(ramp_steps: int | None, conditions: Mapping[int, Any],
                       openings: Sequence[Any], voxel_size: float | None,
                       shape: Sequence[int]) -> int:
    """The ramp length in steps: ``ramp_steps`` as given, or one characteristic time (None)."""
    if ramp_steps is not None:
        return int(ramp_steps)
    return characteristic_steps(conditions, openings, voxel_size, shape)
