"""The kernel variants: what is fixed when a kernel is compiled, and the source of each.

A :class:`KernelVariant` names everything fixed at compile time: lattice, precision,
collision, fluid model, in-tile layout, kernel mode (full step, one of the paper's section
4.1 probes, or the in-place decoding 'swap'), tile edge, the boundary code in it (none, Zou-He
faces, or Zou-He faces and Ladd's moving walls), how it addresses the populations (two copies,
or one of the two alternating in-place AA kernels of :mod:`solver.backends.cuda.streaming`),
how it stores them ('auto': the arithmetic type; 'float16': the shifted, scaled binary16 of
:mod:`solver.storage`, float32 arithmetic) and its kernel family: the tiled storage, or
(``compact``) fluid nodes only. :meth:`KernelVariant.spec` composes the family's spec from the
parts of :mod:`.kernel_parts` (:mod:`.tiled_source`, :mod:`.compact_source`), and
:func:`kernel_source` renders it. Relaxation rates, the body force, the rest state and the
boundary values stay kernel arguments or tables, so changing them never recompiles; tiles per
block is a launch parameter for the same reason. Runs without inlets, outlets or moving walls
use the kernel without the boundary code, and runs whose walls rest the one without Ladd's
term, so each pays only for what it uses.

The in-tile layouts and the arrays and arguments the kernel is given live in
:mod:`solver.backends.cuda.tables`; the knobs removed from the variant space, and why, in
``solver/backends/cuda/KERNELS.md``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import cache

from ...collisions import COLLISION_MODELS
from ...lattice import LATTICE_NAMES, get_lattice
from ...problem import Problem
from ..plan import (
    COMPACT,
    FAMILIES,
    LAYOUT_CHOICES,
    STORAGE_CHOICES,
    STREAMING_CHOICES,
    TILED,
    ExecutionPlan,
    compact_kernel,
)
from .boundary import BOUNDARY_KINDS, boundary_kind
from .collisions import CUDA_COLLISIONS, PROBE_COLLISION, cuda_collision
from .compact_source import CompactCode, CompactSpec, compact_spec
from .kernel_parts import (
    MODE_PARTS,
    boundary_part,
    collision_part,
    mode,
    storage_part,
    streaming_part,
)
from .sector_fill import SECTOR_FILL_MIN_MIX, can_fill_sectors
from .storage import half_form, is_float16, kernel_constants, storage_param_names
from .streaming import kernel_streaming, needs_halo
from .tables import (
    check_tile_shape,
    effective_layout,
    kernel_storage,
    needs_wide_sources,
)
from .tiled_source import TiledSpec, render_tiled

__all__ = ["KernelVariant", "MODES", "COLLISIONS", "SECTOR_FILL_MIN_MIX", "kernel_source",
           "all_variants", "collision_param_names", "real_param_names", "real_args"]

#: Kernel modes (:data:`.kernel_parts.MODE_PARTS`): the template's number of each.
MODES = {name: m.number for name, m in MODE_PARTS.items()}
#: Collision operators the kernel implements (:mod:`.collisions`).
COLLISIONS = tuple(CUDA_COLLISIONS)
#: Rest equilibrium w_k rho0 per weight class k = |c|^2: what solid nodes hold (sector fill).
_REST_PARAMS = [f"rest{k}" for k in range(4)]


@dataclass(frozen=True)
class KernelVariant:
    """Compile-time choices of one kernel; ``layout`` is the effective one ('paper'/'xyz')."""

    lattice: str = "D3Q19"
    precision: str = "float64"
    collision: str = "BGK"
    incompressible: bool = True
    layout: str = "paper"
    mode: str = "full"
    tile_edge: int = 4
    boundary: str = "none"
    streaming: str = "pull"
    storage: str = "auto"
    sector_fill: bool = True
    wide_sources: bool = False
    #: 0: the tiled storage (every node of a tile). Else fluid-compacted storage
    #: (:mod:`.compact`): only fluid nodes, each direction block of a tile padded to a
    #: multiple of this many values; full step or propagation probe, no boundary code.
    compact: int = 0
    packed: int = 0  #: compact only: K tiles per block, one thread per fluid node (0: per node)
    code: CompactCode = CompactCode()  #: compact only: how its halo is located
    #: compact only: 64-bit value offsets and bases (copies of 2^31 values or more, the plan's
    #: ``wide``); else 32-bit, faster
    wide: bool = False

    def canonical(self) -> KernelVariant:
        """Same kernel with the fields that do not change the code normalised (shared cache)."""
        m = mode(self.mode)
        if self.compact:  # one in-tile order (XYZ ranks), no sector fill, 32-bit indices
            v = replace(self, layout="xyz", sector_fill=False, wide_sources=False)
            if m.decodes:  # 'swap' has one address pattern of its own
                v = replace(v, streaming="aa_local")
            return replace(v, collision=PROBE_COLLISION, incompressible=True) \
                if not m.collides and not m.copies else v
        v = replace(self, layout=effective_layout(self.lattice, self.layout, self.tile_edge),
                    packed=0, code=CompactCode(), wide=False)
        if not m.collides:  # the probes neither collide nor apply boundary conditions
            v = replace(v, collision=PROBE_COLLISION, incompressible=True, boundary="none")
        if m.decodes or (m.copies and streaming_part(v.streaming).in_place):
            v = replace(v, streaming="aa_local")  # in place, same node: one kernel each
        if not can_fill_sectors(v):
            v = replace(v, sector_fill=False)
        if not needs_halo(v.streaming, v.mode, v.boundary):
            v = replace(v, wide_sources=False)  # no halo sources to hold
        return v

    @classmethod
    def for_problem(cls, problem: Problem, mode: str = "full", phase: int = 0,
                    plan: ExecutionPlan | None = None) -> KernelVariant:
        """The variant that steps ``problem`` in ``mode`` from ``phase`` (canonical); with
        ``plan``, its family's kernel (the compact one where the plan stores fluid nodes)."""
        if problem.storage.encoded and problem.storage.rounding != "stochastic":
            raise ValueError("The GPU kernel rounds float16 stores stochastically only; "
                             "rounding='nearest' is a NumPy-backend ablation.")
        v = cls(problem.lattice.name, problem.dtype.name, problem.collision.name,
                problem.incompressible, problem.layout, "full", problem.tiling.a,
                boundary_kind(problem) if mode == "full" else "none",
                storage=kernel_storage(problem),
                wide_sources=needs_wide_sources(problem))
        if plan is not None and plan.compact:
            v = replace(v, compact=plan.pad, packed=plan.packed, code=plan.code,
                        wide=plan.wide)
        # the sector fill only where it can apply: the geometry's mix is computed once
        return v.launch(mode, problem.streaming, phase,
                        lambda: problem.sector_mix >= SECTOR_FILL_MIN_MIX)

    def launch(self, mode: str, streaming: str, phase: int, fill) -> KernelVariant:
        """The canonical variant of this one's physics and plan launched in ``mode`` from
        ``phase`` on a state of ``streaming`` (config name); ``fill()``: whether a kernel that
        can have the sector fill gets it. The one path from choices to a launched kernel:
        :meth:`for_problem` and :func:`all_variants` both take it."""
        v = replace(self, mode=mode, boundary=self.boundary if mode == "full" else "none",
                    streaming=kernel_streaming(streaming, phase)).canonical()
        return replace(v, sector_fill=fill()) if v.sector_fill else v

    @property
    def half(self) -> bool:
        """Whether populations are stored as float16 (solver.storage)."""
        return is_float16(self.storage)

    @property
    def half_form(self) -> str:
        """What a float16 kernel's arithmetic works on (:func:`.storage.half_form`)."""
        v = self.canonical()
        return half_form(v.storage, v.collision, v.incompressible, v.boundary, v.mode)

    @property
    def name(self) -> str:
        """Kernel (and namespace) name, unique per canonical variant."""
        return self.spec().name

    def spec(self) -> TiledSpec | CompactSpec:
        """The kernel family's spec of this variant, composed of its parts (checked)."""
        return _spec(self.canonical())


