"""A good initial field for a permeability run: the flow of the sample coarsened by 2.

The slow part of a permeability run is the pressure (density) field spreading through the
sample (see :mod:`solver.rock.protocol`). The same protocol on the sample downsampled by 2 has
8x fewer nodes and reaches its steady state in about the same number of (coarse) steps, so for
about 1/8 of the work it gives a pressure field close to the fine one. That field, with the
coarse velocity, is prolongated (each coarse voxel to its 2³ fine voxels) and the fine run
starts from its equilibrium populations instead of from rest.

Scaling (Stokes flow, same tau): the coarse run keeps the fine densities at the faces and
doubles the body force, so the pressure drop over the sample is the same and the density field
is taken over as it is; k in coarse voxels² is k/4 and the gradient per coarse voxel is twice
the fine one, so the fine velocity is twice the coarse one.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from geometries.errors import GeometryError
from geometries.preprocess import downsample, keep_connected

from ..collision import equilibrium
from ..config import SimulationConfig
from ..lattice import get_lattice
from ..simulation import Simulation
from .protocol import ProtocolSetup

__all__ = ["FACTOR", "coarse_setup", "prolongate", "start_from"]

log = logging.getLogger(__name__)

#: Coarsening factor per axis.
FACTOR = 2


def coarse_setup(setup: ProtocolSetup) -> ProtocolSetup | None:
    """The protocol on the geometry coarsened by 2 (None when that no longer percolates)."""
    shape = setup.geometry.shape
    if any(n % FACTOR or n < 4 * FACTOR for n in shape):
        return None
    coarse = downsample(setup.geometry, FACTOR)
    coarse.flow_axis = setup.axis
    try:
        coarse, _ = keep_connected(coarse, setup.axis, get_lattice(setup.config.lattice).c)
    except GeometryError:
        log.info("%s: the coarsened sample does not percolate; starting from rest.", setup.name)
        return None
    values = {k: v for k, v in setup.config.param.values().items() if k != "name"}
    values["body_force"] = tuple(FACTOR * f for f in setup.config.body_force)
    lo, hi = setup.window
    window = (lo // FACTOR, -(-hi // FACTOR))
    return dataclasses.replace(setup, geometry=coarse, config=SimulationConfig(**values),
                               window=window, sample_layers=setup.sample_layers // FACTOR,
                               gradient=FACTOR * setup.gradient)


def prolongate(fields: dict[str, np.ndarray], shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Coarse rho and u repeated onto the fine grid ``shape``; velocity times 2; NaN to rest."""
    rho, u = fields["rho"], fields["u"]
    for a in range(rho.ndim):
        rho = np.repeat(rho, FACTOR, axis=a)
        u = np.repeat(u, FACTOR, axis=a + 1)
    box = tuple(slice(0, n) for n in shape)
    rho, u = rho[box], FACTOR * u[(slice(None), *box)]
    fluid = np.isfinite(rho) & np.all(np.isfinite(u), axis=0)
    mean_rho = float(np.mean(rho[fluid])) if fluid.any() else 1.0
    return {"rho": np.where(fluid, rho, mean_rho), "u": np.where(fluid, u, 0.0)}


def start_from(sim: Simulation, fields: dict[str, np.ndarray], chunk: int = 1 << 16) -> None:
    """Set ``sim``'s populations to the equilibrium of ``fields`` (fine grid, lattice units).

    Built ``chunk`` tiles at a time, so a 400³ image needs no more host memory than the
    population array itself.
    """
    tiling, p = sim.tiling, sim.problem
    q, n_node = p.lattice.q, tiling.nodes_per_tile
    # float32 runs get float32 host populations: half the host memory and transfer at 400³.
    dtype = np.float64 if sim.config.precision == "float64" else np.float32
    f = np.empty((tiling.n_tiles, q, n_node), dtype=dtype)
    upper = np.array(tiling.shape) - 1
    local = tiling.local_coordinates()
    for lo in range(0, tiling.n_tiles, chunk):
        tiles = slice(lo, min(lo + chunk, tiling.n_tiles))
        corner = tiling.tiles[tiles].astype(np.int64) * tiling.a - np.array(tiling.offset)
        coords = np.clip(corner[:, None, :] + local[None], 0, upper)  # (t, N, d)
        index = tuple(coords[..., a] for a in range(coords.shape[-1]))
        rho = fields["rho"][index].reshape(-1)
        u = np.stack([c[index].reshape(-1) for c in fields["u"]])
        u[:, tiling.solid[tiles].reshape(-1)] = 0.0
        feq = equilibrium(rho, u, p.lattice, p.incompressible)  # (q, t * N)
        f[tiles] = feq.reshape(q, -1, n_node).transpose(1, 0, 2)
    sim.allocate()
    sim.backend.set_populations(sim.state, f)
