"""Coarse start levels of the mirrored k run: fine steps, work, wall time and k per variant.

The check behind the 1000³ model of ``rock_tensor.py`` (its module doc), at a size one GPU runs
in a minute or two: the mirrored protocol of one generated sandstone-like image (``image`` of
``rock_tensor.py``: random sphere pack, porosity 0.2, 20-voxel grains, seed 3), float32, TRT,
one population copy (in place), no formation factor, for each variant
``LEVELS:FACTOR[:STORAGE][:RESCALE]``: ``LEVELS`` coarse start levels (1: today's single start
at 1/2 resolution; 3: from 1/8 via 1/4 and 1/2, the coarsest converged to the tolerance), the other
coarse runs stopped at ``FACTOR`` times the tolerance, ``STORAGE`` the tile storage
(:data:`STORAGES`; ``tiled-wide``: every node of a tile stored, 64-bit halo sources, as the
1000³ image's fine runs are stored; ``auto-wide``: the plan's 32-bit offset limit lowered, so
the fine run is past it as the 1000³ image's is and 'auto' stores it as it stores those:
tiled where the tiled state fits the device, the start levels compact,
:data:`solver.backends.plan.COMPACT`; ``compact-wide``: the same with 'compact' asked for, so
the fine run takes the compact kernels with 64-bit offsets), ``RESCALE`` the start's rescale
(:data:`RESCALES`, ``PermeabilitySettings.start_rescale``: each prolongation's velocity, and
with ``velocity+density`` the density's deviation from its mean, times s = k_last / k_previous
of the chain's levels, clamped to [0.5, 1], or with ``-richardson`` s = 1 - (k_previous /
k_last - 1) / 4 (order-2 Richardson); ``@GAIN``, e.g. ``none@1.15``: the density's deviation
times GAIN at every prolongation, ``start_density_gain``; the factors per level are reported).
The first variant is the reference: every other's k is compared with it (target 0.1 %). Per
run: the fine steps and their rate (fluid G updates/s over the fine steps' wall time), the
start's steps per level, the work in fine-step equivalents, the phases, the most CuPy's pool
held at a check, and in the JSON the fine run's k at every check (how it approaches: the steps
a 1000³ run needs are extrapolated from it).

``--deep TOL``: one more run, of the first variant with the fine run continued to TOL per
1000 steps (e.g. 1e-5, as ``stop_rule.py``'s references; capped by ``--deep-max-steps`` and
``--max-seconds``): every run's k, and its k at each of its first checks, against that deep k
(``k_vs_deep``, ``history_vs_deep``), so errors are against the converged value.

GPU check (about 2 minutes on an H100; the default variants 1:10 3:10 3:1 3:10:auto-wide):
``python benchmarks/rock_time_to_answer/start_levels.py --size 400 --max-seconds 40``
The start's rescale (issue 29; one H200, about 2 minutes):
``python benchmarks/rock_time_to_answer/start_levels.py --size 400 --max-seconds 40
--variants 3:10 3:10:velocity 3:10:velocity+density 3:10:none@1.1 3:10:none@1.15 --deep 1e-5
--deep-max-steps 16000 --tag=-rescale``
CPU smoke test: ``--size 24 --backend numpy --precision float64 --variants 1:10 2:10``.
Writes ``start_levels-<device>-<date>-<size><tag>.json`` and ``.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict
from datetime import date
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rock_tensor import DevicePeak, image  # noqa: E402

from solver.backends import get_backend  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.rock import PermeabilitySettings, run_study  # noqa: E402

log = logging.getLogger("start_levels")


#: Tile storages a variant may ask for; ``tiled-wide``: tiled with the 64-bit halo sources of
#: copies of 2^31 values or more forced (the kernel the 1000³ image's fine runs get);
#: ``auto-wide``: the 1000³ image's arrangement at a smaller size: runs of more than
#: :data:`SMALL_VALUE_LIMIT` values per copy (the fine run) as 'auto' stores a run past the
#: compact kernels' 32-bit offsets (tiled with 64-bit halo sources where the tiled state fits
#: the device: the wide compact kernels are slower), the smaller start levels compact with
#: 32-bit offsets; ``compact-wide``: every run compact, the fine run with 64-bit offsets.
STORAGES = ("auto", "tiled", "compact", "tiled-wide", "auto-wide", "compact-wide")
#: The compact family's value limit of the ``auto-wide`` and ``compact-wide`` variants (2^31 in
#: the plan): a 400³ image's fine run has 4.9e8 values per copy, its 1/2 level 6.4e7.
SMALL_VALUE_LIMIT = 2**27
#: The start's rescale a variant may ask for (``PermeabilitySettings.start_rescale``; with
#: ``-richardson`` its ``start_estimate`` 'richardson', else 'geometric').
RESCALES = ("none", "velocity", "velocity+density", "velocity-richardson",
            "velocity+density-richardson")


class Variant(NamedTuple):
    """A study's start: levels, the coarse runs' tolerance factor, tile storage, rescale."""

    levels: int
    factor: float
    storage: str = "auto"
    rescale: str = "none"


def parse_variant(text: str) -> Variant:
    """``'3:10'``, ``'1:10:tiled'``, ``'3:10:velocity'`` or ``'3:10:auto:velocity'`` ->
    :class:`Variant` (levels, tolerance factor, tile storage, start rescale)."""
    parts = text.split(":")
    extra = parts[2:]
    storages = [p for p in extra if p in STORAGES]
    rescales = [p for p in extra if _rescale_token(p)]
    if (len(parts) < 2 or len(extra) > 2 or len(storages) > 1 or len(rescales) > 1
            or len(storages) + len(rescales) != len(extra)):
        raise argparse.ArgumentTypeError(
            f"variant {text!r}: use LEVELS:FACTOR[:STORAGE][:RESCALE[@GAIN]], STORAGE one of "
            f"{', '.join(STORAGES)}, RESCALE one of {', '.join(RESCALES)}, GAIN in [0.5, 2]")
    return Variant(int(parts[0]), float(parts[1]), storages[0] if storages else "auto",
                   rescales[0] if rescales else "none")


def _rescale_token(text: str) -> bool:
    """Whether ``text`` is a RESCALE part: one of :data:`RESCALES`, optionally ``@GAIN`` (the
    density deviation's gain, ``PermeabilitySettings.start_density_gain``)."""
    mode, _, gain = text.partition("@")
    if mode not in RESCALES:
        return False
    try:
        return not gain or 0.5 <= float(gain) <= 2.0
    except ValueError:
        return False


def rescale_settings(token: str) -> dict:
    """The ``PermeabilitySettings`` of a RESCALE part (:func:`_rescale_token`)."""
    mode, _, gain = token.partition("@")
    mode, _, estimate = mode.partition("-")
    return {"start_rescale": mode, "start_estimate": estimate or "geometric",
            "start_density_gain": float(gain) if gain else 1.0}


def run_variant(sample, axes: list[str], variant: Variant, precision: str,
                backend, max_seconds: float, fast_tau: float | None = None,
                tolerance: float | None = None, max_steps: int | None = None) -> dict:
    """One mirrored study of ``sample`` with a start variant; its numbers per run
    (``tolerance``, ``max_steps``: the fine run's, else the settings' defaults)."""
    storage = variant.storage
    config = SimulationConfig(precision=precision, collision="TRT", streaming="in-place",
                              tile_storage=storage.removesuffix("-wide"))
    with wide_sources(backend, storage.endswith("-wide"), storage != "tiled-wide"):
        return _study(sample, axes, variant, config, backend, max_seconds, fast_tau,
                      tolerance, max_steps)


@contextmanager
def wide_sources(backend, force: bool, small_limit: bool = False):
    """With ``force`` on CuPy, every tiled kernel takes 64-bit halo sources (as a copy of 2^31
    values or more does; ``tests/solver/test_cupy_backend.py`` forces them alike); with
    ``small_limit`` the compact family's 32-bit offsets address at most
    :data:`SMALL_VALUE_LIMIT` values (larger runs take its 64-bit ones;
    ``tests/solver/test_plan.py`` lowers it alike)."""
    if not force or backend.name != "cupy":
        yield
        return
    from dataclasses import replace

    from solver.backends import plan
    from solver.backends.cuda import kernels

    original, family = kernels.needs_wide_sources, plan.COMPACT
    kernels.needs_wide_sources = lambda _problem: True
    if small_limit:
        plan.COMPACT = replace(family, value_limit=SMALL_VALUE_LIMIT)
    try:
        yield
    finally:
        kernels.needs_wide_sources, plan.COMPACT = original, family


def _study(sample, axes: list[str], variant: Variant, config, backend,
           max_seconds: float, fast_tau: float | None, tolerance: float | None = None,
           max_steps: int | None = None) -> dict:
    """:func:`run_variant`'s study and numbers."""
    levels, factor, storage, rescale = variant
    limits = {"max_steps": max_steps} if max_steps else {}
    settings = PermeabilitySettings(protocol="mirrored", axes=axes, formation_factor=False,
                                    coarse_levels=levels, coarse_tolerance_factor=factor,
                                    max_seconds=max_seconds, fast_tau=fast_tau,
                                    **rescale_settings(rescale), **limits)
    if tolerance is not None:
        # The coarse levels keep the default tolerance's stops (the start as in the variant).
        settings.coarse_tolerance_factor = factor * settings.tolerance / tolerance
        settings.tolerance = tolerance
    peak = DevicePeak(backend)
    tic = time.perf_counter()
    study = run_study(sample, config, settings, backend, on_check=peak.sample)
    seconds = time.perf_counter() - tic
    fluid = 2 * int((~sample.solid).sum())  # the mirrored box's fluid voxels (upper bound)
    runs = []
    for r in study.results:
        stepping = r.phases.get("fine_steps", 0.0) + r.phases.get("compile_first_chunk", 0.0)
        runs.append({"axis": r.axis, "k_voxel2": r.k_lattice, "k_mD": r.k_mD,
                     "converged": r.converged, "steps": r.steps, "start_steps": r.start_steps,
                     "work_steps": r.work_steps, "seconds": r.seconds, "phases_s": r.phases,
                     "coarse_k_voxel2": r.coarse_k_lattice, "history": r.history,
                     "start_k_voxel2": r.start_k_lattice, "start_scales": r.start_scales,
                     "start_density_scales": r.start_density_scales,
                     "k_pair": None if r.pair is None else asdict(r.pair),
                     "fine_G_updates_per_s": fluid * r.steps / stepping / 1e9
                     if stepping else None})
    return {"levels": levels, "factor": factor, "tile_storage": storage,
            "start_rescale": rescale, "tolerance": settings.tolerance, "seconds": seconds,
            "device_pool_peak_GB": peak.gigabytes(), "runs": runs}


def run(args: argparse.Namespace) -> dict:
    """Every variant on one image; the report (k differences against the first variant)."""
    backend = get_backend(args.backend)
    tic = time.perf_counter()
    sample = image(args.size, 5.345e-6, args.porosity, args.grain)
    made = time.perf_counter() - tic
    rows = []
    for variant in args.variants:
        row = run_variant(sample, args.axes, variant, args.precision, backend, args.max_seconds,
                          args.fast_tau)
        log.info("variant %s: %.1f s", variant, row["seconds"])
        rows.append(row)
    first = {r["axis"]: r["k_voxel2"] for r in rows[0]["runs"]}
    for row in rows:
        for r in row["runs"]:
            r["k_vs_first"] = r["k_voxel2"] / first[r["axis"]] - 1.0
    deep = None
    if args.deep:
        deep = run_variant(sample, args.axes, args.variants[0], args.precision, backend,
                           args.max_seconds, args.fast_tau, args.deep, args.deep_max_steps)
        log.info("deep reference (%g per 1000 steps): %.1f s", args.deep, deep["seconds"])
        compare_with_deep(rows, deep)
    return {"device": backend.device_info().get("name"), "backend": backend.name,
            "date": date.today().isoformat(), "commit": git_commit(), "size": args.size,
            "grain": args.grain, "fast_tau": args.fast_tau,
            "porosity": sample.porosity, "precision": args.precision,
            "image_seconds": made, "rows": rows, "deep": deep, "tag": args.tag}


def compare_with_deep(rows: list[dict], deep: dict) -> None:
    """Add to every run its k against the deep run's k along its axis (``k_vs_deep``) and
    its k at each check against it (``history_vs_deep``: (step, relative error))."""
    reference = {r["axis"]: r["k_voxel2"] for r in deep["runs"]}
    for row in rows + [deep]:
        for r in row["runs"]:
            k = reference[r["axis"]]
            r["k_vs_deep"] = r["k_voxel2"] / k - 1.0
            r["history_vs_deep"] = [(step, value / k - 1.0) for step, value in r["history"]]


def _at(history: list, step: int) -> str:
    """The relative error at the first check at or after ``step`` (``history_vs_deep``)."""
    later = [e for s, e in history if s >= step]
    return f"{100 * later[0]:+.3f} %" if later else "-"


def markdown(report: dict) -> str:
    """The report as one Markdown table (and, with a deep run, the errors against it)."""
    out = [f"# Coarse start levels, mirrored k of a {report['size']}³ image (porosity "
           f"{report['porosity']:.3f}, grains {report.get('grain', 20.0):g} voxels, tau "
           f"{report.get('fast_tau') or 'auto'}; {report['device']}, {report['date']}, commit "
           f"{report['commit']}, {report['precision']}, in place)", "",
           "| levels | factor | storage | rescale | axis | k (mD) | vs first | converged | "
           "fine steps | start steps (1/2, 1/4, ...) | work | fine G/s | run s | study s | "
           "pool GB |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        pool = row["device_pool_peak_GB"]
        for r in row["runs"]:
            rate = r["fine_G_updates_per_s"]
            out.append(
                f"| {row['levels']} | {row['factor']:g} | {row['tile_storage']} | "
                f"{row.get('start_rescale', 'none')} | {r['axis']} | {r['k_mD']:.5g} | "
                f"{100 * r['k_vs_first']:+.3f} % | {r['converged']} | "
                f"{r['steps']} | {', '.join(str(n) for n in r['start_steps']) or '-'} | "
                f"{r['work_steps']:.0f} | {'-' if rate is None else f'{rate:.2f}'} | "
                f"{r['seconds']:.1f} | {row['seconds']:.1f} | "
                f"{'-' if pool is None else f'{pool:.2f}'} |")
    out += ["", "fine G/s: fluid node updates per second over the fine run's steps (its first "
            "chunk included); work: fine steps plus each level's steps times its share of the "
            "fluid nodes", ""]
    deep = report.get("deep")
    if deep:
        out += [f"## Against a deep run (first variant, fine run to {deep['tolerance']:g} per "
                f"1000 steps, {deep['seconds']:.1f} s)", "",
                "| levels | factor | storage | rescale | axis | velocity x per prolongation "
                "(fine first) | density deviation x | level k (1/2, 1/4, ...) voxel² | fine "
                "steps | k vs deep | at 200 | at 600 | at 1000 |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in report["rows"] + [deep]:
            for r in row["runs"]:
                h = r.get("history_vs_deep", [])
                name = "deep" if row is deep else row.get("start_rescale", "none")
                out.append(
                    f"| {row['levels']} | {row['factor']:g} | {row['tile_storage']} | {name} | "
                    f"{r['axis']} | {', '.join(f'{x:.4f}' for x in r.get('start_scales', []))}"
                    f" | {', '.join(f'{x:.4f}' for x in r.get('start_density_scales', []))}"
                    f" | {', '.join(f'{x:.5g}' for x in r.get('start_k_voxel2', []))} | "
                    f"{r['steps']} | {100 * r['k_vs_deep']:+.3f} % | {_at(h, 200)} | "
                    f"{_at(h, 600)} | {_at(h, 1000)} |")
        out.append("")
    return "\n".join(out)


def write(report: dict, out: Path) -> tuple[Path, Path]:
    """Write the JSON and Markdown reports; their paths."""
    device = re.sub(r"[^A-Za-z0-9]+", "-", str(report["device"] or report["backend"])).strip("-")
    name = f"start_levels-{device}-{report['date']}-{report['size']}{report.get('tag', '')}"
    return write_json_md(out, name,
                         report, markdown(report), indent=2, default=float)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=400, help="image edge, voxels")
    p.add_argument("--axes", nargs="+", default=["x"], choices=["x", "y", "z"])
    p.add_argument("--porosity", type=float, default=0.2, help="of the generated image")
    p.add_argument("--grain", type=float, default=20.0, help="grain diameter, voxels")
    p.add_argument("--fast-tau", type=float, default=None,
                   help="tau of the mirrored runs (default: the sample's choice, 0.6 or 0.7)")
    p.add_argument("--variants", nargs="+", type=parse_variant,
                   default=[parse_variant(v) for v in ("1:10", "3:10", "3:1", "3:10:auto-wide")],
                   help="LEVELS:FACTOR[:STORAGE][:RESCALE] per study; the first is the k "
                        "reference")
    p.add_argument("--deep", type=float, default=None, metavar="TOL",
                   help="also run the first variant with the fine run to TOL per 1000 steps "
                        "(e.g. 1e-5) and compare every run's k with it")
    p.add_argument("--deep-max-steps", type=int, default=20000,
                   help="step limit of the deep run's fine run (and of each of its levels)")
    p.add_argument("--precision", default="float32", choices=["float32", "float64"])
    p.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    p.add_argument("--max-seconds", type=float, default=60.0,
                   help="wall limit of each run (each level and the fine run), s")
    p.add_argument("--tag", default="",
                   help="suffix of the reports' names (e.g. -rescale: not to replace a report)")
    p.add_argument("--out", default="benchmarks/rock_time_to_answer/results")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run, write, print the Markdown."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    args = parse(argv)
    report = run(args)
    json_path, md_path = write(report, Path(args.out))
    print(markdown(report))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
