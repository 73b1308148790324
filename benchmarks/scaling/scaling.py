"""Weak and strong scaling of the distributed solver over MPI ranks (one GPU per rank).

Cases (after Huang et al., ``papers/multi-gpu-porous-media.txt``, section 4.2):

- ``weak``: 192 x 192 x 96 per rank, periodic random sphere pack (porosity 0.8, diameter 40
  nodes); the same periodic block is repeated ``n`` times along z, so every rank gets the same
  geometry and the domain is 192 x 192 x (96 n).
- ``strong``: one 384^3 pack of the same kind on 1, 2, ... ranks.

``--pack rock`` makes both a rock-like pack instead (porosity 0.2, grain diameter 22: tiles
about half fluid, as ``solver.benchmarking.gpu_suite.rock_case``), e.g. ``--cross 384 --size
384`` per rank (weak) and ``--size 768`` (strong); ``--storage float16`` stores binary16
(float32 arithmetic). The tile storage is the execution plan's (``solver.backends.plan``,
compact below its eta_t threshold; ``--tile-storage tiled|compact`` forces one, e.g. to time
float16 on both), ``--streaming in-place`` keeps one copy (AA pattern); decided once for all
ranks and recorded per point with the load imbalance of the slabs (non-empty tiles and fluid
nodes per rank, largest over mean) and each rank's device memory after the run (CuPy's pool,
bytes). Geometries are generated once per shape and kept under ``--out``/.geometry (``.npy``),
so each point only loads them.

Each point is one ``mpirun -n N python benchmarks/scaling/scaling.py measure ...`` job; rank 0
builds the geometry and an ordinary Simulation on a DistributedBackend, runs warm-up steps (kernel
compilation), then times ``--repeats`` runs of ``--steps`` steps and keeps the median. MFLUPS
count all fluid nodes over rank 0's wall time to a closing barrier (every rank has finished
its device work). Parallel efficiency is MFLUPS(n) / (n MFLUPS(1)) and the speed-up
MFLUPS(n) / MFLUPS(1), both against the one-rank run through the same distributed layer; the
one-rank job also times a plain Simulation (no MPI layer; CUDA-graph replay on the GPU) as
``mflups_plain``, and ``efficiency_vs_plain`` is MFLUPS(n) / (n mflups_plain).

Multi-rank points run once per halo transport of ``--transport`` (``nccl``: GPU to GPU;
``host``: MPI through page-locked host memory; ``auto``); a one-rank point exchanges nothing,
so it runs once (host transport) and is the baseline of every transport. Every step is
launched from Python (the default); an NCCL point then also times the same allocation
replaying captured CUDA graphs of 16 steps (``solver.distributed.replay``) as
``mflups_graphs``. A point that fails or passes ``--point-timeout`` is recorded with its error
and the series goes on.

Usage (one GPU per rank; each invocation writes ``scaling-<device>-<cases>-<backend>-``
``<precision>-<date>.json`` and ``.md`` to ``--out``, default benchmarks/scaling/results/)::

    python benchmarks/scaling/scaling.py weak --ranks 1 2 --backend cupy
    python benchmarks/scaling/scaling.py strong --ranks 1 2 --backend cupy --size 384
    python benchmarks/scaling/scaling.py both --ranks 1 2 --backend cupy --transport nccl host \
        --out DIR
    python benchmarks/scaling/scaling.py strong --ranks 1 2 --backend numpy --size 64 --steps 5
    python benchmarks/scaling/scaling.py both --ranks 1 4 --backend cupy --pack rock \
        --storage float16 --tile-storage compact --transport nccl   # compact float16 on ranks

Needs mpi4py and an ``mpirun`` (``$MPIRUN``, else the one next to the Python executable, else
PATH's); the geometry comes from ``geometries.generators``; ranks of a node get one GPU each
(``solver.distributed.bind_local_gpu``; with fewer GPUs than ranks they share them, which
proves the pipeline but cannot speed up). ``LBM_COMMIT`` names the commit when the checkout
has no ``.git``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from solver.backends.cuda.nccl import P2P_DEFAULTS  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.config import HALO_TRANSPORTS  # noqa: E402 (after the sys.path entry)

log = logging.getLogger("scaling")


def sphere_pack(shape: tuple[int, ...], porosity: float, diameter: float, seed: int):
    """Periodic random sphere pack, True = solid."""
    from geometries.generators import random_sphere_pack

    return np.asarray(random_sphere_pack(shape, porosity=porosity, diameter=diameter, seed=seed,
                                         periodic=True).solid, dtype=bool)


#: ``--pack rock``: porosity and grain diameter of the rock-like pack.
ROCK = (0.2, 22.0)


def _pack(args, shape: tuple[int, int, int]) -> np.ndarray:
    """The pack of ``shape``, generated once and kept under ``args.cache`` when given."""
    porosity, diameter = ROCK if args.pack == "rock" else (args.porosity, args.diameter)
    if not getattr(args, "cache", None):
        return sphere_pack(shape, porosity, diameter, 0)
    path = Path(args.cache) / f"{args.pack}-{'x'.join(map(str, shape))}-{porosity}-{diameter}.npy"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.npy")
        np.save(partial, sphere_pack(shape, porosity, diameter, 0))
        partial.replace(path)
    return np.load(path)


def geometry(args, ranks: int) -> np.ndarray:
    """Solid mask of one scaling point."""
    if args.case == "weak":
        return np.concatenate([_pack(args, (args.cross, args.cross, args.size))] * ranks, axis=2)
    return _pack(args, (args.size,) * 3)


def _config(args):
    from solver.config import SimulationConfig

    return SimulationConfig(lattice="D3Q19", collision=args.collision, precision=args.precision,
                            storage=args.storage, tau=0.8, body_force=(1e-6, 0.0, 0.0),
                            backend=args.backend, tile_storage=args.tile_storage,
                            streaming=args.streaming)


def _timed(sim, steps: int, warmup: int, repeats: int, after_warmup=None) -> float:
    """Median wall time of ``repeats`` runs of ``steps`` steps after ``warmup`` steps, s."""
    sim.step(warmup)
    if after_warmup is not None:
        after_warmup()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        sim.step(steps)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


class _Plain:
    """An ordinary one-process run of an already built problem (``step`` as Simulation's)."""

    def __init__(self, backend, problem) -> None:
        self.backend, self.state = backend, backend.allocate(problem)

    def step(self, n: int) -> None:
        self.backend.step(self.state, n)  # returns when the device has finished

    def close(self) -> None:
        self.backend.release(self.state)


def _ablate(part: str) -> None:
    """Diagnosis only (the populations come out wrong): leave out part of the NCCL halo chain in
    this rank's process: 'transfer' the send/recv (gather and scatter stay), 'chain' all of it
    (the boundary and interior launches stay)."""
    from solver.distributed.exchange import NcclExchange

    if part in ("transfer", "chain"):
        NcclExchange.start = (lambda self, f: None) if part == "chain" else (
            lambda self, f: self.buffers.pack(f))
    if part == "chain":
        NcclExchange.finish = lambda self, f: None


def measure(args) -> dict:
    """One scaling point inside an MPI job (rank 0 returns the result, others None)."""
    from solver.distributed import launch
    from solver.simulation import Simulation

    _ablate(args.ablate)

    def on_root(backend):
        solid = geometry(args, backend.size)
        sim = Simulation(solid, _config(args), backend=backend)
        sim.allocate()
        phases = sim.state.solver.host_seconds  # rank 0's host time per step phase
        seconds = _timed(sim, args.steps, args.warmup, args.repeats, phases.clear)
        host_ms = {k: 1e3 * v / (args.steps * args.repeats) for k, v in phases.items()}
        p, n = sim.problem, backend.size
        halo = sim.state.halo_values
        split = sim.state.decomposition_summary()
        result = {
            "case": args.case, "ranks": n, "shape": list(solid.shape),
            "fluid_nodes": p.n_fluid, "n_tiles": p.tiling.n_tiles, "eta_t": p.tiling.eta_t,
            "porosity": float(1 - solid.mean()), "backend": backend.name,
            "precision": args.precision, "storage": args.storage, "pack": args.pack,
            "tile_storage": sim.state.solver.problem.tile_storage,
            "tile_storage_requested": args.tile_storage, "streaming": args.streaming,
            "load_imbalance_tiles": split["load_imbalance_tiles"],
            "load_imbalance_fluid": split["load_imbalance_fluid"],
            "fluid_nodes_per_rank": split["fluid_nodes_per_rank"],
            "collision": args.collision, "steps": args.steps,
            "repeats": args.repeats, "seconds": seconds,
            "ms_per_step": 1e3 * seconds / args.steps,
            "mflups": p.n_fluid * args.steps / seconds / 1e6,
            "tiles_per_rank": sim.state.counts.tolist(), "halo_values_per_step": halo,
            "halo_bytes_per_step": [v * p.storage_dtype.itemsize for v in halo],
            "host_ms_per_step_rank0": host_ms,
            "device": backend.inner.device_info().get("name"),
            "gpus_visible": _gpus_visible(), "transport": backend.transport_used,
            "transport_requested": args.transport[0],
            "transport_reason": backend.transport_reason, "ablate": args.ablate,
        }
        graphs = sim.state.solver.graphs
        if graphs is not None:  # NCCL: the same allocation replaying CUDA graphs
            backend.use_graphs(True)
            replayed = graphs.counts["replayed"]
            fast = _timed(sim, args.steps, args.warmup, args.repeats, phases.clear)
            backend.use_graphs(False)
            total = args.warmup + args.steps * args.repeats
            result["replayed_fraction"] = (graphs.counts["replayed"] - replayed) / total
            result["mflups_graphs"] = p.n_fluid * args.steps / fast / 1e6
            result["ms_per_step_graphs"] = 1e3 * fast / args.steps
            result["host_ms_per_step_rank0_graphs"] = {
                k: 1e3 * v / (args.steps * args.repeats) for k, v in phases.items()}
        result["device_bytes_per_rank"] = backend.device_bytes()
        sim.close()
        if n == 1:  # the same problem without the distributed layer
            plain = _Plain(backend.inner, p)
            plain_seconds = _timed(plain, args.steps, args.warmup, args.repeats)
            plain.close()
            result["mflups_plain"] = p.n_fluid * args.steps / plain_seconds / 1e6
        return result

    return launch(on_root, inner=args.backend, axis=args.axis, transport=args.transport[0])


def _gpus_visible() -> int:
    """NVIDIA GPUs the driver lists on this node (0 without one); no CUDA initialisation."""
    folder = Path("/proc/driver/nvidia/gpus")
    return len(list(folder.iterdir())) if folder.is_dir() else 0


def _mpirun() -> str:
    """The mpirun to launch with (:func:`solver.distributed.comm.find_mpirun`)."""
    from solver.distributed.comm import find_mpirun

    found = find_mpirun()
    if not found:
        raise SystemExit("error: no mpirun found; install `pip install mpi4py mpich`.")
    return found


def _run_point(cmd: list[str], env: dict, timeout: float) -> str | None:
    """Run one mpirun job in its own process group; None, or why it failed."""
    job = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        code = job.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGTERM)  # mpirun passes it on to the ranks
        try:
            job.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
        return f"timed out after {timeout:.0f} s"
    return None if code == 0 else f"mpirun exited with {code}"


