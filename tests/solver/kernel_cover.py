"""The kernels nvcc compiles on the CPU: a 3-way covering subset of the variant space.

The variant space (``kernels.all_variants()``, exactly what the execution plans launch:
``test_variant_space.py``) holds 3486 kernels; compiling each for sm_80 and sm_90 would take
about 15 minutes on CI's two cores. A kernel is composed of parts (lattice and tile edge,
storage, collision, fluid model, layout, mode, boundary code, streaming, sector fill, halo
source width, family with its compact kernel, compact value offsets), so
:func:`compile_cover` picks, greedily and deterministically, variants of the space until
every combination of values of any three parts that occurs in the space occurs in one of
them: every fragment is compiled next to every pair of others it meets.
``LBM_COMPILE_ALL=1`` compiles the whole space instead.
"""

from __future__ import annotations

import heapq
import itertools
from functools import cache

from solver.backends.cuda.kernels import KernelVariant, all_variants

__all__ = ["parts", "compile_cover"]


def parts(v: KernelVariant) -> tuple[tuple, ...]:
    """The parts of ``v``, each as (part, its value)."""
    return (("lattice", v.lattice, v.tile_edge), ("storage", v.precision, v.storage),
            ("collision", v.collision), ("incompressible", v.incompressible),
            ("layout", v.layout), ("mode", v.mode), ("boundary", v.boundary),
            ("streaming", v.streaming), ("sector_fill", v.sector_fill),
            ("wide_sources", v.wide_sources), ("family", v.compact, v.packed, v.code),
            ("offsets", v.wide))


@cache
def compile_cover(t: int = 3) -> tuple[KernelVariant, ...]:
    """Variants of the space holding every combination of ``t`` parts' values it holds."""
    space = all_variants()
    ids: dict[tuple, int] = {}
    combos = [{ids.setdefault(c, len(ids)) for c in itertools.combinations(parts(v), t)}
              for v in space]
    uncovered = set(ids.values())
    heap = [(-len(c), k) for k, c in enumerate(combos)]  # lazy greedy: gains only shrink
    heapq.heapify(heap)
    chosen = []
    while uncovered:
        _, k = heapq.heappop(heap)
        gain = len(combos[k] & uncovered)
        if heap and gain < -heap[0][0]:
            heapq.heappush(heap, (-gain, k))
            continue
        chosen.append(space[k])
        uncovered -= combos[k]
    return tuple(chosen)
