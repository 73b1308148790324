"""The mirrored permeability of a generated rock-like image too large for one GPU, over MPI ranks.

Issue 33: a 1600³ image at porosity ~0.2 does not fit one 80 GB GPU; here it runs its mirrored
permeability (:mod:`solver.distributed.mirrored`: the sample and its mirror image along x,
3200 x 1600 x 1600, periodic along x, sealed sides, body force) on 4 GPUs, no rank ever
holding more than its slab (:mod:`solver.distributed.local_setup`), and reports per rank the
set-up and step times, the estimated device bytes before allocating, CuPy's pool and the
device's used memory after the run, and the host peak.

The image: :class:`geometries.regions.GrainRegions`, solid balls of diameter 21 (integer
centres, seed 1) at porosity 0.2, evaluated slab by slab.

Memory per rank, estimated before any run (issue 33's numbers, from the 400³ image's summary
scaled by 64: porosity 0.196, tile utilisation eta_t 0.483 with 4³ tiles, slabs balanced to
within 1 %): the mirrored 1600³ box has 1.61e9 fluid nodes in 5.2e7 non-empty tiles; a rank
owns 4.0e8 fluid nodes in 1.3e7 tiles (8.3e8 tile nodes). Bytes per rank (two copies, D3Q19;
``mirrored.device_estimate``: the state as its plan allocates it and one check's chunk of
65,536 tiles, 3.2 GB (16,384 and 0.8 GB in the measured run below); tile map and fluid masks
of the global tile grid of 1.28e8 cells, 12 bytes each, 1.5 GB):

=========================  =====================  ==========  =========================
storage                    per node                per rank    fits
=========================  =====================  ==========  =========================
tiled float32              2·19·4 + 1 per tile n.  ~130 GB     H200 (139 GiB), not H100
tiled float16              2·19·2 + 1 per tile n.  ~67 GB      H100 (78 GiB usable)
compact float32 / float16  152 / 76 per fluid n.   ~70 / ~40   refused: 19 x 4.0e8 values
                           + 16 (edge tables)      GB          per copy pass the compact
                                                               kernels' 32-bit indices
=========================  =====================  ==========  =========================

So on H100s the run stores float16 in the tiled storage (``--storage float16``, the default
here); on H200s float32 fits as well. One copy (``--streaming in-place``, where ranks step in
place: issue 33's in-place ranks) halves the populations: ~33 GB float16, ~65 GB float32.
The compact storage's 32-bit offsets address at most 2^31 / 19 = 1.13e8 fluid nodes per rank;
beyond it it runs 64-bit offsets (``CompactTiling.check_offsets``,
``benchmarks/compact/wide_memory.py``; the table above was written before), slower than tiled,
so ``--tile-storage auto`` takes them only where a rank's tiled part does not fit its device
and the compact one does (one H200 in float16, two in float32; ``agreed_storage``).
Every number above is an estimate; the run records the measured ones. Measured on 4 x H200
(float16, tiled, commit 3c20093, results/mirrored-rock-1600-4x-nvidia-h200-float16-2026-11-28):
62.7 GiB held by CuPy's pool per rank against 63.0 GiB estimated, 26.8 ms per step.
Time: ``steps_estimate`` is the protocol's pressure-diffusion bound from rest (~1e6 for this
box at tau 0.7); the one-device protocol's runs of 300³-400³ images converged in 4200-5200
fine steps after 2400 at half resolution (benchmarks/rock_time_to_answer/README.md). The run
starts from the coarse start over the ranks (``--coarse-levels``, default 1:
:mod:`solver.distributed.coarse_start`; set-up of the coarse levels from the fine layers each
rank read already, :class:`geometries.regions.CachedRegions`), then runs ``--steps`` (default
1000) or to k's convergence and reports k, its change per 1000 steps, the monitor's estimate
of the steps still needed, the spread of the flux through the layers, each level's steps and
times, and the time per step to extrapolate from.

Usage (one GPU per rank; writes ``mirrored-rock-<size>-<ranks>x-<device>-<storage>-<date>``
``.json`` and ``.md`` to ``--out``, default benchmarks/scaling/results/)::

    python benchmarks/scaling/mirrored_rock.py --ranks 4 --size 1600            # ~5-8 min
    python benchmarks/scaling/mirrored_rock.py --ranks 4 --size 400 --steps 2000  # check
    python benchmarks/scaling/mirrored_rock.py --ranks 4 --size 1600 --steps 20000 \
        --check 500 --coarse-levels 3 --max-seconds 480 --timeout 570
                                    # to a converged k (not yet measured; estimated 5-6.5 min)
    python benchmarks/scaling/mirrored_rock.py --ranks 4 --size 1600 --estimate-only
    python benchmarks/scaling/mirrored_rock.py --ranks 2 --size 48 --backend numpy \\
        --storage float32 --steps 41 --check 20                                  # CPU

Needs mpi4py and an ``mpirun`` (``$MPIRUN``, else the one next to the Python executable, else
PATH's); as root, Open MPI's ``OMPI_ALLOW_RUN_AS_ROOT`` variables are set for the job.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "benchmarks" / "scaling" / "results"
GIB = 2.0**30


def build_parser() -> argparse.ArgumentParser:
    """Arguments of the launcher (and of each rank, with ``--worker``)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--size", type=int, default=1600, help="sample edge, voxels")
    parser.add_argument("--porosity", type=float, default=0.2)
    parser.add_argument("--diameter", type=float, default=21, help="grain diameter, voxels")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backend", default="cupy", choices=["cupy", "numpy"])
    parser.add_argument("--storage", default="float16", choices=["float16", "float32"],
                        help="population storage (float32 arithmetic either way)")
    parser.add_argument("--tile-storage", default="auto", choices=["auto", "tiled", "compact"])
    parser.add_argument("--streaming", default="two-copy", choices=["two-copy", "in-place"],
                        help="in-place: one copy (where ranks support it)")
    parser.add_argument("--transport", default="auto", choices=["auto", "nccl", "host"])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--check", type=int, default=500, help="steps between k checks")
    parser.add_argument("--coarse-levels", type=int, default=1,
                        help="coarse start over the ranks (solver.distributed.coarse_start): "
                             "1 the sample coarsened by 2, 2-3 a chain from 1/4 or 1/8, 0 rest")
    parser.add_argument("--estimate-only", action="store_true",
                        help="stop before allocating (set-up and the estimates only)")
    parser.add_argument("--chunked-check", action="store_true",
                        help="k checks by the chunked readout (default: the fused one-launch "
                             "check on tiled GPU ranks), to compare k and the check time")
    parser.add_argument("--profile", action="store_true",
                        help="profile every rank (cProfile; the top functions by cumulative "
                             "time written as mirrored-rock-...-profile-rank<r>-<date>.txt)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--timeout", type=float, default=3000, help="seconds for the job")
    parser.add_argument("--max-seconds", type=float, default=None,
                        help="stop stepping at the first check after this many seconds from "
                             "the start (k, its change and the steps still needed reported)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def _mpirun() -> str:
    """The mpirun to launch with (:func:`solver.distributed.comm.find_mpirun`)."""
    from solver.distributed.comm import find_mpirun

    found = find_mpirun()
    if not found:
        raise SystemExit("error: no mpirun found; install `pip install mpi4py mpich`.")
    return found


def launch(args: argparse.Namespace, argv: list[str]) -> int:
    """Run the ranks under mpirun; the worker on rank 0 writes the results."""
    # The repository first, the caller's path kept (a GPU box's dependencies may live there).
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, PYTHONUNBUFFERED="1")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if args.backend == "numpy":
        env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [_mpirun(), "-n", str(args.ranks), sys.executable, str(Path(__file__).resolve()),
           "--worker", *argv]
    print(" ".join(cmd), flush=True)
    return subprocess.run(cmd, env=env, cwd=REPO, timeout=args.timeout).returncode


