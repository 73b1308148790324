"""Simulation configuration: the single source of option sets, defaults and validation.

:class:`SimulationConfig` is a ``param.Parameterized``; the dashboard builds its widgets from it
and the CLI reads case files into it. Every value is in lattice units (node spacing 1, time step
1); conversion from physical units happens at the edges (app, case files). Cross-field checks
that need the geometry (lattice dimension against the geometry's) live in :meth:`check`.
"""

from __future__ import annotations

import logging

import param

from .lattice import LATTICE_NAMES, get_lattice

__all__ = [
    "ConfigError", "SimulationConfig", "FACE_NAMES", "FACE_TYPES", "COLLISIONS", "FLUID_MODELS",
    "PRECISIONS", "BACKENDS",
]

log = logging.getLogger(__name__)

FACE_NAMES = ("x_min", "x_max", "y_min", "y_max", "z_min", "z_max")
FACE_TYPES = ("periodic", "wall")
COLLISIONS = ("BGK", "TRT")
FLUID_MODELS = ("incompressible", "quasi-compressible")
PRECISIONS = ("float32", "float64")
BACKENDS = ("auto", "numpy", "cupy")
GPU_LAYOUTS = ("paper", "xyz")

#: Above this lattice Mach number |u|/c_s compressibility errors dominate; the run is refused.
MAX_MACH = 0.3


class ConfigError(ValueError):
    """A configuration value is invalid; the message says which and what to use instead."""


class _Tau(param.Number):
    """Relaxation time with a message that explains the stability limit."""

    def _validate_value(self, val, allow_None):
        super()._validate_value(val, allow_None)
        if val is not None and val <= 0.5:
            raise ConfigError(
                f"tau = {val} gives zero or negative viscosity (nu = (tau - 1/2)/3); "
                "use tau > 0.5, in practice 0.51 or more (0.6-1.0 is robust)."
            )


def _face(doc: str) -> param.Selector:
    return param.Selector(objects=list(FACE_TYPES), default="periodic", doc=doc)


class SimulationConfig(param.Parameterized):
    """Physics and numerics of one run, in lattice units."""

    lattice = param.Selector(objects=list(LATTICE_NAMES), default="D3Q19",
                             doc="Velocity set; D2Q9 for 2D geometries, D3Q19/D3Q27 for 3D.")
    collision = param.Selector(objects=list(COLLISIONS), default="TRT",
                               doc="BGK (single relaxation time) or TRT (two relaxation times).")
    fluid_model = param.Selector(objects=list(FLUID_MODELS), default="incompressible",
                                 doc="Equilibrium: incompressible (He-Luo) or quasi-compressible.")
    precision = param.Selector(objects=list(PRECISIONS), default="float32",
                               doc="Floating-point type of the stored populations.")
    tau = _Tau(default=0.8, softbounds=(0.5, 2.0),
               doc="Relaxation time (lattice units); viscosity nu = (tau - 1/2)/3.")
    trt_magic = param.Number(default=3 / 16, bounds=(0, None), inclusive_bounds=(False, True),
                             softbounds=(0.01, 1.0),
                             doc="TRT magic parameter Lambda; 3/16 puts bounce-back walls exactly "
                                 "half-way for Poiseuille flow.")
    body_force = param.NumericTuple(default=(0.0, 0.0, 0.0), length=3,
                                    doc="Constant body force per unit volume (lattice units), "
                                        "(Fx, Fy, Fz); Fz is ignored in 2D.")
    initial_density = param.Number(default=1.0, bounds=(0, None), inclusive_bounds=(False, True),
                                   doc="Initial (and reference) density, lattice units.")
    x_min = _face("Boundary at the x = 0 face.")
    x_max = _face("Boundary at the x = nx-1 face.")
    y_min = _face("Boundary at the y = 0 face.")
    y_max = _face("Boundary at the y = ny-1 face.")
    z_min = _face("Boundary at the z = 0 face (3D only).")
    z_max = _face("Boundary at the z = nz-1 face (3D only).")
    tile_edge = param.Integer(default=None, allow_None=True, bounds=(1, 16),
                              doc="Tile edge in nodes; default 4 in 3D and 8 in 2D.")
    tile_offset = param.Selector(objects=["best", "origin"], default="best",
                                 doc="Tile-grid placement: search for the best eta_t, or start "
                                     "at node 0 as in Algorithm 1.")
    backend = param.Selector(objects=list(BACKENDS), default="auto",
                             doc="Compute backend; auto picks CuPy when a GPU is usable.")
    # Defaults are the fastest full step measured on an H200 (benchmarks/results/): Hopper's
    # large L2 absorbs the neighbour reads the paper's layouts were designed to save.
    gpu_layout = param.Selector(objects=list(GPU_LAYOUTS), default="xyz",
                                doc="In-tile layout on the GPU: the paper's per-direction "
                                    "XYZ/YXZ/zigzagNE assignment, or XYZ for all directions.")
    tiles_per_block = param.Selector(objects=[1, 2, 4], default=2,
                                     doc="Tiles processed by one GPU thread block.")

    @property
    def viscosity(self) -> float:
        """Kinematic viscosity in lattice units, (tau - 1/2)/3."""
        return (self.tau - 0.5) / 3.0

    @property
    def ndim(self) -> int:
        """Spatial dimension of the chosen lattice."""
        return get_lattice(self.lattice).d

    def faces(self) -> dict[str, str]:
        """Boundary type per domain face, for the faces of this lattice's dimension."""
        return {name: getattr(self, name) for name in FACE_NAMES[: 2 * self.ndim]}

    def periodic_axes(self) -> tuple[bool, ...]:
        """Per axis, whether both faces are periodic."""
        faces = self.faces()
        return tuple(faces[f"{ax}_min"] == "periodic" for ax in "xyz"[: self.ndim])

    def check(self, geometry_ndim: int | None = None) -> None:
        """Raise ConfigError for inconsistent fields or a geometry of another dimension."""
        if geometry_ndim is not None and geometry_ndim != self.ndim:
            options = "D2Q9" if geometry_ndim == 2 else "D3Q19 or D3Q27"
            raise ConfigError(
                f"Lattice {self.lattice} is {self.ndim}D but the geometry is {geometry_ndim}D; "
                f"choose {options}."
            )
        faces = self.faces()
        for ax in "xyz"[: self.ndim]:
            lo, hi = faces[f"{ax}_min"], faces[f"{ax}_max"]
            if (lo == "periodic") != (hi == "periodic"):
                raise ConfigError(
                    f"Periodic boundaries come in pairs: {ax}_min is {lo!r} but {ax}_max is "
                    f"{hi!r}; make both periodic or neither."
                )
        if self.ndim == 2 and self.body_force[2] != 0.0:
            raise ConfigError("A 2D lattice has no z axis: set body_force[2] to 0.")
