"""Speed of two checkouts, alternately in one call: dense 256^3 BGK float32 and the rock-like
compact float32 case, as ``Simulation`` runs them (default ``tile_storage='auto'``: the dense box
stays tiled, the rock-like pack runs compact).

Issue 27 moved how a run is planned (``solver/backends/plan.py``) without touching the kernels'
code; this checks that speed stayed within 2 %: each round runs every checkout once (the order
alternates between rounds), each in a fresh process, each case timed ``--repeats`` times over
``--steps`` steps (``backend.step``: captured CUDA graphs, device seconds), the median kept.

Usage, on the GPU machine from the repository root (about 3 minutes on an H100)::

    git worktree add /tmp/before ccff6fb   # or: git archive ccff6fb | tar -x -C /tmp/before
    python benchmarks/plan_ab/plan_ab.py --roots /tmp/before . --out benchmarks/plan_ab/results

writes ``plan-ab-<gpu>-<date>.json`` and ``.md`` (fluid G updates/s per checkout and round,
the medians and after/before).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path

#: (label, cube edge, porosity or None for the all-fluid box, grain diameter in voxels)
CASES = (("dense 256^3 BGK float32", 256, None, 0.0),
         ("rock-like 192^3 phi=0.2 d=22 BGK float32", 192, 0.2, 22.0))


def child(root: str, steps: int, repeats: int) -> None:
    """Time both cases with the solver of ``root``; print one JSON line."""
    sys.path.insert(0, root)
    import numpy as np

    from solver.benchmarking.cases import sphere_pack
    from solver.config import SimulationConfig
    from solver.simulation import Simulation

    out = []
    for label, edge, porosity, diameter in CASES:
        solid = np.zeros((edge,) * 3, bool) if porosity is None \
            else sphere_pack((edge,) * 3, porosity, diameter, 1)
        config = SimulationConfig(lattice="D3Q19", collision="BGK", precision="float32",
                                  backend="cupy")
        sim = Simulation(solid, config)
        sim.allocate()
        sim.backend.step(sim.state, 50)  # compile, capture, warm up
        seconds = [sim.backend.step(sim.state, steps) for _ in range(repeats)]
        rate = sim.problem.n_fluid * steps / statistics.median(seconds) / 1e9
        out.append({"case": label, "storage": type(sim.state).__name__,
                    "eta_t": round(sim.tiling.eta_t, 4), "fluid_g_per_s": rate,
                    "seconds": seconds})
        sim.backend.release(sim.state)
        del sim
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--child", metavar="ROOT", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/plan_ab/results"))
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.steps, args.repeats)
    roots = [str(Path(r).resolve()) for r in args.roots]
    rows = []
    for k in range(args.rounds):
        for root in (roots if k % 2 == 0 else roots[::-1]):
            done = subprocess.run([sys.executable, __file__, "--child", root, "--steps",
                                   str(args.steps), "--repeats", str(args.repeats)],
                                  capture_output=True, text=True, cwd=root, check=True)
            for r in json.loads(done.stdout.strip().splitlines()[-1]):
                rows.append({"round": k, "root": root, **r})
                print(k, Path(root).name, r["case"], r["storage"], f"{r['fluid_g_per_s']:.3f}")
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip().splitlines()[0]
    stem = f"plan-ab-{gpu.lower().replace(' ', '-')}-{date.today()}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps({"gpu": gpu, "roots": roots,
                                                      "rows": rows}, indent=1))
    lines = [f"# Speed before/after, {gpu}, {date.today()}", "",
             "| case | storage | before G/s (rounds) | after G/s (rounds) | after / before |",
             "| --- | --- | --- | --- | ---: |"]
    for label, *_ in CASES:
        med = []
        cells = []
        for root in roots:
            rates = [r["fluid_g_per_s"] for r in rows if r["root"] == root and r["case"] == label]
            med.append(statistics.median(rates))
            cells.append(" ".join(f"{x:.3f}" for x in rates))
        storage = next(r["storage"] for r in rows if r["case"] == label)
        lines.append(f"| {label} | {storage} | {cells[0]} | {cells[1]} | {med[1] / med[0]:.4f} |")
    (args.out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
