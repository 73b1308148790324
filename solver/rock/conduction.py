"""Electrical formation factor and tortuosity of a rock image: a Laplace solve in its pores.

The pore space is filled with a fluid of conductivity 1; the grains are insulating. Along
``axis`` the potential is fixed on the two faces of the sample (1 before the first layer of
voxels, 0 after the last: Dirichlet, at half a voxel from the centres of the end layers), grain
walls carry no flux, and the sides are sealed (no flux) or periodic. The finite-volume
discretisation is the 7-point Laplacian on voxel centres: each pair of face-neighbouring pore
voxels is joined by a conductance 1 (unit face, unit distance), a pore voxel of an end layer by
a conductance 2 to its face's potential; a face shared with a grain carries nothing. Pores
without a face-connected path to both ends carry no current and are dropped first.

The symmetric positive definite system is solved by conjugate gradients with a Jacobi
(diagonal) preconditioner, matrix-free, over the connected pore voxels only (a compact vector
and a table of each one's face neighbours, built on the host: :func:`conduction_system`) in the
array module ``xp`` (NumPy on the CPU; on a GPU four fused CUDA kernels,
:mod:`solver.backends.cuda.conduction`), starting from the potential of a straight channel
(linear along the axis, exact there). With the current ``I`` through the inlet face
of area ``A`` (voxels normal to the axis) over a length of ``n`` voxels and a unit potential
drop, ``sigma_eff / sigma_fluid = I n / A`` and

- the formation factor ``F = sigma_fluid / sigma_eff`` (>= 1; ``1 / porosity`` for straight
  channels along the axis),
- the electrical tortuosity ``tau_e = F phi`` (1 for straight channels; ``F = tau_e / phi``;
  some texts call ``tau_e²`` or ``sqrt(tau_e)`` the tortuosity: this one is stated).

The flow tortuosity of a permeability run is ``<|u|> / <u_axis>`` over its fluid nodes
(:func:`solver.observables.tortuosity`, reported by :mod:`solver.rock.measure`).
Validation (tests/solver/test_rock_conduction.py): straight channels (``F = 1/phi``), a slab
channel tilted by ``theta`` (``F = 1 / (phi cos² theta)``: the field along the slab is the drop
times ``cos theta / L`` and the slab's cross-section in a plane normal to the axis is
``w / cos theta``, so ``sigma_eff = phi cos² theta``), simple and body-centred cubic arrays of
insulating spheres against Maxwell's formula ``F = (2 + f) / (2 (1 - f))`` for a sphere volume
fraction ``f`` (Maxwell, A Treatise on Electricity and Magnetism (1873), vol. 1, art. 314),
whose exact lattice corrections are of order ``f^(10/3)`` for the simple cubic lattice (Rayleigh,
Phil. Mag. 34, 481-502 (1892); McPhedran & McKenzie, Proc. R. Soc. A 359, 45-63 (1978)) and
smaller for the body-centred one (McKenzie, McPhedran & Derrick, Proc. R. Soc. A 362, 211-232
(1978)): well under 1 % at the fractions tested. The voxel staircase of curved or tilted
walls adds a resistance of about first order in the voxel size (+1 to +6 % at 7-24 voxels per
sphere radius or slab thickness, halving when the resolution doubles; the tests measure it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["Conduction", "ConductionSystem", "conduction_system", "formation_factor",
           "solve_conduction", "SIDES"]

SIDES = ("wall", "periodic")

#: Conjugate-gradient iterations queued between two reads of the residual by the host.
BLOCK = 8


@dataclass(frozen=True)
class Conduction:
    """Formation factor ``F``, porosity, electrical tortuosity ``F phi`` and the solve's
    iterations and relative residual, along ``axis`` (dimensionless)."""

    axis: int
    formation_factor: float
    porosity: float
    tortuosity: float
    conductivity: float  # sigma_eff / sigma_fluid
    iterations: int
    residual: float
    current_balance: float  # |I_in - I_out| / I_in (conservation check)

    def as_dict(self) -> dict:
        """JSON-ready."""
        return asdict(self)


def _connected(pore: np.ndarray, axis: int, sides: str) -> np.ndarray:
    """Pore voxels face-connected to both end layers along ``axis`` (host, boolean); with
    periodic sides, clusters touching across the sides are joined."""
    from scipy import ndimage

    labels, count = ndimage.label(pore, structure=ndimage.generate_binary_structure(pore.ndim, 1))
    root = np.arange(count + 1)

    def find(i: int) -> int:
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i

    if sides == "periodic":
        for a in range(pore.ndim):
            if a == axis:
                continue
            lo, hi = np.take(labels, 0, axis=a), np.take(labels, -1, axis=a)
            both = (lo > 0) & (hi > 0)
            for i, j in set(zip(lo[both], hi[both], strict=True)):
                root[find(int(i))] = find(int(j))
        for i in range(count + 1):
            root[i] = find(i)
        labels = root[labels]
    first = np.unique(np.take(labels, 0, axis=axis))
    last = np.unique(np.take(labels, pore.shape[axis] - 1, axis=axis))
    both = np.intersect1d(first, last)
    both = both[both > 0]
    return np.isin(labels, both)


def _neighbours(pore: np.ndarray, axis: int, sides: str) -> tuple[np.ndarray, np.ndarray]:
    """Host tables of the pore voxels: their coordinate along ``axis`` (n,) and, per face
    direction (2 d, n), the pore index of the neighbour through that face, or n where the face
    is a grain wall, a sealed side or the end of the sample along ``axis``."""
    shape = pore.shape
    index = np.flatnonzero(pore)
    n = index.size
    dtype = np.int32 if n < 2**31 - 1 else np.int64
    lookup = np.full(pore.size, n, dtype=dtype)
    lookup[index] = np.arange(n, dtype=dtype)
    coords = np.unravel_index(index, shape)
    strides = np.cumprod((1,) + shape[:0:-1])[::-1]  # C order: the last axis varies fastest
    table = np.empty((2 * pore.ndim, n), dtype=dtype)
    for a in range(pore.ndim):
        for k, step in enumerate((1, -1)):
            c = coords[a] + step
            if a != axis and sides == "periodic":
                c %= shape[a]
                valid = np.ones(n, bool)
            else:
                valid = (c >= 0) & (c < shape[a])
            target = index + (np.clip(c, 0, shape[a] - 1) - coords[a]) * strides[a]
            table[2 * a + k] = np.where(valid, lookup[target], n)
    return coords[axis], table


@dataclass(frozen=True)
class ConductionSystem:
    """The host tables of one conduction solve (:func:`conduction_system`): the pore voxels'
    face-neighbour table (directions, n; n = none), the diagonal, the right-hand side, the
    start and the end-layer indicators, with the sample's length, face area and porosity."""

    axis: int
    porosity: float
    length: int
    area: int
    table: np.ndarray
    diagonal: np.ndarray
    first: np.ndarray  # 1.0 on the pore voxels of the first layer
    last: np.ndarray  # 1.0 on those of the last layer
    start: np.ndarray  # the initial potential


