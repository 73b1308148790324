"""How the tiled GPU kernel addresses the populations: two copies, or one copy in place (AA).

Two copies (``SimulationConfig.streaming = 'two-copy'``, kernel streaming ``'pull'``): each
step reads copy ``current`` and writes the other. Node ``x`` pulls ``f_i`` from ``x - c_i``
(``f_opp(i)`` of ``x`` itself on a bounced link: halfway bounce-back), collides and stores
``f*_i(x)`` in its own slot ``(x, i)``.

In place (``'in-place'``): the AA pattern (Bailey et al. 2009) on one copy, with two kernels
that alternate. The backend's ``state.current`` is then the *phase*, i.e. which layout the one
copy is in:

- phase 0, natural layout: slot ``(x, i)`` holds ``f*_i(x)``, exactly as a two-copy copy.
  Kernel ``'aa_neighbour'`` pulls as the two-copy kernel does, collides, and writes
  ``f*_i(x)`` into the slot it read ``g_opp(i)`` from: ``(x + c_i, opp(i))``, or ``(x, i)``
  when ``x + c_i`` is a wall. A thread writes only slots it has read itself and no other
  thread reads them in that step, so one copy suffices and there are no races. Then phase 1.
- phase 1, streamed layout: slot ``(x, j)`` holds the population arriving at ``x`` in
  direction ``opp(j)``, bounce-back included. Kernel ``'aa_local'`` reads ``g_i`` from
  ``(x, opp(i))``, collides and writes ``f*_i(x)`` to ``(x, i)``: phase 0 again. It touches
  only its own node, so it resolves no halo (unless Ladd's term needs to know the walls).

Per node the arithmetic is that of the two-copy kernel, so the populations agree bit for bit.
This module only says where a value is read or written; what is stored there (the arithmetic
type, or float16) is :mod:`solver.backends.cuda.storage`'s, so every storage works in place.
The streamed layout is the natural one with the two slots of every fluid-fluid link exchanged,
``(x, i) <-> (x + c_i, opp(i))``: kernel mode ``'swap'`` does that exchange in place, which is
how the backend decodes phase 1 (and only phase 1) back to the natural layout. A step moves
the same bytes either way (2 q values per node); only the memory for f halves.
"""

from __future__ import annotations

from ...config import population_copies
from ...lattice import Lattice

__all__ = ["KERNEL_STREAMING", "kernel_streaming", "next_phase",
           "phase_code", "pointer_qualifier", "needs_halo", "own_offset_name", "own_offsets",
           "load_code", "store_code", "deferred_stores", "swap_code"]

#: Kernel address patterns: two-copy pull, and the two alternating kernels of the AA pattern.
KERNEL_STREAMING = ("pull", "aa_neighbour", "aa_local")


def kernel_streaming(streaming: str, phase: int) -> str:
    """Kernel pattern that steps a state of config ``streaming`` in ``phase`` (0 or 1)."""
    if population_copies(streaming) == 2:  # ConfigError (a ValueError) for an unknown one
        return "pull"
    return "aa_neighbour" if phase == 0 else "aa_local"


def next_phase(streaming: str, mode: str, phase: int) -> int:
    """``state.current`` after one launch of kernel ``mode``: the one place parity changes.

    Two copies: every launch writes the other copy. In place: a step or a propagation probe
    changes the layout, the read/write probe leaves it, and 'swap' decodes phase 1 to 0.
    """
    if population_copies(streaming) == 2:
        if mode == "swap":
            raise ValueError("The 'swap' kernel decodes in-place storage; two copies need none.")
        return 1 - phase
    if mode == "readwrite":
        return phase
    if mode == "swap" and phase != 1:
        raise ValueError("'swap' decodes the streamed layout (phase 1) only; phase 0 is "
                         "already natural.")
    return 1 - phase