def _spec(v: KernelVariant) -> TiledSpec | CompactSpec:
    """The spec of canonical ``v``: its family's, from the parts its fields name (cheap:
    :func:`kernel_source` caches the text)."""
    m = mode(v.mode)
    if v.compact:
        return compact_spec(v.lattice, v.precision, v.compact, True,
                            v.collision if m.collides else None, v.incompressible, v.packed,
                            "swap" if m.decodes else v.streaming, v.code, v.storage, v.wide)
    storage = storage_part(v.precision, v.storage)
    collision = collision_part(v.collision if m.collides else None, v.incompressible,
                               v.half_form)
    boundary, streaming = boundary_part(v.boundary), streaming_part(v.streaming)
    fluid = "inc" if v.incompressible else "qc"
    unfilled = "_nf" if can_fill_sectors(v) and not v.sector_fill else ""
    name = (f"lbm_{v.mode}_{v.lattice}_{storage.tag}_{v.collision}_{fluid}_{v.layout}"
            f"_a{v.tile_edge}{boundary.suffix}{streaming.suffix}{unfilled}"
            f"{'_s64' if v.wide_sources else ''}")
    return TiledSpec(name, get_lattice(v.lattice), v.layout, v.tile_edge, m, collision,
                     storage, streaming, boundary, v.half_form, v.wide_sources, v)


