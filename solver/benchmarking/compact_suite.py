"""GPU measurement of the compact kernels next to the tiled kernel (issue 20).

On the sphere packs of the paper's Table 6 (phi 0.1, 0.3, ..., 0.9, 192^3, d = 40), a rock-like
pack of small grains (phi 0.2, eta_t about 0.5) and a dense periodic box, each in float32 and
float64 (and 'float16': float16 storage, timed as runs step it, :func:`_measure_runs`): fluid
node updates per second of the tiled kernel (its propagation probe and the BGK
step, best layout and tiles per block) and of the compact kernels
(:mod:`solver.backends.cuda.compact`: only fluid nodes stored, popcount addressing, sources
located once per tile halo node; direction blocks packed exactly, pad 1, or padded to whole
32-byte sectors; the halo codes of :class:`~solver.backends.cuda.compact.CompactCode`; one
thread per tile node or packed), propagation probe, BGK step and BGK in place, against the
fluid-only limit ``copy bandwidth / (2 q n_d)`` measured in the same process. Before timing,
every timed compact kernel is checked on the device: the probe against its NumPy mirror (64^3
pack), the BGK step against the NumPy backend (48^3 pack).
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import date

import numpy as np

from ..backends.cuda.compact import CompactTiling, sector_pad
from ..backends.cuda.compact_run import CompactRun
from ..backends.cuda.compact_source import CompactCode
from ..config import GPU_LAYOUTS
from .cases import BenchCase, git_commit, sphere_pack
from .compact_probe import CompactProbe
from .gpu_suite import _problem, pack_cases, rock_case

__all__ = ["CompactSuite", "check_on_device", "check_step_on_device", "run_compact_suite"]

log = logging.getLogger(__name__)

#: Tiled kernels timed next to the probe: label -> ProbeBackend.probe mode.
TILED = {"tiled propagation": "propagate", "tiled BGK": "full"}


@dataclass
class CompactSuite:
    """What to measure."""

    #: Table 6 porosities (0.1-0.9) every other one: the whole call within 4 minutes.
    porosities: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9)
    pack_size: int = 192
    diameter: float = 40.0
    dense_size: int = 256
    #: Grain diameter of the rock-like case (phi 0.2, eta_t about 0.5 at 192^3); 0: none.
    rock_diameter: float = 22.0
    #: Precision labels; 'float16' (float16 storage) times the kernels of FLOAT16_RUNS.
    precisions: tuple[str, ...] = ("float32", "float64")
    #: 1 tile per block won 3 of 88 compact timings on the H100 (085d55d): not timed.
    tiles_per_block: tuple[int, ...] = (2, 4)
    layouts: tuple[str, ...] = GPU_LAYOUTS
    min_seconds: float = 0.03
    repeats: int = 3


#: The halo code timed next to the default one (issue 20: the inner-tile column fill; paired
#: shared loads and register caps lost their timings and left the kernels, issue 27).
INNER = CompactCode(inner=True)
#: Tiles per block of the packed kernel timed (exact padding, halo addressing).
PACKED = 4
#: float16 storage: (packed tiles per block, halo code) of the two-copy kernels timed as runs
#: step them (CompactRun). Its kernels issue about 28 % more instructions per node than
#: float32's (sm_90: 504 vs 393 for BGK) on half the bytes, so instruction issue binds them
#: sooner: the packed kernel (every lane a fluid node) is timed next to the per-node inner code.
FLOAT16_RUNS = ((0, INNER), (4, INNER), (8, INNER))


@dataclass(frozen=True)
class CompactKernel:
    """One timed compact kernel: padding, packed tiles per block (0: one thread per tile
    node) and halo code; halo addressing throughout (the per-pull addressing lost clearly)."""

    pad: int
    packed: int = 0
    code: CompactCode = CompactCode()

    @property
    def label(self) -> str:
        """'exact halo inner packed 4' and the like (table column)."""
        return " ".join(w for w in ("exact" if self.pad == 1 else "sector-padded", "halo",
                                    self.code.label, f"packed {self.packed}" if self.packed
                                    else "") if w)


def compact_variants(precision: str, step: bool = True) -> list[CompactKernel]:
    """The compact kernels timed: the H100 run's best (exact halo, sector-padded halo, packed
    4) and the inner halo code; the per-node inner kernel for the full step only."""
    sector = sector_pad(np.dtype(precision).itemsize)
    codes = [INNER] if step else []
    return ([CompactKernel(1), CompactKernel(sector)] + [CompactKernel(1, 0, c) for c in codes]
            + [CompactKernel(1, PACKED), CompactKernel(1, PACKED, INNER)])


def _median_seconds(run: Callable[[int], float], suite: CompactSuite) -> tuple[int, float]:
    """Steps per measurement and the median seconds per step of ``repeats`` measurements."""
    warm = run(3) / 3  # compiles on first use; excluded
    steps = int(np.clip(np.ceil(suite.min_seconds / max(warm, 1e-6)), 16, 800)) // 16 * 16
    return steps, float(np.median([run(steps) / steps for _ in range(suite.repeats)]))


def check_on_device(xp, size: int = 64, porosity: float = 0.4, seed: int = 5) -> list[dict]:
    """One probe launch on a periodic ``size``^3 pack from random values against the NumPy
    mirror, per precision and padding (``xp``: CuPy, the backend's array module): max
    |difference| (must be 0) and the case."""
    from ..lattice import get_lattice
    from ..tiling import Tiling

    lat = get_lattice("D3Q19")
    solid = sphere_pack((size,) * 3, porosity, size / 4, seed)
    tiling = Tiling.build(solid, 4, (1, 2, 3))
    periodic = (True, True, True)
    checks = []
    for precision in ("float32", "float64"):
        for kernel in compact_variants(precision, step=False):
            compact = CompactTiling(tiling, kernel.pad)
            rng = np.random.default_rng(seed)
            fin = rng.random(lat.q * compact.n_slots).astype(precision)
            probe = CompactProbe(compact, periodic, precision, halo=True, packed=kernel.packed,
                                 code=kernel.code, xp=xp)
            probe.upload(fin, 0)
            probe.upload(fin, 1)  # padding slots as in the NumPy mirror
            probe.launch(2)
            got = probe.download(1)
            probe.release()
            want = compact.pull(fin, lat, periodic)
            diff = float(np.abs(got - want).max())
            checks.append({"precision": precision, "pad": kernel.pad, "halo": True,
                           "max_abs_diff": diff, "ok": diff == 0.0, "eta_t": round(tiling.eta_t, 4),
                           "packed": kernel.packed, "code": kernel.code.label})
    return checks


def check_step_on_device(xp, size: int = 48, seed: int = 6) -> list[dict]:
    """One compact BGK step on the device (every timed kernel; ``xp``: CuPy) against a NumPy
    backend step of the same problem from the same noisy start, per precision: max relative
    difference over the fluid nodes (ok below 1e-12 float64, 1e-5 float32)."""
    from ..backends.numpy_backend import NumpyBackend

    case = BenchCase("check", sphere_pack((size,) * 3, 0.4, size / 4, seed))
    checks = []
    for precision in ("float32", "float64"):
        problem = _problem(case, precision)
        f0 = problem.initial_populations()
        f0 *= 1.0 + 0.01 * np.random.default_rng(seed).standard_normal(f0.shape)
        numpy_backend = NumpyBackend(threads=1)
        state = numpy_backend.allocate(problem)
        numpy_backend.set_populations(state, f0)
        numpy_backend.step(state, 1)
        ref = numpy_backend.populations(state)
        fluid = np.broadcast_to(~problem.tiling.solid[:, None, :], ref.shape)
        for kernel in compact_variants(precision):
            compact = CompactTiling(problem.tiling, kernel.pad)
            probe = CompactProbe(compact, problem.periodic, precision, problem.lattice.q, True,
                                 step=problem, packed=kernel.packed, code=kernel.code, xp=xp)
            probe.upload(compact.pack(f0.astype(precision)), 0)
            probe.launch(2)
            got = compact.unpack(probe.download(1), problem.lattice.q).astype(np.float64)
            probe.release()
            diff = float(np.abs(got - ref)[fluid].max() / np.abs(ref).max())
            tol = 1e-12 if precision == "float64" else 1e-5
            checks.append({"precision": precision, "pad": compact.pad, "halo": True,
                           "kernel": "BGK step vs NumPy", "max_abs_diff": diff,
                           "packed": kernel.packed, "code": kernel.code.label,
                           "ok": diff <= tol, "eta_t": round(problem.tiling.eta_t, 4)})
    return checks


def _row(case: BenchCase, problem, kernel: str, precision: str, sec: float, steps: int,
         copy: float, **extra) -> dict:
    q, value_bytes = problem.lattice.q, np.dtype(precision).itemsize
    rate = problem.n_fluid / sec
    limit = copy / (2 * q * value_bytes)
    return {"case": case.label, "porosity": case.porosity, "eta_t": round(problem.tiling.eta_t, 4),
            "fluid_nodes": problem.n_fluid, "kernel": kernel, "precision": precision,
            "steps": steps, "seconds_per_step": sec, "fluid_g_per_s": rate / 1e9,
            "limit_g_per_s": limit / 1e9, "of_limit": rate / limit, **extra}


def _measure_case(backend, case: BenchCase, precision: str, suite: CompactSuite, copy: float,
                  rows: list[dict]) -> None:
    """Tiled kernels (best layout and tiles per block) and compact probes on one case,
    appended to ``rows`` as they are measured."""
    problem = _problem(case, precision)
    state = base = backend.allocate(problem)
    try:
        for label, mode in TILED.items():
            best = None
            for layout in suite.layouts:
                state = backend.reconfigure(state, layout=layout)
                for tpb in suite.tiles_per_block:
                    steps, sec = _median_seconds(
                        lambda n: backend.probe(state, mode, n, tpb), suite)  # noqa: B023
                    if best is None or sec < best[1]:
                        best = (steps, sec, layout, tpb)
            rows.append(_row(case, problem, label, precision, best[1], best[0], copy,
                             layout=best[2], tiles_per_block=best[3]))
    finally:
        backend.release(base)
    if problem.storage.encoded:  # the probe's kernels are float32/float64: runs instead
        _measure_runs(case, problem, precision, suite, copy, rows)
        _measure_in_place(case, problem, precision, suite, copy, rows)
        return
    for step in (False, True):
        for kernel in compact_variants(precision, step):
            compact = CompactTiling(problem.tiling, kernel.pad)
            probe = CompactProbe(compact, problem.periodic, precision, problem.lattice.q, True,
                                 problem if step else None, kernel.packed, kernel.code,
                                 xp=backend.xp)
            try:
                best = None
                tpbs = (kernel.packed,) if kernel.packed else suite.tiles_per_block
                for tpb in tpbs:
                    steps, sec = _median_seconds(lambda n: probe.time(n, tpb), suite)  # noqa: B023
                    if best is None or sec < best[1]:
                        best = (steps, sec, tpb)
            finally:
                probe.release()
            label = f"compact {'BGK' if step else 'propagation'} {kernel.label}"
            rows.append(_row(case, problem, label, precision, best[1], best[0], copy,
                             pad=kernel.pad, tiles_per_block=best[2],
                             slots_per_fluid_node=round(compact.n_slots / problem.n_fluid, 4),
                             graphs=probe.use_graphs))
    _measure_in_place(case, problem, precision, suite, copy, rows)


def _best_run(problem, tiles_per_block, suite: CompactSuite, **run_options):
    """(steps, seconds per step, tiles per block) of the fastest CompactRun of ``problem`` (its
    BGK step as runs step it: exact padding, captured graphs) over ``tiles_per_block``."""
    best = None
    for tpb in tiles_per_block:
        run = CompactRun(problem, 1, tiles_per_block=tpb, **run_options)
        try:
            steps, sec = _median_seconds(run.step, suite)
        finally:
            run.release()
        if best is None or sec < best[1]:
            best = (steps, sec, tpb)
    return best


def _measure_runs(case: BenchCase, problem, precision: str, suite: CompactSuite,
                  copy: float, rows: list[dict]) -> None:
    """The compact BGK step of each of FLOAT16_RUNS, two copies, as runs step it (CompactRun:
    exact padding, captured graphs), best tiles per block (packed: its own)."""
    from dataclasses import replace

    for packed, code in FLOAT16_RUNS:
        best = _best_run(replace(problem, tile_storage="compact"),
                         (packed,) if packed else suite.tiles_per_block, suite,
                         packed=packed, code=code)
        label = " ".join(w for w in ("compact BGK exact halo", code.label,
                                     f"packed {packed}" if packed else "") if w)
        rows.append(_row(case, problem, label, precision, best[1], best[0], copy, pad=1,
                         tiles_per_block=best[2]))


def _measure_in_place(case: BenchCase, problem, precision: str, suite: CompactSuite,
                      copy: float, rows: list[dict]) -> None:
    """The compact BGK step in place (AA pattern, one copy) as runs step it (CompactRun:
    exact padding, per-node kernel, captured graphs), default and inner-tile halo code, best
    tiles per block."""
    from dataclasses import replace

    for code in (CompactCode(), INNER):
        best = _best_run(replace(problem, streaming="in-place", tile_storage="compact"),
                         suite.tiles_per_block, suite, code=code)
        label = " ".join(w for w in ("compact BGK exact halo", code.label, "in place") if w)
        rows.append(_row(case, problem, label, precision, best[1], best[0], copy, pad=1,
                         tiles_per_block=best[2]))


def cases(suite: CompactSuite) -> list[BenchCase]:
    """The dense periodic box, the rock-like pack (small grains, eta_t about 0.5), then the
    sphere packs."""
    n, out = suite.pack_size, []
    if suite.dense_size:
        out.append(BenchCase(f"periodic box {suite.dense_size}^3",
                             np.zeros((suite.dense_size,) * 3, dtype=bool), tile_offset="origin"))
    if suite.rock_diameter:
        out.append(rock_case(n, suite.rock_diameter))
    return out + pack_cases(n, suite.porosities, suite.diameter)


def run_compact_suite(backend, suite: CompactSuite | None = None,
                      progress: Callable[[dict], None] | None = None) -> dict:
    """Check the probe on the device, then measure every case on ``backend`` (a CuPy
    ``ProbeBackend``: the tiled probes); ``progress`` gets the partial
    result after each case (so a cut-off run still leaves its table)."""
    suite = suite or CompactSuite()
    info = dict(backend.device_info())
    meta = {"device": info["name"], "date": date.today().isoformat(), "commit": git_commit(),
            "host": platform.node(), "copy_bandwidth": info["copy_bandwidth"],
            "suite": asdict(suite)}
    result = {"meta": meta, "checks": [], "results": [], "errors": []}
    try:
        result["checks"] = check_on_device(backend.xp) + check_step_on_device(backend.xp)
    except Exception as exc:  # reported as a failed check; the timings still come
        log.exception("device check failed")
        result["checks"] = [{"precision": "-", "pad": 0, "max_abs_diff": float("nan"),
                             "ok": False, "error": repr(exc)[:2000]}]
    for case in cases(suite):
        for precision in suite.precisions:
            try:
                _measure_case(backend, case, precision, suite, info["copy_bandwidth"],
                              result["results"])
            except Exception as exc:  # report and go on: one call must give every answer
                log.exception("%s %s failed", case.label, precision)
                result["errors"].append(f"{case.label} {precision}: {exc!r}"[:2000])
            if progress:
                progress(result)
    return result
