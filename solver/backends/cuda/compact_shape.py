"""The launch shape of the compact kernels: their halo code, threads and shared memory.

:class:`CompactCode` is how a halo-addressed compact kernel locates and reads its tile's halo,
:func:`packed_threads` the threads of a packed block and :func:`probe_shared_bytes` a block's
dynamic shared memory; :mod:`.compact_source` renders the kernels, :mod:`.compact_run` launches
them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CompactCode", "DEFAULT_CODE", "MAX_THREADS", "probe_shared_bytes", "packed_threads"]


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
        return f"__launch_bounds__({MAX_THREADS}, {65536 // (MAX_THREADS * self.registers)}) "


#: Threads per block a register-capped kernel may be launched with (CompactCode.registers).
MAX_THREADS = 256
#: The halo code of the kernels timed first (entry by entry, two arrays, no register cap).
DEFAULT_CODE = CompactCode()


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
