"""CUDA source of the kernels on fluid-compacted storage (:mod:`.compact`), one at a time.

:func:`probe_source` fills ``templates/compact_probe.cu`` (and, packed, ``compact_packed.cu``)
for one lattice, precision, storage ('auto' or float16), padding, halo code
(:class:`CompactCode`) and address pattern: the propagation probe, the full step with a
collision of :mod:`.collisions`, the in-place AA kernels and their 'swap' decoding; float16
storage through the tiled kernel's code of :mod:`.storage`. :func:`probe_name` names the
kernel, :func:`real_param_names` its floating arguments, :func:`probe_shared_bytes` and
:func:`packed_threads` its launch shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from string import Template

import numpy as np

from ...lattice import get_lattice
from .collisions import PROBE_COLLISION, cuda_collision
from .storage import (
    KERNEL_STORAGES,
    counter_code,
    decode,
    encode,
    half_form,
    is_float16,
    kinetic,
    node_code,
    storage_code,
    storage_param_names,
    storage_signature,
)
from .streaming import phase_code
from .tables import c_literal

__all__ = ["CompactCode", "DEFAULT_CODE", "probe_name", "probe_source", "probe_shared_bytes",
           "packed_threads", "real_param_names"]

_TEMPLATE = Path(__file__).with_name("templates") / "compact_probe.cu"
_PACKED = _TEMPLATE.with_name("compact_packed.cu")


@dataclass(frozen=True)
class CompactCode:
    """How a halo-addressed compact kernel locates and reads its tile's halo (issue 20: the
    compact float32 kernels are bound by instruction issue, the float64 one by registers).

    ``inner``: tiles whose halo lies inside the domain locate it by columns (one per thread,
    compile-time neighbour and plane per entry: a bit test and popcounts) instead of entry by
    entry with the general wrap and face logic (about 3.4 entries of ~140 instructions per
    thread). ``paired``: a halo node's (value index, padded count) side by side in shared
    memory, one 64-bit load per pull instead of two. ``registers``: cap the registers per thread
    (``__launch_bounds__(256, min blocks)``; 0: none) for occupancy; blocks of at most 256
    threads (4 tiles per block, or the packed kernel of up to 8 tiles).
    """

    inner: bool = False
    paired: bool = False
    registers: int = 0

    def __post_init__(self) -> None:
        if self.registers and not 24 <= self.registers <= 255:
            raise ValueError(f"registers must be 0 (no cap) or 24-255, got {self.registers}.")

    @property
    def suffix(self) -> str:
        """Kernel name suffix ('' for the default code: names of existing kernels unchanged)."""
        return (("_i" if self.inner else "") + ("_w" if self.paired else "")
                + (f"_r{self.registers}" if self.registers else ""))

    @property
    def label(self) -> str:
        """Words for tables: 'inner paired r48', or '' for the default code."""
        return " ".join(w for w, on in (("inner", self.inner), ("paired", self.paired),
                                        (f"r{self.registers}", self.registers)) if on)

    def launch_bounds(self) -> str:
        """``__launch_bounds__`` text of the kernel: the most blocks of 256 threads per SM
        (65536 registers) that ``registers`` per thread allow."""
        if not self.registers:
            return ""
        return f"__launch_bounds__({_MAX_THREADS}, {65536 // (_MAX_THREADS * self.registers)}) "


#: Threads per block a register-capped kernel may be launched with (CompactCode.registers).
_MAX_THREADS = 256
#: The halo code of the kernels timed first (entry by entry, two arrays, no register cap).
DEFAULT_CODE = CompactCode()


def probe_name(lattice: str, precision: str, pad: int, halo: bool = False,
               collision: str | None = None, incompressible: bool = True,
               packed: int = 0, streaming: str = "pull", code: CompactCode = DEFAULT_CODE,
               storage: str = "auto") -> str:
    """Kernel (and namespace) name of one compact kernel (``collision`` None: the probe)."""
    prec = ("f64" if precision == "float64" else "f32") + ("s16" if is_float16(storage) else "")
    mode = "propagate" if collision is None else \
        f"full_{collision}_{'inc' if incompressible else 'qc'}"
    return (f"lbm_compact_{mode}_{lattice}_{prec}_p{pad}" + ("_h" if halo else "")
            + (f"_k{packed}" if packed else "") + _ACCESS[streaming] + code.suffix)


def probe_shared_bytes(tiles_per_block: int, halo: bool = False, packed: int = 0) -> int:
    """Dynamic shared memory of one block: 27 masks (8 B) and bases (4 B) per tile, and with
    ``halo`` the located source (two ints) of each of the 6^3 halo nodes; ``packed`` K: those
    of its K tiles and the node of each fluid rank (one byte)."""
    pad = 4  # paired halo entries start on 8 bytes (one int after an odd number of bases)
    if packed:
        return packed * (27 * 12 + 2 * 4 * 6**3 + 64) + pad
    return tiles_per_block * (27 * 12 + (2 * 4 * 6**3 if halo else 0)) + (pad if halo else 0)


def packed_threads(packed: int) -> int:
    """Threads per block of the packed kernel of ``packed`` tiles: half their nodes (one pass
    at eta_t <= 0.5, two on full tiles)."""
    return 32 * packed


_AXIS_TABLES = "\n".join(
    f"    const AxisSrc a{ax}[3] = {{"
    + ", ".join(f"axis_src(t[{k}], {ax}, {d}, size{ax}, off{ax}, (periodic >> {k}) & 1)"
                for d in (-1, 0, 1)) + "};" for k, ax in enumerate("xyz"))


def real_param_names(lattice: str, precision: str, collision: str | None,
                     incompressible: bool = True, storage: str = "auto") -> list[str]:
    """Floating arguments of a compact kernel: for a step those of the tiled kernel (force,
    rest state, collision constants: ``tables.physics_args`` order); then, with float16
    storage, the storage constants (every float16 kernel, the probe and 'swap' included: they
    precede the step counter ``fs_seed``, the last argument)."""
    stored = storage_param_names(storage)
    if collision is None:
        return stored
    # kernels.real_param_names of the tiled variant (a test keeps them equal)
    return ["fx", "fy", "fz", *(f"rest{k}" for k in range(4)),
            *cuda_collision(collision).param_names(lattice), *stored]


#: Name suffix per address pattern (:mod:`.streaming`): two copies, or the AA pattern's kernels.
_ACCESS = {"pull": "", "aa_neighbour": "_aan", "aa_local": "_aal", "swap": "_swap"}


@cache
def probe_source(lattice: str = "D3Q19", precision: str = "float32", pad: int = 1,
                 halo: bool = False, collision: str | None = None,
                 incompressible: bool = True, packed: int = 0, streaming: str = "pull",
                 code: CompactCode = DEFAULT_CODE, storage: str = "auto") -> str:
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
    ``code``: how the halo is located and read (:class:`CompactCode`; halo addressing only).
    ``storage``: 'auto' (the arithmetic type) or 'float16' (float32 arithmetic), stored, decoded
    and rounded by the tiled kernel's code (:mod:`.storage`): the same form per collision, the
    same step counter and the same random bits, keyed by the node's tiled identity
    ``tile * 64 + n``, so a compact float16 run stores the tiled run's bits.
    """
    if code != DEFAULT_CODE and not halo:
        raise ValueError(f"{code} needs halo addressing (halo=True).")
    if code.registers and packed_threads(packed) > _MAX_THREADS:
        raise ValueError(f"A register cap allows blocks of {_MAX_THREADS} threads, not the "
                         f"{packed_threads(packed)} of {packed} packed tiles.")
    if streaming not in _ACCESS:
        raise ValueError(f"Unknown streaming {streaming!r}; use one of {tuple(_ACCESS)}.")
    if packed and (not halo or packed not in (1, 2, 4, 8, 16)):
        raise ValueError(f"The packed kernel needs halo addressing and 1-16 tiles per block "
                         f"(a power of two), got halo={halo}, packed={packed}.")
    lat = get_lattice(lattice)
    if lat.d != 3:
        raise ValueError(f"The compact probe is 3D (4^3 tiles), not {lattice}.")
    if precision not in ("float32", "float64"):
        raise ValueError(f"Unknown precision {precision!r}; use 'float32' or 'float64'.")
    if storage not in KERNEL_STORAGES:
        raise ValueError(f"Unknown storage {storage!r}; use one of {KERNEL_STORAGES}.")
    if is_float16(storage) and precision != "float32":
        raise ValueError(f"float16 storage needs float32 arithmetic, not {precision}.")
    mode = "swap" if streaming == "swap" else "propagate" if collision is None else "full"
    form = half_form(storage, collision or PROBE_COLLISION, incompressible, "none", mode)
    if pad < 1 or pad & (pad - 1):
        raise ValueError(f"pad must be a power of two >= 1, got {pad}.")
    pulls, stores = [], []

    def load(i: int, index: str) -> str:
        return f"    const real g{i} = {decode(storage, lat, i, f'fin[{index}]', form)};"

    def at(i: int, c, sign: int) -> str:
        """Slot of direction i at the node x + sign c, or the node's own slot of opp(i)."""
        own = f"own + {int(lat.opposite[i])} * stride"
        if halo:  # x + sign c sits at halo index hn + sign (cx + 6 cy + 36 cz)
            shift = sign * (c[0] + 6 * c[1] + 36 * c[2])
            h = f"hn {'+' if shift > 0 else '-'} {abs(shift)}"
            return f"source_slot({i}, halo_src(s_halo, {h}), {own})"
        sx, sy, sz = (f"a{ax}[{1 + sign * ci}]" for ax, ci in zip("xyz", c, strict=True))
        return (f"source_slot({i}, locate({sx}, {sy}, {sz}, s_mask, s_base, masks, base, "
                f"tile_map, gx, gy), {own})")

    def store(i: int, value: str) -> str:
        c, opp = lat.c[i].tolist(), int(lat.opposite[i])
        value = encode(storage, lat, i, value, form)
        if streaming == "aa_neighbour" and any(c):  # into the slot g_opp(i) came from
            return f"    fout[{at(opp, c, 1)}] = {value};"  # (x, i) where x + c_i is not fluid
        return f"    fout[own + {i} * stride] = {value};"

    for i, c in enumerate(lat.c.tolist()):
        if streaming == "aa_local":  # the arriving population waits in the own slot of opp(i)
            pulls.append(load(i, f"own + {int(lat.opposite[i])} * stride"))
        elif not any(c):
            pulls.append(load(i, f"own + {i} * stride"))
        else:  # the source is x - c
            pulls.append(load(i, at(i, c, -1)))
        stores.append(store(i, f"g{i}"))
    # float16: this node's hash for the step's random bits, keyed by its tiled identity
    pulls = node_code(storage, lat, form) + pulls
    if streaming == "swap":  # moves stored values as they are: no decoding, no rounding
        stores, collision = [], None
        pulls = [f"    {{ const int a = own + {i} * stride, b = {at(int(lat.opposite[i]), c, 1)};"
                 f" const store_t t = fin[a]; fout[a] = fin[b]; fout[b] = t; }}"
                 for i, c in enumerate(lat.c.tolist()) if tuple(c) > (0, 0, 0)]
    name = probe_name(lattice, precision, pad, halo, collision, incompressible, packed, streaming,
                      code, storage)
    real = "double" if precision == "float64" else "float"
    if collision is None:
        collide = "\n".join(stores)
    else:
        collide = cuda_collision(collision).code(
            lattice, incompressible, lambda x: c_literal(x, real), store,
            **({"kinetic": kinetic(form)} if form == "scaled" else {}))
    params = "".join(f",\n    const real {p}" for p in real_param_names(
        lattice, precision, collision, incompressible)) + storage_signature(storage)
    text = _TEMPLATE.read_text()
    if packed:  # the helpers of compact_probe.cu, then the packed kernel
        text = text[:text.index('extern "C"')] + _PACKED.read_text()
    indent = "    " if packed else ""  # the packed kernel's body sits in its node loop
    return Template(text).substitute(
        namespace=name, kernel=name, real=real, q=lat.q, storage_code=storage_code(storage),
        storage_prologue=counter_code(storage, mode, phase_code(streaming)), pad=pad,
        halo="true" if halo else "false",
        axis_tables="" if halo else _AXIS_TABLES, pulls=_indent(pulls, indent),
        collide=_indent(collide.split("\n"), indent), real_params=params, packed=packed,
        restrict="__restrict__" if streaming == "pull" else "",
        inner="true" if code.inner else "false", paired="true" if code.paired else "false",
        launch_bounds=code.launch_bounds(),
        corners="true" if (np.count_nonzero(lat.c, axis=1) == 3).any() else "false")


def _indent(lines: list[str], indent: str) -> str:
    return "\n".join(indent + line for line in lines)
