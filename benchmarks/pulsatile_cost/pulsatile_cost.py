"""Cost of pulsatile openings on the vessel benchmark: a waveform inlet and Windkessel outlets.

The bifurcation of ``vessel_throughput.py`` (about ``--fluid-nodes`` lumen nodes, D3Q19 BGK,
float32) runs with a steady Poiseuille inlet and pressure outlets, then with a 10-harmonic
waveform on the inlet (Womersley profiles), then with that waveform and RCR outlets coupled every
``--every`` steps (one host read of the flow rates and one small upload each). Costs per step:
``1 - t_steady / t_pulsatile``; the waveform from CUDA events (the backend's ``step``), the
Windkessel coupling from wall-clock time around the stepping loop with a device sync (it adds
host work between launches), the steady run timed the same way beside it.

Usage (GPU): ``python benchmarks/pulsatile_cost/pulsatile_cost.py [--fluid-nodes 15e6]`` writes
``benchmarks/pulsatile_cost/results/<gpu>-<date>-<commit>-pulsatile.{json,md}`` and prints the
table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vessel"))

from vessel_throughput import config, driven, time_steps, vessel  # noqa: E402

from solver.benchmarking.cases import git_commit  # noqa: E402
from solver.benchmarking.report import results_stem  # noqa: E402
from solver.simulation import Simulation  # noqa: E402
from solver.units import UnitSystem  # noqa: E402
from solver.windkessel import Windkessel, WindkesselCoupling  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def pulsatile(openings: dict, harmonics: int) -> dict:
    """The inlet of ``openings`` with a waveform of mean 0.01 and ``harmonics`` small terms."""
    out = dict(openings)
    inlet = next(k for k, v in out.items() if v["kind"] == "velocity")
    fourier = [0.01] + [[0.002 / k, 0.001 / k] for k in range(1, harmonics + 1)]
    out[inlet] = {"kind": "velocity", "profile": "poiseuille",
                  "waveform": {"period": 5000.0, "fourier": fourier}}
    return out


def wall_seconds(sim: Simulation, steps: int, coupling=None) -> float:
    """Wall-clock seconds per step over ``steps`` steps (synchronised at both ends)."""
    import cupy as cp

    cp.cuda.Device().synchronize()
    tic = time.perf_counter()
    if coupling is None:
        sim.step(steps)
    else:
        coupling.run(sim, steps)
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - tic) / steps


def main(argv: list[str] | None = None) -> None:
    """Measure and write the results files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fluid-nodes", type=float, default=15e6)
    parser.add_argument("--harmonics", type=int, default=10)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--steps", type=int, default=1000, help="per wall-clock measurement")
    parser.add_argument("--seconds", type=float, default=0.5, help="per CUDA-event measurement")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    geometry = vessel(args.fluid_nodes)
    steady_openings = driven(geometry)
    rows = []
    for label, openings in (("steady inlet", steady_openings),
                            (f"waveform inlet ({args.harmonics} harmonics)",
                             pulsatile(steady_openings, args.harmonics))):
        sim = Simulation(geometry, config("float32", "two-copy", openings))
        try:
            events = time_steps(sim, args.seconds, args.repeats)
            wall = statistics.median(wall_seconds(sim, args.steps) for _ in range(args.repeats))
            row = {"case": label, "fluid_nodes": int(sim.problem.n_fluid),
                   "links": int(sim.problem.iolets.n_links), "event_s": events, "wall_s": wall,
                   "device": sim.backend.device_info()["name"]}
            if "waveform" in label:  # + RCR outlets on the pressure openings
                units = UnitSystem(dx=1e-4, dt=1e-5, density=1000.0)
                outlets = [k for k, v in openings.items() if v["kind"] == "pressure"]
                models = {k: Windkessel(1e7, 1e-9, 1e8) for k in outlets}  # ~1 % density
                coupling = WindkesselCoupling(models, units, every=args.every)
                coupling.start(sim)
                row["wall_coupled_s"] = statistics.median(
                    wall_seconds(sim, args.steps, coupling) for _ in range(args.repeats))
            rows.append(row)
        finally:
            sim.close()
    steady, wave = rows
    meta = {"device": steady["device"], "date": date.today().isoformat(),
            "commit": git_commit(), "every": args.every, "harmonics": args.harmonics,
            "waveform_cost": 1.0 - steady["event_s"] / wave["event_s"],
            "waveform_cost_wall": 1.0 - steady["wall_s"] / wave["wall_s"],
            "windkessel_cost_wall": 1.0 - wave["wall_s"] / wave["wall_coupled_s"]}
    stem = results_stem(meta["device"], meta["date"]) + f"-{meta['commit']}-pulsatile"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": rows},
                                                     indent=1))
    text = "\n".join([
        f"# Pulsatile openings' cost: {meta['device']}", "",
        f"Date {meta['date']}, commit {meta['commit']}, D3Q19 BGK float32 two-copy, "
        f"{steady['fluid_nodes']:,} fluid nodes, {steady['links']:,} opening links.", "",
        "| case | s/step (events) | s/step (wall) | s/step (wall, RCR every "
        f"{args.every}) |", "| --- | ---: | ---: | ---: |",
        *(f"| {r['case']} | {r['event_s']:.3e} | {r['wall_s']:.3e} | "
          f"{r.get('wall_coupled_s', float('nan')):.3e} |" for r in rows), "",
        f"Waveform: {100 * meta['waveform_cost']:.2f} % of a step (events), "
        f"{100 * meta['waveform_cost_wall']:.2f} % (wall). Windkessel coupling every "
        f"{args.every} steps: {100 * meta['windkessel_cost_wall']:.2f} % (wall)."]) + "\n"
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