def _points(args) -> list[tuple[int, str]]:
    """(ranks, transport) of every job: one-rank points once, the others per transport."""
    return [(n, t) for n in args.ranks for t in (["host"] if n == 1 else args.transport)]


def series(args, progress=None) -> list[dict]:
    """Run every point of ``args.ranks`` x ``args.transport`` as its own mpirun job;
    ``progress(results)`` after each (the outputs so far survive a killed series)."""
    results = []
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for n, transport in _points(args):
        point = out / f".scaling-{args.case}-{n}-{transport}.json"
        cmd = [_mpirun(), "-n", str(n), sys.executable, str(Path(__file__).resolve()),
               "measure", args.case, "--json", str(point), "--transport", transport]
        for key in ("backend", "precision", "storage", "pack", "cache", "collision", "size",
                    "cross", "porosity", "diameter", "steps", "warmup", "repeats", "axis",
                    "ablate", "tile_storage", "streaming"):
            cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
        log.info("%s", " ".join(cmd))
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        error = _run_point(cmd, dict(os.environ, PYTHONPATH=path), args.point_timeout)
        if error is None and point.exists():
            results.append(json.loads(point.read_text()))
            point.unlink()
        else:
            log.error("%s point on %d rank(s), transport %s failed: %s", args.case, n,
                      transport, error or "no result written")
            results.append({"case": args.case, "ranks": n, "transport": transport,
                            "error": error or "no result written"})
        _efficiencies(results)
        if progress is not None:
            progress(results)
    return results


