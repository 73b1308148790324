"""The host set-up of the mirrored runner over ranks, part by part, on the CPU (issue 33).

At 1600³ on 4 x H200 a rank spent 61 s building its fine solver (``local_rank``) and 40 s
setting up the coarse levels, against 83 s of fine steps. Most of that is host work that
does not need a GPU: this script times it on NumPy arrays, under ``mpirun``, each rank its
own part of a generated rock-like image (:class:`geometries.regions.GrainRegions`, porosity
0.2, grains of 21 voxels, mirrored along x, 4³ tiles, slabs on multiples of 8 tile layers as
the runner cuts them for 3 coarse levels):

- ``summary``: :func:`~solver.distributed.local_setup.summarize` of the fine box;
- ``slab``: :func:`~solver.distributed.local_setup.local_part` (read and tile the slab);
- ``halo``: :func:`~solver.distributed.halo.build_rank` (the rank's layout and halo plan,
  what :class:`~solver.distributed.rank.RankSolver` builds first);
- ``tables``: :func:`~solver.backends.cuda.tables.device_tables` of the rank's layout (the
  host arrays a tiled GPU run uploads);
- ``coarse summaries`` (:func:`~solver.distributed.coarse_start.coarse_levels`) and, per
  coarse level, its slab, halo and tables.

Each part is timed between barriers on every rank; the table gives the slowest rank's
seconds, the least of ``--repeats`` runs (a fresh image each time: nothing cached between
runs). The device's own work (uploads, allocation, the kernels) is not in these numbers.

Usage (writes ``mirrored-setup-cpu-<size>-<ranks>r-<label>-<date>.{json,md}`` to
``benchmarks/scaling/results/``)::

    mpirun -n 2 python benchmarks/scaling/mirrored_setup_cpu.py --size 256 --label after
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

OUT = REPO / "benchmarks" / "scaling" / "results"


def _parts(size: int, comm) -> dict[str, float]:
    """One run of every part on this rank: seconds by part name."""
    from geometries.regions import CachedRegions, GrainRegions, MirroredRegions
    from solver.backends.cuda.tables import device_tables
    from solver.config import SimulationConfig
    from solver.distributed.coarse_start import coarse_levels, feasible_levels
    from solver.distributed.halo import build_rank
    from solver.distributed.local_setup import local_part, summarize
    from solver.distributed.mirrored import _level_bounds, mirrored_config
    from solver.rock.settings import PermeabilitySettings

    rank, n = comm.Get_rank(), comm.Get_size()
    times: dict[str, float] = {}

    def timed(name, f, *args):
        comm.Barrier()
        tic = time.perf_counter()
        out = f(*args)
        times[name] = time.perf_counter() - tic
        return out

    def rank_parts(prefix, box, cfg, summary, bounds):
        problem, dec = timed(f"{prefix}slab", local_part, box, cfg, summary, n, rank, bounds)
        layout, _ = timed(f"{prefix}halo", build_rank, problem.tiling, dec, problem.lattice,
                          problem.periodic, rank)
        timed(f"{prefix}tables", device_tables,
              dataclasses.replace(problem, tiling=layout.tiling, owned=layout.owned))

    config = SimulationConfig(backend="numpy", precision="float32", storage="float16")
    sample = CachedRegions(GrainRegions((size,) * 3, 0.2, 21, 1), 0)
    box = MirroredRegions(sample, 0)
    summary = timed("summary", summarize, box, 0, 4, comm)
    cfg, _ = mirrored_config(summary, config, PermeabilitySettings())
    bounds, levels = _level_bounds(summary, n, feasible_levels(tuple(sample.shape), 0, 4, 3))
    rank_parts("", box, cfg, summary, bounds)
    for level in timed("coarse summaries", coarse_levels, sample, 0, cfg, levels, bounds, 4,
                       comm):
        rank_parts(f"1/{level.scale} ", level.box, level.config, level.summary, level.bounds)
    return times


def main(argv: list[str] | None = None) -> int:
    """Time the parts on every rank; rank 0 writes the JSON and markdown."""
    from solver.benchmarking.results import run_meta, write_json_md
    from solver.distributed.comm import world

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=256, help="sample edge, voxels")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--label", default="after", help="part of the file name")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    comm = world()
    runs = [comm.gather(_parts(args.size, comm), root=0) for _ in range(args.repeats)]
    if comm.Get_rank():
        return 0
    names = list(runs[0][0])
    # The slowest rank of a run, the least of the runs.
    seconds = {k: min(max(r[k] for r in run) for run in runs) for k in names}
    coarse = sum(v for k, v in seconds.items() if k.startswith(("1/", "coarse")))
    record = {**run_meta("cpu", label=args.label), "size": args.size,
              "ranks": comm.Get_size(), "repeats": args.repeats, "seconds": seconds,
              "coarse_total": coarse, "runs": runs}
    lines = [f"# Mirrored runner's host set-up on the CPU, {args.size}³ sample, "
             f"{comm.Get_size()} ranks ({args.label})", "",
             f"Commit {record['commit']}, {record['date']}; slowest rank, least of "
             f"{args.repeats} runs. Command: `mpirun -n {comm.Get_size()} python "
             f"benchmarks/scaling/mirrored_setup_cpu.py --size {args.size} "
             f"--label {args.label}`.", "", "| part | seconds |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.3f} |" for k, v in seconds.items()]
    lines += [f"| coarse levels, all parts | {coarse:.3f} |", ""]
    stem = f"mirrored-setup-cpu-{args.size}-{comm.Get_size()}r-{args.label}-{record['date']}"
    write_json_md(args.out, stem, record, "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