def _refusal(v: KernelVariant) -> str | None:
    """Why the family of ``v`` (canonical) has no such kernel, or None (declared support:
    :data:`~solver.backends.plan.FAMILIES`; a collision's lattices)."""
    family = COMPACT if v.compact else TILED
    if not v.compact:
        collision = cuda_collision(v.collision)
        if v.lattice not in collision.lattices:
            return (f"{v.collision} is implemented for {', '.join(collision.lattices)}, "
                    f"not {v.lattice}.")
        check_tile_shape(v.lattice, v.tile_edge, 1)  # says why a shape fills no whole warps
    lacks = family.variant_lacks(v.mode, get_lattice(v.lattice).d, v.tile_edge, v.lattice,
                                 v.boundary)
    if not lacks:
        return None
    if v.compact:
        return ("Fluid-compacted storage does not support " + ", ".join(lacks)
                + "; use the tiled storage (compact=0) for this run.")
    return "The tiled storage does not support " + ", ".join(lacks) + "."


def collision_param_names(v: KernelVariant) -> list[str]:
    """Names of the collision constants the kernel takes after the body force and rest state."""
    v = v.canonical()
    return cuda_collision(v.collision).param_names(v.lattice)


def real_param_names(v: KernelVariant) -> list[str]:
    """Names of all floating kernel arguments in order (tables.physics_args's values)."""
    if v.canonical().compact and not mode(v.mode).collides:
        return storage_param_names(v.storage)  # the compact probe and swap: storage only
    return ["fx", "fy", "fz", *_REST_PARAMS, *collision_param_names(v),
            *storage_param_names(v.storage)]


def real_args(variant: KernelVariant, physics: list) -> list:
    """Floating kernel arguments of ``variant``, in its signature's count.

    ``physics`` (:func:`~solver.backends.cuda.tables.physics_args`) for a full step. The probes
    and the in-place decoding are compiled as BGK and read neither the force nor collision
    constants: zeros there (another collision's constants would pass the wrong number of
    arguments; D2Q9 MRT has fewer), but the rest state itself, which the XYZ propagation probe
    stores into solid nodes (:mod:`.sector_fill`), and the storage constants, which every
    kernel of a storage takes (the last ``len(storage_param_names(...))`` of ``physics``).
    """
    v = variant.canonical()
    if mode(v.mode).collides:  # float16 deviations: the collision's output constants times S
        return kernel_constants(v.half_form, v.collision, real_param_names(v), physics)
    zero, rest = type(physics[0])(0), len(_REST_PARAMS)
    n_storage = len(storage_param_names(v.storage))
    if v.compact:  # the compact probe and swap take the storage constants only
        return list(physics[len(physics) - n_storage:]) if n_storage else []
    return ([zero] * 3 + list(physics[3:3 + rest]) + [zero] * len(collision_param_names(v))
            + list(physics[len(physics) - n_storage:]))


@cache
def kernel_source(variant: KernelVariant) -> str:
    """Complete CUDA C++ source of one variant; its kernel is ``extern "C"`` ``variant.name``."""
    why = _refusal(variant.canonical())  # the family's declared support first
    if why:
        raise ValueError(why)
    spec = variant.spec()
    if isinstance(spec, CompactSpec):
        return spec.render()
    return render_tiled(spec, collision_param_names(variant))


def all_variants() -> list[KernelVariant]:
    """Every kernel a plan can launch (:func:`_variant_space`, a new list each call)."""
    return list(_variant_space())


@cache
def _variant_space() -> tuple[KernelVariant, ...]:
    """Every kernel a plan can launch (canonical, one per name): the image of the plan's
    choices (:mod:`solver.backends.plan`: storage, layout, streaming, family with its modes,
    tile edges, boundary code and compact kernel) over every lattice, collision model and
    fluid model, the geometry-dependent kernel choices (sector fill, 64-bit halo sources of
    the tiled kernels, 64-bit value offsets of the compact ones)
    and every launch of a run (each phase, the in-place decoding, the timing probes), through
    :meth:`KernelVariant.launch` as a run takes it. Nothing else is in it."""
    seen: dict[str, KernelVariant] = {}
    for family, lattice in itertools.product(FAMILIES.values(), LATTICE_NAMES):
        collisions = [m.name for m in COLLISION_MODELS.values()
                      if lattice in m.lattices and lattice in cuda_collision(m.name).lattices]
        boundaries = BOUNDARY_KINDS if family.boundary_code else ("none",)
        for a, label, layout, streaming, coll, inc, bc, wide in itertools.product(
                family.tile_edges(get_lattice(lattice).d), STORAGE_CHOICES, LAYOUT_CHOICES,
                STREAMING_CHOICES, collisions, (True, False), boundaries, (False, True)):
            precision, storage = STORAGE_CHOICES[label]
            v = KernelVariant(lattice, precision, coll, inc, layout, "full", a, bc,
                              storage=storage, wide_sources=wide)
            if family is COMPACT:
                pad, packed, code = compact_kernel(label)
                v = replace(v, compact=pad, packed=packed, code=code, wide=wide)
            for (launched, phase), fill in itertools.product(family.launches(streaming),
                                                             (True, False)):
                w = v.launch(launched, streaming, phase, lambda f=fill: f)
                seen.setdefault(w.name, w)
    return tuple(seen.values())
