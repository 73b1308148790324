"""Rank 0's host memory and set-up time against a serving rank's, ``mpirun ... solver run``.

One point per rank count: ``mpirun -n N python benchmarks/scaling/rank0_memory.py rank CASE
OUT`` runs the ordinary ``python -m solver run CASE`` (NumPy ranks, CPU) on a periodic sphere
pack, with a probe on every rank that records, at the end of each phase of interest, the
resident set (``/proc/self/statm``) and the peak so far (``ru_maxrss``): the Simulation built
(geometry read, tiled, problem made), the allocation done (the set-up: CPU seconds to there),
each health check (the run monitor), each ``.vti`` (over ranks: each rank's piece and rank 0's
``.pvti``) and each checkpoint written; at exit the
rank's peak and CPU time. The parent writes ``rank0-memory-<cpu>-<size>-<date>.json`` and
``.md`` to ``--out`` (default benchmarks/scaling/results/) with, per point and rank, the
peak, the set-up CPU seconds and the phase that first raised the peak, and the sizes of the
whole-case host arrays rank 0 held (solid mask, tiling tables, one gathered float64 copy of
the populations, the fields of a ``.vti``) computed from the same problem.

Usage::

    python benchmarks/scaling/rank0_memory.py --size 160 --ranks 2 4
    python benchmarks/scaling/rank0_memory.py --size 96 --ranks 2 --steps 10   # quick
    python benchmarks/scaling/rank0_memory.py setup --sizes 160 256   # rank 0's set-up alone
    python benchmarks/scaling/rank0_memory.py held --size 256 --ranks 2  # what rank 0 keeps
    python benchmarks/scaling/rank0_memory.py setup-ranks --sizes 160 256 --ranks 2 4
        # rank 0's set-up under mpirun (no allocation): tracemalloc peak and held, per voxel

Needs mpi4py and an ``mpirun`` (``$MPIRUN``, else the one next to the Python, else PATH's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from solver.benchmarking.results import checkout_commit, write_json_md  # noqa: E402

MIB = 2.0**20


def _rss() -> int:
    """Resident bytes of this process now."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak() -> int:
    """Peak resident bytes of this process so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class Probe:
    """Phases of one rank: (name, rss, peak, cpu seconds) at the end of each."""

    def __init__(self) -> None:
        self.rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", 0)))
        self.phases: list[tuple[str, int, int, float]] = []
        self.setup_cpu: float | None = None
        self.setup_wall: float | None = None
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}  # wall seconds inside each wrapped call

    def mark(self, name: str) -> None:
        self.phases.append((name, _rss(), _peak(), time.process_time()))

    def wrap(self, owner, attr: str, name: str, after=None) -> None:
        """Mark ``name`` after every call of ``owner.attr``; add up its wall time."""
        inner = getattr(owner, attr)

        def wrapped(*args, **kwargs):
            tic = time.perf_counter()
            out = inner(*args, **kwargs)
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - tic
            self.mark(name)
            if after is not None:
                after()
            return out

        setattr(owner, attr, wrapped)

    def report(self) -> dict:
        self.mark("exit")
        first = None  # the phase whose end first saw the final peak
        for name, _, peak, _ in self.phases:
            if peak >= self.phases[-1][2] * 0.99:
                first = name
                break
        return {"rank": self.rank, "peak_bytes": _peak(), "cpu_s": time.process_time(),
                "setup_cpu_s": self.setup_cpu, "setup_wall_s": self.setup_wall,
                "peak_phase": first,
                "seconds_in": {k: round(v, 3) for k, v in self.seconds.items()},
                "phases": [{"phase": n, "rss_mib": round(r / MIB, 1),
                            "peak_mib": round(p / MIB, 1), "cpu_s": round(c, 2)}
                           for n, r, p, c in _squeeze(self.phases)]}


def _squeeze(phases: list) -> list:
    """Consecutive repeats of a phase kept once (the last), so a long run reads short."""
    out: list = []
    for item in phases:
        if out and out[-1][0] == item[0]:
            out[-1] = item
        else:
            out.append(item)
    return out


def rank_main(case: str, out: str, report: str) -> int:
    """One rank: ``solver run CASE`` under the probe; writes REPORT.<rank>.json."""
    from solver import io, readout, run, simulation
    from solver.__main__ import main
    from solver.distributed import backend as dist

    probe = Probe()
    probe.mark("imports")

    def allocated() -> None:
        if probe.setup_cpu is None:
            probe.setup_cpu = time.process_time()
            probe.setup_wall = time.perf_counter() - probe.start

    probe.wrap(simulation.Simulation, "__init__", "simulation built")
    probe.wrap(dist.DistributedBackend, "_allocate", "allocated", allocated)
    probe.wrap(readout.Readout, "health", "health check")
    probe.wrap(run, "write_vti", "vti written")
    if hasattr(dist.DistributedBackend, "write_vti_pieces"):  # over ranks: a .pvti (rank 0)
        probe.wrap(dist.DistributedBackend, "write_vti_pieces", "vti written")
    probe.wrap(run, "save_simulation" if hasattr(run, "save_simulation") else
               "write_checkpoint", "checkpoint written")
    probe.wrap(dist.DistributedBackend, "_gather", "gather")
    probe.wrap(dist.RankSolver, "__init__", "rank solver built")
    probe.wrap(dist, "rank_part", "part cut")
    probe.wrap(dist, "decompose", "decomposed")
    for name in ("_moments", "_nodes", "_write_parts", "_load_parts", "_vti_piece"):
        if hasattr(dist.DistributedBackend, name):
            probe.wrap(dist.DistributedBackend, name, name.strip("_"))
    del io
    code = main(["run", case, "--output", out, "--quiet"])
    Path(f"{report}.{probe.rank}.json").write_text(json.dumps(probe.report()))
    return code


def _case(folder: Path, size: int, steps: int, vti: bool) -> Path:
    """A periodic sphere pack of size^3 (porosity 0.4, grains of 16 nodes) and its case."""
    import yaml

    from benchmarks.scaling.scaling import sphere_pack

    geometry = folder / f"pack-{size}.npy"
    if not geometry.exists():
        np.save(geometry, sphere_pack((size,) * 3, 0.4, 16.0, 0))
    case = {"name": f"pack{size}", "geometry": {"file": geometry.name},
            "config": {"precision": "float64", "tau": 0.8, "body_force": [1e-6, 0, 0],
                       "backend": "numpy"},
            "run": {"max_steps": steps, "output_interval": steps, "check_interval": steps,
                    "checkpoint_interval": 0, "convergence": 0, "vti": vti}}
    path = folder / f"pack-{size}.yaml"
    path.write_text(yaml.safe_dump(case))
    return path


def whole_arrays(geometry: Path) -> dict[str, float]:
    """MiB of the whole-case host arrays rank 0 held before this work (one process's view)."""
    from solver.config import SimulationConfig
    from solver.problem import Problem

    solid = np.load(geometry)
    problem = Problem.from_config(solid, SimulationConfig(precision="float64", tau=0.8))
    t = problem.tiling
    tables = sum(v.nbytes for v in vars(t).values() if isinstance(v, np.ndarray))
    pops = t.n_tiles * problem.lattice.q * t.nodes_per_tile * 8
    return {"solid_mask": solid.nbytes / MIB, "tiling_arrays": tables / MIB,
            "gathered_populations_float64": pops / MIB,
            "vti_fields_float64": 4 * solid.size * 8 / MIB,
            "n_tiles": t.n_tiles, "fluid_nodes": problem.n_fluid}


def measure(args: argparse.Namespace) -> dict:
    """Every point of ``args.ranks``; the results as one JSON-ready dict."""
    from solver.distributed.comm import find_mpirun

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    case = _case(work, args.size, args.steps, not args.no_vti)
    points = []
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for n in args.ranks:
        report = work / f"report-{n}"
        for old in work.glob(f"report-{n}.*.json"):
            old.unlink()
        tic = time.perf_counter()
        done = subprocess.run([find_mpirun(), "-n", str(n), sys.executable, __file__, "rank",
                               str(case), str(work / f"out-{n}"), str(report)],
                              cwd=work, env=env, capture_output=True, text=True,
                              timeout=args.timeout)
        wall = time.perf_counter() - tic
        if done.returncode != 0:
            points.append({"ranks": n, "error": done.stderr[-2000:]})
            continue
        ranks = [json.loads(Path(f"{report}.{r}.json").read_text()) for r in range(n)]
        points.append({"ranks": n, "wall_s": round(wall, 2), "per_rank": ranks})
    return {"size": args.size, "steps": args.steps, "vti": not args.no_vti,
            "commit": _commit(), "date": date.today().isoformat(),
            "whole_case_mib": whole_arrays(work / f"pack-{args.size}.npy"), "points": points}


def _commit() -> str:
    """The checkout's commit; ``LBM_COMMIT`` where it has no ``.git``."""
    found = checkout_commit(REPO)
    return os.environ.get("LBM_COMMIT", "unknown") if found == "unknown" else found


def markdown(result: dict) -> str:
    """The result as a short Markdown table."""
    lines = [f"# Rank 0's host memory, {result['size']}³ pack, NumPy ranks "
             f"({result['date']}, {result['commit']})", "",
             f"{result['steps']} steps, one health check, .vti {'on' if result['vti'] else 'off'}"
             ", checkpoint at the end. Set-up wall: process start (imports done) to the end of "
             "the allocation; own set-up: the rank's time in building the Simulation (rank 0: "
             "read, tile, problem), decomposing, cutting the parts and building its rank "
             "solver (the rest of a serving rank's set-up is waiting for rank 0).", "",
             "| ranks | rank | peak RSS (MiB) | set-up wall (s) | own set-up (s) | "
             "peak reached at |", "|---:|---:|---:|---:|---:|---|"]
    for point in result["points"]:
        if "error" in point:
            lines.append(f"| {point['ranks']} | – | failed | | |")
            continue
        for r in point["per_rank"]:
            setup = r.get("setup_wall_s")
            own = sum(v for k, v in r.get("seconds_in", {}).items()
                      if k in ("simulation built", "decomposed", "part cut",
                               "rank solver built"))
            lines.append(f"| {point['ranks']} | {r['rank']} | {r['peak_bytes'] / MIB:.0f} | "
                         f"{'–' if setup is None else f'{setup:.1f}'} | {own:.1f} | "
                         f"{r['peak_phase']} |")
    whole = result["whole_case_mib"]
    lines += ["", "Whole-case host arrays of this case (MiB): " + ", ".join(
        f"{k} {v:.1f}" for k, v in whole.items() if k not in ("n_tiles", "fluid_nodes")) +
        f"; {whole['n_tiles']} tiles, {whole['fluid_nodes']} fluid nodes.", ""]
    return "\n".join(lines)


def setup_point(size: int, work: str) -> dict:
    """What rank 0's set-up of ``solver run`` builds for a size^3 pack in one process (the
    geometry read, the case's checks, the whole tiling and problem): seconds, and from
    ``tracemalloc`` (which sees NumPy's arrays) the peak during it and what it holds after,
    then what it holds once the voxel image is dropped as rank 0 over MPI ranks drops it
    (``Simulation.release_mask``), MiB."""
    import tracemalloc

    from solver.case import load_case
    from solver.run import HeadlessRun

    folder = Path(work)
    folder.mkdir(parents=True, exist_ok=True)
    case = load_case(_case(folder, size, 4, True))
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tic = time.perf_counter()
    run = HeadlessRun(case, out=folder / "out")
    seconds = time.perf_counter() - tic
    held, peak = tracemalloc.get_traced_memory()
    released = None
    if hasattr(run.sim, "release_mask"):  # absent before this step
        run.geometry = run.sim.release_mask()
        released = round((tracemalloc.get_traced_memory()[0] - base) / MIB, 1)
    return {"size": size, "voxels": size**3, "setup_s": round(seconds, 2),
            "peak_mib": round((peak - base) / MIB, 1), "held_mib": round((held - base) / MIB, 1),
            "held_released_mib": released, "n_tiles": run.sim.tiling.n_tiles}


def setup_series(args: argparse.Namespace) -> int:
    """``setup --sizes ...``: :func:`setup_point` per size, each in a fresh process."""
    points = []
    for size in args.sizes:
        done = subprocess.run([sys.executable, __file__, "setup-point", str(size), args.work],
                              capture_output=True, text=True, timeout=args.timeout)
        points.append(json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0
                      else {"size": size, "error": done.stderr[-2000:]})
    result = {"commit": _commit(), "date": date.today().isoformat(), "points": points}
    lines = [f"# Rank 0's set-up of `solver run` in one process ({result['date']}, "
             f"{result['commit']})", "", "NumPy arrays (tracemalloc) during the set-up (read, "
             "checks, whole tiling and problem) and held after it; the last columns: held once "
             "the voxel image is dropped, as rank 0 over MPI ranks does.", "",
             "| size | voxels | set-up (s) | peak (MiB) | held after (MiB) | held, image dropped "
             "(MiB) | bytes a voxel: peak, held, dropped |", "|---:|---:|---:|---:|---:|---:|---|"]
    for p in points:
        if "error" not in p:
            dropped = p.get("held_released_mib")
            per = [p["peak_mib"], p["held_mib"]] + ([] if dropped is None else [dropped])
            lines.append(f"| {p['size']}³ | {p['voxels']} | {p['setup_s']} | {p['peak_mib']} | "
                         f"{p['held_mib']} | {'–' if dropped is None else dropped} | "
                         + ", ".join(f"{v * MIB / p['voxels']:.2f}" for v in per) + " |")
    return _write(args.out, f"rank0-setup-cpu-{'-'.join(map(str, args.sizes))}{args.tag}-"
                  f"{result['date']}", result, "\n".join(lines) + "\n")


def arrays_held(roots: dict) -> list[tuple[str, int, str, tuple]]:
    """Every NumPy buffer reachable from ``roots`` (attributes, dicts, sequences), once each
    (a view counts as its base): (first path found, bytes, dtype, shape), largest first."""
    import types

    seen: set[int] = set()
    owners: dict[int, tuple] = {}
    stack = list(roots.items())[::-1]
    skip = (types.ModuleType, types.FunctionType, type, str, bytes, int, float, bool)
    while stack:
        path, obj = stack.pop()
        if obj is None or isinstance(obj, skip) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            base = obj
            while isinstance(base.base, np.ndarray):
                base = base.base
            owners.setdefault(id(base), (path, base.nbytes, obj.dtype.name, obj.shape))
            continue
        if isinstance(obj, dict):
            items = [(f"{path}[{k!r}]", v) for k, v in obj.items()]
        elif isinstance(obj, list | tuple | set | frozenset):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(obj)]
        elif hasattr(obj, "__dict__") or hasattr(type(obj), "__slots__"):
            attrs = dict(getattr(obj, "__dict__", {}))
            for name in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, name):
                    attrs[name] = getattr(obj, name)
            items = [(f"{path}.{k}", v) for k, v in attrs.items()]
        else:
            continue
        stack.extend(items[::-1])
    return sorted(owners.values(), key=lambda r: -r[1])


