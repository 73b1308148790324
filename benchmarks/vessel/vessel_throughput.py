"""Vessel throughput like the paper's Table 8: a vessel of ~15 M fluid nodes against a dense box.

The shipped bifurcation (``geometries/samples/vessel_bifurcation.stl``, mm, open at one inlet
and two outlets) is voxelised so that its lumen holds about ``--fluid-nodes`` nodes; it runs
D3Q19 BGK with its openings closed (bounce-back only) and driven (a Poiseuille velocity inlet on
the largest opening, pressure outlets on the others), and a dense all-fluid box of about as many
nodes runs in the same process. Per row: tile utilisation eta_t, fluid MFLUPS (fluid nodes
only), bandwidth ``MFLUPS * 2 q n_d`` as a fraction of the device-to-device copy bandwidth
measured in the same run, and the vessel's MFLUPS over the dense box's. The openings' cost is
``1 - t_closed / t_driven`` per step. Times are CUDA events after a warm-up (the backend's
``step``), the median of ``--repeats`` measurements. ``--collision TRT RR`` times each model
in turn on the same device (issue 28: RR within 15 % of TRT); ``--smagorinsky`` adds RR's
eddy viscosity.

Usage (GPU): ``python benchmarks/vessel/vessel_throughput.py [--fluid-nodes 15e6]`` writes
``benchmarks/vessel/results/<gpu>-<date>-<commit>-vessel.{json,md}`` and prints the table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

#: The repository root, first on the path so that a worktree's own code is what runs.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from geometries import VoxelGeometry  # noqa: E402
from geometries.samples import load_sample  # noqa: E402
from solver.benchmarking.report import results_stem  # noqa: E402
from solver.benchmarking.results import run_meta, write_json_md  # noqa: E402
from solver.collisions import COLLISIONS, collision_model  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.simulation import Simulation  # noqa: E402

RESULTS = Path(__file__).parent / "results"
#: Voxels along x of the first, cheap voxelisation that sizes the real one.
PROBE_RESOLUTION = 96


def vessel(fluid_nodes: float) -> VoxelGeometry:
    """The bifurcation sample voxelised to about ``fluid_nodes`` lumen nodes."""
    probe = load_sample("vessel_bifurcation.stl", resolution=PROBE_RESOLUTION)
    scale = (fluid_nodes / np.count_nonzero(~probe.solid)) ** (1 / 3)
    return load_sample("vessel_bifurcation.stl", resolution=int(round(PROBE_RESOLUTION * scale)),
                       max_voxels=2**31)


def config(precision: str, streaming: str, openings: dict, collision: str = "BGK",
           smagorinsky: float = 0.0) -> SimulationConfig:
    """D3Q19 ``collision`` with walls on every face, the storage option and the openings'
    conditions."""
    storage = dict(precision="float32", storage="float16") if precision == "float16" \
        else dict(precision=precision)
    faces = {f"{ax}_{side}": "wall" for ax in "xyz" for side in ("min", "max")}
    return SimulationConfig(lattice="D3Q19", collision=collision, tau=0.8, backend="cupy",
                            streaming=streaming, openings=openings,
                            smagorinsky_cs=smagorinsky, **storage, **faces)


def driven(geometry: VoxelGeometry) -> dict:
    """Largest opening a Poiseuille velocity inlet, the others pressure outlets."""
    ids = [o.id for o in sorted(geometry.openings, key=lambda o: -o.area)]
    out = {ids[0]: {"kind": "velocity", "value": 0.01, "profile": "poiseuille"}}
    out.update({i: {"kind": "pressure", "value": 1.0} for i in ids[1:]})
    return out


def time_steps(sim: Simulation, seconds: float, repeats: int) -> float:
    """Median seconds per step (CUDA events) after a warm-up that compiles the kernels."""
    sim.step(5)
    per = sim.backend.step(sim.state, 5) / 5
    n = int(np.clip(np.ceil(seconds / max(per, 1e-6)), 10, 2000))
    return statistics.median(sim.backend.step(sim.state, n) / n for _ in range(repeats))


def measure(label: str, geometry, cfg: SimulationConfig, args) -> dict:
    """One row: eta_t, fluid MFLUPS and the fraction of copy bandwidth."""
    sim = Simulation(geometry, cfg)
    try:
        sec = time_steps(sim, args.seconds, args.repeats)
        p = sim.problem
        mflups = p.n_fluid / sec / 1e6
        copy = sim.backend.device_info()["copy_bandwidth"]
        return {"case": label, "fluid_nodes": int(p.n_fluid), "box": list(p.tiling.shape),
                "eta_t": round(p.tiling.eta_t, 4), "seconds_per_step": sec,
                "mflups": round(mflups, 1), "bytes_per_node": p.bytes_per_fluid_node_step(),
                "fraction_copy": round(mflups * 1e6 * p.bytes_per_fluid_node_step() / copy, 4),
                "copy_bandwidth": copy, "device": sim.backend.device_info()["name"]}
    finally:
        sim.close()


def markdown(meta: dict, rows: list[dict]) -> str:
    """The table with GPU, date, commit and copy bandwidth."""
    lines = [f"# Vessel throughput (paper Table 8): {meta['device']}", "",
             f"Date {meta['date']}, commit {meta['commit']}, D3Q19 "
             f"{'/'.join(meta['collisions'])} {meta['precision']} "
             f"{meta['streaming']}; copy bandwidth {meta['copy_bandwidth'] / 1e9:.0f} GB/s "
             f"measured in the same run. Voxelising took {meta['voxelise_s']:.0f} s.", "",
             "| case | box | fluid nodes | eta_t | MFLUPS | of copy BW | of dense |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        # Several collisions prefix each case with the model's name ("RR: dense 248^3").
        dense = next(d for d in rows if d["case"].split(": ")[-1].startswith("dense")
                     and d.get("collision") == r.get("collision"))
        box = "x".join(str(n) for n in r["box"])
        lines.append(f"| {r['case']} | {box} | {r['fluid_nodes']:,} | {r['eta_t']:.3f} | "
                     f"{r['mflups']:.0f} | {r['fraction_copy']:.3f} | "
                     f"{r['mflups'] / dense['mflups']:.3f} |")
    for name, cost in meta.get("openings_cost", {}).items():
        lines += ["", f"{name}: openings (inlet + outlets) cost {100 * cost:.2f} % of a step "
                  "(1 - t_closed / t_driven)."]
    for name, ratio in meta.get("of_first", {}).items():
        lines += ["", f"{name}: {100 * ratio:.1f} % of {meta['collisions'][0]}'s fluid MFLUPS "
                  "on the driven vessel."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Measure and write ``benchmarks/vessel/results/<gpu>-<date>-<commit>-vessel.{json,md}``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fluid-nodes", type=float, default=15e6)
    parser.add_argument("--precision", default="float32",
                        choices=("float32", "float64", "float16"))
    parser.add_argument("--streaming", default="two-copy", choices=("two-copy", "in-place"))
    parser.add_argument("--seconds", type=float, default=0.5, help="per measurement")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--closed-only", action="store_true",
                        help="skip the driven openings (a solver without opening kinds)")
    parser.add_argument("--collision", nargs="+", default=["BGK"], choices=list(COLLISIONS),
                        help="collision models, timed one after another (default BGK)")
    parser.add_argument("--smagorinsky", type=float, default=0.0,
                        help="Smagorinsky constant of the models that take one (RR)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    geometry = vessel(args.fluid_nodes)
    voxelise_s = time.perf_counter() - start
    n = 4 * int(round(args.fluid_nodes ** (1 / 3) / 4))  # whole 4^3 tiles: eta_t 1
    box = VoxelGeometry(np.zeros((n, n, n), dtype=bool), name=f"dense {n}^3")
    rows, cost, driven_rows = [], {}, {}
    for name in args.collision:
        smag = args.smagorinsky if collision_model(name).takes_smagorinsky else 0.0
        made = lambda openings, name=name, smag=smag: config(  # noqa: E731
            args.precision, args.streaming, openings, name, smag)
        mine = [measure("vessel, openings closed", geometry, made({}), args)]
        if not args.closed_only:
            mine.append(measure("vessel, inlet + outlets driven", geometry,
                                made(driven(geometry)), args))
            cost[name] = 1.0 - mine[0]["seconds_per_step"] / mine[1]["seconds_per_step"]
            driven_rows[name] = mine[1]
        mine.append(measure(f"dense {n}^3", box, made({}), args))
        for row in mine:
            row["collision"] = name
            row["case"] = f"{name}: {row['case']}" if len(args.collision) > 1 else row["case"]
        rows += mine
    meta = run_meta(rows[0]["device"], precision=args.precision, streaming=args.streaming,
                    copy_bandwidth=rows[0]["copy_bandwidth"], voxelise_s=voxelise_s,
                    collisions=args.collision, smagorinsky=args.smagorinsky)
    if cost:
        meta["openings_cost"] = cost
    if len(driven_rows) > 1:
        first = driven_rows[args.collision[0]]["mflups"]
        meta["of_first"] = {k: r["mflups"] / first for k, r in driven_rows.items()}
    suffix = "" if args.collision == ["BGK"] else "-" + "-".join(args.collision)
    stem = results_stem(meta["device"], meta["date"]) + f"-{meta['commit']}-vessel{suffix}"
    text = markdown(meta, rows)
    write_json_md(RESULTS, stem, {"meta": meta, "results": rows}, text)
    print(text)


if __name__ == "__main__":
    main()
