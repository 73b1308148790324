"""The parts a kernel is composed of: mode, collision, storage, streaming and boundary code.

Each part is an object that writes its own fragments of CUDA text; a kernel family's spec
(:mod:`.tiled_source`, :mod:`.compact_source`) holds one of each and its generator asks them for
their code, so no generator compares a part's name to choose a fragment. The parts are looked up
by the names a :class:`~solver.backends.cuda.kernels.KernelVariant` carries (:func:`mode`,
:func:`collision_part`, :func:`storage_part`, :func:`streaming_part`, :func:`boundary_part`);
the code itself stays in the modules that own each concept (:mod:`.collisions`, :mod:`.storage`,
:mod:`.streaming`, :mod:`.boundary`). A new collision model is its two registrations
(:mod:`solver.collisions`, :mod:`.collisions`); a new part of another kind is one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...lattice import Lattice
from . import storage as _storage
from . import streaming as _streaming
from .boundary import ladd_code, zou_he_code
from .collisions import CudaCollision, cuda_collision

__all__ = ["Mode", "MODE_PARTS", "mode", "CollisionPart", "collision_part", "StoragePart",
           "storage_part", "StreamingPart", "STREAMING_PARTS", "streaming_part",
           "BoundaryPart", "BOUNDARY_PARTS", "boundary_part"]


@dataclass(frozen=True)
class Mode:
    """What one launch does: ``number`` is the template's ``MODE``; a step ``collides`` (and
    applies the boundary code); ``gathers``: pulls every population into registers; ``copies``:
    the read/write probe's plain copy; ``decodes``: the in-place 'swap' decoding."""

    name: str
    number: int
    gathers: bool
    collides: bool = False
    copies: bool = False
    decodes: bool = False


#: The full step, the paper's probes (section 4.1) and the in-place decoding.
MODE_PARTS = {m.name: m for m in (
    Mode("full", 0, gathers=True, collides=True),
    Mode("propagate", 1, gathers=True),
    Mode("readwrite", 2, gathers=False, copies=True),
    Mode("swap", 3, gathers=False, decodes=True),
)}


def mode(name: str) -> Mode:
    """The kernel mode called ``name``."""
    if name not in MODE_PARTS:
        raise ValueError(f"Unknown kernel mode {name!r}; use one of {tuple(MODE_PARTS)}.")
    return MODE_PARTS[name]


@dataclass(frozen=True)
class CollisionPart:
    """The arithmetic between the loads and the stores: a registered model's collide on the
    storage's form (:func:`.storage.half_form`), or (``model`` None) the propagation probe,
    which stores what it pulled."""

    model: CudaCollision | None
    incompressible: bool = True
    form: str = "populations"

    def code(self, lattice: Lattice, lit, store) -> str:
        """C statements: collide g0..g(q-1) and store each result with ``store(i, value)``."""
        if self.model is None:
            return "\n".join(store(i, f"g{i}") for i in range(lattice.q))
        kinetic = _storage.kinetic(self.form)  # 'scaled': -1.5/S is an argument
        extra = {"kinetic": kinetic} if kinetic else {}
        return self.model.code(lattice.name, self.incompressible, lit, store, **extra)


def collision_part(name: str | None, incompressible: bool = True,
                   form: str = "populations") -> CollisionPart:
    """The collision part of model ``name`` (None: the propagation probe's)."""
    return CollisionPart(None if name is None else cuda_collision(name), incompressible, form)


@dataclass(frozen=True)
class StoragePart:
    """How populations are held: arithmetic ``precision`` and kernel storage ``kind`` ('auto':
    the arithmetic type; 'float16': shifted, scaled binary16, float32 arithmetic)."""

    precision: str
    kind: str = "auto"

    def __post_init__(self) -> None:
        if self.precision not in ("float32", "float64"):
            raise ValueError(f"Unknown precision {self.precision!r}; use 'float32' or "
                             "'float64'.")
        if self.kind not in _storage.KERNEL_STORAGES:
            raise ValueError(f"Unknown storage {self.kind!r}; use one of "
                             f"{_storage.KERNEL_STORAGES}.")
        if self.half and self.precision != "float32":
            raise ValueError(f"float16 storage needs float32 arithmetic, not {self.precision}.")

    @property
    def real(self) -> str:
        """C type of the arithmetic."""
        return "double" if self.precision == "float64" else "float"

    @property
    def half(self) -> bool:
        """Whether the populations are stored as binary16."""
        return _storage.is_float16(self.kind)

    @property
    def tag(self) -> str:
        """Kernel-name part: 'f32', 'f64', 'f32s16'."""
        return ("f64" if self.precision == "float64" else "f32") + ("s16" if self.half else "")

    def form(self, collision: str, incompressible: bool, boundary: str, mode_: str) -> str:
        """What the arithmetic works on (:func:`.storage.half_form`)."""
        return _storage.half_form(self.kind, collision, incompressible, boundary, mode_)

    def definitions(self) -> str:
        """Namespace-scope code: ``store_t`` and the float16 helpers."""
        return _storage.storage_code(self.kind)

    def prologue(self, mode_: Mode, phase: str) -> str:
        """First lines of the kernel: the float16 step counter of this launch."""
        return _storage.counter_code(self.kind, mode_.name, phase)

    def param_names(self) -> list[str]:
        """Floating storage constants after the collision constants."""
        return _storage.storage_param_names(self.kind)

    def signature(self) -> str:
        """Kernel parameters after the collision constants (leading comma), or ''."""
        return _storage.storage_signature(self.kind)

    def node_code(self, lattice: Lattice, form: str) -> list[str]:
        """Per-node lines before the loads (the float16 hash and offsets)."""
        return _storage.node_code(self.kind, lattice, form)

    def decode(self, lattice: Lattice, i: int, stored: str, form: str) -> str:
        """C expression: stored value of direction i as real."""
        return _storage.decode(self.kind, lattice, i, stored, form)

    def encode(self, lattice: Lattice, i: int, value: str, form: str, fill: bool = False) -> str:
        """C expression: real ``value`` of direction i as stored (``fill``: sector fill)."""
        return _storage.encode(self.kind, lattice, i, value, form, fill)

    def rest(self, weight_class: int) -> str:
        """C expression: the rest equilibrium of a weight class as stored."""
        return _storage.rest_value(self.kind, weight_class)


