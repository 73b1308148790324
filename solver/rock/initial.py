"""A good initial field for a permeability run: the flow of the sample coarsened by 2.

The slow part of a permeability run is the pressure (density) field spreading through the
sample (see :mod:`solver.rock.protocol`). The same protocol on the sample downsampled by 2 has
8x fewer nodes and reaches its steady state in about the same number of (coarse) steps, so for
about 1/8 of the work it gives a pressure field close to the fine one. That field, with the
coarse velocity, is prolongated (each coarse voxel to its 2³ fine voxels) and the fine run
starts from its equilibrium populations instead of from rest.

The prolongation runs on the backend's device (:func:`start_on_device`, through the backend's
array module: ``device_populations``, ``set_populations``): no field leaves the device, which
at 400³ (an 800x400x400 mirrored box) was what made the host-built start slower than a run
starting at rest. :func:`prolongate` and :func:`start_from` are the host form of the same map
(a steady field saved on the host, the tests' reference).

Chained (``PermeabilitySettings.coarse_levels``, :func:`solver.rock.measure.start_levels`):
the coarse run may itself start from the sample coarsened by 4, and so on; every level is
:func:`coarse_setup` of the one above and is prolongated into it by :func:`start_on_device`.
The slowest transient takes about the same number of steps at every level (``L²/k`` is
unchanged when both are halved), so a deeper chain helps as far as its coarsest, cheapest
run is converged more tightly than the finer ones would be (``coarse_tolerance_factor``); the
fine run's own correction of the coarse geometry (its pressure field) stays, and on 24³-48³
packs (CPU) that, not the long modes, set the fine steps: the chain did not change them; on a
400³ image (H200) it cut them from 4200 to 3200 (k 0.1 % lower, nearer the common limit).

How close the coarse run must get matters little: on a 40³ sandstone-like image (tau 0.6) the
fine run took 1600 steps whether the coarse run stopped at 10x, 3x or 1x the tolerance (1400,
1500, 1600 coarse steps), about the 1000-step window of the convergence test plus the fine
grid's own correction of the coarse geometry; hence the loose 10x.

Rescaled start (``PermeabilitySettings.start_rescale``, issue 29): a coarse level's k is above
the fine one (a 1000³ image, x: 1/2 resolution 30 % high), so the prolongated start carries
that much too much flow. With ``velocity`` each prolongation multiplies the velocity by
``s = k_est / k_coarse`` (:class:`StartScale`), ``k_est`` the next level's k extrapolated
from the chain's last two levels (``start_estimate``: geometrically, ``k_next ~ k_last² /
k_previous``, so ``s = k_last / k_previous``; or Richardson, order 2; 1 with one level),
clamped to :data:`RESCALE_BOUNDS`; ``velocity+density`` also multiplies the density's deviation
from the mean coarse density (mirrored runs only: :func:`solver.rock.measure.measure_axis`).
``start_density_gain`` multiplies that deviation at every prolongation by a fixed factor: on a
48³ pack of 16-voxel grains (porosity 0.2, tau 0.7, NumPy float64, two levels) whose fine k
fell slowly (+7.1 % at its first check, halving every 200 steps, 2601 fine steps), the
velocity rescale did not help (s = 0.5: +7.9 %, 2601 steps; velocity+density: +30 %, 3001
steps), while the density deviation times 1.15 at the fine run's prolongation left +0.58 % at
the first check and 1601 fine steps (k +0.017 %; times 1.3: -5.9 %, 2401 steps): the slow tail
is the coarse pressure field being weaker than the fine geometry's, not the flow rate. A
second 48³ pack (12-voxel grains) also did best near 1.15 (1601 -> 1401 fine steps at 1.1;
1.2 overshot: 2201). On the GPU (H200, 400³ image along x, against its run continued to 1e-5
per 1000 steps) the gain 1.1 cut the fine steps from 3201 to 1801 and k's distance from +0.144 to
+0.050 % (1.2: 2601 steps, -0.159 %; the velocity rescale alone: no change), and beside the gain
the velocity rescale cut the 1000³ image's fine steps from 1801 to 1401; so the defaults are
``velocity`` and 1.1 (the 1000³ tensor: 2001 fine steps per axis instead of 3001).
benchmarks/rock_time_to_answer/README.md has the numbers.

Scaling (Stokes flow, same tau): the coarse run keeps the fine densities at the faces and
doubles the body force, so the pressure drop over the sample is the same and the density field
is taken over as it is; k in coarse voxels² is k/4 and the gradient per coarse voxel is twice
the fine one, so the fine velocity is twice the coarse one.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np

from geometries.errors import GeometryError
from geometries.preprocess import downsample, keep_connected, mirror

from ..collision import equilibrium
from ..config import SimulationConfig
from ..fields import tile_moments
from ..lattice import get_lattice
from ..simulation import Simulation
from .protocol import ProtocolSetup, sample_labels

__all__ = ["ESTIMATE_CHOICES", "FACTOR", "PLAIN", "RESCALE_BOUNDS", "RESCALE_CHOICES",
           "CoarseTable", "StartScale", "coarse_setup", "prolongate", "pressure_ramp",
           "prolonged_populations", "start_from", "start_on_device"]

log = logging.getLogger(__name__)

#: Coarsening factor per axis.
FACTOR = 2
#: ``PermeabilitySettings.start_rescale`` choices (:class:`StartScale`).
RESCALE_CHOICES = ("none", "velocity", "velocity+density")
#: ``PermeabilitySettings.start_estimate`` choices: how the next level's k is estimated.
ESTIMATE_CHOICES = ("geometric", "richardson")
#: The range the start's rescale factor s is clamped to (a coarse level's k above the fine
#: one: s <= 1; a far-off chain estimate must not stop the start's flow).
RESCALE_BOUNDS = (0.5, 1.0)


@dataclasses.dataclass(frozen=True)
class StartScale:
    """Factors of one prolongation (dimensionless): the fine velocity is ``velocity`` x
    :data:`FACTOR` x the coarse one, the fine density the mean coarse density plus ``density``
    x the coarse deviation from it. The default (1, 1) is the plain prolongation."""

    velocity: float = 1.0
    density: float = 1.0

    @classmethod
    def from_chain(cls, mode: str, k_levels: list[float], estimate: str = "geometric",
                   density_gain: float = 1.0) -> StartScale:
        """The factors for prolongating the last of the chain's levels ``k_levels`` (their k
        in fine voxel², coarsest first) into the next finer one, as ``mode`` asks
        (:data:`RESCALE_CHOICES`): s = k_est / k_last, clamped to :data:`RESCALE_BOUNDS`;
        s = 1 with fewer than two positive finite levels. ``estimate``
        (:data:`ESTIMATE_CHOICES`): 'geometric', k_est = k_last² / k_previous (the ratio of the
        last two levels again: s = k_last / k_previous); 'richardson', k converging with
        the grid spacing squared (Richardson, order 2: k_est = k_last - (k_previous -
        k_last) / 4, s = 1 - (k_previous / k_last - 1) / 4). ``density_gain``: a further
        factor of the density's deviation, at every prolongation (the finer geometry's
        pressure field is stronger than the coarse one's; see the module doc)."""
        if mode not in RESCALE_CHOICES:
            raise ValueError(f"start_rescale {mode!r}: use one of {', '.join(RESCALE_CHOICES)}.")
        if estimate not in ESTIMATE_CHOICES:
            raise ValueError(f"start_estimate {estimate!r}: use one of "
                             f"{', '.join(ESTIMATE_CHOICES)}.")
        s = 1.0
        if mode != "none" and len(k_levels) >= 2:
            previous, last = float(k_levels[-2]), float(k_levels[-1])
            if all(np.isfinite(k) and k > 0 for k in (previous, last)):
                lo, hi = RESCALE_BOUNDS
                ratio = (last / previous if estimate == "geometric"
                         else 1.0 - (previous / last - 1.0) / 4.0)
                s = min(hi, max(lo, ratio))
        return cls(s, density_gain * (s if mode == "velocity+density" else 1.0))

    def density_of(self, rho: Any, mean_rho: Any) -> Any:
        """``rho`` with its deviation from ``mean_rho`` scaled (``rho`` itself when 1)."""
        return rho if self.density == 1.0 else mean_rho + self.density * (rho - mean_rho)