def pool_memory() -> dict:
    """This rank's GPU and memory after the run: CuPy's pool (held: its high-water mark, as it
    returns no block to the device unless asked; used now) and the device's used bytes
    (context and NCCL buffers included)."""
    import cupy as cp

    pool = cp.get_default_memory_pool()
    free, total = cp.cuda.runtime.memGetInfo()
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    return {"gpu": name.decode() if isinstance(name, bytes) else str(name),
            "pool_held_bytes": int(pool.total_bytes()), "pool_used_bytes": int(pool.used_bytes()),
            "device_used_bytes": int(total - free), "device_total_bytes": int(total)}


def work(args: argparse.Namespace) -> int:
    """One rank: the mirrored run; rank 0 writes the JSON and markdown."""
    from geometries.regions import GrainRegions
    from solver.backends import get_backend, may_use_gpu
    from solver.config import SimulationConfig
    from solver.distributed.comm import bind_local_gpu, world
    from solver.distributed.mirrored import run_mirrored, start_settings

    comm = world()
    if may_use_gpu(args.backend):
        bind_local_gpu(comm)
    config = SimulationConfig(backend=args.backend, precision="float32",
                              storage="float16" if args.storage == "float16" else "auto",
                              tile_storage=args.tile_storage, streaming=args.streaming)
    backend = get_backend(args.backend)
    sample = GrainRegions((args.size,) * 3, args.porosity, args.diameter, args.seed)
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    result = run_mirrored(sample, config, 0, comm, backend, args.steps, args.check,
                          settings=start_settings(args.coarse_levels), transport=args.transport,
                          memory=pool_memory if args.backend == "cupy" else None,
                          estimate_only=args.estimate_only, max_seconds=args.max_seconds,
                          fused_check=not args.chunked_check)
    if profiler is not None:
        profiler.disable()
        _write_profile(profiler, args, comm.Get_rank())
    if result is None:
        return 0
    from solver.benchmarking.results import git_commit, write_json_md

    gpu = result["per_rank"][0].get("gpu", args.backend)
    result.update(image=sample.name, commit=git_commit(), date=date.today().isoformat(),
                  command=" ".join(sys.argv[1:]).replace("--worker ", ""), device=gpu)
    stem = (f"mirrored-rock-{args.size}-{args.ranks}x-{_slug(gpu)}-{args.storage}"
            f"{'-in-place' if args.streaming == 'in-place' else ''}"
            f"{f'-coarse{args.coarse_levels}' if args.coarse_levels else ''}"
            f"{'-estimate' if args.estimate_only else ''}"
            f"{'-chunked-check' if args.chunked_check else ''}-{result['date']}")
    write_json_md(args.out, stem, result, markdown(result), default=str)
    print(markdown(result))
    print(f"wrote {args.out / stem}.json and .md")
    return 0


