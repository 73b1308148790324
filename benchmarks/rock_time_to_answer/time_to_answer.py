"""Time to answer: from Start to a permeability converged to 0.1 %, before and after the speed-up.

For each ``--sizes`` edge n a sandstone-like image is generated (overlapping spherical grains,
``geometries.generators.random_sphere_pack``, porosity ``--porosity`` 0.2, grain diameter
``--grain`` 20 voxels, fixed seed) and k along x is measured by the mirrored protocol
(:mod:`solver.rock.protocol`):

- **before**: TRT (Lambda = 3/16), tau = 1, from rest (``accelerate: false``);
- **after**: the accelerated set-up (``accelerate: true``: TRT Lambda = 3/16, tau =
  ``fast_tau``, same pore Re, started from the flow of the image coarsened by 2, prolongated on
  the device) for each ``--fast-tau`` (default auto, 0.6, 0.7): the first, 'auto', is the
  default setting (tau chosen by the sample, :func:`solver.rock.protocol.choose_fast_tau`),
  the others are the relaxation-time lever tried in the same call (one equal to the choice
  is not run twice).

Every run stops by the run monitor's test (:class:`solver.monitor.KConvergence`): k > 0 and
changed by less than 0.1 % over the last 1000 steps, checked every ``--check-interval`` steps;
or at ``--max-steps`` / ``--max-seconds`` of stepping (then marked not converged: its steps are
a lower bound, rerun that size with ``--max-seconds 0``). Reported per run: fine steps,
coarse-start steps, work in fine-step equivalents (coarse steps weighted by their fluid-node
share), wall seconds from Start (total, of which host set-up: pore checks, mirroring; and the
coarse start: coarsening, its run and the prolongation), k in voxel², m² and mD (voxel
``--voxel-size`` 5.345 µm), the work and time ratios and the k difference against "before"
(target: >= 3x less work, |dk| < 0.5 %). Writes ``time_to_answer-<device>-<date>.json``
and ``.md`` to ``--out``.

Before anything is timed, every set-up runs a few hundred steps on a small image
(:func:`warm`): the kernels (the step, the moments, the prolongation) are compiled and loaded
once per machine and kernel version, so compilation is not part of a time to answer.

The GPU command (one call, 200³ and 400³, float32, about 5 minutes on an H100):
``python benchmarks/rock_time_to_answer/time_to_answer.py`` (``--out`` default:
``benchmarks/rock_time_to_answer/results``).
CPU smoke test: ``--quick`` (one 20³ image, NumPy, float64, one fast tau). Measured answers
and their history: ``benchmarks/rock_time_to_answer/README.md``.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from geometries import VoxelGeometry  # noqa: E402
from geometries.errors import GeometryError  # noqa: E402
from geometries.generators import random_sphere_pack  # noqa: E402
from solver.backends import get_backend  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.rock import PermeabilitySettings, run_study  # noqa: E402
from solver.rock.protocol import choose_fast_tau  # noqa: E402

log = logging.getLogger("time_to_answer")


def sandstone(n: int, porosity: float, grain: float, voxel_size: float) -> VoxelGeometry:
    """A sandstone-like n³ image: overlapping grains of ``grain`` voxels, fixed seed."""
    pack = random_sphere_pack((n, n, n), porosity, diameter=min(grain, n), seed=7)
    return VoxelGeometry(pack.solid, voxel_size=voxel_size, name=f"sandstone-like {n}^3")


def measure(sample: VoxelGeometry, accelerate: bool, args: argparse.Namespace,
            backend, fast_tau: float | None = None) -> dict:
    """One mirrored k run from Start; its steps, seconds (total, set-up, coarse start) and k."""
    config = SimulationConfig(precision=args.precision, tau=1.0, collision="TRT",
                              tile_offset="origin")
    settings = PermeabilitySettings(protocol="mirrored", axes=["x"], accelerate=accelerate,
                                    fast_tau=fast_tau, coarse_start=not args.no_coarse,
                                    check_interval=args.check_interval, tolerance=1e-3,
                                    max_steps=args.max_steps, max_seconds=args.max_seconds)
    tic = time.perf_counter()
    study = run_study(sample, config, settings, backend)
    seconds = time.perf_counter() - tic
    r = study.results[0]
    return {"accelerate": accelerate, "tau": r.tau, "steps": r.steps,
            "coarse_steps": r.coarse_steps, "work_steps": r.work_steps, "seconds": seconds,
            "solver_seconds": r.seconds, "setup_seconds": seconds - r.seconds,
            "start_seconds": r.start_seconds, "converged": r.converged,
            "change_per_1000": r.change_per_1000, "k_voxel2": r.k_lattice, "k_m2": r.k_m2,
            "k_mD": r.k_mD, "porosity": sample.porosity}


def taus(sample: VoxelGeometry, args: argparse.Namespace) -> list[float | None]:
    """``--fast-tau`` without repeats: 'auto' (None, the sample's default,
    :func:`solver.rock.protocol.choose_fast_tau`) drops a later tau equal to its choice."""
    auto = choose_fast_tau(sample, 0)
    out: dict[float, float | None] = {}
    for tau in args.fast_tau:
        out.setdefault(auto if tau is None else tau, tau)
    return list(out.values())


def _tau(text: str) -> float | None:
    """A ``--fast-tau`` value: 'auto' (None) or a number."""
    return None if text == "auto" else float(text)


def compare(before: dict, after: dict) -> dict:
    """Work, step and wall-time ratios before/after and the relative k difference."""
    return {"step_ratio": before["steps"] / max(after["steps"], 1),
            "work_ratio": before["work_steps"] / max(after["work_steps"], 1),
            "time_ratio": before["seconds"] / max(after["seconds"], 1e-9),
            "k_difference": after["k_voxel2"] / before["k_voxel2"] - 1.0}


def warm(args: argparse.Namespace, backend) -> float:
    """Run both set-ups briefly on a small image, so every kernel either uses (the step,
    the moments, the prolongation) is compiled and loaded before anything is timed; seconds."""
    n = min(48, min(args.sizes))
    n -= n % 2
    short = argparse.Namespace(**{**vars(args), "max_steps": 2 * args.check_interval,
                                  "max_seconds": 0.0})
    sample = sandstone(n, args.porosity, min(args.grain, n / 3), args.voxel_size)
    tic = time.perf_counter()
    for accelerate, tau in [(False, 1.0), *((True, t) for t in taus(sample, args))]:
        try:
            measure(sample, accelerate, short, backend, tau)
        except GeometryError as exc:  # no path through the small image: nothing warmed
            log.warning("warm-up on %d^3 skipped (%s)", n, exc)
            break
    seconds = time.perf_counter() - tic
    log.info("warm-up (kernel compilation and loading): %.1f s", seconds)
    return seconds


def run(args: argparse.Namespace) -> dict:
    """Measure every size before and after (one 'after' per ``--fast-tau``); the report."""
    backend = get_backend(args.backend)
    warm_seconds = warm(args, backend)
    rows = []
    for n in args.sizes:
        sample = sandstone(n, args.porosity, args.grain, args.voxel_size)
        before = measure(sample, False, args, backend)
        afters = [measure(sample, True, args, backend, tau) for tau in taus(sample, args)]
        # 'after' is the first --fast-tau (the default settings); the others are levers tried.
        row = {"size": n, "before": before, "after": afters[0],
               **compare(before, afters[0]),
               "variants": [{**a, **compare(before, a)} for a in afters[1:]]}
        log.info("%d^3: %s", n, row)
        rows.append(row)
    info = backend.device_info()
    return {"device": info.get("name"), "backend": backend.name, "date": date.today().isoformat(),
            "commit": git_commit(), "precision": args.precision, "porosity": args.porosity,
            "grain_voxels": args.grain, "voxel_size_m": args.voxel_size,
            "coarse_start": not args.no_coarse, "warm_up_seconds": warm_seconds,
            "criterion": "k > 0 and k changed < 0.1 % over the last 1000 steps "
                         "(solver.monitor.KConvergence)",
            "rows": rows}


def markdown(report: dict) -> str:
    """The before/after table."""
    lines = [f"# Time to answer: k to 0.1 % ({report['device']}, {report['backend']}, "
             f"{report['precision']}, {report['date']}, {report['commit']})", "",
             f"Sandstone-like overlapping grains, porosity {report['porosity']}, grains "
             f"{report['grain_voxels']} voxels, voxel {report['voxel_size_m']} m; mirrored "
             "protocol along x; before = TRT tau 1 from rest, after = accelerate: true "
             f"(coarse start {'on' if report.get('coarse_start', True) else 'off'}). "
             "Seconds from Start: total (host set-up: pore checks, mirroring; coarse start: "
             "coarsening, its run, the prolongation); the fine run's tiling is in the total "
             "of both. Kernels were compiled and loaded before timing (a short run of every "
             "set-up on a small image): compilation is paid once per machine and kernel "
             "version, not per answer, so it is not in the time to answer.", "",
             "| size | run | tau | steps (+ coarse) | work steps | seconds | converged | k (mD) "
             "| work before/after | time before/after | k after/before - 1 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in report["rows"]:
        runs = [("before", row["before"], None), ("after", row["after"], row)]
        runs += [("variant", v, v) for v in row.get("variants", [])]
        for name, r, ratios in runs:
            extra = (f"{ratios['work_ratio']:.2f}x | {ratios['time_ratio']:.2f}x | "
                     f"{100 * ratios['k_difference']:+.3f} %" if ratios else " | | ")
            k = f"{r['k_mD']:.4g}" if r["k_mD"] is not None else "n/a"
            steps = f"{r['steps']} (+ {r['coarse_steps']})" if r["coarse_steps"] else r["steps"]
            secs = (f"{r['seconds']:.1f} ({r.get('setup_seconds', 0):.1f}; "
                    f"{r.get('start_seconds', 0):.1f})")
            lines.append(f"| {row['size']}³ | {name} | {r['tau']} | {steps} | "
                         f"{r['work_steps']:.0f} | {secs} | {r['converged']} | {k} "
                         f"| {extra} |")
    return "\n".join(lines) + "\n"


def write(report: dict, out: Path) -> tuple[Path, Path]:
    """Write the JSON and markdown files; return their paths."""
    device = re.sub(r"[^a-z0-9.]+", "-", str(report["device"] or report["backend"]).lower())
    device = device.strip("-")
    stem = out / f"time_to_answer-{device}-{report['date']}"
    # with_suffix: as ever, a dot in the device name ends the file name there
    return write_json_md(out, stem.with_suffix("").name, report, markdown(report), indent=2,
                         newline=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options (``--quick``: one 20³ image on the NumPy backend, float64)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[200, 400], help="image edges, voxels")
    p.add_argument("--porosity", type=float, default=0.2)
    p.add_argument("--grain", type=float, default=20.0, help="grain diameter, voxels")
    p.add_argument("--voxel-size", type=float, default=5.345e-6, help="metres")
    p.add_argument("--precision", default="float32", choices=["float32", "float64"])
    p.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    p.add_argument("--check-interval", type=int, default=250, help="steps between k checks")
    p.add_argument("--max-steps", type=int, default=60000, help="per run")
    p.add_argument("--max-seconds", type=float, default=60.0,
                   help="per run, stepping wall seconds; 0 = until converged")
    p.add_argument("--fast-tau", type=_tau, nargs="+", default=[None, 0.6, 0.7],
                   help="tau of the accelerated runs, 'auto' = chosen by the sample (the "
                        "default setting): one 'after' row each (first = 'after')")
    p.add_argument("--no-coarse", action="store_true", help="accelerated runs start from rest")
    p.add_argument("--out", default="benchmarks/rock_time_to_answer/results",
                   help="folder for JSON + md")
    p.add_argument("--quick", action="store_true", help="CPU smoke test: one 20³ image")
    args = p.parse_args(argv)
    if args.quick:
        args.sizes, args.porosity, args.grain = [20], 0.35, 8.0
        args.backend, args.precision, args.check_interval = "numpy", "float64", 50
        args.max_seconds, args.fast_tau = 0.0, args.fast_tau[:1]
    return args


def main(argv: list[str] | None = None) -> int:
    """Run and write the report; print the table."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse(argv)
    report = run(args)
    json_path, md_path = write(report, Path(args.out))
    print(markdown(report))
    print(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
