"""Host-side description of one run, built once per geometry and configuration.

A :class:`Problem` gathers what every backend needs — the lattice, the tiling, relaxation rates,
the body force, the periodic axes and the storage dtype — so that backends only allocate and
step. Large derived tables (the NumPy pull table) are built on first use only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .collision import Relaxation, equilibrium, relaxation
from .config import SimulationConfig
from .lattice import Lattice, get_lattice
from .streaming import PullTable, build_pull_table
from .tiling import Tiling

__all__ = ["Problem"]


@dataclass
class Problem:
    """Everything about a run that does not change while it steps (lattice units)."""

    lattice: Lattice
    tiling: Tiling
    rates: Relaxation
    force: np.ndarray
    incompressible: bool
    rho0: float
    periodic: tuple[bool, ...]
    dtype: np.dtype
    collision: str
    layout: str = "paper"
    tiles_per_block: int = 1
    extras: dict = field(default_factory=dict)
    #: Tiles this process steps, bool (n_tiles,); None = all. The others are read-only halo
    #: tiles of a distributed run (:mod:`solver.distributed`).
    owned: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def from_config(cls, solid: np.ndarray, config: SimulationConfig) -> Problem:
        """Tile ``solid`` (True = solid, axes (x, y[, z])) and derive the run's constants."""
        config.check(solid.ndim)
        lattice = get_lattice(config.lattice)
        offset = "best" if config.tile_offset == "best" else (0,) * solid.ndim
        tiling = Tiling.build(solid, config.tile_edge, offset)
        return cls(
            lattice=lattice,
            tiling=tiling,
            rates=relaxation(config.collision, config.tau, config.trt_magic),
            force=np.asarray(config.body_force[: lattice.d], dtype=np.float64),
            incompressible=config.fluid_model == "incompressible",
            rho0=float(config.initial_density),
            periodic=config.periodic_axes(),
            dtype=np.dtype(config.precision),
            collision=config.collision,
            layout=config.gpu_layout,
            tiles_per_block=int(config.tiles_per_block),
        )

    @property
    def n_fluid(self) -> int:
        """Fluid nodes in the domain (in the owned tiles when ``owned`` is set)."""
        if self.owned is None:
            return self.tiling.n_fluid
        return int((~self.tiling.solid[self.owned]).sum())

    @cached_property
    def pull_table(self) -> PullTable:
        """Gather/scatter tables of the NumPy reference (built on first use)."""
        return build_pull_table(self.tiling, self.lattice, self.periodic, self.owned)

    def initial_populations(self) -> np.ndarray:
        """Equilibrium at rest with density rho0 on every tile node, float64 (n_tiles, q, a**d)."""
        n = self.tiling.n_tiles * self.tiling.nodes_per_tile
        rho = np.full(n, self.rho0)
        u = np.zeros((self.lattice.d, n))
        feq = equilibrium(rho, u, self.lattice, self.incompressible)
        return feq.reshape(self.lattice.q, self.tiling.n_tiles, -1).transpose(1, 0, 2).copy()

    def bytes_per_fluid_node_step(self) -> int:
        """Minimum bytes moved per fluid node and step, 2 q n_d (paper eq. 10)."""
        return 2 * self.lattice.q * self.dtype.itemsize
