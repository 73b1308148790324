"""Do the mirrored start's defaults hold over GPU ranks? The plain start against the defaults.

Issue 29: ``PermeabilitySettings`` rescales the coarse start of mirrored runs (``start_rescale``
velocity, ``start_density_gain`` 1.1; measured on one H200), and the multi-rank command line
(``mpirun -n R python -m solver.distributed.mirrored``) now takes its defaults from there. This
script runs that command twice on the same generated rock-like image (``--grains``: porosity
0.2, 21-voxel grains) along one axis, with the coarse levels of the settings (by size: 3 from
400³ on, else 1):

- ``plain``: ``--start-rescale none --start-density-gain 1.0`` (the command line's defaults
  before);
- ``defaults``: no start flags (the settings' defaults);

and reports per run the fine and coarse steps, the fine-step equivalents of the work, k, the
start's factors, the set-up, coarse and fine seconds and the wall time, and k's difference of
the defaults from the plain start. JSON + md to ``--out`` (default benchmarks/scaling/results/).

Usage (2 GPUs; at 400³ each run is expected to take 15-25 s, as mirrored_rock.py's 400³ run on
2 H200s did, and is stopped at its first check after 40 s and killed after 70 s: under 150 s in
all; the script turns NVLink multicast off and, as root, sets Open MPI's variables)::

    python benchmarks/scaling/start_defaults_ranks.py --size 400 --ranks 2
    python benchmarks/scaling/start_defaults_ranks.py --size 24 --ranks 2 --backend numpy \\
        --precision float64 --steps 41 --check 20                        # CPU check

Lattice units; k in voxel².
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "benchmarks" / "scaling" / "results"
sys.path.insert(0, str(REPO))

from solver.benchmarking.results import git_commit, gpu_slug, write_json_md  # noqa: E402

#: The two starts compared: (name, the command line's start flags).
STARTS = (("plain", ["--start-rescale", "none", "--start-density-gain", "1.0"]),
          ("defaults", []))


def build_parser() -> argparse.ArgumentParser:
    """Arguments."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=400, help="image edge, voxels")
    parser.add_argument("--porosity", type=float, default=0.2)
    parser.add_argument("--diameter", type=float, default=21, help="grain diameter, voxels")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--axis", type=int, default=0, help="flow axis (0, 1, 2)")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--backend", default="cupy", choices=["numpy", "cupy"])
    parser.add_argument("--precision", default="float32", choices=["float32", "float64"])
    parser.add_argument("--steps", type=int, default=None,
                        help="step limit of each run (default: the command line's, "
                             "PermeabilitySettings.max_steps)")
    parser.add_argument("--check", type=int, default=None,
                        help="steps between k checks (default: the command line's, "
                             "PermeabilitySettings.check_interval)")
    parser.add_argument("--max-seconds", type=float, default=40.0,
                        help="each run stops stepping at its first check after this (the "
                             "result still written, marked not converged)")
    parser.add_argument("--timeout", type=float, default=70.0,
                        help="seconds per mpirun (two runs: the whole script under 150 s)")
    parser.add_argument("--out", type=Path, default=OUT)
    return parser


def command(args: argparse.Namespace, flags: list[str], out: Path) -> list[str]:
    """``mpirun -n R python -m solver.distributed.mirrored --grains N ...`` with ``flags``."""
    from solver.distributed.comm import find_mpirun

    mpirun = find_mpirun()
    if mpirun is None:
        raise SystemExit("error: no mpirun found; install `pip install mpi4py mpich`.")
    cmd = [mpirun, "-n", str(args.ranks), sys.executable, "-m", "solver.distributed.mirrored",
           "--grains", str(args.size), "--porosity", str(args.porosity), "--diameter",
           str(args.diameter), "--seed", str(args.seed), "--axis", str(args.axis),
           "--backend", args.backend, "--set", f"precision={args.precision}",
           "--max-seconds", str(args.max_seconds), "--json", str(out), *flags]
    for name, value in (("--steps", args.steps), ("--check", args.check)):
        if value is not None:
            cmd += [name, str(value)]
    return cmd


