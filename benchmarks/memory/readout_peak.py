"""Device memory at the peak of each readout of a run, against its resident state (issue 20).

On a rock-like periodic pack (192^3, phi 0.2, grains of 22 nodes, eta_t about 0.5), for the
compact and the tiled storage in float32 and float64, a BGK run is stepped, then each readout
the dashboard, the CLI and the runner make is done once: a health check, a live view with
health, a slice, the fields, the populations a checkpoint writes, a checkpoint file and the
wall shear stress (``--streaming in-place``: the same in place, AA pattern, one copy). Reported
per readout: the peak of the CuPy pool's bytes in use (every
allocation passes through a tracking allocator) above the resident state, and the peak in
bytes per fluid node next to the resident state's and the estimate
(:func:`solver.memory.device_bytes`), and the readout's wall time. Usage on the GPU machine:
``python benchmarks/memory/readout_peak.py --out $OUT`` (``--size 96`` for a quick run; on a machine
without CuPy the NumPy backend runs it, tracemalloc measuring, for a smoke test).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.benchmarking.cases import sphere_pack  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.memory import device_bytes  # noqa: E402
from solver.problem import Problem  # noqa: E402
from solver.simulation import Simulation  # noqa: E402


class PoolPeak:
    """Peak of the CuPy pool's bytes in use, tracked at every allocation."""

    def __init__(self, cp) -> None:
        self.cp, self.pool = cp, cp.get_default_memory_pool()
        self.peak = 0
        cp.cuda.set_allocator(self._malloc)

    def _malloc(self, size: int):
        memory = self.pool.malloc(size)
        self.peak = max(self.peak, self.pool.used_bytes())
        return memory

    def used(self) -> int:
        """Bytes in use now (after the queued work)."""
        self.cp.cuda.Device().synchronize()
        return int(self.pool.used_bytes())

    def measure(self, action) -> tuple[int, float]:
        """(peak bytes in use during ``action()``, its seconds)."""
        self.cp.cuda.Device().synchronize()
        self.peak = self.used()
        start = time.perf_counter()
        action()
        self.cp.cuda.Device().synchronize()
        return self.peak, time.perf_counter() - start


class HostPeak:
    """The same on the host (NumPy backend): tracemalloc's peak."""

    def used(self) -> int:
        """Bytes traced now (0 while not tracing)."""
        return tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0

    def measure(self, action) -> tuple[int, float]:
        """(bytes traced at the peak of ``action()`` above those before, its seconds)."""
        tracemalloc.start()
        start = time.perf_counter()
        try:
            action()
            return tracemalloc.get_traced_memory()[1], time.perf_counter() - start
        finally:
            tracemalloc.stop()


def readouts(sim: Simulation, folder: Path) -> dict:
    """The readouts to measure, by name."""
    middle = sim.solid.shape[2] // 2
    return {"health": sim.health, "view+health": lambda: sim.view(2, middle, "umag"),
            "slice": lambda: sim.slice(2, middle, "umag"), "fields": sim.fields,
            "populations": sim.populations, "checkpoint": lambda: sim.save(folder / "c.npz"),
            "wall shear": sim.wall_shear_stress}


