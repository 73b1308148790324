"""The fields a user looks at: one definition each, lattice units, SI factors.

Velocity magnitude and components and the density come straight from the moments
(:mod:`solver.fields`); the others are derived here, on the backend's array module ``xp`` so
that they are computed where the moments live:

- ``pressure``: ``p = c_s^2 (rho - rho0)`` with ``c_s^2 = 1/3`` and ``rho0`` the reference
  (initial) density, in ``rho0 c^2`` units like a stress;
- ``vorticity``: ``|curl u|`` (1/step), from the velocity gradient;
- ``qcrit``: the Q-criterion ``(|Omega|^2 - |S|^2) / 2`` (1/step^2) of the rotation and strain
  rate tensors, positive where rotation wins (vortex cores);
- ``wss``: the wall shear stress on the fluid nodes next to a wall (:mod:`solver.wall_shear`).

The velocity gradient uses central differences between fluid nodes, one-sided differences
where only one neighbour along an axis is fluid and zero where neither is (a node between two
walls, or a box edge: no value beyond the box is assumed). :meth:`FieldSpec.to_si` converts a
field to SI with a :class:`solver.units.UnitSystem`. The app, the command line's exports and
notebooks all use these definitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FieldSpec", "FIELDS", "GRADIENT_FIELDS", "pressure", "velocity_gradient",
           "vorticity", "vorticity_magnitude", "q_criterion", "grid_field", "cut_gradient_field",
           "wall_cut", "image_data"]


@dataclass(frozen=True)
class FieldSpec:
    """A field's name, its label, its SI unit and which lattice scale converts it."""

    name: str
    label: str
    unit: str
    #: velocity, density, stress (pressure, shear), rate (1/time) or rate2 (1/time^2).
    scale: str

    def si_factor(self, units: Any) -> float:
        """The factor from lattice units to :attr:`unit` (``units``: a UnitSystem)."""
        step = units.dt
        return {"velocity": units.dx / step, "density": units.density,
                "stress": units.density * units.dx**2 / step**2, "rate": 1.0 / step,
                "rate2": 1.0 / step**2}[self.scale]

    def lattice_label(self) -> str:
        """The label with its lattice unit, e.g. ``pressure (lattice units)``."""
        return f"{self.label} (lattice units)"

    def si_label(self) -> str:
        """The label with its SI unit, e.g. ``pressure (Pa)``."""
        return f"{self.label} ({self.unit})"


FIELDS: dict[str, FieldSpec] = {spec.name: spec for spec in (
    FieldSpec("umag", "|u|", "m/s", "velocity"),
    FieldSpec("ux", "u_x", "m/s", "velocity"),
    FieldSpec("uy", "u_y", "m/s", "velocity"),
    FieldSpec("uz", "u_z", "m/s", "velocity"),
    FieldSpec("rho", "density", "kg/m³", "density"),
    FieldSpec("pressure", "pressure p − p0", "Pa", "stress"),
    FieldSpec("vorticity", "vorticity |ω|", "1/s", "rate"),
    FieldSpec("qcrit", "Q-criterion", "1/s²", "rate2"),
    FieldSpec("wss", "wall shear stress", "Pa", "stress"),
)}

#: Fields that need the velocity gradient (a cut needs its two neighbour layers too).
GRADIENT_FIELDS = ("vorticity", "qcrit")


def pressure(rho: Any, rho0: float) -> Any:
    """Pressure relative to the reference, ``c_s^2 (rho - rho0)``, lattice units."""
    return (rho - rho0) / 3.0


def _neighbour(values: Any, fluid: Any, axis: int, step: int, periodic: bool,
               xp: Any) -> tuple[Any, Any]:
    """(values at the node ``step`` along grid ``axis``, whether that node is fluid); nodes
    beyond the box count as not fluid unless ``periodic``. ``values`` (..., *grid), ``fluid``
    (*grid)."""
    offset = values.ndim - fluid.ndim
    shifted = xp.roll(values, -step, axis=offset + axis)
    inside = xp.roll(fluid, -step, axis=axis)
    if not periodic:
        edge = [slice(None)] * fluid.ndim
        edge[axis] = slice(-1, None) if step > 0 else slice(0, 1)
        inside[tuple(edge)] = False
    return shifted, inside


