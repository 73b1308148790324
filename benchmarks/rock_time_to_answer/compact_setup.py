"""Host seconds of a compact two-copy wide fine run's set-up, part by part, on the CPU.

The 1000³ mirrored rock along x (issue 29) runs its fine run on compact storage with two
copies and 64-bit value offsets; on an H200 its ``tiling`` phase took 29.1 s and its
``allocation`` 5.3 s, against 11.7 s and 0.9 s tiled in place. This times, on an n³ image of
the same generator (``rock_tensor.image``) mirrored along x, the host parts a CuPy run makes
for that storage (no CuPy needed: the functions the CuPy backend calls, on NumPy arrays):
the plan, :class:`~solver.backends.cuda.compact.CompactTiling`, the edge tables
(:func:`~solver.backends.cuda.compact_run.edge_nodes`), the tiles' first entries
(:func:`~solver.backends.cuda.compact_readout.fluid_starts`), the k check's node flags
(:func:`solver.rock.check.node_flags`), the memory estimates a run asks for
(``state_bytes``, ``device_bytes``) and the host conversions of the allocation's table
uploads. The wide kernels are forced below the 1000³ size by lowering ``COMPACT.value_limit``
(as tests/solver/test_plan.py does). Seconds are the least of ``--repeat`` runs.

``--save FILE.npz`` keeps the tables made, ``--compare FILE.npz`` checks them bit for bit
(before/after a change). ``--device`` (CuPy): also the allocation of the compact run on the
GPU, from host tables made with the edge tables (uploaded: the way before) and without them
(made on the device, :mod:`solver.backends.cuda.compact_edges`), and whether both give the same
tables. Writes ``compact_setup-<n>-<commit>.json`` and ``.md`` to ``--out``.

    python benchmarks/rock_time_to_answer/compact_setup.py --size 300
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rock_tensor import image  # noqa: E402

import solver.backends.plan as plan_module  # noqa: E402
from solver import observables  # noqa: E402
from solver.backends import get_backend  # noqa: E402
from solver.backends.base import prepare_problem_tables  # noqa: E402
from solver.backends.cuda.compact import CompactTiling  # noqa: E402
from solver.backends.cuda.compact_readout import fluid_starts, state_bytes  # noqa: E402
from solver.backends.cuda.compact_run import compact_host, edge_nodes  # noqa: E402
from solver.backends.cuda.footprint import device_bytes  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.rock import PermeabilitySettings  # noqa: E402
from solver.rock.check import node_flags  # noqa: E402
from solver.rock.protocol import checked_sample, sample_labels, setup_protocol  # noqa: E402
from solver.simulation import Simulation  # noqa: E402


def mirrored_problem(n: int):
    """The mirrored x-axis set-up of the n³ image and its problem (two copies, compact)."""
    backend = get_backend("numpy")
    sample = image(n, 5.345e-6)
    config = SimulationConfig(precision="float32", collision="TRT", streaming="two-copy",
                              tile_storage="compact")
    settings = PermeabilitySettings(protocol="mirrored", axes=["x"], formation_factor=False)
    checked = checked_sample(sample, config, 0, sample_labels(sample, config, backend))
    setup = setup_protocol(sample, config, 0, "mirrored", settings, checked)
    sim = Simulation(setup.geometry, setup.config, backend)
    return setup, sim.problem


def parts(setup, problem) -> dict:
    """The host parts of the compact wide run of ``problem``: name -> (callable)."""
    q = problem.lattice.q
    plan = plan_module.plan_for(problem)
    compact = CompactTiling(problem.tiling, plan.pad, plan.wide)
    window = observables.darcy_window(problem, setup.axis, setup.window, np)
    t = problem.tiling
    return {
        "plan_for": lambda: plan_module.plan_for(problem),
        "problem_tables": lambda: prepare_problem_tables(problem),
        "CompactTiling": lambda: CompactTiling(t, plan.pad, plan.wide),
        "edge_nodes": lambda: edge_nodes(compact, q),
        "fluid_starts": lambda: fluid_starts(compact),
        "compact_host": lambda: compact_host(problem, plan.pad, plan.wide),
        # What CupyBackend.prepare makes (before the edge tables moved to the device: all).
        "compact_host_cupy": lambda: compact_host(problem, plan.pad, plan.wide,
                                                  **_device_edges()),
        "node_flags": lambda: node_flags(problem, window, True),
        "state_bytes": lambda: state_bytes(problem),
        "device_bytes": lambda: device_bytes(problem),
        "upload_tables": lambda: (compact.masks.astype(np.uint64), compact.base_table(),
                                  np.ascontiguousarray(t.tiles, dtype=np.int32).ravel(),
                                  np.ascontiguousarray(t.tile_map.transpose(),
                                                       dtype=np.int32).ravel()),
    }


def _device_edges() -> dict:
    """compact_host's keyword for a run that makes its edge tables on the device (none
    before that option existed: the host made them)."""
    return {"edges": False} if "edges" in inspect.signature(compact_host).parameters else {}


def device_allocation(problem, repeat: int) -> dict:
    """On CuPy: seconds of the compact run's allocation (:class:`CompactRun`, synchronized)
    from host tables made ahead with the edge tables (uploaded) and without them (made on the
    device, copy 0 filled at rest in the same launch), the least of ``repeat``; and whether
    both runs' edge tables and copies hold the same bits."""
    import cupy as cp

    from solver.backends.cuda.compact_run import CompactRun

    plan = plan_module.plan_for(problem)
    out, edges = {}, {}
    for name, kw in (("allocate_host_edges", {}), ("allocate_device_edges", _device_edges())):
        best = np.inf
        for _ in range(repeat):
            host = compact_host(problem, plan.pad, plan.wide, **kw)
            cp.cuda.Device().synchronize()
            tic = time.perf_counter()
            run = CompactRun(problem, plan.pad, cp, wide=plan.wide, host=host,
                             tiles_per_block=plan.tiles_per_block, packed=plan.packed,
                             code=plan.code)
            cp.cuda.Device().synchronize()
            best = min(best, time.perf_counter() - tic)
            edges[name] = [cp.asnumpy(a) for a in (*run.edge, *run.f)]
            run.release()
            del run, host
            cp.get_default_memory_pool().free_all_blocks()
        out[name] = best
        print(f"{name:22s} {best:8.3f} s", flush=True)
    a, b = edges.values()
    out["device_edges_identical"] = all(
        x.dtype == y.dtype and np.array_equal(x.view(np.uint8), y.view(np.uint8))
        for x, y in zip(a, b, strict=True))
    print("device edge tables and filled copies bit-identical:", out["device_edges_identical"])
    return out