def phase_code(pattern: str) -> str:
    """C expression (unsigned) of the phase a launch of kernel ``pattern`` reads.

    Two copies: the copy it reads (copy 0 lies at the lower address: both live in one array).
    In place: the layout, 0 for the neighbour kernel and 1 for the local one and 'swap'. This
    is ``state.current`` of the backends, kept on the device for what must follow the phase
    there (the float16 step counter, :mod:`solver.backends.cuda.storage`).
    """
    if pattern == "pull":
        return "fin < fout ? 0u : 1u"
    return "0u" if pattern == "aa_neighbour" else "1u"


def pointer_qualifier(pattern: str) -> str:
    """``__restrict__`` for the population pointers of two-copy kernels; none in place.

    In place the two pointers are the same array: a load may not move past a store.
    """
    return "__restrict__" if pattern == "pull" else ""


def needs_halo(pattern: str, mode: str, boundary: str) -> bool:
    """Whether the kernel resolves the halo sources (``s_src``) before its barrier."""
    if mode == "readwrite":
        return False
    return pattern != "aa_local" or mode == "swap" or (mode == "full" and boundary == "moving")


def _shift(c, halo_edge: int) -> int:
    return int(sum(ci * halo_edge**ax for ax, ci in enumerate(c)))


def _own(i: int, kinds) -> str:
    return f"base + {i} * NPT + slot_{kinds[i]}(n)"


def _source_slot(i: int, kinds) -> str:
    """Slot (s, i) of halo source ``s`` (its offset in a copy: tile * Q * NPT + XYZ index)."""
    if kinds[i] == "xyz":
        return f"(size_t)s + {i} * NPT"
    return f"(size_t)(s - (s & (NPT - 1))) + {i} * NPT + slot_{kinds[i]}((int)(s & (NPT - 1)))"


def _linked(i: int, kinds, fallback: str) -> str:
    """Slot (s, i) of halo source ``s``, else (a wall: s < 0) ``fallback``."""
    return f"s >= 0 ? {_source_slot(i, kinds)}\n                                 : {fallback}"


def own_offset_name(d: int) -> str:
    """Name of the node's own offset shifted by d data blocks (:func:`own_offsets`)."""
    return f"own_{'m' if d < 0 else 'p'}{abs(d)}"


def own_offsets(pattern: str, lattice: Lattice, kinds) -> list[str]:
    """Per-node lines before the loads of an all-XYZ pull: the node's own offset in a copy
    shifted by (opp(i) - i) data blocks, one per distinct shift (as ``src_t``).

    A bounced link reads slot (x, opp(i)) where a streamed one reads (s, i); selecting between
    the source s and the shifted own offset leaves one common ``+ i * NPT``, which the load takes
    as its immediate: the address costs a select and one wide multiply-add (:func:`load_code`).
    """
    if not _selects_own_offset(pattern, kinds):
        return []
    shifts = sorted({int(lattice.opposite[i]) - i for i in range(lattice.q) if any(lattice.c[i])})
    return [f"    const src_t {own_offset_name(d)} = node_source(tile, n) + ({d}) * NPT;"
            for d in shifts]


def _selects_own_offset(pattern: str, kinds) -> bool:
    """Whether loads select between the source and a shifted own offset (:func:`own_offsets`):
    halo pulls with every direction in the XYZ layout."""
    return pattern != "aa_local" and all(k == "xyz" for k in kinds)


def load_code(pattern: str, lattice: Lattice, kinds, i: int, halo_edge: int) -> list[str]:
    """Lines defining ``const size_t at``, where ``g_i`` of node ``n`` is read (not the rest)."""
    opp = int(lattice.opposite[i])
    if pattern == "aa_local":
        return [f"        const size_t at = {_own(opp, kinds)};"]
    shift = _shift(lattice.c[i], halo_edge)
    read = f"        const src_t s = s_src[centre - ({shift})];"
    if _selects_own_offset(pattern, kinds):  # select, then one common offset
        return [read, f"        const src_t from = s >= 0 ? s : {own_offset_name(opp - i)};",
                f"        const size_t at = (size_t)from + {i} * NPT;"]
    return [read, f"        const size_t at = {_linked(i, kinds, _own(opp, kinds))};"]


