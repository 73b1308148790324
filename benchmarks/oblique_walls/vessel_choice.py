"""A stenosis or expansion at the default settings with and without AUTO_TAU's raise.

Runs :func:`solver.validation.stenosis.run_tube` (SI values only, the CLI's path, NumPy; the
stenosis at its 'ci' lengths, the expansion at 'full', it has no other) for a throat Reynolds
number and diameter in voxels, with ``AUTO_MACH`` as shipped or set to 0 (the choice before it:
the target's own tau, RR below 0.55). Prints and appends one JSON row: status (stability),
tau, collision, Mach, mass balance, pressure drops, and the expansion's jet.

Usage (CPU, minutes): ``python benchmarks/oblique_walls/vessel_choice.py KIND RE D [AUTO_MACH]``
appends to ``benchmarks/oblique_walls/results/vessel_choice.jsonl``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import solver.lattice_parameters as lattice_parameters  # noqa: E402
from solver.validation.stenosis import run_tube  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    kind, reynolds, d = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    if len(sys.argv) > 4:
        lattice_parameters.AUTO_MACH = float(sys.argv[4])
    r = run_tube(kind, reynolds, d, "ci" if kind == "stenosis" else "full", "numpy")
    row = {"kind": kind, "re": reynolds, "d": d, "auto_mach": lattice_parameters.AUTO_MACH,
           "status": r.status, "steps": r.steps, "tau": r.tau, "collision": r.collision,
           "mach": r.mach, "balance": r.balance, "drop": r.drop,
           "station_drop": r.station_drop, "centreline": r.centreline,
           "reattachment": r.reattachment, "seconds": r.seconds}
    print(json.dumps(row), flush=True)
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "vessel_choice.jsonl", "a") as fh:
        fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
