"""Which storage a CuPy run's populations use: every node of each tile, or only its fluid nodes.

``SimulationConfig.tile_storage`` asks for 'tiled', 'compact' (:mod:`.compact`, :mod:`.compact_run`)
or 'auto'; :func:`choose_tile_storage` decides once per problem and returns a
:class:`TileStorage` that the backend (allocation) and :func:`solver.memory.device_bytes`
(estimate) both read, so the estimate always describes what gets allocated. Explicit 'compact'
for a run the compact kernel cannot step is refused with what to change; 'auto' then falls back
to the tiled storage and says why in ``reason``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...problem import Problem
from ...values import ConfigError
from .compact_source import CompactCode
from .kernels import KernelVariant, kernel_source

__all__ = ["TileStorage", "choose_tile_storage", "AUTO_COMPACT_BELOW",
           "AUTO_COMPACT_BELOW_FLOAT16", "AUTO_COMPACT_IN_PLACE_BELOW", "storage_label",
           "COMPACT_PAD", "COMPACT_PACKED", "COMPACT_PACKED_FLOAT16", "COMPACT_CODE",
           "COMPACT_CODE_FLOAT16"]

#: float16 storage (float32 arithmetic, binary16 values) has its own crossover. From the H100
#: run benchmarks/results/nvidia-h100-80gb-hbm3-2026-11-25-0019bc5-compact.md (full BGK step,
#: G fluid updates/s, tiled -> compact 'exact halo inner packed 4'): 17.08 -> 19.27 at eta_t
#: 0.50, 17.28 -> 18.06 at 0.55, 26.55 -> 26.39 at 0.81, 32.27 -> 30.00 at 1.0: compact wins
#: below about 0.78; the threshold sits a little under it (compact also needs less memory).
AUTO_COMPACT_BELOW_FLOAT16 = 0.75
#: 'auto' stores fluid nodes only below this tile utilisation eta_t, per precision. From the
#: H100 run of benchmarks/results/nvidia-h100-80gb-hbm3-2026-11-24-ch-0654955-compact.md (full
#: BGK step, fraction of the fluid-only limit, tiled -> compact 'exact halo inner'): float32
#: 0.559 -> 0.775 at eta_t 0.50, 0.811 -> 0.882 at 0.81, 0.872 -> 0.887 at 0.90, 0.918 -> 0.880
#: at 0.97; float64 0.653 -> 0.902 at 0.50, 0.872 -> 0.919 at 0.81, 0.919 -> 0.907 at 0.90. So
#: float32 gains up to eta_t ~0.92 and float64 up to ~0.875 (as in the earlier 9c8bdb3 run);
#: the thresholds sit at those crossovers (compact also needs less memory, never more).
AUTO_COMPACT_BELOW = {"float32": 0.92, "float64": 0.875, "float16": AUTO_COMPACT_BELOW_FLOAT16}
#: The same for in-place streaming (AA pattern: one copy). From the H100 run of
#: benchmarks/results/nvidia-h100-80gb-hbm3-2026-11-25-0460fb9-fluid.md (BGK in place, G fluid
#: updates/s, tiled -> compact): float32 8.69 -> 10.87 at eta_t 0.50, 9.09 -> 10.90 at 0.55,
#: 11.16 -> 12.18 at 0.71, 13.08 -> 13.14 at 0.81, 14.53 -> 13.71 at 0.90; float64 compact
#: ahead on every case, the all-fluid box included (5.43 -> 7.28 at 0.50, 7.78 -> 7.90 at
#: 0.97, 7.98 -> 8.69 at 1.0), so 1.01 = always; float16 storage 12.32 -> 13.28 at 0.50,
#: 13.08 -> 16.24 at 0.55, 14.98 -> 14.51 at 0.65. Compact in place also stores one copy of
#: the fluid nodes only: the least memory of any option.
AUTO_COMPACT_IN_PLACE_BELOW = {"float32": 0.85, "float64": 1.01, "float16": 0.6}
#: Values per direction block rounded up to this: 1 ('exact'), faster than sector-padded at
#: every eta_t below the thresholds (float32 0.634 vs 0.568 at eta_t 0.50 in that run).
COMPACT_PAD = 1
#: Tiles per block of the packed compact kernel (one thread per fluid node), 0 for the
#: per-node kernel: in that run packed 4 lost to the per-node inner code at every case
#: (float32 0.687 vs 0.775 at eta_t 0.50).
COMPACT_PACKED = 0
#: The same for float16 storage (and COMPACT_CODE_FLOAT16 below), whose compact kernel issues
#: 28 % more instructions per node (sm_90 BGK: 504 vs 393) on half the bytes, so instruction
#: issue binds it and the packed kernel (every lane a fluid node) wins there: in that run
#: (``benchmarks/compact_probe.py --precision float16``) packed 4 gave 19.27 G/s at eta_t 0.50
#: against 16.77 per node, 16.93 paired and 15.68 packed 8.
COMPACT_PACKED_FLOAT16 = 4
#: How the compact kernel locates and reads its halo (CompactCode). The inner-tile column fill
#: won in that run (float32 0.634 -> 0.775, float64 0.853 -> 0.902 at eta_t 0.50); paired
#: shared loads were level or slower (0.755, 0.890) and the register caps lost (r32 0.546,
#: r48 0.509: spills).
COMPACT_CODE = CompactCode(inner=True)
#: float16 storage's halo code (see COMPACT_PACKED_FLOAT16): the inner column fill as float32.
COMPACT_CODE_FLOAT16 = COMPACT_CODE
#: Lattices whose compact kernel was timed (the thresholds above); others run compact only
#: when asked for.
_AUTO_LATTICES = ("D3Q19",)


@dataclass(frozen=True)
class TileStorage:
    """The decided storage: ``kind`` 'tiled' or 'compact', ``pad``, ``packed`` and ``code``
    (compact: :class:`~.compact_run.CompactRun`'s), and why."""

    kind: str
    reason: str
    pad: int = 0
    packed: int = 0
    code: CompactCode = CompactCode()

    @property
    def compact(self) -> bool:
        """Whether only fluid nodes are stored."""
        return self.kind == "compact"


def storage_label(problem: Problem) -> str:
    """Key of :data:`AUTO_COMPACT_BELOW`: 'float16' for float16 storage, else the precision."""
    return "float16" if problem.storage.encoded else problem.dtype.name


def _kernel(problem: Problem) -> tuple[int, CompactCode]:
    """Packed tiles per block (0: one thread per tile node) and halo code of ``problem``'s
    compact kernel."""
    if storage_label(problem) == "float16":
        return COMPACT_PACKED_FLOAT16, COMPACT_CODE_FLOAT16
    return COMPACT_PACKED, COMPACT_CODE


def _refusal(problem: Problem) -> str | None:
    """Why the compact kernel cannot step ``problem``, or None."""
    if problem.owned is not None:
        return "a distributed (MPI) rank steps the tiled storage"
    if problem.iolets is not None:
        return "driven openings need the openings' link pass, written for the tiled storage"
    if problem.tiling.ndim != 3 or problem.tiling.a != 4:
        return f"it needs 3D tiles of edge 4 (this run: {problem.tiling.ndim}D, edge " \
               f"{problem.tiling.a})"
    try:
        packed, code = _kernel(problem)
        kernel_source(replace(KernelVariant.for_problem(problem), compact=COMPACT_PAD,
                              packed=packed, code=code))
    except ValueError as exc:
        return str(exc).removeprefix("Fluid-compacted storage does not support ").split(";")[0]
    return None


def choose_tile_storage(problem: Problem) -> TileStorage:
    """The storage of ``problem``'s run on the GPU (decided once, cached on the problem).

    Raises ConfigError for ``tile_storage='compact'`` on a run the compact kernel lacks."""
    cached = problem.__dict__.get("_tile_storage")
    if cached is not None:
        return cached
    asked = getattr(problem, "tile_storage", "tiled")
    if asked == "tiled":
        choice = TileStorage("tiled", "tile_storage='tiled'")
    else:
        why = _refusal(problem)
        label = storage_label(problem)
        limits = AUTO_COMPACT_BELOW if problem.streaming == "two-copy" \
            else AUTO_COMPACT_IN_PLACE_BELOW
        eta, limit = problem.tiling.eta_t, limits[label]
        if asked == "compact":
            if why:
                raise ConfigError(f"tile_storage='compact' cannot run this case: {why}. Use "
                                  "tile_storage='tiled' (or 'auto').")
            choice = TileStorage("compact", "tile_storage='compact'", COMPACT_PAD,
                                 *_kernel(problem))
        elif why:
            choice = TileStorage("tiled", f"auto: compact storage lacks this case ({why})")
        elif problem.lattice.name not in _AUTO_LATTICES:
            choice = TileStorage("tiled", f"auto: compact storage is timed for "
                                 f"{', '.join(_AUTO_LATTICES)} only, not {problem.lattice.name}")
        elif eta >= limit:
            choice = TileStorage("tiled", f"auto: eta_t {eta:.3f} not below {limit} "
                                 f"({problem.lattice.name}, {label}, {problem.streaming})")
        else:
            choice = TileStorage("compact", f"auto: eta_t {eta:.3f} below {limit}", COMPACT_PAD,
                                 *_kernel(problem))
    problem.__dict__["_tile_storage"] = choice
    return choice
