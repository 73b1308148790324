"""Node types: one small integer per node, shared by every backend.

A node is solid, plain fluid, or a fluid node on a Zou-He face; the Zou-He types name their face
so that the kernel finds the face's parameters (inlet velocity, outlet density, normal) in the
per-face tables of :class:`solver.boundaries.BoundaryTables` without any per-node value:

    type = SOLID (0) | FLUID (1) | VELOCITY + face (2..7) | PRESSURE + face (8..13)

with ``face`` the index in :data:`solver.config.FACE_NAMES` (x_min, x_max, y_min, y_max, z_min,
z_max). Stored as uint8 per node in the tiled layout ``[tile][node_in_tile]``.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["NodeType", "FACE_NAMES", "zou_he_type", "face_of", "is_velocity", "is_pressure",
           "face_axis_side"]

#: Domain faces in table order (same as :data:`solver.config.FACE_NAMES`).
FACE_NAMES = ("x_min", "x_max", "y_min", "y_max", "z_min", "z_max")


class NodeType(IntEnum):
    """Per-node type code (uint8)."""

    SOLID = 0
    FLUID = 1
    VELOCITY_X_MIN = 2
    VELOCITY_X_MAX = 3
    VELOCITY_Y_MIN = 4
    VELOCITY_Y_MAX = 5
    VELOCITY_Z_MIN = 6
    VELOCITY_Z_MAX = 7
    PRESSURE_X_MIN = 8
    PRESSURE_X_MAX = 9
    PRESSURE_Y_MIN = 10
    PRESSURE_Y_MAX = 11
    PRESSURE_Z_MIN = 12
    PRESSURE_Z_MAX = 13


_VELOCITY0, _PRESSURE0 = int(NodeType.VELOCITY_X_MIN), int(NodeType.PRESSURE_X_MIN)


def zou_he_type(base: int, face: int) -> NodeType:
    """Type of a Zou-He node on face index ``face`` of a kind whose x_min nodes have type
    ``base`` (:attr:`solver.face_kinds.FaceKind.node_type`)."""
    return NodeType(int(base) + face)


def is_velocity(t: int) -> bool:
    """Whether type ``t`` is a Zou-He velocity node."""
    return _VELOCITY0 <= t < _PRESSURE0


def is_pressure(t: int) -> bool:
    """Whether type ``t`` is a Zou-He pressure (density) node."""
    return _PRESSURE0 <= t < _PRESSURE0 + 6


def face_of(t: int) -> int:
    """Face index (0..5) of a Zou-He node type."""
    if not (is_velocity(t) or is_pressure(t)):
        raise ValueError(f"Node type {t} is not a Zou-He boundary node.")
    return (t - _VELOCITY0) % 6


def face_axis_side(face: int) -> tuple[int, int]:
    """Axis (0, 1, 2) and side (0 = min, 1 = max) of face index ``face``."""
    return face // 2, face % 2
