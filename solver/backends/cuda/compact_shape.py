"""The launch shape of the compact kernels: their halo code, threads and shared memory.

:class:`CompactCode` is how a halo-addressed compact kernel locates its tile's halo,
:func:`packed_threads` the threads of a packed block and :func:`probe_shared_bytes` a block's
dynamic shared memory; :mod:`.compact_source` renders the kernels, :mod:`.compact_run` launches
them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CompactCode", "DEFAULT_CODE", "probe_shared_bytes", "packed_threads"]


@dataclass(frozen=True)
class CompactCode:
    """How a halo-addressed compact kernel locates its tile's halo.

    ``inner``: tiles whose halo lies inside the domain locate it by columns (one per thread,
    compile-time neighbour and plane per entry: a bit test and popcounts) instead of entry by
    entry with the general wrap and face logic (about 3.4 entries of ~140 instructions per
    thread).
    """

    inner: bool = False

    @property
    def suffix(self) -> str:
        """Kernel name suffix ('' for the default code: names of existing kernels unchanged)."""
        return "_i" if self.inner else ""

    @property
    def label(self) -> str:
        """Words for tables: 'inner', or '' for the default code."""
        return "inner" if self.inner else ""


#: The halo code of the kernels timed first (entry by entry).
DEFAULT_CODE = CompactCode()


def halo_count_bytes(wide: bool, in_place: bool, encoded: bool) -> int:
    """Bytes of a located halo source's padded count in a compact kernel: 4 (an int), but 8 in
    the wide kernels of two copies with float32/float64 storage. There the int count ran
    slower on one H200 (256³ rock-like pack, float32: 15.13 against 16.39 G fluid updates/s,
    compact-wide-nvidia-h200-2026-11-28-{da1f85c,193deac}-two-copy.md); in place (0.940
    against 0.806 of the 32-bit kernels) and with float16 storage (18.55 against 17.33 G/s
    with two copies) it ran faster. float64 was not timed."""
    return 8 if wide and not in_place and not encoded else 4


def probe_shared_bytes(tiles_per_block: int, halo: bool = False, packed: int = 0,
                       wide: bool = False, count: int = 4) -> int:
    """Dynamic shared memory of one block: 27 masks (8 B) and bases (an offset: 4 B, ``wide``
    8 B) per tile, and with ``halo`` the located source (an offset and a padded count of
    ``count`` bytes, :func:`halo_count_bytes`) of each of the 6^3 halo nodes; ``packed`` K:
    those of its K tiles and the node of each fluid rank (one byte)."""
    pad = 4  # slack once kept for paired (8-byte) halo entries; launches keep their bytes
    offset = 8 if wide else 4
    tile = 27 * (8 + offset) + ((offset + count) * 6**3 if halo or packed else 0)
    if packed:
        return packed * (tile + 64) + pad
    return tiles_per_block * tile + (pad if halo else 0)


def packed_threads(packed: int) -> int:
    """Threads per block of the packed kernel of ``packed`` tiles: half their nodes (one pass
    at eta_t <= 0.5, two on full tiles)."""
    return 32 * packed