def store_code(pattern: str, kinds, i: int, value: str) -> str:
    """Statement storing ``value`` (a ``store_t``, already encoded) as ``f*_i`` of node ``n``
    (into ``out{i}`` when deferred)."""
    if pattern == "aa_neighbour":
        return f"    out{i} = {value};"
    return f"    fout[{_own(i, kinds)}] = {value};"


def deferred_stores(pattern: str, lattice: Lattice, kinds, halo_edge: int) -> tuple[str, str]:
    """Declarations before and stores after the collision of kernels that defer their stores.

    The neighbour step stores into neighbours' slots; with those address selects between the
    arithmetic the compiler contracts (FMA) differently than in the two-copy kernel, so the
    results would differ in the last bit. Storing after all the arithmetic (the encoding to the
    storage included) keeps the arithmetic of both kernels alike.
    """
    if pattern != "aa_neighbour":
        return "", ""
    q = lattice.q
    declare = "    store_t " + ", ".join(f"out{i}" for i in range(q)) + ";"
    lines = ["    const src_t own = node_source(tile, n);"] if _xyz(kinds) else []
    moving = [i for i, c in enumerate(lattice.c.tolist()) if any(c)]
    lines += [f"    fout[{_own(i, kinds)}] = out{i};" for i in range(q) if i not in moving]
    # Last computed, first stored: ptxas 13.0-13.5 then hold 2 registers fewer (float32 40
    # instead of 42: 48 resident warps per SM instead of 40 at 4 warps per block).
    for i in reversed(moving):
        opp = int(lattice.opposite[i])
        # The slot g_opp(i) came from: neighbour x + c_i = x - c_opp(i), or (x, i) at a wall.
        # volatile: read the source again rather than keep every load address live.
        shift = _shift(lattice.c[opp], halo_edge)
        lines += ["    {",
                  f"        const src_t s = ((const volatile src_t*)s_src)[centre - ({shift})];",
                  f"        fout[{_store_slot(i, opp, kinds)}] = out{i};",
                  "    }"]
    return declare, "\n".join(lines)


def _store_slot(i: int, opp: int, kinds) -> str:
    """Slot ``f*_i`` of the neighbour step goes to: (s, opp(i)) of source ``s``, or (x, i).

    In the XYZ layout this is the address g_opp(i) was loaded from, written much as
    :func:`load_code` writes it: a 32-bit select between ``s`` shifted by (opp(i) - i) data
    blocks and the node's own offset ``own``, then one wide multiply-add with ``i * NPT`` as the
    store's immediate (about 5 instructions per direction with the shared load; a select
    between two 64-bit slots cost about 11, and 18 fallback addresses that a compiler may
    compute before the collision and hold). Shifting ``s`` rather than ``own`` keeps one own
    offset live: the loads' shifted own offsets, reused here, would be 6 registers held
    through the collision (float32: 48 registers instead of 42).
    """
    if _xyz(kinds):
        return f"(size_t)(s >= 0 ? s + ({opp - i}) * NPT : own) + {i} * NPT"
    return _linked(opp, kinds, _own(i, kinds))


def swap_code(lattice: Lattice, kinds, halo_edge: int) -> str:
    """Kernel body of mode 'swap': exchange the two slots of every fluid-fluid link of node n.

    Each link is taken by one of its ends only (directions i < opp(i)), so every slot is
    touched by exactly one thread.
    """
    lines = []
    for i, c in enumerate(lattice.c.tolist()):
        opp = int(lattice.opposite[i])
        if not any(c) or i > opp:
            continue
        lines += [
            "    {",
            f"        const src_t s = s_src[centre - ({_shift(lattice.c[opp], halo_edge)})];",
            "        if (s >= 0) {",
            f"            const size_t here = {_own(i, kinds)};",
            f"            const size_t there = {_source_slot(opp, kinds)};",
            "            const store_t t = fout[here];",
            "            fout[here] = fout[there];",
            "            fout[there] = t;",
            "        }",
            "    }",
        ]
    return "\n".join(lines)


def _xyz(kinds) -> bool:
    return all(k == "xyz" for k in kinds)
