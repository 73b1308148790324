"""Permeability protocols: how a rock sample is placed in the lattice to measure k along an axis.

An image of a rock sample has faces that do not match: making the flow axis periodic as it is
joins unrelated pores at the inlet and outlet and changes k (the issue measured 1132 mD against
1475 mD on a 200³ sandstone). Two set-ups from the digital-rock literature avoid that:

``mirrored``
    The sample followed by its mirror image along the flow axis, periodic along that axis and
    driven by a constant body force G. The faces of the doubled sample match by construction
    and both halves carry the same flow, so k of the doubled box is k of the sample. The
    sides are sealed walls (default) or periodic. Mirroring is the usual way to run periodic
    LBM on non-periodic images (Guibert et al., "Computational permeability determination from
    pore-scale imaging: sample size, mesh and method sensitivities", Transp. Porous Media
    107, 641-656 (2015), compare it with other boundary set-ups).
``pressure``
    Open fluid buffer layers (default 8) before and after the sample, a Zou-He density
    (pressure) inlet and outlet and sealed sides, as in a core-flood experiment and in the
    set-ups compared in Andrä et al., "Digital rock physics benchmarks - part II: computing
    effective properties", Comput. Geosci. 50, 33-43 (2013) and Saxena et al., "References and
    benchmarks for pore-scale flow simulated using micro-CT images of porous media and
    digital rocks", Adv. Water Resour. 109, 211-235 (2017). The pressure gradient is taken
    between the buffer layers adjacent to the sample (n + 1 voxels apart for a sample of n
    layers), the Darcy velocity is the mean over those layers, so the buffers do not count.

Both give k by Darcy's law through :func:`solver.observables.permeability` (the one formula).
The speed-up (``accelerate``): in a porous sample the slowest transient is not momentum
diffusion (its time k / (eps nu) is a few steps) but the pressure (density) field spreading
through the sample, a diffusion with coefficient ``D = c_s² k / (eps nu)`` (Darcy flow of a
weakly compressible fluid): its time ``L² eps nu / (pi² c_s² k)`` grows with nu. A smaller tau
(``settings.fast_tau``, by default 0.6 or 0.7 chosen by the sample: :func:`choose_fast_tau`,
mirrored runs) cuts it. With TRT and Lambda = 3/16 the steady
state of linear Stokes flow depends on Lambda only, not on tau (Ginzburg & d'Humieres, Phys.
Rev. E 68, 066614 (2003); Talon et al., Water Resour. Res. 48, W04526 (2012)); here k still
moves slightly with tau, the more the thinner the throats. Measured (NumPy, float64, mirrored,
sealed sides, converged to 0.001 % per 1000 steps, k against tau = 1): a 32³ pack of 14-voxel
grains at porosity 0.24 (k = 0.052 voxel²): tau 0.7 +0.05 %, tau 0.6 +0.07 %; a 24³ pack of
8-voxel grains at porosity 0.22 (k = 0.003 voxel², throats of 1-2 voxels): tau 0.7 +1.7 %,
0.6 +2.3 %, 0.55 +2.6 %, 0.52 +2.75 % (+0.7 % at tau 0.7 with periodic sides); a 10x smaller
force changed k by 1e-5, so it is not the drive. Time to answer on a 40³ image of 10-voxel
grains at porosity 0.2 (k = 0.012 voxel², 0.1 % criterion, benchmarks/rock_time_to_answer): tau 0.7
with the coarse start 2.35x less work, k +0.17 %; tau 0.6 3.2x, k +0.33 %: 0.6 is the default
of short samples with wide throats only (:func:`choose_fast_tau`); an image whose k is a few
thousandths of a voxel² is too coarse for k to 0.5 % at any tau < 1 (set ``accelerate:
false`` or image it finer). The drive is scaled with nu so the
pore Reynolds number stays the same; and the run starts from the flow of the sample coarsened
by 2 (:mod:`solver.rock.initial`). Measured here (NumPy, float64, mirrored, sphere packs;
tests/solver/test_rock_permeability.py): tau 0.7 alone, 1.5-1.9x fewer steps, k within
0.02-0.15 % at porosity 0.3-0.35 (up to 1 % at porosity 0.22 with 2-3 voxel throats, where k
itself is under-resolved); with the coarse start, 24³ and 32³ packs at porosity 0.3 need
2.1-3.2x fewer fine steps (1.8-2.7x less work counting the coarse run), k within 0.2 %.
Pressure-driven runs settle with their sound waves, which viscosity damps, so they keep the
configured tau and only start coarse: on the 48³ pack downsampled to 24³, 5400 steps from
rest against 1100 (+ 2550 coarse) steps, 3.8x less work, k within 0.03 %. With
``pressure_start: ramp`` the coarse run itself starts from a density ramp across the sample
(:func:`~solver.rock.initial.pressure_ramp`) instead of uniform density (NumPy, float64, tau
0.8, sphere packs): 24³ at porosity 0.3, 9600 -> 1200 coarse steps (work 2717 -> 1652
fine-step equivalents), k +0.07 %; 32³ at porosity 0.25, 14,700 -> 1600 coarse steps (3673 ->
2104), k +0.14 %. Against that 32³ run converged to 2e-5 per 1000 steps (26,300 steps) the
default start stops at +0.16 %, the ramp at +0.30 %: the fine run keeps a slow tail the long
coarse run had removed, so the ramp is opt-in (default ``rest``: today's k).
Lengths are in voxels, k in voxels² (lattice units) until converted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from geometries import VoxelGeometry
from geometries.pores import PoreReport, check_sample, connectivity, pore_labels
from geometries.preprocess import add_buffer, keep_connected, mirror

from ..config import SimulationConfig
from ..lattice import CS2, get_lattice
from ..monitor import K_WINDOW
from .settings import AXIS_NAMES, PermeabilitySettings

__all__ = ["PROTOCOLS", "PoreLabels", "ProtocolSetup", "checked_sample", "sample_labels",
           "setup_protocol",
           "protocol_values", "driving_gradient", "pore_drive", "estimate_k", "kozeny_carman",
           "estimated_steps", "steps_for", "choose_fast_tau", "fast_tau_for"]

PROTOCOLS = ("mirrored", "pressure")
#: Budget for the drive: mean pore speed (lattice units) and pore Reynolds number.
U_PORE_MAX = 0.01
RE_PORE_MAX = 0.1
#: Accelerated tau of short samples with wide throats, and of the others
#: (:func:`choose_fast_tau`; why: :class:`~solver.rock.settings.PermeabilitySettings`).
FAST_TAU, SAFE_FAST_TAU = 0.6, 0.7
#: Wide throats: a Kozeny-Carman k of at least this, voxel²; short: at most this many layers.
WIDE_THROAT_K, SHORT_SAMPLE_LAYERS = 0.05, 256


@dataclass
class ProtocolSetup:
    """One protocol run along one axis: the lattice geometry, its config and the k window."""

    protocol: str
    axis: int
    geometry: VoxelGeometry
    config: SimulationConfig
    window: tuple[int, int]  # layers [lo, hi) along axis where k is measured
    sample_layers: int
    report: PoreReport
    gradient: float  # driving force per volume, lattice units
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        """Short label, e.g. ``'mirrored x'``."""
        return f"{self.protocol} {AXIS_NAMES[self.axis]}"


def estimate_k(sample: VoxelGeometry, axis: int) -> tuple[float, float]:
    """Kozeny-Carman k (voxels²) and hydraulic diameter (voxels) from the voxel surface.

    ``k = eps³ / (5 S²)``, ``d_h = 4 eps / S`` with S the solid-fluid faces per voxel; an open
    box (no solid) is bounded by its sealed sides only (``d_h`` = narrowest side, k = d_h²/32).
    """
    solid = sample.solid
    faces = sum(int(np.count_nonzero(np.diff(solid, axis=a))) for a in range(solid.ndim))
    return kozeny_carman(sample.porosity, faces / solid.size, solid.shape, axis)


def kozeny_carman(porosity: float, surface: float, shape: tuple[int, ...],
                  axis: int) -> tuple[float, float]:
    """:func:`estimate_k` from the porosity and the solid-fluid faces per voxel ``surface`` of
    a box of ``shape`` (what a distributed run sums over its slabs,
    :mod:`solver.distributed.local_setup`)."""
    eps = max(porosity, 1e-6)
    if surface > 0:
        return eps**3 / (5.0 * surface**2), 4.0 * eps / surface
    d_h = float(min(n for a, n in enumerate(shape) if a != axis))
    return d_h**2 / 32.0, d_h


def driving_gradient(sample: VoxelGeometry, axis: int, nu: float) -> float:
    """Force per volume (lattice units) giving a mean pore speed within the Mach/Re budget.

    The mean pore speed ``k G / (nu eps)`` with k from :func:`estimate_k` is set to
    ``min(U_PORE_MAX, RE_PORE_MAX nu / d_h)``. In Stokes flow k does not depend on G; a larger
    G only lifts the signal above float32 rounding.
    """
    return pore_drive(*estimate_k(sample, axis), sample.porosity, nu)


def pore_drive(k_est: float, d_h: float, porosity: float, nu: float) -> float:
    """:func:`driving_gradient` from a Kozeny-Carman ``k_est`` and ``d_h`` (voxels)."""
    u_pore = min(U_PORE_MAX, RE_PORE_MAX * nu / d_h)
    return u_pore * max(porosity, 1e-6) * nu / k_est


def choose_fast_tau(sample: VoxelGeometry, axis: int) -> float:
    """tau of an accelerated mirrored run when ``fast_tau`` is unset: :data:`FAST_TAU` for a
    sample of at most :data:`SHORT_SAMPLE_LAYERS` voxels along ``axis`` whose Kozeny-Carman k
    (:func:`estimate_k`) is at least :data:`WIDE_THROAT_K` voxel², else :data:`SAFE_FAST_TAU`."""
    return fast_tau_for(estimate_k(sample, axis)[0], sample.shape[axis])


def fast_tau_for(k_est: float, layers: int) -> float:
    """:func:`choose_fast_tau` from a Kozeny-Carman ``k_est`` (voxels²) and the sample's
    ``layers`` along the flow axis."""
    short = layers <= SHORT_SAMPLE_LAYERS
    return FAST_TAU if short and k_est >= WIDE_THROAT_K else SAFE_FAST_TAU


def estimated_steps(sample: VoxelGeometry, axis: int, nu: float, length: int) -> int:
    """Steps to a converged k from rest: twice the pressure-diffusion time
    ``L² eps nu / (pi² c_s² k)`` with k from :func:`estimate_k`, plus the 1000-step window of
    the convergence test (:class:`solver.monitor.KConvergence`).

    ``length`` is the periodic length in voxels (twice the sample for the mirrored protocol).
    On 20³-32³ sphere packs at porosity 0.22-0.35 (NumPy, tau 1) the mirrored runs from rest
    reached 0.1 % per 1000 steps after 1.8-2.2 diffusion times (a 200-step check, before the
    window); a 24³ pack at porosity 0.3 now stops after 1950 steps, estimated 2100.
    """
    return steps_for(estimate_k(sample, axis)[0], sample.porosity, nu, length)


def steps_for(k_est: float, porosity: float, nu: float, length: int) -> int:
    """:func:`estimated_steps` from a Kozeny-Carman ``k_est`` (voxels²) and the porosity."""
    eps = max(porosity, 1e-6)
    diffusion = 2 * length**2 * eps * nu / (math.pi**2 * CS2 * k_est)
    # + one window: the monitor's test compares k over the last K_WINDOW steps.
    return int(math.ceil((diffusion + K_WINDOW) / 100) * 100)


@dataclass(frozen=True)
class PoreLabels:
    """The connected pore components of a sample (int labels, 0 = solid), labelled once for
    every axis (:func:`sample_labels`), and the voxels of each label (``np.bincount``)."""

    components: np.ndarray
    sizes: np.ndarray


def checked_sample(sample: VoxelGeometry, config: SimulationConfig, axis: int,
                   labels: PoreLabels | None = None) -> tuple[PoreReport, VoxelGeometry]:
    """The pore report of ``sample`` along ``axis`` (refusing a sample without a connected
    path) and the sample with the pores not joining inlet and outlet dropped; the lattice's own
    connectivity. Both protocols of one axis share it (:func:`setup_protocol`'s ``checked``).
    The pores are labelled once for both (``labels``: :func:`sample_labels`, when made
    already: the same for every axis; the two labellings were most of this at 400³)."""
    links = get_lattice(config.lattice).c
    if labels is None:
        labels = sample_labels(sample, config)
    report = check_sample(sample, axis, links, labels.components, labels.sizes)
    kept, _ = keep_connected(sample, axis, links, labels.components)
    return report, kept


def protocol_values(config: SimulationConfig, axis: int, protocol: str,
                    settings: PermeabilitySettings, ndim: int,
                    fast_tau: float) -> tuple[dict, list[str]]:
    """SimulationConfig values of ``protocol`` along ``axis`` before its drive (tau and
    collision of the speed-up, with ``fast_tau`` when ``settings.fast_tau`` is unset; sides,
    the periodic flow axis, no openings) and the notes saying what changed."""
    values = {k: v for k, v in config.param.values().items() if k != "name"}
    values["openings"] = {}  # the protocol sets every face itself; a vessel's openings stay shut
    notes = []
    if settings.accelerate:
        # Pressure-driven runs settle with their sound waves, damped by viscosity: a small tau
        # slows them (measured: 8400 steps at tau 0.7 against 5400 at tau 1 on a 24³ pack),
        # and Zou-He faces diverged at tau 1.5; so only the mirrored runs change tau.
        tau = values["tau"]
        if protocol == "mirrored":
            tau = settings.fast_tau if settings.fast_tau is not None else fast_tau
        values.update(collision="TRT", tau=tau, trt_magic=3 / 16, mrt_rates={})
        notes.append(f"accelerated: TRT, tau = {tau}, Lambda = 3/16")
    for a in range(ndim):
        for side in ("min", "max"):
            values[f"{'xyz'[a]}_{side}"] = settings.sides if a != axis else "periodic"
            values[f"{'xyz'[a]}_{side}_value"] = None
    return values, notes


def sample_labels(sample: VoxelGeometry, config: SimulationConfig,
                  backend: Any = None) -> PoreLabels:
    """The connected pore components of ``sample`` with the lattice's connectivity and their
    sizes, shared by :func:`checked_sample` along every axis; labelled and counted on the GPU
    when ``backend`` is CuPy's (:mod:`solver.backends.cuda.rock_setup`: the same components;
    labels and counts were most of the 31 s of host connectivity analysis at 1000³), else on
    the host."""
    links = get_lattice(config.lattice).c
    if getattr(backend, "name", None) == "cupy" and sample.ndim == 3:
        from ..backends.cuda.rock_setup import device_pore_labels

        made = device_pore_labels(~sample.solid, connectivity(links, sample.ndim))
        if made is not None:
            return PoreLabels(*made)
    components = pore_labels(sample, links)
    return PoreLabels(components, np.bincount(components.ravel()))


def setup_protocol(sample: VoxelGeometry, config: SimulationConfig, axis: int, protocol: str,
                   settings: PermeabilitySettings,
                   checked: tuple[PoreReport, VoxelGeometry] | None = None) -> ProtocolSetup:
    """Build the geometry and configuration of ``protocol`` along ``axis`` (checks the sample).

    The sample's pores are checked with the lattice's own connectivity (a sample without a
    connected path is refused); pores not joining inlet and outlet are dropped (no flow there).
    ``checked``: :func:`checked_sample` of this sample, config and axis, when already made.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"Unknown permeability protocol {protocol!r}; use one of {PROTOCOLS}.")
    report, kept = checked if checked is not None else checked_sample(sample, config, axis)
    ndim, n = sample.ndim, sample.shape[axis]
    k_est, d_h = estimate_k(kept, axis)
    values, notes = protocol_values(config, axis, protocol, settings, ndim,
                                    fast_tau_for(k_est, n))
    gradient = pore_drive(k_est, d_h, kept.porosity, (values["tau"] - 0.5) / 3.0)
    force = [0.0, 0.0, 0.0]
    if protocol == "mirrored":
        geometry = mirror(kept, axis)
        force[axis] = gradient
        window = (0, 2 * n)
    else:
        b = settings.buffer_layers
        geometry = add_buffer(kept, b, b, axis, fill="fluid")
        # Densities giving the gradient G over the whole box; k uses the measured drop.
        drop = gradient * (geometry.shape[axis] - 1) / CS2
        rho0 = values["initial_density"]
        values[f"{'xyz'[axis]}_min"] = values[f"{'xyz'[axis]}_max"] = "pressure"
        values[f"{'xyz'[axis]}_min_value"] = rho0 + drop / 2
        values[f"{'xyz'[axis]}_max_value"] = rho0 - drop / 2
        window = (b - 1, b + n + 1)
    values["body_force"] = tuple(force)
    geometry.flow_axis = axis
    cfg = SimulationConfig(**values)
    cfg.check(ndim)
    if math.isclose(report.porosity, 0.0):
        notes.append("no pores")
    return ProtocolSetup(protocol, axis, geometry, cfg, window, n, report, gradient, notes)
