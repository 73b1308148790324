"""Launch the kernels issue 20 is about, twice each, for Nsight Compute to profile.

Run under ``ncu`` (one launch per kernel is profiled after one warm launch), e.g.::

    ncu --launch-skip-before-match 0 --kernel-name regex:lbm_ --launch-count 40 \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --csv --page details \
        python3 benchmarks/kernel_tuning/kernel_profile.py

Kernels: the tiled BGK step on a dense periodic 256^3 box (float32, float16 storage, float32
in place, MRT float16), and on the rock-like 192^3 pack (phi 0.2, 22-node grains, eta_t about
0.5) the tiled BGK step and the compact kernels (propagation probe and BGK step, per-node and
packed, float32 and float64). Prints each kernel's name with what it is, so the ncu rows can
be read. Not a timing: ncu replays each launch many times.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.backends.cuda.compact import CompactTiling  # noqa: E402
from solver.backends.plan import COMPACT_CODE  # noqa: E402
from solver.benchmarking.cases import BenchCase, sphere_pack  # noqa: E402
from solver.benchmarking.compact_probe import CompactProbe  # noqa: E402
from solver.benchmarking.gpu_suite import _problem, _rates  # noqa: E402


def tiled(backend, case: BenchCase, precision: str, streaming: str = "two-copy",
          collision: str = "BGK") -> None:
    """Two launches of the tiled full step (XYZ layout, 2 tiles per block)."""
    problem = _problem(case, precision, streaming)
    state = base = backend.allocate(problem)
    try:
        state = backend.reconfigure(state, layout="xyz", collision=collision,
                                    rates=_rates(collision, problem))
        backend.probe(state, "full", 2, 2)
        print(f"tiled {collision} {precision} {streaming} {case.label}", flush=True)
    finally:
        backend.release(base)


def compact(backend, case: BenchCase, precision: str, step: bool, packed: int = 0) -> None:
    """Two launches of a compact kernel (exact padding, halo addressing, the runs' code)."""
    problem = _problem(case, precision)
    probe = CompactProbe(CompactTiling(problem.tiling, 1), problem.periodic, precision,
                         problem.lattice.q, True, problem if step else None, packed,
                         COMPACT_CODE, xp=backend.xp)
    try:
        probe.launch(packed or 2)
        probe.launch(packed or 2)
        probe.stream.synchronize()
        print(f"compact {'BGK' if step else 'propagation'} {precision} packed {packed} "
              f"{case.label}", flush=True)
    finally:
        probe.release()


def main() -> int:
    """Launch every kernel of the list."""
    from solver.benchmarking.probe_backend import ProbeBackend  # CuPy: the GPU machine only

    backend = ProbeBackend()
    box = BenchCase("periodic box 256^3", np.zeros((256,) * 3, dtype=bool),
                    tile_offset="origin")
    rock = BenchCase("rock-like 192^3", sphere_pack((192,) * 3, 0.2, 22.0, 1), porosity=0.2)
    tiled(backend, box, "float32")
    tiled(backend, box, "float16")
    tiled(backend, box, "float32", "in-place")
    tiled(backend, box, "float16", collision="MRT")
    tiled(backend, rock, "float32")
    for precision in ("float32", "float64"):
        compact(backend, rock, precision, False)
        compact(backend, rock, precision, True)
    compact(backend, rock, "float32", True, packed=4)
    return 0


if __name__ == "__main__":
    sys.exit(main())