#: The plain prolongation.
PLAIN = StartScale()


def coarse_setup(setup: ProtocolSetup, backend: Any = None) -> ProtocolSetup | None:
    """The protocol on the geometry coarsened by 2 (None when that no longer percolates);
    its pores labelled on the GPU when ``backend`` is CuPy's (:func:`sample_labels`: 500³
    voxels for the first level of a 1000³ sample)."""
    shape = setup.geometry.shape
    if any(n % FACTOR or n < 4 * FACTOR for n in shape):
        return None
    geometry = setup.geometry
    halve = setup.protocol == "mirrored" and setup.sample_layers % FACTOR == 0
    if halve:
        # Coarsen and filter the sample (the first half) and mirror that: half the voxels of
        # the doubled box to vote and label, the same coarse box (the halves are even).
        index = [slice(None)] * geometry.ndim
        index[setup.axis] = slice(0, setup.sample_layers)
        index = tuple(index)
        labels = None if geometry.labels is None else geometry.labels[index]
        geometry = dataclasses.replace(geometry, solid=geometry.solid[index], labels=labels,
                                       openings=())
    coarse = downsample(geometry, FACTOR)
    coarse.flow_axis = setup.axis
    components = None
    if getattr(backend, "name", None) == "cupy":
        components = sample_labels(coarse, setup.config, backend).components
    try:
        coarse, _ = keep_connected(coarse, setup.axis, get_lattice(setup.config.lattice).c,
                                   components)
    except GeometryError:
        log.info("%s: the coarsened sample does not percolate; starting from rest.", setup.name)
        return None
    if halve:
        coarse = mirror(coarse, setup.axis)
    values = {k: v for k, v in setup.config.param.values().items() if k != "name"}
    values["body_force"] = tuple(FACTOR * f for f in setup.config.body_force)
    # The coarse run is only a start: no search for the best tile-grid offset (a 64-way search
    # over the coarse box, 1.0 s against 0.4 s at origin for the 400x200x200 coarse box of a
    # 400³ sample on the 2-core CPU, for a few % of a short run).
    values["tile_offset"] = "origin"
    lo, hi = setup.window
    window = (lo // FACTOR, -(-hi // FACTOR))
    return dataclasses.replace(setup, geometry=coarse, config=SimulationConfig(**values),
                               window=window, sample_layers=setup.sample_layers // FACTOR,
                               gradient=FACTOR * setup.gradient)


def prolongate(fields: dict[str, np.ndarray], shape: tuple[int, ...],
               scale: StartScale = PLAIN) -> dict[str, np.ndarray]:
    """Coarse rho and u repeated onto the fine grid ``shape``; velocity times 2 (and
    ``scale.velocity``), density deviation from the mean times ``scale.density``; NaN to
    rest."""
    rho, u = fields["rho"], fields["u"]
    for a in range(rho.ndim):
        rho = np.repeat(rho, FACTOR, axis=a)
        u = np.repeat(u, FACTOR, axis=a + 1)
    box = tuple(slice(0, n) for n in shape)
    rho, u = rho[box], FACTOR * u[(slice(None), *box)]
    if scale.velocity != 1.0:
        u = scale.velocity * u
    fluid = np.isfinite(rho) & np.all(np.isfinite(u), axis=0)
    mean_rho = float(np.mean(rho[fluid])) if fluid.any() else 1.0
    rho = scale.density_of(rho, mean_rho)
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


def start_on_device(fine: Simulation, coarse: Simulation, chunk: int = 1 << 16,
                    scale: StartScale = PLAIN) -> None:
    """Set ``fine``'s populations to the equilibrium of ``coarse``'s flow, prolongated on the
    device both run on (lattice units; fine velocity = 2 x coarse, see the module doc; times
    ``scale.velocity``, the density's deviation from the mean times ``scale.density``).

    The map of :func:`prolongate` + :func:`start_from` without the host: each fine node takes
    the density and velocity of the coarse node containing it (coordinates // 2); fine nodes
    whose coarse node is solid or in an empty coarse tile get the mean coarse density at rest.
    Built ``chunk`` fine tiles at a time in the backend's array module
    (:class:`CoarseTable`, :func:`prolonged_populations`; the distributed coarse start,
    :mod:`solver.distributed.coarse_start`, uses the same two pieces); on CuPy with plain
    storage in two kernels instead (:mod:`solver.backends.cuda.prolong`: no CuPy operation to
    compile), written into the fresh fine state.
    """
    xp = fine.backend.xp
    if _fused_start(fine, coarse, scale):
        return
    cp_, ct, ft = coarse.problem, coarse.tiling, fine.tiling
    coarse.allocate()
    f_c = coarse.backend.device_populations(coarse.state)
    rho_c, u_c = tile_moments(f_c, cp_.lattice, cp_.force, cp_.incompressible, xp)
    del f_c
    fluid_c = xp.asarray(~ct.solid)
    mean_rho = rho_c[fluid_c].mean() if bool(fluid_c.any()) else xp.asarray(1.0)
    table = CoarseTable.build(ct, rho_c, u_c, fluid_c, mean_rho, xp, scale.velocity)
    del rho_c, u_c
    table.scale_density(mean_rho, scale)
    p = fine.problem
    dtype = xp.float64 if fine.config.precision == "float64" else xp.float32
    f = xp.empty((ft.n_tiles, p.lattice.q, ft.nodes_per_tile), dtype=dtype)
    # 65536 tiles a chunk (4M nodes, under 1 GB of float64 temporaries, as fields.TILE_CHUNK):
    # 13 chunks for a 400³ sample's fine box instead of 51, each a few dozen launches.
    for lo in range(0, ft.n_tiles, chunk):
        hi = min(lo + chunk, ft.n_tiles)
        f[lo:hi] = prolonged_populations(p, table, lo, hi, dtype, xp)
    fine.allocate()
    fine.backend.set_populations(fine.state, f)


@dataclasses.dataclass(frozen=True)
class CoarseTable:
    """A coarse run's flow as the prolongation reads it (lattice units, arrays of ``xp``):
    density ``rho`` (n * N + 1,) and velocity already times :data:`FACTOR` ``u`` (d, n * N + 1)
    of the first ``n`` tiles of ``tiling`` (tile-node order), solid nodes at the mean
    density at rest, and one extra slot at the end: the value of fine nodes without a fluid
    coarse node (the mean density at rest). ``tile_map``: the coarse tiling's tile map on the
    device (int32), uploaded once by :meth:`build` (per chunk it was a host int64 copy and an
    upload of the whole coarse grid: 200 chunks, 10 s of a 1600³ rank's start)."""

    tiling: Any
    rho: Any
    u: Any
    n: int
    tile_map: Any = None

    @classmethod
    def build(cls, tiling: Any, rho_c: Any, u_c: Any, fluid_c: Any, mean_rho: Any,
              xp: Any, velocity: float = 1.0) -> CoarseTable:
        """The table of moments ``rho_c`` (n, N) and ``u_c`` (d, n, N) of the first n tiles of
        ``tiling``, fluid where ``fluid_c`` (n, N), with ``mean_rho`` for the rest; the
        velocity times :data:`FACTOR` and ``velocity`` (:class:`StartScale`)."""
        d = tiling.ndim
        rho = xp.concatenate([xp.where(fluid_c, rho_c, mean_rho).reshape(-1),
                              xp.reshape(xp.asarray(mean_rho), (1,))])
        u_f = FACTOR * u_c if velocity == 1.0 else (FACTOR * velocity) * u_c
        u = xp.concatenate([xp.where(fluid_c[None], u_f, 0.0).reshape(d, -1),
                            xp.zeros((d, 1))], axis=1)
        return cls(tiling, rho, u, int(rho_c.shape[0]),
                   xp.asarray(np.ascontiguousarray(tiling.tile_map, dtype=np.int32)))

    def scale_density(self, mean_rho: Any, scale: StartScale) -> None:
        """Scale the densities' deviation from ``mean_rho`` by ``scale.density``, in place
        (once the mean is known: over ranks only after every rank has summed)."""
        if scale.density != 1.0:
            self.rho[...] = scale.density_of(self.rho, mean_rho)


def prolonged_populations(problem: Any, table: CoarseTable, lo: int, hi: int, dtype: Any,
                          xp: Any) -> Any:
    """Equilibrium populations (hi - lo, q, N) in ``dtype`` of the fine tiles ``[lo, hi)`` of
    ``problem`` from the coarse node containing each node (``table``; solid fine nodes at rest
    velocity; fine nodes whose coarse tile is not among the table's get its last slot)."""
    ct, ft = table.tiling, problem.tiling
    d = ft.ndim
    rest = table.n * ct.nodes_per_tile
    tile_map = (table.tile_map if table.tile_map is not None
                else xp.asarray(np.ascontiguousarray(ct.tile_map, dtype=np.int32)))
    offset_c, offset_f = (xp.asarray(np.array(t.offset, dtype=np.int64)) for t in (ct, ft))
    upper_f = xp.asarray(np.array(ft.shape, dtype=np.int64) - 1)
    upper_c = xp.asarray(np.array(ct.shape, dtype=np.int64) - 1)
    weights = xp.asarray(ct.a ** np.arange(d, dtype=np.int64))
    local = xp.asarray(ft.local_coordinates().astype(np.int64))
    tiles = xp.asarray(ft.tiles[lo:hi].astype(np.int64))
    coords = tiles[:, None, :] * ft.a - offset_f + local[None]  # (t, N, d) fine
    coords = xp.clip(coords, 0, upper_f)
    shifted = xp.clip(coords // FACTOR, 0, upper_c) + offset_c  # coarse, tile frame
    tile = tile_map[tuple(shifted[..., a] // ct.a for a in range(d))].astype(np.int64)
    node = ((shifted % ct.a) * weights).sum(axis=-1)
    known = (tile >= 0) & (tile < table.n)
    flat = xp.where(known, tile * ct.nodes_per_tile + node, rest).reshape(-1)
    rho = table.rho[flat]
    u = xp.where(xp.asarray(ft.solid[lo:hi]).reshape(1, -1), 0.0, table.u[:, flat])
    q, n_node = problem.lattice.q, ft.nodes_per_tile
    feq = equilibrium(rho, u, problem.lattice, problem.incompressible, xp)  # (q, t * N)
    return feq.reshape(q, hi - lo, n_node).transpose(1, 0, 2).astype(dtype, copy=False)


def _fused_start(fine: Simulation, coarse: Simulation, scale: StartScale = PLAIN) -> bool:
    """Prolongate with the CUDA kernels where both runs are CuPy runs that the kernels write
    (:func:`solver.backends.cuda.prolong.fused_applies`) and the fine run has not stepped;
    whether it did."""
    if (fine.backend.name != "cupy" or coarse.backend.name != "cupy" or fine.time_step
            or fine.tiling.ndim != 3):
        return False
    from ..backends.cuda.prolong import fused_applies, prolong, run_access

    if not fused_applies(fine.problem, coarse.problem):
        return False
    coarse.allocate()
    fine.allocate()
    xp = fine.backend.xp
    prolong(fine.problem, run_access(fine.backend, fine.state, xp), coarse.problem,
            run_access(coarse.backend, coarse.state, xp), xp, scale=scale)
    return True


def pressure_ramp(setup: ProtocolSetup) -> dict[str, np.ndarray] | None:
    """The start of a pressure-driven run (None for other protocols): at rest, the density
    falling linearly across the sample window from the inlet face's to the outlet face's value
    and constant in the buffers before and after it (lattice units).

    A run from uniform density waits for the pressure to diffuse in from the faces, the slow
    transient of :mod:`solver.rock.protocol`; a sample whose permeability is far below the
    open buffers' carries nearly all the drop, so the ramp is close to the steady pressure and
    only the sample's heterogeneity is left to settle.
    """
    if setup.protocol != "pressure":
        return None
    cfg, axis, shape = setup.config, setup.axis, setup.geometry.shape
    name = "xyz"[axis]
    rho_in, rho_out = getattr(cfg, f"{name}_min_value"), getattr(cfg, f"{name}_max_value")
    lo, hi = setup.window
    layer = np.clip((np.arange(shape[axis]) - lo) / max(hi - 1 - lo, 1), 0.0, 1.0)
    profile = rho_in + (rho_out - rho_in) * layer
    view = [1] * len(shape)
    view[axis] = shape[axis]
    rho = np.broadcast_to(profile.reshape(view), shape).astype(np.float64)
    return {"rho": rho, "u": np.zeros((len(shape), *shape))}
