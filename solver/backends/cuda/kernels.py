"""CUDA source of the tiled stream-collide kernels, one variant at a time (no CuPy needed).

A :class:`KernelVariant` names everything fixed at compile time: lattice, precision, collision
(BGK/TRT/MRT), fluid model, in-tile layout, kernel mode (full step, one of the paper's section
4.1 probes, or the in-place decoding 'swap'), tile edge, the boundary code in it (none, Zou-He
faces, or Zou-He faces and Ladd's moving walls), how it addresses the populations (two copies,
or one of the two alternating in-place AA kernels of :mod:`solver.backends.cuda.streaming`) and
how it stores them ('auto': the arithmetic type; 'float16': the shifted, scaled binary16 of
:mod:`solver.storage`, float32 arithmetic; :mod:`solver.backends.cuda.storage`).
:func:`kernel_source` fills ``templates/tiled_lbm.cu`` with straight-line code for that variant's
velocity set: the pull of every direction, the boundary code of
:mod:`solver.backends.cuda.boundary`, the closed form BGK/TRT collision with Guo forcing of
:mod:`solver.collision` or the moment-space MRT of :mod:`solver.backends.cuda.mrt`, and
coalesced stores (and, in the XYZ layout, the sector fill of :mod:`.sector_fill`). Every
population load and store is one of :func:`_load` and :func:`_storer`: where a value is read or
written is the streaming's (:mod:`solver.backends.cuda.streaming`), how it is decoded or encoded
the storage's (:mod:`solver.backends.cuda.storage`), so every streaming works with every storage.
Relaxation rates, the body force, the rest state and the boundary values stay kernel arguments
or tables, so changing them never recompiles; tiles per block is a launch parameter for the
same reason. Runs without inlets, outlets or moving walls use the kernel without the boundary
code, and runs whose walls rest the one without Ladd's term, so each pays only for what it uses.

The in-tile layouts and the arrays and arguments the kernel is given live in
:mod:`solver.backends.cuda.tables`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from string import Template

import numpy as np

from ...collisions import COLLISION_MODELS
from ...lattice import get_lattice
from ...problem import Problem
from ..plan import COMPACT
from .boundary import BOUNDARY_KINDS, boundary_kind, ladd_code, zou_he_code
from .collisions import CUDA_COLLISIONS, PROBE_COLLISION, cuda_collision
from .compact_source import CompactCode, probe_name, probe_source
from .sector_fill import SECTOR_FILL_MIN_MIX, can_fill_sectors, fills_sectors, solid_exit
from .storage import (
    KERNEL_STORAGES,
    counter_code,
    decode,
    encode,
    half_form,
    is_float16,
    kernel_constants,
    kinetic,
    node_code,
    rest_value,
    storage_code,
    storage_param_names,
    storage_signature,
)
from .streaming import (
    AA_TUNING,
    KERNEL_STREAMING,
    AATuning,
    deferred_stores,
    kernel_streaming,
    load_code,
    needs_halo,
    own_offsets,
    phase_code,
    pointer_qualifier,
    store_code,
    swap_code,
)
from .tables import (
    LAYOUTS,
    c_literal,
    check_tile_shape,
    direction_layouts,
    effective_layout,
    halo_masks,
    kernel_storage,
    needs_wide_sources,
)

__all__ = ["KernelVariant", "MODES", "COLLISIONS", "SECTOR_FILL_MIN_MIX", "kernel_source",
           "all_variants", "collision_param_names", "real_param_names", "real_args"]

#: Kernel modes: the full step, the paper's probes (section 4.1) and the in-place decoding.
MODES = {"full": 0, "propagate": 1, "readwrite": 2, "swap": 3}
#: Collision operators the kernel implements (:mod:`.collisions`).
COLLISIONS = tuple(CUDA_COLLISIONS)
#: Rest equilibrium w_k rho0 per weight class k = |c|^2: what solid nodes hold (sector fill).
_REST_PARAMS = [f"rest{k}" for k in range(4)]
_TEMPLATE = Path(__file__).with_name("templates") / "tiled_lbm.cu"


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
    #: (:mod:`.compact`, opt-in): only fluid nodes, each direction block of a tile padded to a
    #: multiple of this many values; full step or propagation probe, pull, no boundary code.
    compact: int = 0
    packed: int = 0  #: compact only: K tiles per block, one thread per fluid node (0: per node)
    #: In-place step kernels only (tiled storage, full step or propagation probe, tiles of at
    #: most 64 nodes): register cap and read-only-cache loads (:class:`.streaming.AATuning`).
    aa: AATuning = AATuning()
    code: CompactCode = CompactCode()  #: compact only: how its halo is located and read

    def canonical(self) -> KernelVariant:
        """Same kernel with the fields that do not change the code normalised (shared cache)."""
        if self.compact:  # one in-tile order (XYZ ranks), no sector fill, 32-bit indices
            v = replace(self, layout="xyz", sector_fill=False, wide_sources=False, aa=AATuning())
            return replace(v, collision=PROBE_COLLISION, incompressible=True) \
                if v.mode in ("propagate", "swap") else v
        v = replace(self, layout=effective_layout(self.lattice, self.layout, self.tile_edge),
                    packed=0, code=CompactCode())
        if v.mode != "full":  # the probes neither collide nor apply boundary conditions
            v = replace(v, collision=PROBE_COLLISION, incompressible=True, boundary="none")
        if v.mode == "swap" or (v.mode == "readwrite" and v.streaming != "pull"):
            v = replace(v, streaming="aa_local")  # in place, same node: one kernel each
        if not can_fill_sectors(v):
            v = replace(v, sector_fill=False)
        if not needs_halo(v.streaming, v.mode, v.boundary):
            v = replace(v, wide_sources=False)  # no halo sources to hold
        if v.streaming == "pull" or v.mode not in ("full", "propagate"):
            v = replace(v, aa=AATuning())  # two-copy kernels stay as they are
        return v

    @classmethod
    def for_problem(cls, problem: Problem, mode: str = "full", phase: int = 0
                    ) -> KernelVariant:
        """The variant that steps ``problem`` in ``mode`` from ``phase`` (canonical)."""
        if problem.storage.encoded and problem.storage.rounding != "stochastic":
            raise ValueError("The GPU kernel rounds float16 stores stochastically only; "
                             "rounding='nearest' is a NumPy-backend ablation.")
        v = cls(problem.lattice.name, problem.dtype.name, problem.collision.name,
                problem.incompressible, problem.layout, mode, problem.tiling.a,
                boundary_kind(problem) if mode == "full" else "none",
                kernel_streaming(problem.streaming, phase),
                kernel_storage(problem),
                wide_sources=needs_wide_sources(problem),
                aa=AA_TUNING[problem.storage_dtype.name]).canonical()
        if v.sector_fill:  # only where it can apply: the geometry's mix is computed once
            v = replace(v, sector_fill=problem.sector_mix >= SECTOR_FILL_MIN_MIX)
        return v

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
        v = self.canonical()
        if v.compact:
            return probe_name(v.lattice, v.precision, v.compact, True,
                              None if v.mode != "full" else v.collision, v.incompressible,
                              v.packed, "swap" if v.mode == "swap" else v.streaming, v.code,
                              v.storage)
        fluid = "inc" if v.incompressible else "qc"
        prec = ("f64" if v.precision == "float64" else "f32") + ("s16" if v.half else "")
        bc = {"none": "", "zou_he": "_zh", "moving": "_mw"}[v.boundary]
        access = {"pull": "", "aa_neighbour": "_aan", "aa_local": "_aal"}[v.streaming]
        unfilled = "_nf" if can_fill_sectors(v) and not v.sector_fill else ""
        wide = "_s64" if v.wide_sources else ""
        return (f"lbm_{v.mode}_{v.lattice}_{prec}_{v.collision}_{fluid}_{v.layout}"
                f"_a{v.tile_edge}{bc}{access}{unfilled}{wide}{v.aa.suffix}")


_lit = c_literal  # C literal of x in the kernel's precision (tables.c_literal)


def _load(v: KernelVariant, i: int, index: str) -> str:
    """C expression: the population of direction i (or its opposite) at ``fin[index]``, as
    real (decoded from the storage)."""
    stored = f"__ldg(&fin[{index}])" if v.aa.nc_loads else f"fin[{index}]"
    return decode(v.storage, get_lattice(v.lattice), i, stored, v.half_form)


def _gather(v: KernelVariant, real: str) -> str:
    lat, a = get_lattice(v.lattice), v.tile_edge
    kinds = direction_layouts(v.lattice, v.layout, a)
    he = a + 2
    lines = []
    for i, c in enumerate(lat.c.tolist()):
        if not any(c):
            at = f"base + {i} * NPT + slot_{kinds[i]}(n)"
            lines.append(f"    const real g{i} = {_load(v, i, at)};")
            continue
        lines += [
            f"    real g{i};",
            "    {",
            *load_code(v.streaming, lat, kinds, i, he),
            f"        g{i} = {_load(v, i, 'at')};",
            "    }",
        ]
    if v.boundary == "moving":  # group of this node's solid neighbours, NO_WALL if none moves
        lines.insert(0, "    const int wgroup = wall_group[tile * NPT + n];")
        lines.append(ladd_code(v.lattice, he))
    return "\n".join(node_code(v.storage, lat, v.half_form)
                     + own_offsets(v.streaming, lat, kinds) + lines)


def _storer(v: KernelVariant):
    """``store(i, value)``: the statement storing ``value`` (real) as f*_i of the thread's
    node, encoded to the storage, where the streaming pattern puts it."""
    kinds = direction_layouts(v.lattice, v.layout, v.tile_edge)
    lat = get_lattice(v.lattice)
    if not fills_sectors(v) or v.half:  # float16: encode zeroes a solid lane's store
        return lambda i, value: store_code(
            v.streaming, kinds, i, encode(v.storage, lat, i, value, v.half_form,
                                          fills_sectors(v)))
    return lambda i, value: store_code(  # the sector fill's solid lanes store the rest state
        v.streaming, kinds, i, f"solid ? {rest_value(v.storage, lat.weight_class[i])} : "
                               f"{encode(v.storage, lat, i, value, v.half_form)}")


def _collide(v: KernelVariant, real: str) -> str:
    lat = get_lattice(v.lattice)
    kinds = direction_layouts(v.lattice, v.layout, v.tile_edge)
    if v.mode == "swap":
        return swap_code(lat, kinds, v.tile_edge + 2)
    before, after = deferred_stores(v.streaming, lat, kinds, v.tile_edge + 2)
    return "\n".join(part for part in (before, _arithmetic(v, real), after) if part)


def _arithmetic(v: KernelVariant, real: str) -> str:
    lat = get_lattice(v.lattice)
    g = [f"g{i}" for i in range(lat.q)]
    store = _storer(v)
    if v.mode == "propagate":
        return "\n".join(store(i, g[i]) for i in range(lat.q))
    lit = lambda x: _lit(x, real)  # noqa: E731
    code = cuda_collision(v.collision).code
    if v.half_form == "scaled":  # the closed form on S-scaled deviations (.storage)
        return code(v.lattice, v.incompressible, lit, store, kinetic=kinetic(v.half_form))
    return code(v.lattice, v.incompressible, lit, store)


def _readwrite(v: KernelVariant) -> str:
    lat = get_lattice(v.lattice)
    kinds = direction_layouts(v.lattice, v.layout, v.tile_edge)
    lines = []
    for i in range(lat.q):
        at = f"base + {i} * NPT + slot_{kinds[i]}(n)"
        lines.append(f"        fout[{at}] = fin[{at}];")
    return "\n".join(lines)


@cache
def _template() -> Template:
    return Template(_TEMPLATE.read_text())


def collision_param_names(v: KernelVariant) -> list[str]:
    """Names of the collision constants the kernel takes after the body force and rest state."""
    v = v.canonical()
    return cuda_collision(v.collision).param_names(v.lattice)


def real_param_names(v: KernelVariant) -> list[str]:
    """Names of all floating kernel arguments in order (tables.physics_args's values)."""
    if v.canonical().compact and v.mode in ("propagate", "swap"):
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
    if v.mode == "full":  # float16 deviations: the collision's output constants times S
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
    v = variant.canonical()
    if v.compact:
        return _compact_source(v)
    if v.mode not in MODES:
        raise ValueError(f"Unknown kernel mode {v.mode!r}; use one of {tuple(MODES)}.")
    if v.precision not in ("float32", "float64"):
        raise ValueError(f"Unknown precision {v.precision!r}; use 'float32' or 'float64'.")
    collision = cuda_collision(v.collision)  # ValueError: unknown collision
    if v.storage not in KERNEL_STORAGES:
        raise ValueError(f"Unknown storage {v.storage!r}; use one of {KERNEL_STORAGES}.")
    if v.half and v.precision != "float32":
        raise ValueError(f"float16 storage needs float32 arithmetic, not {v.precision}.")
    if v.boundary not in BOUNDARY_KINDS:
        raise ValueError(f"Unknown boundary code {v.boundary!r}; use one of {BOUNDARY_KINDS}.")
    if v.streaming not in KERNEL_STREAMING:
        raise ValueError(f"Unknown kernel streaming {v.streaming!r}; use one of "
                         f"{KERNEL_STREAMING}.")
    if v.lattice not in collision.lattices:
        raise ValueError(f"{v.collision} is implemented for {', '.join(collision.lattices)}, "
                         f"not {v.lattice}.")
    lat = get_lattice(v.lattice)
    check_tile_shape(v.lattice, v.tile_edge, 1)
    real = "double" if v.precision == "float64" else "float"
    a, d = v.tile_edge, lat.d
    params = ",\n".join(f"    const real {p}" for p in collision_param_names(v))
    full = v.mode == "full"
    computes = v.mode not in ("readwrite", "swap")
    return _template().substitute(
        namespace=v.name, kernel=v.name, real=real, d=d,
        source="long long" if v.wide_sources else "int",
        storage_code=storage_code(v.storage),
        storage_prologue=counter_code(v.storage, v.mode, phase_code(v.streaming)),
        q=lat.q, a=a, npt=a**d,
        halo_nodes=(a + 2) ** d, neighbours=3**d, mode=MODES[v.mode],
        skip_corners="true" if int(np.abs(lat.c).sum(axis=1).max()) < d else "false",
        # Only big tiles need a register cap for their block size; a cap at 256 threads makes
        # ptxas trade registers for occupancy and spill, which costs more than it gains here.
        launch_bounds=v.aa.qualifier(a**d)
        or (f"__launch_bounds__({min(1024, 4 * a**d)}) " if a**d > 64 else ""),
        readwrite=_readwrite(v) if v.mode == "readwrite" else "",
        gather=_gather(v, real) if computes else "",
        collide=_collide(v, real) if v.mode != "readwrite" else "",
        solid_exit=solid_exit(v),
        restrict=pointer_qualifier(v.streaming),
        halo="true" if needs_halo(v.streaming, v.mode, v.boundary) else "false",
        halo_masks="true" if halo_masks(v.storage) else "false",
        collision_params=params + storage_signature(v.storage),
        zou_he=zou_he_code(v.lattice, v.incompressible, lambda x: _lit(x, real))
        if full and v.boundary != "none" else "",
    )


def _compact_source(v: KernelVariant) -> str:
    """Source of a fluid-compacted variant (halo addressing), or why it does not exist
    (:data:`~solver.backends.plan.COMPACT`: what the family supports, declared)."""
    lacks = COMPACT.variant_lacks(v.mode, get_lattice(v.lattice).d, v.tile_edge, v.lattice,
                                  v.boundary)  # the family's declared support
    if lacks:
        raise ValueError("Fluid-compacted storage does not support " + ", ".join(lacks)
                         + "; use the tiled storage (compact=0) for this run.")
    return probe_source(v.lattice, v.precision, v.compact, True,
                        None if v.mode != "full" else v.collision, v.incompressible, v.packed,
                        "swap" if v.mode == "swap" else v.streaming, v.code, v.storage)


def all_variants(tile_edges: dict[str, tuple[int, ...]] | None = None,
                 streaming: tuple[str, ...] = ("pull",)) -> list[KernelVariant]:
    """Every distinct kernel variant (canonical) for the given tile edges per lattice.

    ``streaming``: the kernel address patterns to include (:data:`KERNEL_STREAMING`); the
    in-place decoding ('swap') is always included.
    """
    edges = tile_edges or {"D2Q9": (8,), "D3Q19": (4,), "D3Q27": (4,), "D3Q13": (4,)}
    seen: dict[str, KernelVariant] = {}
    for lattice, a_values in edges.items():
        collisions = [m.name for m in COLLISION_MODELS.values() if lattice in m.lattices]
        for a, (prec, store), coll, inc, layout, mode, bc, access, fill in itertools.product(
            a_values, (("float32", "auto"), ("float64", "auto"), ("float32", "float16")),
            collisions, (True, False), LAYOUTS, MODES, BOUNDARY_KINDS, streaming, (True, False),
        ):
            v = KernelVariant(lattice, prec, coll, inc, layout, mode, a, bc, access,
                              store, fill).canonical()
            seen.setdefault(v.name, v)
    return list(seen.values())
