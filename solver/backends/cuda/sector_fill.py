"""The sector fill of the tiled kernel: solid nodes that share a 32-byte sector with a fluid node
store the rest equilibrium, so the written copy's sectors are written whole (XYZ layout).

Whether a kernel has it (:func:`can_fill_sectors`, :func:`fills_sectors`), the code where solid
nodes stop (:func:`solid_exit`, filled into ``templates/tiled_lbm.cu`` by :mod:`.kernels`) and
the least share of mixed sectors for which a run gets it (:data:`SECTOR_FILL_MIN_MIX`).
"""

from __future__ import annotations

from typing import Protocol

from .tables import natural_order


class KernelVariant(Protocol):
    """What the sector fill reads of a :class:`.kernels.KernelVariant`."""

    layout: str
    mode: str
    streaming: str
    sector_fill: bool

__all__ = ["SECTOR_FILL_MIN_MIX", "can_fill_sectors", "fills_sectors", "solid_exit"]

#: Least ``Problem.sector_mix`` for which a step gets the sector fill (:func:`solid_exit`).
#: Measured on the H100 (tune_kernel.py, 2026-11-23, 1d8228a, 192^3 packs): the fill gains
#: float32 +17 % at porosity 0.1 (47 % of the sectors mixed), +0.7 % at 0.9 (3.3 %), nothing
#: at 0.95 (1.6 %), and costs 0.5 % on the all-fluid box (float64: +18 %, +1.4 %, +0.5 % at
#: 1.2 % mixed, -0.2 %).
SECTOR_FILL_MIN_MIX = 0.01


def can_fill_sectors(v: KernelVariant) -> bool:
    """Whether the sector fill (:func:`solid_exit`) applies to the kernel: XYZ-layout two-copy
    steps and propagation probes (``layout`` the effective one)."""
    return natural_order(v.layout) and v.mode in ("full", "propagate") and v.streaming == "pull"


def fills_sectors(v: KernelVariant) -> bool:
    """Whether the kernel has the sector fill: it applies, and the variant asks for it."""
    return v.sector_fill and can_fill_sectors(v)


def solid_exit(v: KernelVariant) -> str:
    """Where solid nodes stop; with the sector fill, solid nodes sharing a 32-byte sector with a
    fluid node go on and store the rest equilibrium w_i rho0.

    A 32-byte sector of a direction's data block holds 32 / sizeof(storage) consecutive slots,
    i.e. (XYZ layout, slot = n, NPT % 32 == 0) the nodes of one aligned group of lanes; a warp
    ballot of the fluid lanes tells each solid lane whether its group holds a fluid node. Such
    a lane runs the fluid path as if it were fluid (its sources are valid slots: neighbours or,
    across a solid link, its own; what it computes is discarded) and every store selects the
    rest value for it (float16: the rounding mask zeroes the stored bits), so its slots are
    written by the same store instructions as its fluid neighbours' and the sector is written
    whole: a partly written sector costs a DRAM read first (read-modify-write). The ballot
    sits after the barrier, where all 32 lanes of a warp are alive (warps never straddle
    tiles: NPT % 32 == 0 and blockDim.x is a multiple of NPT; inactive tiles left as whole
    warps), so the full mask is exact. Sectors line up with lane
    groups because every copy starts on a 32-element boundary; the values stored never depend
    on it. The paper layout permutes slots per direction, so sectors there mix other nodes: no
    fill. In place (AA) a step reads every sector it writes, so partial writes cost no DRAM
    read there: two-copy kernels only. The value is stored as is, never rounded
    (:func:`~solver.backends.cuda.storage.rest_value`).

    History (tune_kernel.py, H100): a fill that stored from a branch of its own, before the
    fluid path, gained 2-7 % on porous packs from porosity 0.5 up but lost 6 % (float32) and
    14 % (float64) at porosity 0.1 (19 more store instructions per warp); placed before the
    halo work it lost 20-25 %. Predicating the solid lanes' loads off cost float32 3-7 % at
    porosity 0.1-0.7 against these plain loads (float64 the same either way).
    """
    if not fills_sectors(v):
        return "    if (type == 0) return;"
    return "\n".join([
        "    const bool solid = type == 0;",
        "    {  // sector fill: solid lanes whose sector holds no fluid node stop",
        "        constexpr int SECTOR = 32 / (int)sizeof(*fout);  // slots per 32-byte sector",
        "        const unsigned fluid = __ballot_sync(0xffffffffu, !solid);",
        "        if (solid && !((fluid >> (n & (32 - SECTOR))) & ((1u << SECTOR) - 1u))) return;",
        "    }",
    ])