def held_rank(case: str, out: str, report: str) -> int:
    """Rank 0 of ``mpirun``: ``solver run``'s set-up and allocation (HeadlessRun on a
    DistributedBackend), then every array it keeps, written to ``report`` as JSON."""
    from solver.case import load_case
    from solver.distributed.launch import launch
    from solver.run import HeadlessRun

    def on_root(backend) -> None:
        run = HeadlessRun(load_case(case), out=out, backend=backend)
        run.sim.allocate()
        rows = arrays_held({"run": run})
        arrays = [{"path": p, "bytes": n, "dtype": d, "shape": list(sh)}
                  for p, n, d, sh in rows]
        voxels = int(np.prod(run.sim.tiling.shape))
        Path(report).write_text(json.dumps({"voxels": voxels, "arrays": arrays}))
        run.sim.close()

    launch(on_root, inner="numpy")
    return 0


def held_table(args: argparse.Namespace) -> int:
    """``held --size S --ranks N``: the arrays rank 0 keeps after the set-up, whole-case ones
    apart from its own rank's share; JSON + md to ``--out``."""
    from solver.distributed.comm import find_mpirun

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    case = _case(work, args.size, 4, True)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    report = work / f"held-{args.size}-{args.ranks}.json"
    done = subprocess.run([find_mpirun(), "-n", str(args.ranks), sys.executable, __file__,
                           "held-rank", str(case), str(work / "out-held"), str(report)],
                          cwd=work, env=env, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return 1
    found = json.loads(report.read_text())
    own = [a for a in found["arrays"] if "._solver" in a["path"]]  # rank 0's own rank share
    whole = [a for a in found["arrays"] if "._solver" not in a["path"]]
    result = {"commit": _commit(), "date": date.today().isoformat(), "size": args.size,
              "ranks": args.ranks, "voxels": found["voxels"], "whole_case": whole,
              "own_rank_bytes": sum(a["bytes"] for a in own),
              "own_rank_largest": own[:8]}
    total = sum(a["bytes"] for a in whole)
    lines = [f"# What rank 0 keeps after `solver run`'s set-up, {args.size}³ pack, "
             f"{args.ranks} NumPy ranks ({result['date']}, {result['commit']})", "",
             "Every NumPy buffer reachable from rank 0's run after the allocation; its own "
             f"rank's share (populations, pull tables, halo buffers) apart: "
             f"{result['own_rank_bytes'] / MIB:.1f} MiB, as on a serving rank.", "",
             "| array | dtype | shape | MiB | bytes a voxel |", "|---|---|---|---:|---:|"]
    for a in whole:
        if a["bytes"] >= 1024:
            lines.append(f"| `{a['path']}` | {a['dtype']} | {tuple(a['shape'])} | "
                         f"{a['bytes'] / MIB:.2f} | {a['bytes'] / found['voxels']:.3f} |")
    lines.append(f"| **whole-case total** | | | **{total / MIB:.1f}** | "
                 f"**{total / found['voxels']:.2f}** |")
    return _write(args.out, f"rank0-held-cpu-{args.size}-{args.ranks}ranks{args.tag}-"
                  f"{result['date']}", result, "\n".join(lines) + "\n")



def setup_rank(case: str, out: str, report: str) -> int:
    """Rank 0 of ``mpirun``: ``solver run``'s set-up (HeadlessRun on a DistributedBackend,
    nothing allocated) under ``tracemalloc``: its peak and what it holds after, written to
    ``report`` as JSON, with whether the ranks tiled the image by slabs."""
    import tracemalloc

    from solver import run as run_module
    from solver.case import load_case
    from solver.distributed.launch import launch
    from solver.run import HeadlessRun

    whole_reads = []
    load_whole = run_module.load_geometry

    def counted(spec):
        whole_reads.append(spec)
        return load_whole(spec)

    run_module.load_geometry = counted  # the whole-image loader: not called by slabs

    def on_root(backend) -> None:
        case_ = load_case(case)
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        tic = time.perf_counter()
        run = HeadlessRun(case_, out=out, backend=backend)
        seconds = time.perf_counter() - tic
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        voxels = int(np.prod(run.sim.tiling.shape))
        Path(report).write_text(json.dumps({
            "voxels": voxels, "setup_s": round(seconds, 2), "peak_bytes": peak - base,
            "held_bytes": held - base, "by_slabs": not whole_reads,
            "n_tiles": run.sim.tiling.n_tiles}))
        run.sim.close()

    launch(on_root, inner="numpy")
    return 0


def setup_ranks_table(args: argparse.Namespace) -> int:
    """``setup-ranks --sizes ... --ranks ...``: rank 0's set-up peak and held bytes under
    ``mpirun`` per size and rank count; JSON + md to ``--out``."""
    from solver.distributed.comm import find_mpirun

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    if os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    points = []
    for size in args.sizes:
        case = _case(work, size, 4, True)
        for n in args.ranks:
            report = work / f"setup-{size}-{n}.json"
            report.unlink(missing_ok=True)
            done = subprocess.run([find_mpirun(), "-n", str(n), sys.executable, __file__,
                                   "setup-rank", str(case), str(work / "out-setup"),
                                   str(report)], cwd=work, env=env, capture_output=True,
                                  text=True, timeout=args.timeout)
            if done.returncode != 0:
                points.append({"size": size, "ranks": n, "error": done.stderr[-2000:]})
                continue
            points.append({"size": size, "ranks": n, **json.loads(report.read_text())})
    result = {"commit": _commit(), "date": date.today().isoformat(), "points": points}
    lines = [f"# Rank 0's set-up of `mpirun -n N python -m solver run` ({result['date']}, "
             f"{result['commit']})", "", "NumPy arrays on rank 0 (tracemalloc) while "
             "HeadlessRun is built on a DistributedBackend (geometry, checks, tiling, problem; "
             "nothing allocated), and held after it.", "",
             "| size | ranks | image tiled by slabs | set-up (s) | peak (MiB) | held (MiB) | "
             "bytes a voxel: peak, held |", "|---:|---:|---|---:|---:|---:|---|"]
    for p in points:
        if "error" in p:
            lines.append(f"| {p['size']}³ | {p['ranks']} | failed | | | | |")
            continue
        lines.append(f"| {p['size']}³ | {p['ranks']} | {'yes' if p['by_slabs'] else 'no'} | "
                     f"{p['setup_s']} | {p['peak_bytes'] / MIB:.1f} | "
                     f"{p['held_bytes'] / MIB:.1f} | {p['peak_bytes'] / p['voxels']:.2f}, "
                     f"{p['held_bytes'] / p['voxels']:.2f} |")
    return _write(args.out, f"rank0-setup-ranks-cpu-{'-'.join(map(str, args.sizes))}"
                  f"{args.tag}-{result['date']}", result, "\n".join(lines) + "\n")


def _write(folder: str, stem: str, result: dict, table: str) -> int:
    """``result`` as ``stem``.json and ``table`` as ``stem``.md in ``folder``; prints the table."""
    write_json_md(Path(folder), stem, result, table)
    print(table)
    return 0

def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "rank":
        return rank_main(*argv[1:4])
    if argv and argv[0] == "held-rank":
        return held_rank(*argv[1:4])
    if argv and argv[0] == "setup-rank":
        return setup_rank(*argv[1:4])
    if argv and argv[0] == "setup-ranks":
        parser = argparse.ArgumentParser(description="rank 0's set-up under mpirun")
        parser.add_argument("--sizes", type=int, nargs="+", default=[160, 256])
        parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
        parser.add_argument("--tag", default="", help="added to the result files' names")
        parser.add_argument("--work", default="/tmp/rank0-memory")
        parser.add_argument("--out", default=str(REPO / "benchmarks/scaling/results"))
        parser.add_argument("--timeout", type=float, default=1200)
        return setup_ranks_table(parser.parse_args(argv[1:]))
    if argv and argv[0] == "held":
        parser = argparse.ArgumentParser(description="what rank 0 keeps after the set-up")
        parser.add_argument("--size", type=int, default=256)
        parser.add_argument("--ranks", type=int, default=2)
        parser.add_argument("--tag", default="", help="added to the result files' names")
        parser.add_argument("--work", default="/tmp/rank0-memory")
        parser.add_argument("--out", default=str(REPO / "benchmarks/scaling/results"))
        parser.add_argument("--timeout", type=float, default=1200)
        return held_table(parser.parse_args(argv[1:]))
    if argv and argv[0] == "setup-point":
        print(json.dumps(setup_point(int(argv[1]), argv[2])))
        return 0
    if argv and argv[0] == "setup":
        parser = argparse.ArgumentParser(description="rank 0's set-up in one process")
        parser.add_argument("--sizes", type=int, nargs="+", default=[160, 256])
        parser.add_argument("--work", default="/tmp/rank0-memory")
        parser.add_argument("--out", default=str(REPO / "benchmarks/scaling/results"))
        parser.add_argument("--timeout", type=float, default=1200)
        parser.add_argument("--tag", default="", help="added to the result files' names")
        return setup_series(parser.parse_args(argv[1:]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=160)
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--no-vti", action="store_true", help="write no .vti (fields)")
    parser.add_argument("--tag", default="", help="added to the result files' names")
    parser.add_argument("--work", default="/tmp/rank0-memory")
    parser.add_argument("--out", default=str(REPO / "benchmarks/scaling/results"))
    parser.add_argument("--timeout", type=float, default=1200)
    args = parser.parse_args(argv)
    result = measure(args)
    return _write(args.out, f"rank0-memory-cpu-{args.size}{args.tag}-{result['date']}", result,
                  markdown(result))


if __name__ == "__main__":
    sys.exit(main())
