"""The user-facing simulation object: geometry + configuration + backend state.

``Simulation(geometry, config)`` tiles the geometry (cheap, host only) and derives the run's
constants; device memory is allocated by :meth:`Simulation.allocate`, which :meth:`step` calls on
first use. Fields come back on the voxel grid in (x, y[, z]) order with NaN in solid nodes.
All quantities are in lattice units.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .backends import Backend, get_backend
from .collision import stored_moments
from .config import ConfigError, SimulationConfig
from .metrics import Metrics
from .problem import Problem

__all__ = ["Simulation", "SimulationConfig", "ConfigError", "QUANTITIES"]

log = logging.getLogger(__name__)

#: Quantities :meth:`Simulation.slice` can return.
QUANTITIES = ("umag", "ux", "uy", "uz", "rho")


def solid_mask(geometry: Any) -> np.ndarray:
    """Boolean solid mask (True = solid) of a VoxelGeometry or a plain boolean array."""
    solid = getattr(geometry, "solid", geometry)
    solid = np.asarray(solid)
    if solid.dtype != bool:
        raise ConfigError(
            f"A plain array geometry must be boolean (True = solid), got dtype {solid.dtype}; "
            "convert it with `array != pore_value` or load it through geometries.load()."
        )
    if solid.ndim not in (2, 3):
        raise ConfigError(f"Geometry must be 2D or 3D, got shape {solid.shape}.")
    if solid.all():
        raise ConfigError("The geometry has no fluid node: nothing to simulate.")
    return solid


class Simulation:
    """A tiled lattice-Boltzmann run on one geometry (lattice units throughout)."""

    def __init__(
        self, geometry: Any, config: SimulationConfig | None = None,
        backend: Backend | str | None = None,
    ) -> None:
        self.geometry = geometry
        self.config = config if config is not None else SimulationConfig()
        self.solid = solid_mask(geometry)
        self.problem = Problem.from_config(self.solid, self.config)
        if backend is None or isinstance(backend, str):
            backend = get_backend(backend or self.config.backend)
        self.backend = backend
        self.state: Any = None
        self.metrics = Metrics(
            fluid_nodes=self.problem.n_fluid, n_tiles=self.problem.tiling.n_tiles,
            eta_t=self.problem.tiling.eta_t,
            bytes_per_node_step=self.problem.bytes_per_fluid_node_step(),
        )

    @property
    def tiling(self):
        """The tiling of the geometry (see :class:`solver.tiling.Tiling`)."""
        return self.problem.tiling

    @property
    def time_step(self) -> int:
        """Number of completed time steps."""
        return self.metrics.steps

    def memory_bytes(self) -> int:
        """Memory the state needs on the device, bytes."""
        return self.tiling.memory_bytes(self.problem.lattice.q, self.problem.dtype.itemsize)

    def allocate(self) -> None:
        """Allocate and initialise the backend state (equilibrium at rest)."""
        if self.state is None:
            self.state = self.backend.allocate(self.problem)
            info = self.backend.device_info()
            self.metrics.peak_bandwidth = info.get("peak_bandwidth")
            self.metrics.copy_bandwidth = info.get("copy_bandwidth")

    def step(self, n: int = 1) -> None:
        """Advance ``n`` time steps."""
        if n < 0:
            raise ValueError(f"Number of steps must be non-negative, got {n}.")
        self.allocate()
        if n:
            self.metrics.record(n, self.backend.step(self.state, n))

    def populations(self) -> np.ndarray:
        """Latest post-collision populations on the host, float64 (n_tiles, q, a**d)."""
        self.allocate()
        return self.backend.populations(self.state)

    def fields(self) -> dict[str, np.ndarray]:
        """Density ``rho`` (grid shape) and velocity ``u`` (d + grid shape); NaN in solids."""
        f = self.populations()
        t, q, n = f.shape
        flat = f.transpose(1, 0, 2).reshape(q, t * n)
        rho, u = stored_moments(flat, self.problem.lattice, self.problem.force,
                                self.problem.incompressible)
        solid = self.tiling.solid.reshape(-1)
        rho = np.where(solid, np.nan, rho).reshape(t, n)
        u = np.where(solid, np.nan, u).reshape(-1, t, n).transpose(1, 2, 0)
        return {
            "rho": self.tiling.scatter(rho),
            "u": np.moveaxis(self.tiling.scatter(u), -1, 0),
        }

    def slice(self, axis: int, index: int, quantity: str = "umag") -> np.ndarray:
        """2D cut through the fields normal to ``axis`` at ``index`` (3D) or the field (2D)."""
        if quantity not in QUANTITIES:
            raise ValueError(f"Unknown quantity {quantity!r}; choose one of {QUANTITIES}.")
        fields = self.fields()
        if quantity == "rho":
            data = fields["rho"]
        elif quantity == "umag":
            data = np.sqrt((fields["u"] ** 2).sum(axis=0))
        else:
            component = "xyz".index(quantity[1])
            if component >= self.solid.ndim:
                raise ValueError(f"{quantity} does not exist in a 2D simulation.")
            data = fields["u"][component]
        if data.ndim == 2:
            return data
        if not 0 <= axis < 3 or not 0 <= index < data.shape[axis]:
            raise ValueError(f"Slice axis {axis} index {index} is outside shape {data.shape}.")
        return np.take(data, index, axis=axis)

    def close(self) -> None:
        """Free the backend state (device memory)."""
        if self.state is not None:
            self.backend.release(self.state)
            self.state = None

    def save(self, path: str | Path) -> Path:
        """Write a checkpoint (populations in the storage dtype, config, mask hash) atomically."""
        from .io import save_simulation

        return save_simulation(self, path)

    @classmethod
    def load(cls, path: str | Path, geometry: Any, backend: Backend | str | None = None,
             ) -> Simulation:
        """Continue from a checkpoint on ``geometry``; refuses another geometry's checkpoint."""
        from .io import load_simulation

        return load_simulation(path, geometry, backend)