def _cell(value) -> str:
    """A table cell: seconds to the millisecond, anything else as it is."""
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=300, help="edge of the image (its box: 2n x n x n)")
    p.add_argument("--repeat", type=int, default=3, help="runs per part (the least is kept)")
    p.add_argument("--save", help="write the tables made to this .npz")
    p.add_argument("--compare", help="check the tables made against this .npz, bit for bit")
    p.add_argument("--device", action="store_true",
                   help="also time the compact run's allocation on CuPy (host-made edge tables "
                        "uploaded, and made on the device) and compare their tables")
    p.add_argument("--out", default=str(ROOT / "benchmarks/rock_time_to_answer/results"))
    args = p.parse_args(argv)
    setup, problem = mirrored_problem(args.size)
    # The wide (64-bit) compact kernels, as the 1000³ run's plan chooses them.
    plan_module.COMPACT = replace(plan_module.COMPACT, value_limit=1000)
    plan = plan_module.plan_for(problem)
    assert plan.compact and plan.wide, plan.describe()
    t = problem.tiling
    seconds, first = {}, {}
    for name, task in parts(setup, problem).items():
        runs = []
        for _ in range(args.repeat):
            tic = time.perf_counter()
            task()
            runs.append(time.perf_counter() - tic)
        seconds[name], first[name] = min(runs), runs[0]
        print(f"{name:18s} {min(runs):8.3f} s (first {runs[0]:.3f} s)", flush=True)
    host = compact_host(problem, plan.pad, plan.wide)
    window = observables.darcy_window(problem, setup.axis, setup.window, np)
    tables = {"at": host.edge[0], "block": host.edge[1], "tiled": host.edge[2],
              "starts": host.starts, "masks": host.compact.masks, "base": host.compact.base,
              "padded": host.compact.padded, "flags": node_flags(problem, window, True)}
    if args.save:
        np.savez(args.save, **tables)
    same = None
    if args.compare:
        old = np.load(args.compare)
        same = {k: bool(old[k].dtype == v.dtype and np.array_equal(old[k], v))
                for k, v in tables.items()}
        print("bit-identical:", same)
    if args.device:
        seconds.update(device_allocation(problem, args.repeat))
    commit = git_commit()
    record = {"size": args.size, "box": list(t.shape), "tiles": int(t.n_tiles),
              "fluid_nodes": int(t.n_fluid), "eta_t": float(t.eta_t), "commit": commit,
              "repeat": args.repeat, "seconds": seconds, "first_seconds": first,
              "bit_identical": same}
    md = [f"# Compact wide two-copy host set-up, {args.size}³ mirrored along x ({commit})", "",
          f"box {t.shape}, {t.n_tiles} tiles, {t.n_fluid} fluid nodes, eta_t {t.eta_t:.3f}; "
          f"least of {args.repeat} runs (first: the first run, its fresh memory's page faults "
          "included, as a study's one call)", "", "| part | seconds | first |", "|---|---|---|"]
    md += [f"| {k} | {_cell(v)} | {_cell(first.get(k, ''))} |" for k, v in seconds.items()]
    write_json_md(Path(args.out), f"compact_setup-{args.size}-{commit}", record,
                  "\n".join(md) + "\n")
    ok = seconds.get("device_edges_identical", True)
    return 0 if ok and (same is None or all(same.values())) else 1


if __name__ == "__main__":
    raise SystemExit(main())