def _write_profile(profiler: cProfile.Profile, args: argparse.Namespace, rank: int) -> None:
    """This rank's profile of the run: the functions by cumulative time (top 80), as text."""
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(80)
    args.out.mkdir(parents=True, exist_ok=True)
    path = (args.out / f"mirrored-rock-{args.size}-{args.ranks}x-profile-rank{rank}-"
            f"{date.today().isoformat()}.txt")
    path.write_text(text.getvalue())


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-") or "device"


def _gib(value) -> str:
    return "-" if value is None else f"{value / GIB:.2f}"


def _coarse_lines(r: dict) -> list[str]:
    """The coarse start's levels (none: from rest) and the fine run's remaining estimate."""
    if not r.get("coarse"):
        return ["Started at rest (no coarse start).", ""]
    lines = [f"Coarse start, {r['coarse_levels']} level(s), then {r['steps']} fine steps; "
             f"work {r['work_steps']:.0f} fine-step equivalents.", "",
             "| level | box | fluid nodes | steps | k fine voxel² | converged | set-up s | "
             "steps s | checks s |", "|---:|---|---:|---:|---:|---|---:|---:|---:|"]
    for c in r["coarse"]:
        k = c.get("k")
        lines.append(f"| 1/{c['scale']} | {' x '.join(map(str, c['shape']))} | "
                     f"{c['fluid_nodes']:,} | {c['steps']} | {'-' if k is None else f'{k:.5g}'} "
                     f"| {c['converged']} | {c['setup_seconds']:.1f} | {c['step_seconds']:.1f} "
                     f"| {c['check_seconds']:.1f} |")
    history = r.get("history") or []
    if history:
        last = history[-1]
        lines += ["", f"Fine run: last check at step {last.get('step')}, k change per 1000 "
                      f"steps {last.get('change')}, remaining steps estimated "
                      f"{last.get('remaining')}."]
    return lines + [""]


