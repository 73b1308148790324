"""Command line: ``python -m solver bench`` (more subcommands join as they are built)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

__all__ = ["main"]


def _bench(args: argparse.Namespace) -> int:
    from .backends import get_backend
    from .bench import cpu_cases, run_case, write_results
    from .config import SimulationConfig

    backend = get_backend(args.backend)
    results = []
    for case in cpu_cases(args.size):
        for precision in args.precision:
            config = SimulationConfig(lattice="D3Q19", collision="BGK", precision=precision,
                                      backend=backend.name)
            results.append(run_case(case, config, args.steps))
    device = backend.device_info()["name"]
    for r in results:
        print(f"{r['case']:<40} {r['precision']:<8} eta_t={r['eta_t']:.3f} "
              f"{r['mflups']:8.2f} MFLUPS")
    if args.out:
        stem = f"{backend.name}-{args.size}"
        print(f"wrote {write_results(results, device, Path(args.out), stem)}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from .backends import get_backend
    from .validation import CASES, run_all, write_report

    unknown = [n for n in args.case or [] if n not in CASES]
    if unknown:
        print(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}",
              file=sys.stderr)
        return 2
    backend = get_backend(args.backend)
    results = run_all(args.size, backend.name, args.case)
    for r in results:
        verdict = ("pass" if r.passed else "FAIL") if r.checked else "info"
        print(f"{verdict:<4} {r.case:<22} {r.quantity:<58} {r.measured:.5g} "
              f"(ref {r.reference:.5g}, {r.size}, {r.seconds:.0f} s)")
    path = write_report(results, backend.device_info()["name"], Path(args.out), args.size,
                        backend.name)
    print(f"wrote {path}")
    return 0 if all(r.passed for r in results) else 1


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of the ``solver`` command."""
    parser = argparse.ArgumentParser(prog="python -m solver", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="measure MFLUPS on standard cases")
    bench.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    bench.add_argument("--size", type=int, default=64, help="box edge in nodes")
    bench.add_argument("--steps", type=int, default=20)
    bench.add_argument("--precision", nargs="+", default=["float64", "float32"],
                       choices=["float32", "float64"])
    bench.add_argument("--out", default=None, help="folder for the JSON + markdown table")
    bench.set_defaults(func=_bench)
    validate = sub.add_parser("validate", help="run the physics validation cases and write "
                              "benchmarks/results/validation-<device>-<date>.md")
    validate.add_argument("--size", default="ci", choices=["ci", "full"],
                          help="ci: small CPU sizes; full: GPU sizes with the papers' targets")
    validate.add_argument("--backend", default="auto", choices=["auto", "numpy", "cupy"])
    validate.add_argument("--case", nargs="+", default=None, help="case names (default: all)")
    validate.add_argument("--out", default="benchmarks/results", help="report folder")
    validate.set_defaults(func=_validate)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
