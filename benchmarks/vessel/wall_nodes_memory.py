"""Host peak memory and time of the wall nodes (solver.wall_shear.wall_nodes) on a vessel-like
tube: slabs along axis 0 against the whole-grid build it replaced (kept as the tests' reference).

Run from the repository root: ``python benchmarks/vessel/wall_nodes_memory.py [--n 256]``;
writes ``benchmarks/vessel/results/cpu-<date>-<commit>-wall-nodes-<n>.{json,md}``.
"""

from __future__ import annotations

import argparse
import datetime
import pathlib
import sys
import time
import tracemalloc

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.wall_shear import wall_nodes  # noqa: E402
from tests.solver.test_wall_nodes_slabs import (  # noqa: E402
    WALLS,
    problem_of,
    vessel_tube,
    whole_grid_walls,
)


def measure(fn) -> tuple[float, int, object]:
    """(seconds without tracing, traced peak bytes, result) of ``fn()``."""
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256, help="box edge in voxels")
    args = parser.parse_args()
    problem = problem_of(vessel_tube(args.n), **WALLS)
    rows = {}
    for name, fn in (("whole grid (before)", lambda: whole_grid_walls(problem)),
                     ("slabs (after)", lambda: wall_nodes(problem))):
        seconds, peak, walls = measure(fn)
        rows[name] = {"seconds": round(seconds, 3), "peak_MB": round(peak / 1e6, 1),
                      "wall_nodes": len(walls.voxels)}
    commit = git_commit()
    date = datetime.date.today().isoformat()
    record = {"date": date, "commit": commit, "box": [args.n] * 3,
              "voxels": args.n**3, "rows": rows}
    lines = [f"wall_nodes, {args.n}³ vessel tube, D3Q19, {date}, {commit}", "",
             "| build | peak (tracemalloc) | time | wall nodes |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {k} | {v['peak_MB']} MB | {v['seconds']} s | {v['wall_nodes']} |"
              for k, v in rows.items()]
    write_json_md(ROOT / "benchmarks/vessel/results", f"cpu-{date}-{commit}-wall-nodes-{args.n}",
                  record, "\n".join(lines) + "\n", indent=2, newline=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
