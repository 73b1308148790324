"""Command line: ``python -m solver bench | run | validate`` (see ``--help`` of each)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the solver is imported lazily: `--help` stays fast
    from .run import HeadlessRun, RunOutcome

__all__ = ["EXIT_BACKEND", "EXIT_OUTPUT", "main"]

#: Exit codes of ``run`` beyond solver.run's 0 done, 2 invalid, 3 diverged, 130 interrupted
#: (and solver.rock.cli's 6: permeability not converged); one meaning each (SECURITY.md).
EXIT_OUTPUT = 4  # the output folder could not be written during the run
EXIT_BACKEND = 5  # the requested backend (cupy) cannot start on this machine


#: Box edges ``bench`` accepts (nodes): 3000 asked for 27 G nodes.
BENCH_SIZES = (8, 512)


def _bench_arguments(args: argparse.Namespace) -> str | None:
    """What is wrong with ``bench``'s arguments, or None."""
    low, high = BENCH_SIZES
    if not low <= args.size <= high:
        return f"--size {args.size}: give a box edge of {low} to {high} nodes (default 64)."
    if args.steps < 1:
        return f"--steps {args.steps}: give at least 1 time step (default 20)."
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        return f"--out {args.out} is a file; give a folder for the results."
    return None


def _bench(args: argparse.Namespace) -> int:
    problem = _bench_arguments(args)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from .backends import get_backend
    from .benchmarking.cases import cpu_cases, precision_options, run_case, write_results
    from .config import SimulationConfig

    backend = get_backend(args.backend)
    if args.suite == "gpu" or (args.suite == "auto" and backend.name == "cupy"):
        return _bench_gpu(args, backend)
    results = []
    for case in cpu_cases(args.size):
        for precision in args.precision:
            config = SimulationConfig(lattice="D3Q19", collision="BGK", backend=backend.name,
                                      **precision_options(precision))
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