def conduction_system(solid: np.ndarray, axis: int = 0, sides: str = "wall") -> ConductionSystem:
    """The conduction system of the pore space of ``solid`` (True = grain) along ``axis`` on
    the host (see the module doc for the equations and boundary conditions).
    Raises ValueError when no pore path joins the two faces along ``axis``."""
    solid = np.asarray(solid, dtype=bool)
    if sides not in SIDES:
        raise ValueError(f"sides must be one of {SIDES}, got {sides!r}.")
    if not 0 <= axis < solid.ndim:
        raise ValueError(f"axis {axis} is not an axis of a {solid.ndim}D image.")
    porosity = float(1.0 - solid.mean())
    pore = _connected(~solid, axis, sides)
    if not pore.any():
        raise ValueError(f"No face-connected pore path joins the two faces along axis {axis}: "
                         "the formation factor is infinite.")
    length = solid.shape[axis]
    along, table = _neighbours(pore, axis, sides)
    count = table.shape[1]
    first = (along == 0).astype(np.float64)
    last = (along == length - 1).astype(np.float64)
    # Conductance 2 to the fixed potential of each end face: 1 before the first layer, 0 after
    # the last; 1 to each face neighbour in the pores.
    diagonal = 2.0 * (first + last) + (table != count).sum(axis=0)
    # The start: the potential of a straight channel, falling linearly from 1 at the inlet face
    # to 0 at the outlet face (exact there). CG's slowest part is the smooth drop along the
    # whole sample, which this guess already carries; what is left is the pores' local detour.
    start = 1.0 - (along + 0.5) / length
    return ConductionSystem(axis, porosity, length, solid.size // length, table, diagonal,
                            first, last, start)


def solve_conduction(system: ConductionSystem, xp: Any = np, tolerance: float = 1e-8,
                     max_iterations: int | None = None,
                     shape: tuple[int, ...] | None = None) -> Conduction:
    """F, porosity and ``F phi`` from ``system`` (:func:`conduction_system`) by conjugate
    gradients in ``xp`` (numpy or cupy: on CuPy the fused kernels of
    :mod:`solver.backends.cuda.conduction`), stopping when the residual is ``tolerance`` times
    the right-hand side's norm or after ``max_iterations`` (default 20 x the largest edge²
    of ``shape``, or of the length)."""
    count = system.table.shape[1]
    edge = max(shape) if shape else system.length
    limit = max_iterations or 20 * edge**2
    b = 2.0 * system.first
    device = _device_solver(xp, count)
    if device is not None:
        x, iterations, residual = device(system.diagonal, system.table, b, system.start,
                                         tolerance, limit)
    else:
        x, iterations, residual = _solve(xp, system.diagonal, system.table, b, system.start,
                                         tolerance, limit)
    x = np.asarray(getattr(xp, "asnumpy", np.asarray)(x))
    current_in = float((2.0 * system.first * (1.0 - x)).sum())
    current_out = float((2.0 * system.last * x).sum())
    conductivity = current_in * system.length / system.area
    f = 1.0 / conductivity
    return Conduction(system.axis, f, system.porosity, f * system.porosity, conductivity,
                      iterations, residual, abs(current_in - current_out) / current_in)