def _efficiencies(results: list[dict]) -> None:
    """Speed-up and efficiencies of every point against the first good one (one rank)."""
    base = next((r for r in results if "error" not in r), None)
    for r in results:
        if base is not None and "error" not in r:
            r["efficiency"] = r["mflups"] / (r["ranks"] * base["mflups"] / base["ranks"])
            r["speedup"] = r["mflups"] / base["mflups"]
            if base.get("mflups_plain"):
                r["efficiency_vs_plain"] = r["mflups"] / (r["ranks"] * base["mflups_plain"])
            if "mflups_graphs" in r:
                r["efficiency_graphs"] = r["mflups_graphs"] / (
                    r["ranks"] * base["mflups"] / base["ranks"])


def _write(results: list[dict], out: Path, args, cases: list[str]) -> None:
    good = [r for r in results if "error" not in r]
    device = good[0]["device"] if good else "unknown device"
    slug = "".join(c if c.isalnum() else "-" for c in device.lower()).strip("-")
    label = "float16" if args.storage == "float16" else args.precision
    options = "".join(f"-{v}" for v, default in ((args.tile_storage, "auto"),
                                                 (args.streaming, "two-copy")) if v != default)
    stem = (f"scaling-{slug}-{'-'.join(cases)}-{args.pack}-{args.backend}-{label}{options}-"
            f"{date.today().isoformat()}")
    commit = git_commit()  # LBM_COMMIT: copies without .git set it
    # NCCL's settings change the timings: recorded with them (the library's own defaults,
    # solver.backends.cuda.nccl.P2P_DEFAULTS, where the environment sets none).
    settings = {**P2P_DEFAULTS, **{k: v for k, v in sorted(os.environ.items())
                                   if k.startswith("NCCL_")}}
    meta = {"device": device, "gpus_visible": _gpus_visible(), "date": date.today().isoformat(),
            "commit": commit, "transports": args.transport, "settings": settings,
            "ablate": args.ablate}
    ablated = (f" Diagnosis only, results wrong: NCCL halo chain without its {args.ablate}."
               if args.ablate != "none" else "")
    lines = [f"# Scaling ({', '.join(cases)}): {device}", "",
             f"Date {meta['date']}, commit {commit}; {meta['gpus_visible']} GPU(s) visible; "
             f"D3Q19 {args.collision} {args.precision}"
             f"{', float16 storage' if args.storage == 'float16' else ''}, "
             + (f"rock-like pack porosity {ROCK[0]}, grain diameter {ROCK[1]}"
                if args.pack == "rock" else
                f"sphere pack porosity {args.porosity}, diameter {args.diameter}")
             + "; settings "
             f"{', '.join(f'{k}={v}' for k, v in settings.items())}; "
             f"median of {args.repeats} runs, wall time to a closing "
             "barrier. Speed-up and efficiency against the one-rank run through the "
             "distributed layer; 'vs plain' against one ordinary process (CUDA graphs). Ranks "
             "launch every step from Python; 'graphs' is the same NCCL allocation replaying "
             f"captured CUDA graphs of 16 steps.{ablated}", ""]
    for case in cases:
        lines += _case_table(case, [r for r in results if r["case"] == case])
    lines += ["Rank 0's host time per step, ms (launch: post, boundary and swap; pack: pack "
              "and wait until it can be sent; interior; halo: wait for the messages, unpack):",
              ""]
    for r in good:
        phases = ", ".join(f"{k} {v:.3f}" for k, v in r["host_ms_per_step_rank0"].items())
        lines.append(f"- {r['case']}, {r['ranks']} rank(s), {r['transport']}: {phases}")
        if "host_ms_per_step_rank0_graphs" in r:
            phases = ", ".join(f"{k} {v:.3f}"
                               for k, v in r["host_ms_per_step_rank0_graphs"].items())
            lines.append(f"- {r['case']}, {r['ranks']} rank(s), {r['transport']}, graphs: "
                         f"{phases}")
    write_json_md(out, stem, {"meta": meta, "results": results}, "\n".join(lines) + "\n",
                  indent=2)
    print("\n".join(lines), flush=True)