def run(size: int, steps: int, out: Path | None, streaming: str = "two-copy") -> list[dict]:
    """Measure every storage and precision; print and write a table."""
    try:
        import cupy as cp

        tracker, backend = PoolPeak(cp), "cupy"
    except ImportError:
        tracker, backend = HostPeak(), "numpy"
    solid = sphere_pack((size,) * 3, 0.2, 22, 1)
    rows = []
    for precision in ("float32", "float64"):
        for storage in ("compact", "tiled"):
            config = SimulationConfig(lattice="D3Q19", collision="BGK", precision=precision,
                                      tile_storage=storage, backend=backend,
                                      streaming=streaming, body_force=(1e-6, 0.0, 0.0))
            problem = Problem.from_config(solid, config)
            sim = Simulation(solid, config, problem=problem)
            sim.step(steps)
            sim.health()  # the fluid mask and the kernels' loading, once per run
            resident = tracker.used()
            fluid = sim.problem.n_fluid
            row = {"storage": storage, "precision": precision, "streaming": streaming,
                   "n_fluid": fluid,
                   "eta_t": round(float(sim.tiling.eta_t), 3),
                   "state_B_per_fluid": round(sim.memory_bytes() / fluid, 1),
                   "resident_B_per_fluid": round(resident / fluid, 1),
                   "estimate_B_per_fluid": round(device_bytes(sim.problem) / fluid, 1)}
            with tempfile.TemporaryDirectory() as folder:
                for name, action in readouts(sim, Path(folder)).items():
                    peak, seconds = tracker.measure(action)
                    row[name] = {"peak_B_per_fluid": round(peak / fluid, 1),
                                 "extra_MiB": round((peak - resident) / 2**20, 1),
                                 "ms": round(seconds * 1e3, 1)}
            sim.close()
            rows.append(row)
            print(json.dumps(row), flush=True)
            if out is not None:
                write(rows, size, out, streaming)
    return rows


def write(rows: list[dict], size: int, out: Path, streaming: str = "two-copy") -> None:
    """``readout-peak.json`` (in place: ``readout-peak-in-place.json``) and a markdown table in
    ``out``."""
    stem = "readout-peak" + ("" if streaming == "two-copy" else f"-{streaming}")
    record = {"commit": git_commit(), "size": size, "streaming": streaming, "rows": rows}
    names = [k for k in rows[0] if isinstance(rows[0][k], dict)]
    lines = [f"Rock-like {size}^3 (phi 0.2, d 22), {streaming}, commit {git_commit()}: bytes per "
             "fluid node at each readout's peak (extra MiB over the resident state, ms)", "",
             "| storage | state | resident | estimate | " + " | ".join(names) + " |",
             "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in names) + " |"]
    for r in rows:
        cells = [f"{r[n]['peak_B_per_fluid']:.0f} (+{r[n]['extra_MiB']:.0f}, {r[n]['ms']:.0f})"
                 for n in names]
        lines.append(f"| {r['storage']} {r['precision']} | {r['state_B_per_fluid']:.0f} | "
                     f"{r['resident_B_per_fluid']:.0f} | {r['estimate_B_per_fluid']:.0f} | "
                     + " | ".join(cells) + " |")
    write_json_md(out, stem, record, "\n".join(lines) + "\n")
    print("\n".join(lines))


def estimates(size: int, diameter: float) -> None:
    """Print the resident state and the estimated peak (device_bytes) in bytes per fluid node
    of every storage and streaming on a phi 0.2 pack (no GPU needed)."""
    from solver.backends.cuda.compact_readout import state_bytes

    solid = sphere_pack((size,) * 3, 0.2, diameter, 1)
    kinds = [("tiled", "two-copy"), ("compact", "two-copy"), ("tiled", "in-place"),
             ("compact", "in-place")]
    print(f"{size}^3 pack phi 0.2 d {diameter:g}: state / peak bytes per fluid node")
    print("| storage | " + " | ".join(f"{k} {s}" for k, s in kinds) + " |")
    print("| --- |" + " ---: |" * len(kinds))
    for precision in ("float32", "float64"):
        cells = []
        for storage, streaming in kinds:
            p = Problem.from_config(solid, SimulationConfig(
                lattice="D3Q19", collision="BGK", precision=precision, tile_storage=storage,
                streaming=streaming))
            cells.append(f"{state_bytes(p) / p.n_fluid:.0f} / {device_bytes(p) / p.n_fluid:.0f}")
        print(f"| {precision} (eta_t {p.tiling.eta_t:.3f}) | " + " | ".join(cells) + " |")


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=192)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--estimates", type=float, default=0.0, metavar="DIAMETER",
                        help="only print the estimated bytes per fluid node (CPU) of a pack "
                             "of this grain diameter")
    parser.add_argument("--streaming", choices=("two-copy", "in-place"), default="two-copy")
    args = parser.parse_args()
    if args.estimates:
        estimates(args.size, args.estimates)
    else:
        run(args.size, args.steps, args.out, args.streaming)


if __name__ == "__main__":
    main()