def _run(args: argparse.Namespace) -> int:
    from .backends import get_backend
    from .case import check_output_folder, load_case
    from .distributed import launched_size
    from .io import CheckpointError, remove_orphaned_temporaries
    from .run import EXIT_INVALID, HeadlessRun

    under_mpi = launched_size() > 1 and not hasattr(args.backend, "allocate")
    try:
        case = load_case(args.case)
        if args.frames is not None:
            case.frames = _frames_option(args.frames)
        from .rock.cli import run_permeability, run_permeability_mpi, settings_for

        study = settings_for(case, args.protocol, args.axes, args.max_steps)
        if study is not None:  # a permeability study: protocol runs along the chosen axes
            if under_mpi:  # one run per rank, or all on rank 0 (solver.rock.cli)
                return run_permeability_mpi(case, study, args.output, args.backend)
            return run_permeability(case, study, args.output, args.backend)
        if under_mpi:
            from .distributed.cli import run_under_mpi

            return run_under_mpi(args, _run)
        if args.max_steps is not None:
            case.run.max_steps = args.max_steps
        output = check_output_folder(args.output or case.run.output or Path("runs") / case.name)
        for tmp in remove_orphaned_temporaries(output):
            logging.getLogger(__name__).info("removed %s, left by a killed run", tmp)
        try:  # a named backend that cannot start is the machine's problem, not the case's
            backend = (args.backend if hasattr(args.backend, "allocate")
                       else get_backend(args.backend or case.config.backend))
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_BACKEND
        run = HeadlessRun(case, out=output, backend=backend)
        if run.lattice_choice is not None:  # the choice and its cost, before the run
            print(f"lattice: {run.lattice_choice.text()}")
        if args.resume:
            _resume(run, args.resume, CheckpointError)
    except (ValueError, MemoryError, OSError) as exc:  # user errors: case, config, geometry
        print(f"error: {_describe(exc)}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        print("Interrupted before the run started; nothing was written.", file=sys.stderr)
        return 130
    try:
        outcome = run.execute(progress=not args.quiet)
    except MemoryError as exc:
        print(f"error: {_describe(exc)}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as exc:  # disk full, folder removed or made read-only during the run
        print(f"error: writing the outputs to {run.out} failed ({exc}); free space or fix the "
              "folder, then resume from its last checkpoint with --resume.", file=sys.stderr)
        return EXIT_OUTPUT
    return _report(run, outcome)


def _frames_option(text: str):
    """The ``--frames`` option: a case's ``frames`` mapping in YAML flow style, braces
    optional ("every: 200, views: [slice, 3d], movie: gif"); ValueError saying the fix."""
    import yaml

    from .slice_frames import frame_settings

    text = text.strip()
    try:
        spec = yaml.safe_load(text if text.startswith("{") else "{" + text + "}")
    except yaml.YAMLError as exc:
        raise ValueError(f"--frames {text!r} is not a mapping; write it as a case's frames, "
                         "e.g. --frames 'every: 200, views: [slice, 3d], movie: gif'.") from exc
    return frame_settings(spec, "--frames")


def _describe(exc: BaseException) -> str:
    """The message of a refused input; a bare MemoryError printed an empty ``error:``."""
    if isinstance(exc, MemoryError):
        detail = f" ({exc})" if str(exc) else ""
        return (f"out of memory{detail}: the geometry or run needs more memory than this "
                "machine has; use a smaller or coarser geometry, or float16 storage.")
    return str(exc) or type(exc).__name__


def _resume(run: HeadlessRun, path: str, error: type[Exception]) -> None:
    """Load a checkpoint into ``run``; any failure of a damaged file becomes ``error``."""
    try:
        run.resume(path)
    except ValueError:
        raise
    # Fields of a bit-flipped checkpoint can parse but hold the wrong types (TypeError,
    # AttributeError, IndexError in restore): the file is damaged, not the program.
    except (TypeError, AttributeError, IndexError, KeyError) as exc:
        raise error(f"The checkpoint {path} is damaged ({type(exc).__name__}: {exc}); resume "
                    "from an intact checkpoint or start again without --resume.") from exc


def _cycles_line(s: dict) -> str:
    """A pulsatile run's verdict: periodic or not and how much its last two cycles differ (a
    steady-state change and an instantaneous mass balance say nothing of a heartbeat)."""
    state = "periodic" if s.get("periodic") else "not periodic yet"
    change = s.get("cycle_change")
    line = (f"pulsatile, {state}: the last two of {s['cycles']} cycles differ by "
            f"{100 * change:.3g} % of each opening's range" if change is not None else
            f"pulsatile, {state}: {s['cycles']} cycles sampled (two needed to compare)")
    if s.get("tawss_mean_Pa") is not None:
        line += f"; mean TAWSS {s['tawss_mean_Pa']:.4g} Pa, largest OSI {s['osi_max']:.3g}"
    return line


def _report(run: HeadlessRun, outcome: RunOutcome) -> int:
    """Print the summary of a finished run and return its exit code."""
    from .run import EXIT_OK

    s = outcome.summary
    print(f"{s['case']}: {outcome.status} after {s['steps']} steps in {s['run_seconds']:.1f} s "
          f"({s['mflups']:.2f} MFLUPS, eta_t = {s['eta_t']:.3f}, {s['backend']})")
    if s.get("permeability") is not None:
        extra = (f" = {s['permeability_m2']:.4g} m^2 = {s['permeability_mD']:.4g} mD"
                 if s.get("permeability_m2") is not None else "")
        residual = f"{s['residual']:.3g}" if s.get("residual") is not None else "n/a"
        # The monitor's verdict comes first: an unconverged or negative k is no answer.
        name = "permeability k" if s.get("k_answer") else "k so far (NOT the answer)"
        print(f"{name} = {s['permeability']:.6g} (lattice units){extra}, residual "
              f"{residual}/step; {s.get('k_label', '')}")
    if s.get("cycles") is not None:  # pulsatile: never steady, periodic once cycles agree
        print(f"openings: {_cycles_line(s)}")
    elif s.get("steady_label"):  # a flow through openings: its own steady state
        balance = s.get("mass_balance")
        drop = s.get("pressure_drop_Pa")
        extra = "".join([f", mass balance {100 * balance:.3g} %" if balance is not None else "",
                         f", pressure drop {drop:.4g} Pa" if drop is not None else ""])
        print(f"openings: {s['steady_label']}{extra}")
    print(f"outputs in {run.out}")
    if outcome.exit_code != EXIT_OK:
        print(f"error: {outcome.message}" if outcome.exit_code != 130 else outcome.message,
              file=sys.stderr)
    return outcome.exit_code


def _bench_gpu(args: argparse.Namespace, backend) -> int:
    from .benchmarking.gpu_suite import GpuSuite, run_gpu_suite
    from .benchmarking.report import summary, write_report

    if backend.name != "cupy":
        print("The GPU suite needs the CuPy backend (a CUDA GPU); use --suite cpu.",
              file=sys.stderr)
        return 2
    from .benchmarking.probe_backend import ProbeBackend  # the probes are benchmarks' only

    backend = ProbeBackend()
    suite = GpuSuite(dense_sizes=tuple(args.dense), porosities=tuple(args.porosity),
                     pack_size=args.pack_size, precisions=tuple(args.precision),
                     layouts=tuple(args.layouts), tiles_per_block=tuple(args.tpb),
                     streaming=tuple(args.streaming), tile_storages=tuple(args.tile_storage),
                     rock_diameter=args.rock)
    report = run_gpu_suite(backend, suite)
    json_path, md_path = write_report(report, Path(args.out or "benchmarks/throughput/results"))
    print(f"wrote {json_path} and {md_path}")
    print(summary(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """Argument parser of the ``solver`` command."""
    from .config import BACKENDS, HALO_TRANSPORTS, STREAMING
    from .storage import PRECISION_LABELS

    parser = argparse.ArgumentParser(prog="python -m solver", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="measure MFLUPS on standard cases")
    bench.add_argument("--backend", default="auto", choices=list(BACKENDS))
    bench.add_argument("--size", type=int, default=64, help="box edge in nodes")
    bench.add_argument("--steps", type=int, default=20)
    bench.add_argument("--precision", nargs="+", default=list(PRECISION_LABELS),
                       choices=list(PRECISION_LABELS),
                       help="float16 = float16 storage, float32 arithmetic")
    bench.add_argument("--out", default=None, help="folder for the JSON + markdown table "
                       "(GPU suite default: benchmarks/throughput/results)")
    bench.add_argument("--suite", default="auto", choices=["auto", "cpu", "gpu"],
                       help="auto: the GPU suite when the backend is CuPy")
    bench.add_argument("--dense", type=int, nargs="+", default=[64, 128, 192, 256],
                       help="GPU suite: cavity3D box edges (paper Table 3)")
    bench.add_argument("--porosity", type=float, nargs="*",
                       default=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1],
                       help="GPU suite: sphere-pack porosities (paper Table 6)")
    bench.add_argument("--pack-size", type=int, default=192, help="GPU suite: pack box edge")
    bench.add_argument("--layouts", nargs="+", default=["paper", "xyz"],
                       choices=["paper", "xyz"], help="GPU suite: in-tile layouts")
    bench.add_argument("--tpb", type=int, nargs="+", default=[1, 2, 4], choices=[1, 2, 4],
                       help="GPU suite: tiles per block")
    bench.add_argument("--streaming", nargs="+", default=["two-copy"], choices=list(STREAMING),
                       help="GPU suite: population storage (in-place: one copy, AA pattern)")
    bench.add_argument("--tile-storage", nargs="+", default=["tiled"],
                       choices=["tiled", "compact"],
                       help="GPU suite: every node of each tile, or its fluid nodes only "
                            "(compact: full steps only)")
    bench.add_argument("--rock", type=float, default=0.0, metavar="D",
                       help="GPU suite: also a rock-like pack (phi 0.2, grains of D nodes; 22 "
                            "gives eta_t about 0.5 at 192^3)")
    bench.set_defaults(func=_bench)
    validate = sub.add_parser("validate", help="run the physics validation cases and write "
                              "benchmarks/validation/results/validation-<device>-<date>.md")
    validate.add_argument("--size", default="ci", choices=["ci", "full"],
                          help="ci: small CPU sizes; full: GPU sizes with the papers' targets")
    validate.add_argument("--backend", default="auto", choices=list(BACKENDS))
    validate.add_argument("--case", nargs="+", default=None, help="case names (default: all)")
    validate.add_argument("--out", default="benchmarks/validation/results", help="report folder")
    validate.set_defaults(func=_validate)
    run = sub.add_parser("run", help="run a case file (YAML/JSON) headless",
                         description="Run a case headless. Exit codes: 0 done; 2 invalid case, "
                                     "output folder or checkpoint, or refused (stability, "
                                     "memory, checkpoint mismatch); 3 diverged; 4 writing the "
                                     "outputs failed during the run; 5 the requested backend "
                                     "cannot start (no GPU); 6 permeability not converged "
                                     "within permeability.max_steps; 130 interrupted "
                                     "(checkpoint written).")
    run.add_argument("case", help="case file, .yaml/.yml or .json (see solver/case.py)")
    run.add_argument("--resume", metavar="CHECKPOINT", default=None,
                     help="continue from a checkpoint.npz of the same geometry and config")
    run.add_argument("--output", default=None, help="output folder (overrides run.output)")
    run.add_argument("--max-steps", type=int, default=None, help="override run.max_steps")
    run.add_argument("--backend", default=None, choices=list(BACKENDS),
                     help="override config.backend")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--frames", default=None, metavar="SPEC",
                     help="write pictures headless, as a case's frames (replaces them): "
                          "'every: 200, views: [slice, 3d], movie: gif' (keys: field, axis, "
                          "index, every, views, movie, fps, streamlines, isosurface, range)")
    run.add_argument("--protocol", default=None, choices=["mirrored", "pressure", "both"],
                     help="measure k by this protocol (solver/rock/protocol.py); overrides "
                          "the case's permeability.protocol")
    run.add_argument("--axes", default=None, help="flow axes for k: x, y, z, a comma list or "
                     "'all' (the k tensor); overrides permeability.axes")
    run.add_argument("--transport", default="auto", choices=list(HALO_TRANSPORTS),
                     help="halo transport under mpirun: nccl (GPU to GPU), host (MPI through "
                          "host memory), auto (nccl when every rank has its own GPU)")
    run.set_defaults(func=_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