def markdown(r: dict) -> str:
    """The result as a markdown report: the run, then one row per rank."""
    lines = [f"# Mirrored permeability, {r.get('image', '')}",
             "",
             f"{r['ranks']} ranks on {r.get('device', '?')}, box {' x '.join(map(str, r['shape']))}"
             f", porosity {r['porosity']:.4f}, {r['fluid_nodes']:,} fluid nodes in "
             f"{r['tiles']:,} tiles; commit {r.get('commit')}, {r.get('date')}.",
             f"Command: `python benchmarks/scaling/mirrored_rock.py {r.get('command', '')}`", ""]
    if not r.get("estimate_only"):
        k = r.get("k")
        per_step = r["step_seconds"] / max(r["timed_steps"], 1)
        hours = r["steps_estimate"] * per_step / 3600
        lines += [f"Storage {r['storage']} ({r['precision']} arithmetic), tile storage "
                  f"{r['per_rank'][0]['tile_storage']}, halo transport {r['transport']}.",
                  f"{r['timed_steps']} timed steps in {r['step_seconds']:.2f} s "
                  f"({per_step * 1e3:.1f} ms per step, "
                  f"{r['mflups'] or 0:.0f} MFLUPS over the fluid nodes); "
                  f"k = {'-' if k is None else f'{k:.5g}'} voxel² after {r['steps']} steps "
                  f"(the mean of the last check's and the next step's k, period-2 "
                  f"alternation ±{r.get('alternation') or float('nan'):.2g}, residual in "
                  f"k {r.get('alternation_residual') or float('nan'):.2g}; "
                  f"converged: {r['converged']}; layer flux spread "
                  f"{r.get('flux_spread') or float('nan'):.2g}); the protocol estimates "
                  f"{r['steps_estimate']:,} steps from rest (~{hours:.1f} h at this speed).",
                  f"Load imbalance: tiles {r['load_imbalance_tiles']:.3f}, fluid nodes "
                  f"{r['load_imbalance_fluid']:.3f}.", ""]
        lines += _coarse_lines(r)
    lines += ["| rank | tiles | fluid nodes | estimate GiB | pool held GiB | device used GiB "
              "| host peak GiB | summary s | slab s | coarse s | allocate s | prolong s | steps s "
              "| checks s |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for p in r["per_rank"]:
        s = p.get("seconds", {})
        lines.append(
            f"| {p['rank']} | {p.get('tiles_owned', p.get('tiles', 0)):,} | "
            f"{p.get('fluid_nodes', p.get('fluid_nodes_with_halo', 0)):,} | "
            f"{_gib(p.get('device_bytes_estimate'))} | {_gib(p.get('pool_held_bytes'))} | "
            f"{_gib(p.get('device_used_bytes'))} | {_gib(p.get('host_peak_bytes'))} | "
            f"{s.get('summary', 0):.1f} | {s.get('slab', 0):.1f} | "
            f"{s.get('coarse_summary', 0) + s.get('coarse_runs', 0):.1f} | "
            f"{s.get('allocate', 0):.1f} | {s.get('prolong', 0):.1f} | "
            f"{p.get('step_seconds', 0):.1f} | {p.get('check_seconds', 0):.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Launcher (default) or one rank (``--worker``)."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.worker:
        return work(args)
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
