"""Small random porous test problems shared by the GPU and kernel-emulation tests.

Sizes are not multiples of the tile edge, x and z are periodic and y has walls, a body force
drives the flow, a solid block guarantees empty tiles, and the populations start from a noisy
equilibrium so that every direction and layout carries distinct values from the first step.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from solver.backends.base import with_rest_solids
from solver.backends.numpy_backend import NumpyBackend
from solver.config import SimulationConfig
from solver.problem import Problem
from solver.tiling import Tiling

__all__ = ["SHAPES", "porous_solid", "make_problem", "noisy_start", "as_stored", "reference",
           "sector_filled"]

#: Domain sizes per lattice (not multiples of the default tile edges 4 in 3D and 8 in 2D).
SHAPES = {"D2Q9": (45, 21), "D3Q19": (26, 15, 11), "D3Q27": (15, 10, 7)}


def porous_solid(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random overlapping periodic spheres (about 40 % solid) plus one solid block."""
    rng = np.random.default_rng(seed)
    grids = np.meshgrid(*[np.arange(n) for n in shape], indexing="ij")
    solid = np.zeros(shape, dtype=bool)
    while solid.mean() < 0.4:
        centre, radius = rng.uniform(0, shape), rng.uniform(1.5, 3.5)
        dist2 = sum(np.minimum(abs(g - c), n - abs(g - c)) ** 2
                    for g, c, n in zip(grids, centre, shape, strict=True))
        solid |= dist2 <= radius**2
    solid[tuple(slice(0, min(9, n)) for n in shape)] = True  # whole tiles stay empty
    return solid


def make_problem(lattice: str = "D3Q19", precision: str = "float64", collision: str = "TRT",
                 fluid_model: str = "incompressible", layout: str = "paper",
                 tiles_per_block: int = 1, offset: tuple[int, ...] | None = None,
                 seed: int = 0, storage: str = "auto", tile_storage: str = "tiled") -> Problem:
    """A porous problem; ``offset`` forces the tile-grid offset (else the best one). Tiled
    storage unless asked: these problems test the tiled kernels (layouts, tiles per block),
    which the default 'auto' would replace by the compact one on porous geometries."""
    shape = SHAPES[lattice]
    d = len(shape)
    faces = {"x_min": "periodic", "x_max": "periodic", "y_min": "wall", "y_max": "wall"}
    if d == 3:
        faces |= {"z_min": "periodic", "z_max": "periodic"}
    force = (2e-5, -1e-5, 5e-6) if d == 3 else (2e-5, -1e-5, 0.0)
    config = SimulationConfig(lattice=lattice, precision=precision, collision=collision,
                              fluid_model=fluid_model, gpu_layout=layout,
                              tiles_per_block=tiles_per_block, body_force=force, tau=0.7,
                              storage=storage, tile_storage=tile_storage, **faces)
    solid = porous_solid(shape, seed)
    problem = Problem.from_config(solid, config)
    if offset is not None:
        problem = replace(problem, tiling=Tiling.build(solid, problem.tiling.a, offset))
    assert (problem.tiling.tile_map < 0).any(), "test geometry must have empty tiles"
    return problem


def narrow_problem(shape: tuple[int, int, int]) -> Problem:
    """D3Q19 TRT float64 problem on an all-fluid box narrower than a tile: periodic wrap onto
    itself along x and z, walls in y, a body force."""
    config = SimulationConfig(lattice="D3Q19", precision="float64", collision="TRT",
                              fluid_model="quasi-compressible", body_force=(1e-5, 0.0, 2e-6),
                              y_min="wall", y_max="wall", tile_offset="origin",
                              tile_storage="tiled")  # tests the tiled kernels' wrap
    return Problem.from_config(np.zeros(shape, dtype=bool), config)


def noisy_start(problem: Problem, seed: int = 1) -> np.ndarray:
    """Rest equilibrium with 1 % noise, rounded to the storage, float64."""
    f0 = problem.initial_populations()
    noise = np.random.default_rng(seed).standard_normal(f0.shape)
    storage = problem.storage
    return storage.decode(storage.encode(f0 * (1.0 + 0.01 * noise))).astype(np.float64)


def as_stored(problem: Problem, f: np.ndarray) -> np.ndarray:
    """``f`` (n_tiles, q, a**d) as a backend's ``set_populations`` stores it, read back, float64:
    rounded to the storage, the rest equilibrium in solid nodes (:mod:`solver.backends.base`)."""
    storage = problem.storage
    return storage.decode(with_rest_solids(problem, storage.encode(f))).astype(np.float64)


def reference(problem: Problem, f0: np.ndarray, steps: int,
              then_from_step: int | None = None) -> np.ndarray:
    """NumPy-backend populations (XYZ, float64) after ``steps`` steps from ``f0``; with
    ``then_from_step``, ``steps`` more with the step counter set to it (float16 storage's
    stochastic rounding, as after a resume)."""
    backend = NumpyBackend(threads=1)
    state = backend.allocate(problem)
    backend.set_populations(state, f0)
    backend.step(state, steps)
    if then_from_step is not None:
        backend.set_step(state, then_from_step)
        backend.step(state, steps)
    return backend.populations(state)


def sector_filled(problem: Problem) -> np.ndarray:
    """Solid nodes that XYZ-layout kernels write (the rest equilibrium), bool (n_tiles, a**d).

    Those whose 32-byte sector, 32 / itemsize consecutive nodes of a tile, holds a fluid node,
    when the problem's kernel has the sector fill (none otherwise).
    """
    from solver.backends.cuda.kernels import KernelVariant

    solid = problem.tiling.solid
    if not KernelVariant.for_problem(problem).sector_fill:
        return np.zeros_like(solid)
    sectors = solid.reshape(solid.shape[0], -1, 32 // problem.storage_dtype.itemsize)
    return (sectors & ~sectors.all(axis=2, keepdims=True)).reshape(solid.shape)


def half_tolerance(problem: Problem, ref: np.ndarray, steps: int = 4) -> float:
    """``steps`` binary16 steps of the largest stored deviation |f - w rho0| of ``ref``
    (solver.storage): how far float16 runs whose float32 arithmetic runs in another order may
    differ (rounding thresholds crossed differently add up over the steps)."""
    return steps * 2.0**-10 * np.abs(ref - problem.storage.shift[:, None]).max()