def formation_factor(solid: np.ndarray, axis: int = 0, sides: str = "wall", xp: Any = np,
                     tolerance: float = 1e-8, max_iterations: int | None = None) -> Conduction:
    """F, porosity and ``F phi`` of the pore space of ``solid`` (True = grain) along ``axis``
    (see the module doc for the equations and boundary conditions); ``xp``: numpy or cupy.

    The unknowns are the potentials of the connected pore voxels only (a compact vector with a
    neighbour table and the iterates of a block, about 150 bytes per pore voxel on the device);
    the conjugate-gradient solve stops when the residual is ``tolerance`` times the right-hand
    side's norm.
    Raises ValueError when no pore path joins the two faces along ``axis``."""
    system = conduction_system(solid, axis, sides)
    return solve_conduction(system, xp, tolerance, max_iterations, np.shape(solid))


def _device_solver(xp: Any, count: int):
    """The fused CUDA solve (:func:`solver.backends.cuda.conduction.cg_solve`) when ``xp`` is
    CuPy and the neighbour table fits int32, else None (the ``xp`` code below)."""
    if getattr(xp, "__name__", "") != "cupy" or count >= 2**31 - 1:
        return None
    from ..backends.cuda.conduction import cg_solve

    return cg_solve


def _solve(xp: Any, diagonal: np.ndarray, table: np.ndarray, b: np.ndarray, start: np.ndarray,
           tolerance: float, limit: int) -> tuple[Any, int, float]:
    """Jacobi-preconditioned CG of ``(diag - adjacency) x = b`` from ``start`` in ``xp`` (host
    tables in); the iterate, iterations and relative residual ``|r| / |b|``. Stops at the first
    iteration whose residual is under ``tolerance`` (iteration 0: the start itself)."""
    count = table.shape[1]
    links = xp.asarray(table)
    diagonal, b = xp.asarray(diagonal), xp.asarray(b)
    inverse = 1.0 / diagonal
    # The host reads the residuals once per BLOCK iterations (a sync per iteration was most of
    # a solve's time on a GPU: the host waited for each tiny reduction). Scalars stay on the
    # device and the iterate of each iteration of a block has its own slot, so the solve stops
    # at the first iteration under the tolerance with exactly the values of a per-iteration
    # test (the few iterations queued after it are dropped).
    xs = xp.zeros((BLOCK, count))  # slot i % BLOCK: the iterate after iteration i
    norms = xp.zeros(BLOCK)  # slot i % BLOCK: |r| after iteration i
    padded = xp.zeros(count + 1)  # p (or the start) and a 0 at the index of "no neighbour"
    p = padded[:count]
    p[...] = xp.asarray(start)
    xs[0] = p
    r = b - _apply(diagonal, links, padded, p, xp)
    norm_b = float(xp.sqrt((b * b).sum()))
    residual = float(xp.sqrt((r * r).sum())) / norm_b
    if residual < tolerance:
        return xs[0], 0, residual
    z = inverse * r
    p[...] = z
    rz = (r * z).sum()
    iterations, done = 0, 0
    while done < limit:  # after convergence a block may divide 0 by 0: its values are dropped
        block = min(BLOCK, limit - done)
        for i in range(done + 1, done + block + 1):
            q = _apply(diagonal, links, padded, p, xp)
            alpha = rz / (p * q).sum()
            xp.add(xs[(i - 1) % BLOCK], alpha * p, out=xs[i % BLOCK])
            r -= alpha * q
            norms[i % BLOCK] = xp.sqrt((r * r).sum())
            z = inverse * r
            rz, rz_old = (r * z).sum(), rz
            p *= rz / rz_old
            p += z
        host = np.asarray(getattr(xp, "asnumpy", np.asarray)(norms)) / norm_b
        slots = [i % BLOCK for i in range(done + 1, done + block + 1)]
        below = [k for k, slot in enumerate(slots) if host[slot] < tolerance]
        stop = below[0] if below else block - 1
        iterations, residual = done + stop + 1, float(host[slots[stop]])
        if below:
            break
        done += block
    return xs[iterations % BLOCK], iterations, residual


def _apply(diagonal, links, padded, p, xp: Any):
    """The conductance matrix times ``p`` (``padded``: p and a trailing 0, the "no neighbour"
    index of ``links``)."""
    q = diagonal * p
    for direction in links:
        q -= padded[direction]
    return q