def _case_table(case: str, rows: list[dict]) -> list[str]:
    lines = [f"## {case.capitalize()} scaling", "",
             "| ranks | transport | shape | fluid nodes | tiles per rank | imbalance tiles / "
             "fluid | storage | halo MB/step per rank | GB per rank | ms/step | MFLUPS "
             "| speed-up | efficiency | eff. vs plain | plain 1-rank MFLUPS "
             "| graphs: ms/step | graphs: efficiency |",
             "| ---: | --- | --- | ---: | --- | --- | --- | --- | --- | ---: | ---: | ---: "
             "| ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['ranks']} | {r['transport']} | failed: {r['error']} "
                         "| | | | | | | | | | | | | | |")
            continue
        plain = f"{r['mflups_plain']:.1f}" if "mflups_plain" in r else ""
        graphs = (f"{r['ms_per_step_graphs']:.3f} | {r['efficiency_graphs']:.3f}"
                  if "efficiency_graphs" in r else " | ")
        halo = ", ".join(f"{b / 1e6:.2f}" for b in r["halo_bytes_per_step"])
        transport = r["transport"] if r["ranks"] > 1 else "(none)"
        if r["ranks"] > 1 and r.get("transport_requested") not in (None, r["transport"]):
            transport = f"{r['transport_requested']} -> {r['transport']}"
        imbalance = (f"{r['load_imbalance_tiles']:.3f} / {r['load_imbalance_fluid']:.3f}"
                     if "load_imbalance_tiles" in r else "")
        memory = ", ".join(f"{b / 1e9:.1f}" for b in r.get("device_bytes_per_rank") or []
                           if b is not None)
        lines.append(f"| {r['ranks']} | {transport} | {'x'.join(map(str, r['shape']))} | "
                     f"{r['fluid_nodes']} | {r['tiles_per_rank']} | {imbalance} | "
                     f"{r.get('tile_storage', '')} {r.get('storage', '')}"
                     f"{' in place' if r.get('streaming') == 'in-place' else ''} | {halo} | "
                     f"{memory} | "
                     f"{r['ms_per_step']:.3f} | {r['mflups']:.1f} | {r.get('speedup', 0):.3f} "
                     f"| {r.get('efficiency', 0):.3f} | {r.get('efficiency_vs_plain', 0):.3f} "
                     f"| {plain} | {graphs} |")
    return lines + [""]


