"""Time from "preview this geometry" to the first step of its run, on the CPU (NumPy).

The app's preview tiles the geometry (with the offset search) and the run then used to tile it
again; now the preview's Problem is reused. Both ways run here in fresh subprocesses on the
same generated sphere pack, so they can be compared:

    python benchmarks/preview_to_first_step/preview_to_first_step.py 256  # one JSON line per way
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from app.geometry_sources import make_preview
from geometries import generators
from solver.config import SimulationConfig
from solver.memory import assess_memory
from solver.simulation import Simulation
n, reuse = {n}, {reuse}
geometry = generators.random_sphere_pack((n, n, n), porosity=0.3, diameter=16, seed=1)
config = SimulationConfig(backend="numpy", precision="float32", body_force=(1e-6, 0, 0))
t0 = time.perf_counter()
preview = make_preview(geometry, config)
t1 = time.perf_counter()
verdict = assess_memory(preview.problem, "numpy")
if verdict.level == "refused":
    raise SystemExit(verdict.message)
sim = Simulation(geometry, preview.config, "numpy", problem=preview.problem if reuse else None)
t2 = time.perf_counter()
sim.step(1)
t3 = time.perf_counter()
print(json.dumps(dict(n=n, reuse=reuse, preview_s=t1 - t0, problem_s=t2 - t1,
                      first_step_s=t3 - t2, total_s=t3 - t0, fluid=preview.n_fluid,
                      required_bytes=verdict.required)))
"""


def run(n: int, reuse: bool) -> dict:
    """One way, in a fresh interpreter; seconds of each stage."""
    code = CHILD.format(root=str(ROOT), n=n, reuse=reuse)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=1800)
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    for reuse in (False, True):
        print(json.dumps(run(size, reuse)), flush=True)