def _derivative(values: Any, fluid: Any, axis: int, periodic: bool, xp: Any) -> Any:
    """d values / d x_axis (spacing 1): central, one-sided next to a non-fluid node, or 0."""
    ahead, fluid_ahead = _neighbour(values, fluid, axis, 1, periodic, xp)
    behind, fluid_behind = _neighbour(values, fluid, axis, -1, periodic, xp)
    out = xp.where(fluid_ahead & fluid_behind, 0.5 * (ahead - behind),
                   xp.where(fluid_ahead, ahead - values,
                            xp.where(fluid_behind, values - behind, 0.0)))
    return xp.where(fluid, out, 0.0)


def velocity_gradient(u: Any, fluid: Any, xp: Any = np,
                      periodic: tuple[bool, ...] | None = None) -> Any:
    """``G[a, b] = d u_a / d x_b`` (d, d, *grid) of a velocity (d, *grid) on a grid of ``d``
    axes with unit spacing; ``fluid`` (*grid, bool) marks the nodes with a velocity; along a
    ``periodic`` axis the grid wraps (default: none does)."""
    fluid = xp.asarray(fluid, dtype=bool)
    periodic = periodic or (False,) * fluid.ndim
    return xp.stack([_derivative(u, fluid, b, periodic[b], xp) for b in range(fluid.ndim)],
                    axis=1)


def vorticity(grad: Any, xp: Any = np) -> Any:
    """The vorticity ``curl u`` (3, ...) of a 3D gradient, or the scalar (...) of a 2D one."""
    if grad.shape[0] == 2:
        return grad[1, 0] - grad[0, 1]
    return xp.stack([grad[2, 1] - grad[1, 2], grad[0, 2] - grad[2, 0], grad[1, 0] - grad[0, 1]])


def vorticity_magnitude(grad: Any, xp: Any = np) -> Any:
    """``|curl u|`` (...) of a velocity gradient (d, d, ...)."""
    w = vorticity(grad, xp)
    return xp.abs(w) if grad.shape[0] == 2 else xp.sqrt((w * w).sum(axis=0))


def q_criterion(grad: Any, xp: Any = np) -> Any:
    """``Q = (|Omega|^2 - |S|^2) / 2`` (...) with S and Omega the symmetric and antisymmetric
    parts of the velocity gradient (d, d, ...): positive where rotation dominates strain."""
    transpose = xp.swapaxes(grad, 0, 1)
    strain, rotation = 0.5 * (grad + transpose), 0.5 * (grad - transpose)
    return 0.5 * ((rotation * rotation).sum(axis=(0, 1)) - (strain * strain).sum(axis=(0, 1)))


def grid_field(name: str, rho: Any, u: Any, solid: Any, rho0: float = 1.0,
               xp: Any = np, periodic: tuple[bool, ...] | None = None) -> Any:
    """Field ``name`` (not ``wss``) on a whole grid from its density (*grid) and velocity
    (d, *grid), lattice units, NaN in ``solid`` (the host path of notebooks and exports);
    ``periodic``: the axes along which the grid wraps."""
    solid = xp.asarray(solid, dtype=bool)
    fluid = ~solid
    if name == "rho":
        out = rho
    elif name == "pressure":
        out = pressure(rho, rho0)
    elif name == "umag":
        out = xp.sqrt((xp.where(fluid, u, 0.0) ** 2).sum(axis=0))
    elif name in ("ux", "uy", "uz"):
        component = "xyz".index(name[1])
        out = u[component] if component < u.shape[0] else xp.zeros_like(rho)
    elif name in GRADIENT_FIELDS:
        grad = velocity_gradient(xp.where(fluid, u, 0.0), fluid, xp, periodic)
        out = vorticity_magnitude(grad, xp) if name == "vorticity" else q_criterion(grad, xp)
    else:
        raise ValueError(f"Unknown field {name!r}; choose one of {list(FIELDS)} "
                         "(wss: Simulation.wall_shear_stress).")
    return xp.where(solid, xp.nan, out)


