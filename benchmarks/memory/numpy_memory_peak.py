"""Peak host memory of NumPy-backend runs against the backend's estimate.

Each case runs in a fresh subprocess: build the geometry, note the resident set size (RSS), then
build the Simulation, step it a few times and take the health and a slice as the runner does;
the peak is the high-water mark ``VmHWM`` minus the RSS before. Prints one JSON line per case
with the estimate of :meth:`NumpyBackend.memory_required` and their ratio.

    python benchmarks/memory/numpy_memory_peak.py    # 48^3, 64^3, 96^3 boxes and a 96^3 pack
    python benchmarks/memory/numpy_memory_peak.py 128 box float32
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, resource, sys
import numpy as np
sys.path.insert(0, {root!r})
from solver.config import SimulationConfig
from solver.simulation import Simulation
from solver.backends import get_backend
n, kind, precision = {n}, {kind!r}, {precision!r}
if kind == "box":
    solid = np.zeros((n, n, n), dtype=bool)
    force = (1e-6, 0, 0)
    faces = dict(y_min="wall", y_max="wall")
else:
    from geometries import generators
    solid = generators.random_sphere_pack((n, n, n), porosity=0.45, diameter=12, seed=1).solid
    force, faces = (1e-6, 0, 0), {{}}
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()
def high_water():
    # VmHWM: the peak of this process image. ru_maxrss would not do: Linux carries the
    # parent's peak over fork and exec, so a child of a large pytest starts at its size.
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith("VmHWM:"))
config = SimulationConfig(backend="numpy", precision=precision, body_force=force, **faces)
backend = get_backend("numpy")
before = rss()
sim = Simulation(solid, config, backend=backend)
estimate = backend.memory_required(sim.problem)
sim.step(2)
sim.health()
sim.view(2, n // 2, "umag", health=True)
peak = high_water() - before
print(json.dumps(dict(n=n, kind=kind, precision=precision, fluid=int(sim.problem.n_fluid),
                      tiles=int(sim.tiling.n_tiles), measured=peak, estimate=estimate,
                      ratio=estimate / peak)))
"""


def measure(n: int, kind: str = "box", precision: str = "float64") -> dict:
    """Run one case in a fresh interpreter; return its measured peak and the estimate (bytes)."""
    code = CHILD.format(root=str(ROOT), n=n, kind=kind, precision=precision)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=900)
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    if len(sys.argv) > 1:
        cases = [(int(sys.argv[1]), *sys.argv[2:4])]
    else:
        cases = [(48, "box"), (64, "box"), (96, "box"), (96, "pack"), (96, "box", "float32")]
    for case in cases:
        print(json.dumps(measure(*case)), flush=True)
