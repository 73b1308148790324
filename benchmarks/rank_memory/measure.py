"""Host peak memory of every rank of ``mpirun -n N python -m solver run CASE`` on the CPU.

Writes a generated sphere-pack case (NumPy backend), runs it under ``mpirun`` with each rank
wrapped in ``/usr/bin/time -v`` (its peak resident set size, kB), and writes
``results/<label>.json`` and ``.md``. ``--code`` picks the checkout whose ``solver`` runs (the
current one by default), so the same command measures before and after a change::

    python benchmarks/rank_memory/measure.py --ranks 2 --label after
    python benchmarks/rank_memory/measure.py --ranks 2 --label before --code /path/to/old

``--payload`` measures instead, in one process and without stepping, what a serving rank is
sent at an allocation: the pickled whole problem (what every rank received by broadcast
before solver/distributed/slab_parts.py) and each rank's pickled part (what it receives now).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def case(shape: int, porosity: float, steps: int) -> dict:
    """A periodic generated pack, float32 TRT, ``steps`` steps with one output at the end."""
    return {"name": "pack", "geometry": {"generator": "random_sphere_pack", "parameters": {
                "shape": [shape] * 3, "porosity": porosity, "diameter": 12, "seed": 3},
                "voxel_size": 5e-6},
            "config": {"lattice": "D3Q19", "collision": "TRT", "tau": 0.8,
                       "precision": "float32", "body_force": [1e-5, 0, 0],
                       "backend": "numpy"},
            "run": {"max_steps": steps, "output_interval": steps, "check_interval": steps,
                    "checkpoint_interval": 10 * steps, "convergence": 0}}


def peak_kb(text: str) -> int:
    """Peak resident set size (kB) from ``/usr/bin/time -v`` output."""
    return int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))


def payload(args: argparse.Namespace) -> dict:
    """Pickled bytes of the whole problem and of every rank's part of the case's problem."""
    import dataclasses
    import pickle

    from solver.case import load_geometry, parse_case
    from solver.distributed import decompose
    from solver.distributed.slab_parts import rank_part
    from solver.problem import Problem

    parsed = parse_case(case(args.shape, args.porosity, args.steps), base=Path("."),
                        source="benchmark", default_name="pack")
    geometry = load_geometry(parsed.geometry)
    problem = Problem.from_config(geometry.solid, parsed.config).with_openings(geometry)
    whole = dataclasses.replace(problem).use_iolets(problem.iolets)  # as allocate() sent it
    dec = decompose(problem.tiling, args.ranks)
    parts = [len(pickle.dumps(rank_part(problem, dec, r), protocol=5))
             for r in range(1, args.ranks)]
    return {"whole_problem_mib": round(len(pickle.dumps(whole, protocol=5)) / 2**20, 2),
            "part_mib_per_serving_rank": [round(b / 2**20, 2) for b in parts],
            "n_tiles": int(problem.tiling.n_tiles)}


def main() -> int:
    """Run the case under mpirun and write the per-rank peaks."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--shape", type=int, default=128)
    parser.add_argument("--porosity", type=float, default=0.35)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--label", default="run")
    parser.add_argument("--code", default=str(REPO), help="checkout whose solver runs")
    parser.add_argument("--payload", action="store_true",
                        help="pickled bytes a serving rank is sent (no mpirun, no steps)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    if args.payload:
        return _write(args, {"label": args.label, "ranks": args.ranks, "shape": [args.shape] * 3,
                             "porosity": args.porosity, **payload(args)})
    from solver.distributed.comm import find_mpirun

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "case.json").write_text(json.dumps(case(args.shape, args.porosity, args.steps)))
        env = dict(os.environ, PYTHONPATH=args.code, OMP_NUM_THREADS="1")
        inner = (f"exec /usr/bin/time -v -o {tmp}/mem_${{PMI_RANK:-0}}.txt {sys.executable} "
                 f"-m solver run {tmp}/case.json --output {tmp}/out --quiet")
        cmd = [find_mpirun(), "-n", str(args.ranks), "sh", "-c", inner]
        done = subprocess.run(cmd, cwd=args.code, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return done.returncode
        peaks = [peak_kb((tmp / f"mem_{r}.txt").read_text()) for r in range(args.ranks)]
        summary = json.loads((tmp / "out" / "summary.json").read_text())
    rows = "\n".join(f"| {r} | {p / 1024:.1f} |" for r, p in enumerate(peaks))
    return _write(args, {"label": args.label, "ranks": args.ranks, "shape": [args.shape] * 3,
                         "porosity": args.porosity, "steps": args.steps,
                         "fluid_nodes": summary.get("fluid_nodes"),
                         "peak_rss_mib_per_rank": [round(p / 1024, 1) for p in peaks]},
                  f"| rank | peak RSS (MiB) |\n|---:|---:|\n{rows}\n")


def _write(args: argparse.Namespace, result: dict, table: str = "") -> int:
    """Write ``result`` (with the measured checkout's commit) to results/<label>.json/.md."""
    from solver.benchmarking.results import checkout_commit, write_json_md

    commit = checkout_commit(args.code)
    result = {**result, "commit": commit}
    write_json_md(HERE / "results", args.label, result,
                  f"# {args.label}: {args.ranks} ranks, {args.shape}^3 pack, porosity "
                  f"{args.porosity}, commit {commit}\n\n{table or json.dumps(result, indent=1)}\n",
                  newline=True)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