def cut_gradient_field(sim: Any, axis: int, index: int, name: str) -> np.ndarray:
    """A :data:`GRADIENT_FIELDS` field on the cut of ``sim`` (a Simulation) normal to ``axis``
    at ``index`` (2D: the whole field): host (n_a, n_b), NaN in solids, lattice units.

    The velocity of the cut and of its two neighbour layers (wrapped along a periodic axis,
    none beyond a wall of the box) is read at their nodes on the device, the gradient is
    computed there, and only the plane crosses to the host.
    """
    xp = sim.backend.xp
    periodic = tuple(sim.problem.periodic)
    if len(sim.shape) == 2:
        u, fluid = sim.cut_velocity(0, 0)
        grad = velocity_gradient(u, xp.asarray(fluid), xp, periodic)
        middle = fluid
    else:
        n = sim.shape[axis]
        u_mid, middle = sim.cut_velocity(axis, index)
        layers, masks = [], []
        for k in (index - 1, index, index + 1):
            if sim.problem.periodic[axis]:
                k %= n
            if k == index:
                u, fluid = u_mid, middle
            elif 0 <= k < n:
                u, fluid = sim.cut_velocity(axis, k)
            else:
                u, fluid = xp.zeros_like(u_mid), np.zeros_like(middle)
            layers.append(u)
            masks.append(fluid)
        slab = xp.stack(layers, axis=1 + axis)  # (3, *grid) with 3 layers along the normal
        # The three layers are the normal's whole extent here: it never wraps in the slab.
        slab_periodic = tuple(p and a != axis for a, p in enumerate(periodic))
        grad = velocity_gradient(slab, xp.asarray(np.stack(masks, axis=axis)), xp,
                                 slab_periodic)
        grad = xp.take(grad, 1, axis=2 + axis)
    field = vorticity_magnitude(grad, xp) if name == "vorticity" else q_criterion(grad, xp)
    plane = np.array(sim.backend.to_host(field), dtype=np.float64)
    plane[~middle] = np.nan
    return plane


def wall_cut(walls: Any, axis: int, index: int, ndim: int) -> tuple[Any, tuple]:
    """(the :class:`solver.wall_shear.WallNodes` on the cut normal to ``axis`` at ``index``,
    their in-plane indices into the cut); 2D: all of them."""
    from .wall_shear import WallNodes

    voxels = walls.voxels
    pick = np.flatnonzero(voxels[:, axis] == index) if ndim == 3 else np.arange(len(voxels))
    sub = WallNodes(voxels[pick], walls.normals[pick], walls.tile[:, pick],
                    walls.direction[:, pick], walls.node[:, pick])
    in_plane = np.delete(voxels[pick], axis, axis=1) if ndim == 3 else voxels[pick]
    return sub, tuple(in_plane.T)


def image_data(fields: dict[str, np.ndarray], voxel_size: float | None = None) -> Any:
    """A :class:`pyvista.ImageData` with one cell array per entry of ``fields`` (grid-shaped
    arrays, x, y[, z] order), cells of ``voxel_size`` metres (1 if None)."""
    import pyvista as pv

    shape = next(iter(fields.values())).shape
    shape3 = tuple(shape) + (1,) * (3 - len(shape))
    h = voxel_size or 1.0
    grid = pv.ImageData(dimensions=tuple(n + 1 for n in shape3), spacing=(h, h, h))
    for name, values in fields.items():
        grid.cell_data[name] = np.asarray(values, dtype=np.float64).reshape(-1, order="F")
    return grid