def build_parser() -> argparse.ArgumentParser:
    """Arguments of the scaling benchmark."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?",
                        choices=["weak", "strong", "both", "measure", "prepare"])
    parser.add_argument("case", nargs="?", choices=["weak", "strong"],
                        help="(measure and prepare modes) the case of the point, or whose "
                             "geometry to generate into the cache")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--backend", default="cupy", choices=["auto", "numpy", "cupy"])
    parser.add_argument("--precision", default="float32", choices=["float32", "float64"])
    parser.add_argument("--storage", default="auto", choices=["auto", "float16"],
                        help="population storage: the precision's, or binary16 (float32 only)")
    parser.add_argument("--tile-storage", default="auto", choices=["auto", "tiled", "compact"],
                        help="tile storage: the execution plan's choice (auto), every node of a "
                             "tile, or fluid nodes only (compact)")
    parser.add_argument("--streaming", default="two-copy", choices=["two-copy", "in-place"],
                        help="two copies of f, or one updated in place (AA pattern)")
    parser.add_argument("--pack", default="sphere", choices=["sphere", "rock"],
                        help="sphere: --porosity/--diameter (0.8, 40); rock: porosity 0.2, "
                             "grains of 22 nodes")
    parser.add_argument("--cache", default=None,
                        help="folder of generated geometries (default: OUT/.geometry)")
    parser.add_argument("--collision", default="BGK", choices=["BGK", "TRT"])
    parser.add_argument("--size", type=int, default=None,
                        help="strong: box edge (384); weak: z length per rank (96)")
    parser.add_argument("--cross", type=int, default=192, help="weak: x and y size (192)")
    parser.add_argument("--porosity", type=float, default=0.8)
    parser.add_argument("--diameter", type=float, default=40.0)
    parser.add_argument("--steps", type=int, default=None,
                        help="timed steps per repeat (weak 1000, strong 200)")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--axis", default="2", help="decomposition axis (z as in the paper)")
    parser.add_argument("--transport", nargs="+", default=["auto"],
                        choices=list(HALO_TRANSPORTS),
                        help="halo transports of the multi-rank points (measure: the first)")
    parser.add_argument("--point-timeout", type=float, default=900.0,
                        help="seconds before one mpirun job is stopped and recorded as failed")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    parser.add_argument("--json", default=None, help="(measure mode) where to write the point")
    parser.add_argument("--ablate", default="none", choices=["none", "transfer", "chain"],
                        help="diagnosis only, wrong results: NCCL points without their "
                             "transfers ('transfer') or their whole halo chain ('chain')")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    if args.mode is None:
        build_parser().print_help()
        return 2
    axis = args.axis
    if args.mode == "measure":
        args.axis = int(axis) if axis.isdigit() else axis
        _defaults(args)
        result = measure(args)
        if result is not None and args.json:
            Path(args.json).write_text(json.dumps(result))
        return 0
    args.cache = args.cache or str(Path(args.out) / ".geometry")
    if args.mode == "prepare":  # generate (and keep) the geometry of a case, nothing else
        _defaults(args)
        solid = geometry(args, 1)
        log.info("%s geometry %s cached in %s", args.case, solid.shape, args.cache)
        return 0
    cases = ["weak", "strong"] if args.mode == "both" else [args.mode]
    results = []
    for case in cases:
        point = argparse.Namespace(**vars(args))
        point.case = case
        _defaults(point)
        done = list(results)
        results += series(point, lambda got, done=done: _write(done + got, Path(args.out), args,
                                                               cases))
    _write(results, Path(args.out), args, cases)
    return 0 if all("error" not in r for r in results) else 1


def _defaults(args) -> None:
    """Case-dependent defaults: size (weak 96 per rank, strong 384) and steps."""
    strong = args.case == "strong"
    args.size = args.size or (384 if strong else 96)
    args.steps = args.steps or (200 if strong else 1000)


if __name__ == "__main__":
    sys.exit(main())
