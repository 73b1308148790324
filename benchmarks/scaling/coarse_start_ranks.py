"""Does the mirrored permeability's coarse start over ranks give one device's k, in fewer steps?

Issue 33: the mirrored protocol over MPI ranks (:mod:`solver.distributed.mirrored`) starts from
the flow of the sample coarsened by 2, run over the same ranks
(:mod:`solver.distributed.coarse_start`). This script runs, on one generated grain pack whose
pores all join the two faces (so the one-device protocol, which drops the others, and the
ranks, which keep them, run the same geometry):

- ``one device``: :func:`solver.rock.measure.measure_axis` with its coarse start
  (``PermeabilitySettings.coarse_levels``), the reference;
- for each ``--ranks`` R: ``mpirun -n R python -m solver.distributed.mirrored`` with the same
  coarse levels (``--coarse-levels``), and with ``--from-rest`` also from rest;

each to k's convergence test (tolerance 1e-3 per 1000 steps, checks every ``--check`` steps) or
``--steps``, and reports k, the fine and coarse steps, the fine-step equivalents of the work,
the wall time and k's difference from the one-device run. JSON + md to ``--out`` (default
benchmarks/scaling/results/).

Usage::

    python benchmarks/scaling/coarse_start_ranks.py --size 48 --ranks 1 2 --backend numpy \\
        --precision float64 --from-rest                      # CPU, ~15 min on 2 busy cores
    python benchmarks/scaling/coarse_start_ranks.py --size 256 --ranks 1 2 --backend cupy
                                                             # 2 GPUs, ~2 min

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

import numpy as np

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "benchmarks" / "scaling" / "results"
sys.path.insert(0, str(REPO))

from solver.benchmarking.results import git_commit, gpu_slug, write_json_md  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    """Arguments."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=48, help="sample edge, voxels")
    parser.add_argument("--porosity", type=float, default=0.3)
    parser.add_argument("--diameter", type=float, default=8, help="grain diameter, voxels")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--backend", default="numpy", choices=["numpy", "cupy"])
    parser.add_argument("--precision", default="float32", choices=["float32", "float64"])
    parser.add_argument("--storage", default="auto", help="population storage (auto, float16)")
    parser.add_argument("--tile-storage", default="tiled", choices=["tiled", "compact", "auto"])
    parser.add_argument("--coarse-levels", type=int, default=1)
    parser.add_argument("--from-rest", action="store_true", help="also run the ranks from rest")
    parser.add_argument("--steps", type=int, default=20000, help="most steps per level")
    parser.add_argument("--check", type=int, default=200, help="steps between k checks")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per mpirun")
    return parser


def sample(args: argparse.Namespace) -> np.ndarray:
    """The grain pack with only the pores joining the two faces along x (solid mask)."""
    from geometries import VoxelGeometry
    from geometries.preprocess import keep_connected
    from geometries.regions import GrainRegions
    from solver.lattice import get_lattice

    n = args.size
    solid = GrainRegions((n, n, n), args.porosity, args.diameter, args.seed).slab(0, 0, n)
    kept, _ = keep_connected(VoxelGeometry(solid), 0, get_lattice("D3Q19").c)
    return np.asarray(kept.solid)


def config_values(args: argparse.Namespace) -> dict:
    """SimulationConfig values of every run."""
    return {"backend": args.backend, "precision": args.precision, "storage": args.storage,
            "tile_storage": args.tile_storage}


def one_device(solid: np.ndarray, args: argparse.Namespace) -> dict:
    """The one-device protocol with its coarse start (the reference)."""
    from geometries import VoxelGeometry
    from solver.backends import get_backend
    from solver.config import SimulationConfig
    from solver.rock.measure import measure_axis
    from solver.rock.protocol import setup_protocol
    from solver.rock.settings import PermeabilitySettings

    settings = PermeabilitySettings(coarse_start=args.coarse_levels > 0,
                                    coarse_levels=max(1, args.coarse_levels),
                                    check_interval=args.check, max_steps=args.steps)
    config = SimulationConfig(**config_values(args), tile_offset="origin")
    setup = setup_protocol(VoxelGeometry(solid), config, 0, "mirrored", settings)
    tic = time.perf_counter()
    r = measure_axis(setup, settings, get_backend(args.backend))
    return {"run": "one device", "k": r.k_lattice, "steps": r.steps, "converged": r.converged,
            "coarse_steps": r.start_steps, "work_steps": r.work_steps,
            "seconds": time.perf_counter() - tic, "tau": r.tau, "gradient": r.gradient}