def storage_part(precision: str, kind: str = "auto") -> StoragePart:
    """The storage part of ``precision`` and kernel storage ``kind`` (checked)."""
    return StoragePart(precision, kind)


@dataclass(frozen=True)
class StreamingPart:
    """Where a tiled kernel reads and writes a population (:mod:`.streaming`): two copies
    ('pull') or one of the in-place AA kernels; ``suffix`` names it in kernel names."""

    pattern: str
    suffix: str
    in_place: bool = True

    def phase(self) -> str:
        """C expression of the phase this launch reads."""
        return _streaming.phase_code(self.pattern)

    def restrict(self) -> str:
        """Pointer qualifier of ``fin``/``fout``."""
        return _streaming.pointer_qualifier(self.pattern)

    def needs_halo(self, mode_: Mode, boundary: BoundaryPart) -> bool:
        """Whether the kernel resolves its tile's halo."""
        return _streaming.needs_halo(self.pattern, mode_.name, boundary.name)

    def own_offsets(self, lattice: Lattice, kinds) -> list[str]:
        """Per-node own-slot offsets before the loads."""
        return _streaming.own_offsets(self.pattern, lattice, kinds)

    def load(self, lattice: Lattice, kinds, i: int, halo_edge: int) -> list[str]:
        """Lines that set ``at``, the slot direction i is read from."""
        return _streaming.load_code(self.pattern, lattice, kinds, i, halo_edge)

    def store(self, kinds, i: int, value: str) -> str:
        """The statement storing direction i's ``value`` (as stored)."""
        return _streaming.store_code(self.pattern, kinds, i, value)

    def deferred(self, lattice: Lattice, kinds, halo_edge: int) -> tuple[str, str]:
        """Code before and after the arithmetic of deferred stores ('', '' if none)."""
        return _streaming.deferred_stores(self.pattern, lattice, kinds, halo_edge)


#: The kernel address patterns (:data:`.streaming.KERNEL_STREAMING`).
STREAMING_PARTS = {s.pattern: s for s in (
    StreamingPart("pull", "", in_place=False), StreamingPart("aa_neighbour", "_aan"),
    StreamingPart("aa_local", "_aal"))}


def streaming_part(pattern: str) -> StreamingPart:
    """The tiled streaming part of kernel address pattern ``pattern``."""
    if pattern not in STREAMING_PARTS:
        raise ValueError(f"Unknown kernel streaming {pattern!r}; use one of "
                         f"{tuple(STREAMING_PARTS)}.")
    return STREAMING_PARTS[pattern]


@dataclass(frozen=True)
class BoundaryPart:
    """The boundary code in a tiled step (:mod:`.boundary`): Zou-He faces (``faces``) and
    Ladd's moving walls (``ladd``); ``suffix`` names it in kernel names."""

    name: str
    faces: bool
    ladd: bool
    suffix: str

    def before_gather(self) -> list[str]:
        """Lines before the loads: the node's wall group (Ladd)."""
        return ["    const int wgroup = wall_group[tile * NPT + n];"] if self.ladd else []

    def after_gather(self, lattice: Lattice, halo_edge: int) -> list[str]:
        """Lines after the loads: Ladd's momentum term."""
        return [ladd_code(lattice.name, halo_edge)] if self.ladd else []

    def face_code(self, lattice: Lattice, incompressible: bool, lit) -> str:
        """The Zou-He face closures (the template's ``zou_he``), or ''."""
        return zou_he_code(lattice.name, incompressible, lit) if self.faces else ""


#: The boundary codes a tiled step can have: none, Zou-He faces, faces and moving walls.
BOUNDARY_PARTS = {b.name: b for b in (
    BoundaryPart("none", False, False, ""), BoundaryPart("zou_he", True, False, "_zh"),
    BoundaryPart("moving", True, True, "_mw"))}


def boundary_part(name: str) -> BoundaryPart:
    """The boundary part called ``name``."""
    if name not in BOUNDARY_PARTS:
        raise ValueError(f"Unknown boundary code {name!r}; use one of {tuple(BOUNDARY_PARTS)}.")
    return BOUNDARY_PARTS[name]
