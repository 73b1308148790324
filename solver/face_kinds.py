"""The registry of domain-face boundary kinds (host side): one :class:`FaceKind` per kind.

A kind is registered once here with its name, its priority where faces meet (edges, corners),
how its ``<face>_value`` is parsed and validated, the node-type codes of its boundary nodes, its
NumPy operator on those nodes (the Zou-He closure: density and momentum from what is known) and
the observables it adds (a mass flux). Its CUDA twin is registered under the same name in
:mod:`solver.backends.cuda.boundary` (a test keeps the key sets equal). The configuration's option
set (:data:`FACE_TYPES`), :mod:`solver.boundaries`, :mod:`solver.observables` and both backends
go through :func:`face_kind`; nothing else compares a kind's name.

Adding a kind: write its parser (and, if it has boundary nodes, its closure and node-type codes
in :mod:`solver.node_types`), :func:`register` it below, and register its kernel needs in
:mod:`solver.backends.cuda.boundary`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .node_types import NodeType
from .registry import Registry
from .values import ConfigError, is_number, velocity_vector

__all__ = ["FaceCondition", "FaceKind", "FACE_KIND_REGISTRY", "FACE_TYPES", "register",
           "face_kind"]


@dataclass(frozen=True)
class FaceCondition:
    """Validated boundary of one domain face: its type, velocity (3,) and density, lattice units.

    ``velocity`` is the inlet velocity (``velocity``) or wall velocity (``moving_wall``) and
    zero otherwise; ``density`` is the outlet density of a ``pressure`` face, else None.
    """

    kind: str
    velocity: tuple[float, float, float] = (0.0, 0.0, 0.0)
    density: float | None = None


#: ``parse(kind, face, value, axis, ndim, initial_density)``: the face's validated condition
#: from its configured ``<face>_value``; ConfigError with what to set otherwise.
ParseFn = Callable[[str, str, Any, int, int, float], FaceCondition]
#: ``closure(k, zf, f_n, half_f, incompressible, xp)``: density (M,) and momentum j' (d, M) at
#: the kind's Zou-He nodes from K = sum_T g + 2 sum_O g (:func:`solver.boundaries.zou_he`).
ClosureFn = Callable[..., tuple[Any, Any]]


@dataclass(frozen=True)
class FaceKind:
    """One boundary kind of a domain face.

    ``priority``: where faces meet, the higher wins (a node on two Zou-He faces belongs to the
    higher; a link through an edge takes the higher face's velocity). ``periodic``: the face
    wraps to its opposite (they come in pairs). ``node_type``: the :class:`NodeType` of its
    boundary nodes on face x_min (face index added for the others), None when the kind has no
    boundary nodes (bounce-back covers it); ``closure``: their NumPy Zou-He closure.
    ``flux``: fluid crosses the face, so it has a mass flux (:func:`solver.observables.
    face_fluxes`) and names the flow axis.
    """

    name: str
    priority: int
    parse: ParseFn
    periodic: bool = False
    node_type: int | None = None
    closure: ClosureFn | None = None
    flux: bool = False
    doc: str = ""

    def __reduce__(self):
        # Pickled by name, like the collision models: the registry holds the functions.
        return face_kind, (self.name,)

    def condition(self, face: str, value: Any, ndim: int, initial_density: float
                  ) -> FaceCondition:
        """The validated condition of ``face`` (e.g. 'x_min') with ``<face>_value`` = value."""
        return self.parse(self.name, face, value, "xyz".index(face[0]), ndim, initial_density)


#: Every registered kind by name; the order is the ``face_kind`` code of the boundary tables.
FACE_KIND_REGISTRY: Registry[FaceKind] = Registry("face kind")


register = FACE_KIND_REGISTRY.register


def face_kind(name: str) -> FaceKind:
    """The registered face kind called ``name``."""
    return FACE_KIND_REGISTRY.named(name)


# ---------------------------------------------------------------- parsers
def _no_value(kind: str, face: str, value, axis: int, ndim: int, rho0: float) -> FaceCondition:
    return FaceCondition(kind)  # periodic and resting walls take no value (ignored)


def _inlet_velocity(kind: str, face: str, value, axis: int, ndim: int, rho0: float
                    ) -> FaceCondition:
    if value is None:
        raise ConfigError(f"{face} is a velocity inlet/outlet: set {face}_value to the "
                          "velocity (a number along the face axis, or a vector).")
    if is_number(value):
        value = [float(value) if a == axis else 0.0 for a in range(ndim)]
    return FaceCondition(kind, velocity=velocity_vector(value, ndim, _what(face, kind)))


def _wall_velocity(kind: str, face: str, value, axis: int, ndim: int, rho0: float
                   ) -> FaceCondition:
    if value is None or is_number(value):
        raise ConfigError(f"{face} is a moving wall: set {face}_value to its velocity "
                          f"vector, tangential to the face (component {axis} zero).")
    what = _what(face, kind)
    velocity = velocity_vector(value, ndim, what)
    if velocity[axis] != 0.0:
        raise ConfigError(f"{what} = {value!r} moves through the face; a moving wall "
                          f"slides along it: set component {axis} to 0.")
    return FaceCondition(kind, velocity=velocity)


def _outlet_density(kind: str, face: str, value, axis: int, ndim: int, rho0: float
                    ) -> FaceCondition:
    density = rho0 if value is None else value
    if not is_number(density) or not 0.0 < density < math.inf:
        raise ConfigError(f"{_what(face, kind)} must be a positive density (lattice units), "
                          f"got {value!r}.")
    return FaceCondition(kind, density=float(density))


def _what(face: str, kind: str) -> str:
    return f"{face}_value ({face} is {kind!r})"


# ---------------------------------------------------------------- Zou-He closures (NumPy)
def _velocity_closure(k, zf, f_n: float, half_f, incompressible: bool, xp=np):
    """Given velocity: rho from K and u.n; j' = rho u - F/2 (u - F/2 incompressible)."""
    u = xp.asarray(zf.velocity, dtype=k.dtype)[:, None]
    u_n = float(zf.velocity @ zf.normal)
    rho = k + (u_n - 0.5 * f_n) if incompressible else (k - 0.5 * f_n) / (1.0 - u_n)
    j = (u if incompressible else rho * u) - half_f
    return rho, j


def _density_closure(k, zf, f_n: float, half_f, incompressible: bool, xp=np):
    """Given density: the normal velocity from K and rho; j' along the normal, - F/2."""
    rho = xp.full_like(k, zf.density)
    u_n = rho - k + 0.5 * f_n if incompressible else 1.0 - (k - 0.5 * f_n) / rho
    nn = xp.asarray(zf.normal, dtype=k.dtype)[:, None]
    j = (u_n if incompressible else rho * u_n) * nn - half_f
    return rho, j


register(FaceKind("periodic", 0, _no_value, periodic=True,
                  doc="wraps to the opposite face"))
register(FaceKind("wall", 1, _no_value, doc="resting wall, halfway bounce-back"))
register(FaceKind("velocity", 4, _inlet_velocity, node_type=int(NodeType.VELOCITY_X_MIN),
                  closure=_velocity_closure, flux=True,
                  doc="Zou-He velocity inlet/outlet; value: velocity"))
register(FaceKind("pressure", 2, _outlet_density, node_type=int(NodeType.PRESSURE_X_MIN),
                  closure=_density_closure, flux=True,
                  doc="Zou-He density outlet; value: density (default initial_density)"))
register(FaceKind("moving_wall", 3, _wall_velocity,
                  doc="bounce-back with Ladd's term; value: tangential wall velocity"))

#: Option set of the ``x_min`` ... ``z_max`` face parameters.
FACE_TYPES: tuple[str, ...] = tuple(FACE_KIND_REGISTRY)