def ranks_run(path: Path, ranks: int, levels: int, args: argparse.Namespace) -> dict:
    """``mpirun -n ranks python -m solver.distributed.mirrored`` on the saved sample."""
    from solver.distributed.comm import find_mpirun

    out = path.with_name(f"ranks-{ranks}-levels-{levels}.json")
    cmd = [find_mpirun(), "-n", str(ranks), sys.executable, "-m", "solver.distributed.mirrored",
           str(path), "--axis", "0", "--backend", args.backend, "--steps", str(args.steps),
           "--check", str(args.check), "--coarse-levels", str(levels), "--json", str(out)]
    for key, value in config_values(args).items():
        if key != "backend":
            cmd += ["--set", f"{key}={value}"]
    path_env = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path_env, PYTHONUNBUFFERED="1")
    if args.backend == "numpy":
        env.setdefault("OMP_NUM_THREADS", "1")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    print(" ".join(cmd), flush=True)
    tic = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, timeout=args.timeout, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - tic
    if done.returncode:
        raise SystemExit(f"mpirun failed ({done.returncode}):\n{done.stderr[-4000:]}")
    r = json.loads(out.read_text())
    return {"run": f"{ranks} rank(s), " + (f"{levels} coarse level(s)" if levels else "from rest"),
            "k": r["k"], "steps": r["steps"], "converged": r["converged"],
            "coarse_steps": [c["steps"] for c in r["coarse"]],
            "coarse_k": [c["k"] for c in r["coarse"]], "work_steps": r["work_steps"],
            "seconds": seconds, "tau": r["tau"], "gradient": r["gradient"],
            "slab_bounds": r["slab_bounds"], "set_up": r["per_rank"][0]["seconds"]}


def markdown(result: dict) -> str:
    """The runs as a markdown table."""
    ref = result["runs"][0]["k"]
    lines = [f"# Coarse start over ranks: {result['sample']}", "",
             f"Backend {result['backend']}, {result['precision']}, storage {result['storage']}, "
             f"{result['coarse_levels']} coarse level(s); commit {result['commit']}, "
             f"{result['date']}. Command: `{result['command']}`", "",
             "| run | k (voxel²) | vs one device | fine steps | coarse steps | work steps | "
             "converged | wall s |", "|---|---:|---:|---:|---:|---:|---|---:|"]
    for r in result["runs"]:
        diff = (r["k"] - ref) / ref if ref else float("nan")
        lines.append(f"| {r['run']} | {r['k']:.8g} | {diff:+.2e} | {r['steps']} | "
                     f"{r['coarse_steps']} | {r['work_steps']:.0f} | {r['converged']} | "
                     f"{r['seconds']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the reference and the ranks; write JSON and markdown."""
    args = build_parser().parse_args(argv)
    solid = sample(args)
    print(f"sample {solid.shape}, porosity {1 - solid.mean():.4f}", flush=True)
    runs = [one_device(solid, args)]
    print(runs[-1], flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sample.npy"
        np.save(path, solid)
        for ranks in args.ranks:
            runs.append(ranks_run(path, ranks, args.coarse_levels, args))
            print(runs[-1], flush=True)
            if args.from_rest:
                runs.append(ranks_run(path, ranks, 0, args))
                print(runs[-1], flush=True)
    # LBM_COMMIT where the tree is a snapshot inside another checkout (its HEAD is not ours).
    commit = git_commit()
    device = "cpu" if args.backend == "numpy" else gpu_slug()
    result = {"sample": f"grains d={args.diameter:g} porosity~{args.porosity:g} seed "
                        f"{args.seed} {args.size}³ (pores joining the faces only)",
              "porosity": float(1 - solid.mean()), "backend": args.backend,
              "precision": args.precision, "storage": args.storage,
              "coarse_levels": args.coarse_levels, "runs": runs, "commit": commit,
              "date": date.today().isoformat(), "device": device,
              "command": "python benchmarks/scaling/coarse_start_ranks.py "
                         + " ".join(sys.argv[1:] if argv is None else argv)}
    stem = f"coarse-start-ranks-{args.size}-{device}-{args.precision}-{result['date']}"
    write_json_md(args.out, stem, result, markdown(result), default=str)
    print(markdown(result))
    print(f"wrote {args.out / stem}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