def environment(backend: str) -> dict[str, str]:
    """The ranks' environment: the repository first on the path; on GPUs NVLink multicast off
    and NCCL's bootstrap over loopback (one host); as root, Open MPI's permission."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")
    if backend == "numpy":
        env.setdefault("OMP_NUM_THREADS", "1")
    else:
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        env.setdefault("NCCL_SOCKET_IFNAME", "lo")
        env.setdefault("NCCL_IB_DISABLE", "1")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def run(args: argparse.Namespace, name: str, flags: list[str], folder: Path) -> dict:
    """One start: the command's result condensed (steps, k, factors, seconds)."""
    out = folder / f"{name}.json"
    cmd = command(args, flags, out)
    print(" ".join(cmd), flush=True)
    tic = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=REPO, env=environment(args.backend),
                              timeout=args.timeout, capture_output=True, text=True)
    except subprocess.TimeoutExpired:  # the other start and the report still follow
        return {"start": name, "flags": " ".join(flags) or "(none)",
                "error": f"killed after {args.timeout:g} s"}
    wall = time.perf_counter() - tic
    if done.returncode:
        return {"start": name, "flags": " ".join(flags) or "(none)",
                "error": f"mpirun failed ({done.returncode}): {done.stderr[-4000:]}"}
    r = json.loads(out.read_text())
    times = r["per_rank"][0]["seconds"]
    return {"start": name, "flags": " ".join(flags) or "(none)", "k": r["k"],
            "steps": r["steps"], "converged": r["converged"],
            "coarse_levels": r["coarse_levels"],
            "coarse_steps": [c["steps"] for c in r["coarse"]],
            "coarse_k": [c["k"] for c in r["coarse"]], "work_steps": r["work_steps"],
            "start_scale": r["start_scale"], "start_density_scale": r["start_density_scale"],
            "coarse_start_scales": [[c["start_scale"], c["start_density_scale"]]
                                    for c in r["coarse"]],
            "set_up_seconds": times.get("summary", 0.0) + times.get("slab", 0.0),
            "coarse_seconds": times.get("coarse_runs", 0.0),
            "fine_step_seconds": r["step_seconds"], "wall_seconds": wall,
            "alternation": r["alternation"], "storage": r["storage"],
            "transport": r["transport"], "fluid_nodes": r["fluid_nodes"], "tau": r["tau"]}


def markdown(result: dict) -> str:
    """The two runs side by side."""
    plain = result["runs"][0].get("k")
    lines = [f"# Mirrored start over {result['ranks']} ranks: plain against the defaults", "",
             f"{result['sample']}, axis {result['axis']}; {result['device']}, "
             f"{result['precision']}; commit {result['commit']}, {result['date']}. Command: "
             f"`{result['command']}`", "",
             "| start | flags | fine steps | coarse steps | work steps | k (voxel²) | "
             "vs plain | s (velocity, density) | converged | set-up s | coarse s | fine s | "
             "wall s |", "|---|---|---:|---|---:|---:|---:|---|---|---:|---:|---:|---:|"]
    for r in result["runs"]:
        if "error" in r:
            lines.append(f"| {r['start']} | {r['flags']} | {r['error'][:300]} |")
            continue
        diff = (r["k"] - plain) / plain if plain else float("nan")
        lines.append(f"| {r['start']} | {r['flags']} | {r['steps']} | {r['coarse_steps']} | "
                     f"{r['work_steps']:.0f} | {r['k']:.8g} | {diff:+.3%} | "
                     f"{r['start_scale']}, {r['start_density_scale']} | {r['converged']} | "
                     f"{r['set_up_seconds']:.1f} | {r['coarse_seconds']:.1f} | "
                     f"{r['fine_step_seconds']:.1f} | {r['wall_seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run both starts; write JSON and markdown."""
    args = build_parser().parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run(args, name, flags, Path(tmp)) for name, flags in STARTS]
    device = "cpu" if args.backend == "numpy" else gpu_slug()
    result = {"sample": f"generated grains {args.size}³, porosity~{args.porosity:g}, "
                        f"d={args.diameter:g}, seed {args.seed}",
              "axis": args.axis, "ranks": args.ranks, "backend": args.backend,
              "precision": args.precision, "runs": runs, "commit": git_commit(),
              "date": date.today().isoformat(), "device": device,
              "command": "python benchmarks/scaling/start_defaults_ranks.py "
                         + " ".join(sys.argv[1:] if argv is None else argv)}
    stem = f"start-defaults-ranks-{args.size}-{args.ranks}x-{device}-{result['date']}"
    write_json_md(args.out, stem, result, markdown(result), default=str)
    print(markdown(result))
    print(f"wrote {args.out / stem}.json and .md")
    return 1 if any("error" in r for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
