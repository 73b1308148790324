"""The compact kernel family (fluid-compacted storage, :mod:`.compact`): spec and generator.

A :class:`CompactSpec` is one kernel on storage that holds only a tile's fluid nodes, composed
of the parts of :mod:`.kernel_parts` (the collision or the propagation probe's plain stores,
the storage) and the compact family's own address patterns (:class:`CompactStreaming`: two
copies, the in-place AA kernels and their 'swap' decoding), with its padding, halo addressing,
packing, halo code (:mod:`.compact_shape`) and value offsets (32-bit, or ``wide`` 64-bit for a
copy of 2^31 values or more: the same template with ``offset_t`` long long; the 32-bit
kernels' text is unchanged). :meth:`CompactSpec.render` fills
``templates/compact_probe.cu`` (and, packed, ``compact_packed.cu``); float16 storage uses the
tiled kernel's code of :mod:`.storage`. :func:`probe_source`, :func:`probe_name` and
:func:`real_param_names` are the same by plain arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from string import Template

import numpy as np

from ...lattice import Lattice, get_lattice
from .collisions import PROBE_COLLISION, cuda_collision
from .compact_shape import (
    DEFAULT_CODE,
    CompactCode,
    halo_count_bytes,
    packed_threads,
    probe_shared_bytes,
)
from .kernel_parts import CollisionPart, Mode, StoragePart, collision_part, mode, storage_part
from .streaming import phase_code
from .tables import c_literal

__all__ = ["CompactCode", "DEFAULT_CODE", "CompactSpec", "CompactStreaming", "compact_spec",
           "probe_name", "probe_source", "probe_shared_bytes", "packed_threads",
           "real_param_names", "halo_text"]

_TEMPLATE = Path(__file__).with_name("templates") / "compact_probe.cu"
_PACKED = _TEMPLATE.with_name("compact_packed.cu")


@dataclass(frozen=True)
class CompactStreaming:
    """Where a compact kernel reads and writes (:mod:`.streaming`'s patterns on compact slots):
    ``from_opposite`` reads the own slot of opp(i) (in place, streamed layout); ``to_source``
    stores into the slot its opposite came from (in place, natural layout); ``swaps`` is the
    'swap' decoding (moves stored values, no arithmetic)."""

    pattern: str
    suffix: str
    in_place: bool = True
    from_opposite: bool = False
    to_source: bool = False
    swaps: bool = False

    @property
    def mode(self) -> str:
        """The kernel mode of a launch with no collision: 'swap' or the probe."""
        return "swap" if self.swaps else "propagate"

    def restrict(self) -> str:
        """Pointer qualifier of ``fin``/``fout`` (in place they alias)."""
        return "" if self.in_place else "__restrict__"


#: The compact address patterns, by name.
COMPACT_STREAMING = {s.pattern: s for s in (
    CompactStreaming("pull", "", in_place=False),
    CompactStreaming("aa_neighbour", "_aan", to_source=True),
    CompactStreaming("aa_local", "_aal", from_opposite=True),
    CompactStreaming("swap", "_swap", swaps=True))}


@dataclass(frozen=True)
class CompactSpec:
    """One compact kernel, composed of parts; ``collision`` has no model for the probe and
    'swap'; ``halo``: sources located once per tile halo node (shared memory); ``wide``: 64-bit
    value offsets and bases (name suffix '_o64')."""

    lattice: Lattice
    storage: StoragePart
    pad: int
    halo: bool
    collision: CollisionPart
    packed: int
    streaming: CompactStreaming
    code: CompactCode
    mode: Mode
    wide: bool = False

    @property
    def offset(self) -> str:
        """The C type of a value offset (``offset_t``): 'long long' wide, else 'int'."""
        return "long long" if self.wide else "int"

    @property
    def count_bytes(self) -> int:
        """Bytes of a located halo source's padded count ``pc`` in shared memory (and its C
        type's size): an int, but 64-bit like the offsets in the wide kernels of two copies
        with float32/float64 storage (:func:`.compact_shape.halo_count_bytes`)."""
        return halo_count_bytes(self.wide, self.streaming.in_place, self.storage.half)

    @property
    def name(self) -> str:
        """Kernel (and namespace) name."""
        c = self.collision
        kind = "propagate" if c.model is None else \
            f"full_{c.model.name}_{'inc' if c.incompressible else 'qc'}"
        return (f"lbm_compact_{kind}_{self.lattice.name}_{self.storage.tag}_p{self.pad}"
                + ("_h" if self.halo else "") + (f"_k{self.packed}" if self.packed else "")
                + self.streaming.suffix + self.code.suffix + ("_o64" if self.wide else ""))

    def render(self) -> str:
        """CUDA source; its kernel is :attr:`name`."""
        return _render(self)


@cache
def compact_spec(lattice: str = "D3Q19", precision: str = "float32", pad: int = 1,
                 halo: bool = False, collision: str | None = None,
                 incompressible: bool = True, packed: int = 0, streaming: str = "pull",
                 code: CompactCode = DEFAULT_CODE, storage: str = "auto",
                 wide: bool = False) -> CompactSpec:
    """The spec of one compact kernel (checked); the arguments as :func:`probe_source`'s."""
    if code != DEFAULT_CODE and not halo:
        raise ValueError(f"{code} needs halo addressing (halo=True).")
    if streaming not in COMPACT_STREAMING:
        raise ValueError(f"Unknown streaming {streaming!r}; use one of "
                         f"{tuple(COMPACT_STREAMING)}.")
    if packed and (not halo or packed not in (1, 2, 4, 8, 16)):
        raise ValueError(f"The packed kernel needs halo addressing and 1-16 tiles per block "
                         f"(a power of two), got halo={halo}, packed={packed}.")
    lat = get_lattice(lattice)
    if lat.d != 3:
        raise ValueError(f"The compact probe is 3D (4^3 tiles), not {lattice}.")
    store = storage_part(precision, storage)
    access = COMPACT_STREAMING[streaming]
    if access.swaps:  # moves stored values as they are: no decoding, no rounding
        collision = None
    m = mode("full" if collision is not None else access.mode)
    form = store.form(collision or PROBE_COLLISION, incompressible, "none", m.name)
    if pad < 1 or pad & (pad - 1):
        raise ValueError(f"pad must be a power of two >= 1, got {pad}.")
    return CompactSpec(lat, store, pad, halo, collision_part(collision, incompressible, form),
                       packed, access, code, m, wide)


def probe_name(lattice: str, precision: str, pad: int, halo: bool = False,
               collision: str | None = None, incompressible: bool = True,
               packed: int = 0, streaming: str = "pull", code: CompactCode = DEFAULT_CODE,
               storage: str = "auto", wide: bool = False) -> str:
    """Kernel (and namespace) name of one compact kernel (``collision`` None: the probe)."""
    return compact_spec(lattice, precision, pad, halo, collision, incompressible, packed,
                        streaming, code, storage, wide).name


def real_param_names(lattice: str, precision: str, collision: str | None,
                     incompressible: bool = True, storage: str = "auto") -> list[str]:
    """Floating arguments of a compact kernel: for a step those of the tiled kernel (force,
    rest state, collision constants: ``tables.physics_args`` order); then, with float16
    storage, the storage constants (every float16 kernel, the probe and 'swap' included: they
    precede the step counter ``fs_seed``, the last argument)."""
    stored = storage_part(precision, storage).param_names()
    if collision is None:
        return stored
    # kernels.real_param_names of the tiled variant (a test keeps them equal)
    return ["fx", "fy", "fz", *(f"rest{k}" for k in range(4)),
            *cuda_collision(collision).param_names(lattice), *stored]


@cache
def probe_source(lattice: str = "D3Q19", precision: str = "float32", pad: int = 1,
                 halo: bool = False, collision: str | None = None,
                 incompressible: bool = True, packed: int = 0, streaming: str = "pull",
                 code: CompactCode = DEFAULT_CODE, storage: str = "auto",
                 wide: bool = False) -> str:
    """CUDA source of a compact kernel; its kernel is ``probe_name(...)`` of the same arguments.

    ``halo``: the tile's threads locate the source of each halo node once (shared memory),
    and a pull is a shared load; otherwise every pull of every node locates its source
    (popcounts and neighbourhood look-ups per direction). ``collision`` None: the propagation
    probe; else a full step with that collision (:mod:`.collisions`), no boundary code (walls:
    halfway bounce-back; faces periodic or walls). ``packed`` K > 0: the packed kernel of
    ``templates/compact_packed.cu`` (K tiles per block, :func:`packed_threads` threads, one per
    fluid node; halo addressing only). ``streaming``: 'pull' (two copies) or one of the AA
    pattern's in-place kernels of :mod:`.streaming` ('aa_neighbour' from the natural layout,
    'aa_local' from the streamed one), with the same arithmetic per node; 'swap' (no collision)
    decodes the streamed layout in place: the two slots of every fluid-fluid link exchanged,
    each link by the node it leaves in a direction of positive first non-zero component.
    ``code``: how the halo is located (:class:`CompactCode`; halo addressing only).
    ``storage``: 'auto' (the arithmetic type) or 'float16' (float32 arithmetic), stored, decoded
    and rounded by the tiled kernel's code (:mod:`.storage`): the same form per collision, the
    same step counter and the same random bits, keyed by the node's tiled identity
    ``tile * 64 + n``, so a compact float16 run stores the tiled run's bits.
    ``wide``: 64-bit value offsets, bases (the ``base`` argument is int64) and located sources,
    for a copy of 2^31 values or more (:data:`.compact.OFFSET_LIMIT`); the same arithmetic.
    """
    return compact_spec(lattice, precision, pad, halo, collision, incompressible, packed,
                        streaming, code, storage, wide).render()


_AXIS_TABLES = "\n".join(
    f"    const AxisSrc a{ax}[3] = {{"
    + ", ".join(f"axis_src(t[{k}], {ax}, {d}, size{ax}, off{ax}, (periodic >> {k}) & 1)"
                for d in (-1, 0, 1)) + "};" for k, ax in enumerate("xyz"))


def _slot(s: CompactSpec, i: int, c, sign: int) -> str:
    """Slot of direction i at the node x + sign c, or the node's own slot of opp(i)."""
    own = f"own + {int(s.lattice.opposite[i])} * stride"
    if s.halo:  # x + sign c sits at halo index hn + sign (cx + 6 cy + 36 cz)
        shift = sign * (c[0] + 6 * c[1] + 36 * c[2])
        h = f"hn {'+' if shift > 0 else '-'} {abs(shift)}"
        return f"source_slot({i}, halo_src(s_halo, {h}), {own})"
    sx, sy, sz = (f"a{ax}[{1 + sign * ci}]" for ax, ci in zip("xyz", c, strict=True))
    return (f"source_slot({i}, locate({sx}, {sy}, {sz}, s_mask, s_base, masks, base, "
            f"tile_map, gx, gy), {own})")


def _pulls(s: CompactSpec) -> list[str]:
    """The loads of g0..g(q-1) (after the float16 node hash), or the swap's exchanges."""
    lat, form = s.lattice, s.collision.form
    if s.streaming.swaps:
        return [f"    {{ const {s.offset} a = own + {i} * stride, "
                f"b = {_slot(s, int(lat.opposite[i]), c, 1)};"
                f" const store_t t = fin[a]; fout[a] = fin[b]; fout[b] = t; }}"
                for i, c in enumerate(lat.c.tolist()) if tuple(c) > (0, 0, 0)]
    lines = []
    for i, c in enumerate(lat.c.tolist()):
        if s.streaming.from_opposite:  # the arriving population waits in the own slot of opp(i)
            at = f"own + {int(lat.opposite[i])} * stride"
        elif not any(c):
            at = f"own + {i} * stride"
        else:  # the source is x - c
            at = _slot(s, i, c, -1)
        lines.append(f"    const real g{i} = {s.storage.decode(lat, i, f'fin[{at}]', form)};")
    # float16: this node's hash for the step's random bits, keyed by its tiled identity
    return s.storage.node_code(lat, form) + lines


def _storer(s: CompactSpec):
    lat = s.lattice

    def store(i: int, value: str) -> str:
        c, opp = lat.c[i].tolist(), int(lat.opposite[i])
        value = s.storage.encode(lat, i, value, s.collision.form)
        if s.streaming.to_source and any(c):  # into the slot g_opp(i) came from
            return f"    fout[{_slot(s, opp, c, 1)}] = {value};"  # (x, i): x + c_i not fluid
        return f"    fout[own + {i} * stride] = {value};"
    return store


#: The halo's located sources by (offset, padded count) bytes: the fields of ``Found``, a tile's
#: halo in offsets (HN at0, then HN pc), entry h's pc and its C type. The 32-bit kernels' text,
#: unchanged; the wide ones keep only at0 64-bit (the padded count pc, at most 64, is an int: 12
#: B a halo node, not 16), but those of two copies with float32/float64 storage keep pc 64-bit
#: too: their text as before pc became an int (:func:`.compact_shape.halo_count_bytes`).
_HALO_TEXT = {
    (4, 4): {"found_fields": "int at0, pc", "halo_offsets": "2 * HN",
             "halo_pc_put": "s_halo[HN + h]", "halo_pc_get": "s_halo[HN + h]",
             "pc_type": "int"},
    (8, 4): {"found_fields": "long long at0;\n    int pc", "halo_offsets": "(HN + HN / 2)",
             "halo_pc_put": "reinterpret_cast<int*>(s_halo + HN)[h]",
             "halo_pc_get": "reinterpret_cast<const int*>(s_halo + HN)[h]", "pc_type": "int"},
    (8, 8): {"found_fields": "long long at0, pc", "halo_offsets": "2 * HN",
             "halo_pc_put": "s_halo[HN + h]", "halo_pc_get": "s_halo[HN + h]",
             "pc_type": "long long"}}


def halo_text(offset_bytes: int = 4, count_bytes: int = 4) -> dict[str, str]:
    """The template's halo pieces (:data:`_HALO_TEXT`) for offsets and padded counts of these
    sizes: what another kernel built on the compact template's helpers renders them with."""
    return dict(_HALO_TEXT[offset_bytes, count_bytes])


def _render(s: CompactSpec) -> str:
    lat, real = s.lattice, s.storage.real
    collide = "" if s.streaming.swaps else s.collision.code(
        lat, lambda x: c_literal(x, real), _storer(s))
    model = s.collision.model
    params = "".join(f",\n    const real {p}" for p in real_param_names(
        lat.name, s.storage.precision, model and model.name, s.collision.incompressible)) \
        + s.storage.signature()
    text = _TEMPLATE.read_text()
    if s.packed:  # the helpers of compact_probe.cu, then the packed kernel
        text = text[:text.index('extern "C"')] + _PACKED.read_text()
    indent = "    " if s.packed else ""  # the packed kernel's body sits in its node loop
    return Template(text).substitute(
        namespace=s.name, kernel=s.name, real=real, q=lat.q, offset=s.offset,
        storage_code=s.storage.definitions(),
        storage_prologue=s.storage.prologue(s.mode, phase_code(s.streaming.pattern)),
        pad=s.pad, halo="true" if s.halo else "false",
        axis_tables="" if s.halo else _AXIS_TABLES, pulls=_indent(_pulls(s), indent),
        collide=_indent(collide.split("\n"), indent), real_params=params, packed=s.packed,
        restrict=s.streaming.restrict(),
        inner="true" if s.code.inner else "false",
        corners="true" if (np.count_nonzero(lat.c, axis=1) == 3).any() else "false",
        **halo_text(8 if s.wide else 4, s.count_bytes))


def _indent(lines: list[str], indent: str) -> str:
    return "\n".join(indent + line for line in lines)

