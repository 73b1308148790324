"""The execution plan of a run: how a :class:`~solver.problem.Problem` executes on the GPU,
decided once, with the reason for every choice.

The ``Problem`` is the physics; the plan is the rest (lbmpy's split of a method from its
optimisation and target): the arithmetic and storage precision, the in-tile layout, the
streaming (two copies or one in place), the tile storage (every node of a tile, or only its
fluid nodes) and with it the kernel family, the compact kernels' value offsets (32-bit, or
64-bit for a copy of 2^31 values or more), and the launch shape. :func:`plan_for` decides it
from the problem's options, the geometry's numbers (tile utilisation eta_t, dimensions, tile
edge), the device's memory where the problem carries it (``Problem.device_capacity``: only
for a run whose compact storage would need 64-bit offsets) and the families' support, which
is declared data (:class:`KernelFamily`), never learned by compiling a kernel. It needs no
GPU, so every automatic choice is unit-tested on the CPU.

This module (with :mod:`solver.config`, which declares the options, and the kernel generators
that own the kernels' vocabulary) is the only code that compares an execution option's name;
everything else asks the plan (``plan.compact``, ``plan.in_place``, ``plan.half``), which
``tests/solver/test_plan.py`` checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import GPU_LAYOUTS, STREAMING, population_copies
from ..problem import Problem
from ..values import ConfigError
from .cuda.boundary import boundary_kind
from .cuda.compact_shape import CompactCode
from .cuda.streaming import next_phase
from .cuda.tables import check_tile_shape, effective_layout

__all__ = ["KernelFamily", "TILED", "COMPACT", "FAMILIES", "ExecutionPlan", "plan_for",
           "STORAGE_CHOICES", "LAYOUT_CHOICES", "STREAMING_CHOICES", "compact_kernel",
           "storage_label", "compact_values", "compact_state_estimate",
           "AUTO_COMPACT_BELOW", "AUTO_HEADROOM_PER_TILE_NODE", "WIDE_SLOWER",
           "WIDE_TWO_COPIES_FASTER", "fits_device", "device_headroom",
           "AUTO_COMPACT_BELOW_FLOAT16", "AUTO_COMPACT_IN_PLACE_BELOW", "COMPACT_PAD",
           "COMPACT_PACKED", "COMPACT_PACKED_FLOAT16", "COMPACT_CODE", "COMPACT_CODE_FLOAT16"]


# ------------------------------------------------------------------ what each family supports
@dataclass(frozen=True)
class KernelFamily:
    """What one family of kernels can step, declared (checked against the generated kernels by
    ``tests/solver/test_plan.py``): the tile edges per lattice dimension, kernel modes, whether
    it has the boundary code of Zou-He faces and moving walls, the openings' link pass and
    distributed (MPI) ranks, the lattices whose crossover against the tiled storage was
    timed (None: every lattice; 'auto' picks the family only for these), and the values per
    copy its 32-bit offsets address (None: any): from there on its wide kernels (64-bit
    offsets) run, never a refusal."""

    name: str
    edges: tuple[tuple[int, tuple[int, ...]], ...]  # (dimension, its tile edges), ...
    modes: tuple[str, ...]
    boundary_code: bool
    openings: bool
    distributed: bool
    timed_lattices: tuple[str, ...] | None = None
    value_limit: int | None = None  # values per copy its 32-bit offsets address (None: any)

    def variant_lacks(self, mode: str, dim: int, tile_edge: int, lattice: str,
                      boundary: str) -> list[str]:
        """What a kernel of this family lacks for one variant (words; empty: it exists)."""
        shape = self._shapes()
        return [what for what, bad in (
            (f"mode {mode!r} (only {', '.join(repr(m) for m in self.modes)})",
             mode not in self.modes),
            (f"lattice {lattice} with tile edge {tile_edge} ({shape})",
             not self._fits(dim, tile_edge)),
            (f"boundary code {boundary!r}", boundary != "none" and not self.boundary_code),
        ) if bad]

    def problem_lacks(self, problem: Problem) -> str | None:
        """Why this family cannot step ``problem``, or None (the first reason only)."""
        if problem.owned is not None and not self.distributed:
            return f"a distributed (MPI) rank steps the {TILED.name} storage"
        if problem.iolets is not None and not self.openings:
            return "driven openings need the openings' link pass, written for the " \
                   f"{TILED.name} storage"
        t = problem.tiling
        if not self._fits(t.ndim, t.a):
            return f"it needs {self._shapes()} (this run: {t.ndim}D, edge {t.a})"
        lacks = self.variant_lacks("full", t.ndim, t.a, problem.lattice.name,
                                   boundary_kind(problem))
        return ", ".join(lacks) or None

    @property
    def dims(self) -> tuple[int, ...]:
        """The lattice dimensions it steps."""
        return tuple(d for d, _ in self.edges)

    def tile_edges(self, dim: int) -> tuple[int, ...]:
        """The tile edges of ``dim``-D runs it steps (none: not that dimension)."""
        return dict(self.edges).get(dim, ())

    def _fits(self, dim: int, tile_edge: int) -> bool:
        return tile_edge in self.tile_edges(dim)

    def _shapes(self) -> str:
        return "; ".join(f"{d}D tiles of edge {' or '.join(map(str, a))}"
                         for d, a in self.edges)

    def launches(self, streaming: str) -> tuple[tuple[str, int], ...]:
        """(mode, phase) of every launch of this family's kernels on a state of ``streaming``:
        its modes from either phase (in place the kernel follows the phase), 'swap' only where
        it decodes (phase 1 of one copy)."""
        return tuple((m, p) for m in self.modes for p in (0, 1) if _launches(streaming, m, p))


def _launches(streaming: str, mode: str, phase: int) -> bool:
    """Whether a state of ``streaming`` in ``phase`` launches ``mode`` (``next_phase``'s rule)."""
    try:
        next_phase(streaming, mode, phase)
    except ValueError:
        return False
    return True


#: Every node of each non-empty tile (the paper's storage): every mode, boundary and run, on
#: the tiles whose nodes fill whole warps (:func:`.cuda.tables.check_tile_shape`) except 3D
#: edge 8, which lost its timing on the H100 (dense float32 0.868 of the copy bandwidth against
#: 0.954 at edge 4, float16 0.655 against 0.796; eta_t of the rock-like pack 0.29:
#: benchmarks/kernel_tuning/README.md), so it left the variant space (issue 27).
TILED = KernelFamily("tiled", ((2, (8, 16)), (3, (4,))),
                     ("full", "propagate", "readwrite", "swap"),
                     boundary_code=True, openings=True, distributed=True)
#: Only the fluid nodes of each tile (issue 20, :mod:`.cuda.compact`): 3D tiles of edge 4, the
#: full step, the propagation probe and the in-place decoding, no boundary code; distributed
#: ranks step tile ranges of it (``CompactRun.launch_tiles``: two copies or in place, float16
#: storage keyed as one launch over the rank's tiles). Its kernels address a copy with
#: 32-bit offsets below 2^31 values (113 M D3Q19 fluid nodes), with 64-bit ones from there on
#: (the wide kernels, ``ExecutionPlan.wide``: a 1000³ rock image at porosity 0.2, mirrored,
#: has 4e8 fluid nodes, 7.6e9 values per copy; ``CompactTiling.check_offsets``). 'auto' takes
#: the wide kernels only where the tiled state does not fit the device and the compact one
#: does (they are slower than tiled, :data:`WIDE_SLOWER`); an explicit 'compact' always can.
COMPACT = KernelFamily("compact", ((3, (4,)),), ("full", "propagate", "swap"),
                       boundary_code=False, openings=False, distributed=True,
                       timed_lattices=("D3Q19",), value_limit=2**31)
#: The families by ``SimulationConfig.tile_storage`` name.
FAMILIES = {f.name: f for f in (TILED, COMPACT)}

# ------------------------------------------------------------- the choices a plan makes
#: The storage precisions a plan chooses among (``ExecutionPlan.storage``), each with the
#: arithmetic precision and the kernels' storage it means (float16: float32 arithmetic).
STORAGE_CHOICES = {"float32": ("float32", "auto"), "float64": ("float64", "auto"),
                   "float16": ("float32", "float16")}
#: The in-tile layouts (the effective one: 'paper' applies to 3D tiles of edge 4 only).
LAYOUT_CHOICES = GPU_LAYOUTS
#: The streamings: two copies, or one in place.
STREAMING_CHOICES = STREAMING
# These, the families (FAMILIES: modes, tile edges, boundary code) and compact_kernel below are
# every execution choice a kernel depends on: solver/backends/cuda/kernels.all_variants is their
# image, and tests/solver/test_variant_space.py checks that every plan's launches lie in it.

# ---------------------------------------------------------- the timings automatic choices use
#: float16 storage (float32 arithmetic, binary16 values) has its own crossover. From the H100
#: run benchmarks/compact/results/nvidia-h100-80gb-hbm3-2026-11-25-0019bc5-compact.md (full BGK
#: step, G fluid updates/s, tiled -> compact 'exact halo inner packed 4'): 17.08 -> 19.27 at eta_t
#: 0.50, 17.28 -> 18.06 at 0.55, 26.55 -> 26.39 at 0.81, 32.27 -> 30.00 at 1.0: compact wins
#: below about 0.78; the threshold sits a little under it (compact also needs less memory).
AUTO_COMPACT_BELOW_FLOAT16 = 0.75
#: 'auto' stores fluid nodes only below this tile utilisation eta_t, per precision. From the
#: H100 run of benchmarks/compact/results/nvidia-h100-80gb-hbm3-2026-11-24-ch-0654955-compact.md
#: (full BGK step, fraction of the fluid-only limit, tiled -> compact 'exact halo inner'): float32
#: 0.559 -> 0.775 at eta_t 0.50, 0.811 -> 0.882 at 0.81, 0.872 -> 0.887 at 0.90, 0.918 -> 0.880
#: at 0.97; float64 0.653 -> 0.902 at 0.50, 0.872 -> 0.919 at 0.81, 0.919 -> 0.907 at 0.90. So
#: float32 gains up to eta_t ~0.92 and float64 up to ~0.875 (as in the earlier 9c8bdb3 run);
#: the thresholds sit at those crossovers (compact also needs less memory, never more).
AUTO_COMPACT_BELOW = {"float32": 0.92, "float64": 0.875, "float16": AUTO_COMPACT_BELOW_FLOAT16}
#: The same for in-place streaming (AA pattern: one copy). From the H100 run of
#: benchmarks/throughput/results/nvidia-h100-80gb-hbm3-2026-11-25-0460fb9-fluid.md (BGK in place, G
#: fluid updates/s, tiled -> compact): float32 8.69 -> 10.87 at eta_t 0.50, 9.09 -> 10.90 at 0.55,
#: 11.16 -> 12.18 at 0.71, 13.08 -> 13.14 at 0.81, 14.53 -> 13.71 at 0.90; float64 compact
#: ahead on every case, the all-fluid box included (5.43 -> 7.28 at 0.50, 7.78 -> 7.90 at
#: 0.97, 7.98 -> 8.69 at 1.0), so 1.01 = always; float16 storage 12.32 -> 13.28 at 0.50,
#: 13.08 -> 16.24 at 0.55, 14.98 -> 14.51 at 0.65. Compact in place also stores one copy of
#: the fluid nodes only: the least memory of any option.
AUTO_COMPACT_IN_PLACE_BELOW = {"float32": 0.85, "float64": 1.01, "float16": 0.6}
#: Why 'auto' keeps a run tiled where the compact storage would need 64-bit value offsets: the
#: wide kernels were measured slower than the tiled storage there (H200, commit f052a62,
#: 2026-11-28, TRT in place): the 1000³ mirrored rock run along x (4.0e8 fluid nodes) 39.0 ms
#: per fine step compact with 64-bit offsets (10.3 G fluid updates/s) against 32.1 ms tiled
#: (12.5 G/s, commit 9c87819), 21 % slower; on the 256³ rock-like pack (eta_t ~0.5) the wide
#: kernels ran 0.81x (float32) and 0.84x (float16) the 32-bit ones
#: (benchmarks/compact/results/compact-wide-nvidia-h200-2026-11-28-bd19b10.md).
WIDE_SLOWER = "measured slower than tiled: 1000³ mirrored rock in place on an H200, " \
              "10.3 against 12.5 G fluid updates/s (f052a62)"
#: Why 'auto' takes the wide kernels for two population copies wherever their state fits:
#: the 1000³ mirrored rock along x (H200, commit acb1c4a, 2026-11-28, float32 TRT, 4.0e8 fluid
#: nodes, the same 3001 fine steps and k) stepped its fine run in 74.0 s compact with two copies
#: and 64-bit offsets against 97.3 s tiled in place (1.31x); tiled with two copies it ran out of
#: memory on the H200's 150 GB (127.6 GB asked beside 25.6 GB held), where the compact two
#: copies held 69.6 GB at the checks (81.5 GB at the polled peak, under an 85.5 GB pool cap: an
#: 80 GB H100's memory). Compact is also the smaller state, so it fits wherever tiled does.
WIDE_TWO_COPIES_FASTER = "measured faster than tiled: 1000³ mirrored rock on an H200, fine " \
                         "steps 74.0 s compact with two copies against 97.3 s tiled in place " \
                         "(acb1c4a), and tiled with two copies did not fit its 150 GB"
#: Device bytes per tile node a run holds beyond its resident state at its peak, for 'auto''s
#: fit (``Problem.device_capacity``): the fused check's flags, the checks' chunks, and at the
#: prolongation the coarser level's state and moments. The 1000³ mirrored tiled in-place run
#: (float32, 8.37e8 tile nodes, 65.0 GB of state by ``Problem.tiled_state_bytes``) held 66.5
#: GB in CuPy's pool at its checks and 73.8 GB at its polled peak (H200, f052a62): 10.5 B per
#: tile node above the state, rounded up.
AUTO_HEADROOM_PER_TILE_NODE = 12
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
#: (``benchmarks/compact/compact_probe.py --precision float16``) packed 4 gave 19.27 G/s at eta_t
#: 0.50 against 16.77 per node, 16.93 paired and 15.68 packed 8.
COMPACT_PACKED_FLOAT16 = 4
#: How the compact kernel locates and reads its halo (CompactCode). The inner-tile column fill
#: won in that run (float32 0.634 -> 0.775, float64 0.853 -> 0.902 at eta_t 0.50); paired
#: shared loads were level or slower (0.755, 0.890) and the register caps lost (r32 0.546,
#: r48 0.509: spills).
COMPACT_CODE = CompactCode(inner=True)
#: float16 storage's halo code (see COMPACT_PACKED_FLOAT16): the inner column fill as float32.
COMPACT_CODE_FLOAT16 = COMPACT_CODE


# -------------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class ExecutionPlan:
    """How one problem runs on the GPU; ``reasons`` says why, per choice (choice, words).

    ``storage``: the storage precision ('float32', 'float64' or 'float16'); ``layout`` the
    effective in-tile layout; ``tile_storage`` 'tiled' or 'compact' (``family``); ``pad``,
    ``packed`` and ``code`` the compact kernel's padding, tiles per packed block and halo code;
    ``wide`` its 64-bit value offsets (a copy of ``COMPACT.value_limit`` values or more);
    ``tiles_per_block`` the launch shape of the per-node kernels."""

    precision: str
    storage: str
    layout: str
    streaming: str
    family: KernelFamily
    tiles_per_block: int
    pad: int = 0
    packed: int = 0
    code: CompactCode = CompactCode()
    reasons: tuple[tuple[str, str], ...] = ()
    wide: bool = False

    @property
    def tile_storage(self) -> str:
        """'tiled' or 'compact': the family's name."""
        return self.family.name

    @property
    def compact(self) -> bool:
        """Whether only fluid nodes are stored (the compact kernel family)."""
        return self.family is COMPACT

    @property
    def copies(self) -> int:
        """Population copies the state holds: 2 (two copies) or 1 (in place)."""
        return population_copies(self.streaming)

    @property
    def in_place(self) -> bool:
        """Whether one copy is updated in place (AA pattern)."""
        return self.copies == 1

    @property
    def half(self) -> bool:
        """Whether populations are stored as (shifted, scaled) binary16."""
        return self.storage == "float16"

    @property
    def reason(self) -> str:
        """Why this tile storage (kept for the log line of the allocation)."""
        return self.why("tile_storage")

    def why(self, choice: str) -> str:
        """The reason of one choice ('precision', 'storage', 'layout', 'streaming',
        'tile_storage', 'offsets' (compact plans), 'launch')."""
        return dict(self.reasons)[choice]

    def describe(self) -> str:
        """One line per choice: 'choice: value (reason)'."""
        values = {"precision": self.precision, "storage": self.storage, "layout": self.layout,
                  "streaming": self.streaming, "tile_storage": self.tile_storage,
                  "offsets": "64-bit" if self.wide else "32-bit", "launch": self._launch()}
        return "\n".join(f"{k}: {values[k]} ({why})" for k, why in self.reasons)

    def _launch(self) -> str:
        if self.packed:
            return f"{self.packed} tiles per block, one thread per fluid node"
        return f"{self.tiles_per_block} tiles per block"


def storage_label(problem: Problem) -> str:
    """Storage precision of ``problem``'s populations: 'float16', else the arithmetic's."""
    return "float16" if problem.storage.encoded else problem.dtype.name


def compact_kernel(label: str) -> tuple[int, int, CompactCode]:
    """Padding, packed tiles per block (0: one thread per tile node) and halo code of the
    compact kernel for storage precision ``label``: the only compact kernel a plan runs."""
    if label == "float16":
        return COMPACT_PAD, COMPACT_PACKED_FLOAT16, COMPACT_CODE_FLOAT16
    return COMPACT_PAD, COMPACT_PACKED, COMPACT_CODE


def compact_values(problem: Problem, pad: int) -> int:
    """Population values per copy of ``problem`` on compact storage padded to ``pad``: q times
    the fluid nodes, exact for pad 1 (the plans' :data:`COMPACT_PAD`), an upper bound else
    (each tile adds at most pad - 1 slots): the count the value offsets must address."""
    t = problem.tiling
    return problem.lattice.q * (int(t.n_fluid) + (pad - 1) * int(t.n_tiles))


def _offsets(problem: Problem, pad: int) -> tuple[bool, str]:
    """Whether the compact kernels of ``problem`` need 64-bit value offsets, and why. The
    32-bit ones are faster (32-bit address arithmetic; 2052 instead of 3024 bytes of shared
    memory a tile for the neighbourhood and the located halo sources) and address below
    ``COMPACT.value_limit`` values per copy."""
    values, limit = compact_values(problem, pad), COMPACT.value_limit
    if limit is None:
        return False, "32-bit value offsets: the family addresses any copy with them"
    if values < limit:
        return False, f"32-bit value offsets: {values:.3g} values per copy, below {limit:.3g} " \
                      "(the faster kernels)"
    return True, f"64-bit value offsets (wide kernels): {values:.3g} values per copy, not " \
                 f"below the 32-bit offsets' {limit:.3g}"


def _tile_storage(problem: Problem, label: str) -> tuple[KernelFamily, str]:
    """The family of ``problem``'s run and why. ConfigError for an explicit 'compact' that
    the compact family cannot step."""
    asked = problem.tile_storage
    if asked == "tiled":
        return TILED, "tile_storage='tiled'"
    why = COMPACT.problem_lacks(problem)
    if asked == "compact":
        if why:
            raise ConfigError(f"tile_storage='compact' cannot run this case: {why}. Use "
                              "tile_storage='tiled' (or 'auto').")
        return COMPACT, "tile_storage='compact'"
    if asked != "auto":
        raise ConfigError(f"Unknown tile_storage {asked!r}; use 'auto', 'tiled' or 'compact'.")
    limits = AUTO_COMPACT_BELOW if population_copies(problem.streaming) == 2 \
        else AUTO_COMPACT_IN_PLACE_BELOW
    eta, limit, lattice = problem.tiling.eta_t, limits[label], problem.lattice.name
    if why:
        return TILED, f"auto: compact storage lacks this case ({why})"
    timed = COMPACT.timed_lattices
    if timed is not None and lattice not in timed:
        return TILED, f"auto: compact storage is timed for {', '.join(timed)} only, not {lattice}"
    if eta >= limit:
        return TILED, f"auto: eta_t {eta:.3f} not below {limit} ({lattice}, {label}, " \
                      f"{problem.streaming})"
    pad = compact_kernel(label)[0]
    if _offsets(problem, pad)[0]:
        return _wide_or_tiled(problem, pad, f"eta_t {eta:.3f} below {limit}")
    return COMPACT, f"auto: eta_t {eta:.3f} below {limit}"


def _wide_or_tiled(problem: Problem, pad: int, why_compact: str) -> tuple[KernelFamily, str]:
    """'auto''s family for a run whose compact storage needs 64-bit offsets: tiled (faster,
    :data:`WIDE_SLOWER`) unless, on ``problem.device_capacity``, only the compact state fits
    (:func:`fits_device`: a 1600³ mirrored rock image on one H200, float16)."""
    slower = f"the compact storage would need 64-bit value offsets " \
             f"({compact_values(problem, pad):.3g} values per copy), {WIDE_SLOWER}"
    capacity = problem.device_capacity
    if population_copies(problem.streaming) == 2:
        return _wide_two_copies(problem, pad, why_compact)
    if capacity is None:
        return TILED, f"auto: {slower}; device memory not given"
    tiled, compact = problem.tiled_state_bytes(), compact_state_estimate(problem, pad)
    headroom = device_headroom(problem)
    sizes = f"state tiled {tiled / 1e9:.1f} GB, compact {compact / 1e9:.1f} GB, each " \
            f"+{headroom / 1e9:.1f} GB of headroom, device {capacity / 1e9:.1f} GB"
    if fits_device(problem, tiled, capacity):
        return TILED, f"auto: {slower}; the tiled state fits ({sizes})"
    if not fits_device(problem, compact, capacity):
        return TILED, f"auto: {slower}; neither state fits ({sizes})"
    return COMPACT, f"auto: {why_compact}, and only the compact state fits the device ({sizes})"


def _wide_two_copies(problem: Problem, pad: int, why_compact: str) -> tuple[KernelFamily, str]:
    """'auto''s family for a two-copy run past the 32-bit offsets: compact with the wide
    kernels (:data:`WIDE_TWO_COPIES_FASTER`, and the smaller state) unless, on a given
    ``problem.device_capacity``, it does not fit; then tiled, whose state is larger still, so
    the memory check says to stream in place."""
    capacity = problem.device_capacity
    faster = f"{why_compact}, with 64-bit value offsets ({compact_values(problem, pad):.3g} " \
             f"values per copy), {WIDE_TWO_COPIES_FASTER}"
    if capacity is None:
        return COMPACT, f"auto: {faster}; device memory not given"
    compact, headroom = compact_state_estimate(problem, pad), device_headroom(problem)
    if fits_device(problem, compact, capacity):
        return COMPACT, f"auto: {faster}; the compact state fits (compact {compact / 1e9:.1f} " \
                        f"GB +{headroom / 1e9:.1f} GB of headroom, device {capacity / 1e9:.1f} GB)"
    return TILED, f"auto: the compact state with two copies does not fit ({compact / 1e9:.1f} " \
                  f"GB +{headroom / 1e9:.1f} GB of headroom, device {capacity / 1e9:.1f} GB), " \
                  "nor the tiled one: stream in place (streaming='in-place')"


def device_headroom(problem: Problem) -> int:
    """Device bytes a run of ``problem`` holds beyond its resident state at its peak, an
    estimate: :data:`AUTO_HEADROOM_PER_TILE_NODE` per tile node."""
    t = problem.tiling
    return int(AUTO_HEADROOM_PER_TILE_NODE * t.n_tiles * t.nodes_per_tile)


def fits_device(problem: Problem, state_bytes: int, capacity: int) -> bool:
    """Whether a run of ``problem`` whose resident state takes ``state_bytes`` fits a device of
    ``capacity`` bytes with :func:`device_headroom` beside it."""
    return state_bytes + device_headroom(problem) <= capacity


def compact_state_estimate(problem: Problem, pad: int) -> int:
    """Device bytes of ``problem``'s resident compact state with 64-bit offsets, from counts
    (no :class:`~.cuda.compact.CompactTiling`: the plan stays cheap): its copies, per tile the
    fluid mask and base (8 + 8 B), tile map and list, and per fluid node 20 B of edge tables;
    :func:`~.cuda.compact_readout.compact_state_bytes` or a little above (its edge tables'
    tiled index takes 4 B where the tiled copy has fewer than 2^31 values)."""
    t = problem.tiling
    slots = compact_values(problem, pad) // problem.lattice.q
    return int(problem.population_copies * problem.lattice.q * slots
               * problem.storage_dtype.itemsize + 16 * int(t.n_tiles) + t.tile_map.nbytes
               + t.tiles.nbytes + 20 * int(t.n_fluid))


def plan_for(problem: Problem) -> ExecutionPlan:
    """The execution plan of ``problem`` (pure: the same problem always gets the same plan).

    Raises ConfigError for ``tile_storage='compact'`` on a run the compact family lacks, and
    for a tile edge the GPU kernels do not take (ValueError from ``check_tile_shape`` where
    the tiles do not fill whole warps)."""
    label = storage_label(problem)
    family, why_family = _tile_storage(problem, label)
    lacks = TILED.problem_lacks(problem) if family is TILED else None
    if lacks:  # the shapes the tiles fill whole warps in are check_tile_shape's to explain
        check_tile_shape(problem.lattice.name, problem.tiling.a, 1)
        raise ConfigError(f"The GPU kernels cannot run this case: {lacks}. Set tile_edge to "
                          "one of those, or backend='numpy' (every tile edge).")
    asked_layout, a = problem.layout, problem.tiling.a
    layout = effective_layout(problem.lattice.name, asked_layout, a)
    reasons = [
        ("precision", f"precision='{problem.dtype.name}'"),
        ("storage", "storage='float16': binary16 values, float32 arithmetic"
         if problem.storage.encoded else "storage='auto': the arithmetic precision"),
        ("layout", f"gpu_layout='{asked_layout}'" if layout == asked_layout else
         f"gpu_layout='{asked_layout}' applies to 3D tiles of edge 4 only (edge {a}, "
         f"{problem.lattice.d}D): XYZ"),
        ("streaming", f"streaming='{problem.streaming}'"),
        ("tile_storage", why_family),
    ]
    if family is COMPACT:
        pad, packed, code = compact_kernel(label)
        wide, why_offsets = _offsets(problem, pad)
        reasons.append(("offsets", why_offsets))
        shape = f"packed {packed} (COMPACT_PACKED_FLOAT16: instruction issue binds it)" \
            if packed else f"per node (COMPACT_PACKED), tiles_per_block={problem.tiles_per_block}"
        reasons.append(("launch", f"compact {label} kernel {shape}, halo code "
                        f"{code.label or 'default'} (timed fastest, see COMPACT_CODE)"))
        return ExecutionPlan(problem.dtype.name, label, layout, problem.streaming, family,
                             problem.tiles_per_block, pad, packed, code, tuple(reasons), wide)
    reasons.append(("launch", f"tiles_per_block={problem.tiles_per_block}"))
    return ExecutionPlan(problem.dtype.name, label, layout, problem.streaming, family,
                         problem.tiles_per_block, reasons=tuple(reasons))
