"""Cost of pulsatile openings on the vessel benchmark: a waveform inlet and Windkessel outlets.

The bifurcation of ``vessel_throughput.py`` (about ``--fluid-nodes`` lumen nodes, D3Q19 BGK,
float32) runs four ways: steady Poiseuille inlet and pressure outlets; a 10-harmonic waveform on
the inlet (Womersley profiles); the steady inlet with RCR outlets updated every ``--every``
steps; both. Two runs (steady, waveform) are allocated together and timed in turn (interleaved
repeats, so a drift of the GPU clock hits them alike), then RCR outlets are coupled to both and
they are timed again the same way. The Windkessel update runs in the openings' pass on the
device (no host work per step), so CUDA events time every case; wall-clock time around a
synchronised loop is reported beside them as a check. Cost of a feature: ``1 - t_steady /
t_feature``, for the waveform, the Windkessel coupling and both together.

Usage (GPU): ``python benchmarks/pulsatile_cost/pulsatile_cost.py [--fluid-nodes 15e6]`` writes
``benchmarks/pulsatile_cost/results/<gpu>-<date>-<commit>-pulsatile.{json,md}`` and prints the
table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vessel"))

from vessel_throughput import config, driven, time_steps, vessel  # noqa: E402

from solver.benchmarking.report import results_stem  # noqa: E402
from solver.benchmarking.results import run_meta, write_json_md  # noqa: E402
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


def wall_seconds(sim: Simulation, steps: int) -> float:
    """Wall-clock seconds per step over ``steps`` steps (synchronised at both ends)."""
    import cupy as cp

    cp.cuda.Device().synchronize()
    tic = time.perf_counter()
    sim.step(steps)
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - tic) / steps


def couple(sim: Simulation, openings: dict, every: int) -> WindkesselCoupling:
    """RCR outlets (about 1 % density) on the pressure openings of ``sim``, started."""
    units = UnitSystem(dx=1e-4, dt=1e-5, density=1000.0)
    outlets = [k for k, v in openings.items() if v["kind"] == "pressure"]
    coupling = WindkesselCoupling({k: Windkessel(1e7, 1e-9, 1e8) for k in outlets}, units,
                                  every=every)
    coupling.start(sim)
    return coupling


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
    steady = driven(geometry)
    wave = pulsatile(steady, args.harmonics)
    sims = {}
    rows = []
    try:  # two runs (building a 15 M node problem takes tens of seconds on the host)
        for label, openings in (("steady", steady), ("waveform", wave)):
            sims[label] = Simulation(geometry, config("float32", "two-copy", openings))
            time_steps(sims[label], args.seconds, 1)  # compile, capture, warm up
        labels = {"steady": ("steady inlet", f"RCR outlets (every {args.every} steps)"),
                  "waveform": (f"waveform inlet ({args.harmonics} harmonics)",
                               "waveform inlet + RCR outlets")}
        for phase in (0, 1):  # without, then with the RCR outlets on both runs
            if phase:
                for label, openings in (("steady", steady), ("waveform", wave)):
                    couple(sims[label], openings, args.every)
                    time_steps(sims[label], args.seconds, 1)  # the graphs captured again
            events = {k: [] for k in sims}
            walls = {k: [] for k in sims}
            for _ in range(args.repeats):  # interleaved: each repeat times both runs once
                for label, sim in sims.items():
                    events[label].append(time_steps(sim, args.seconds, 1))
                    walls[label].append(wall_seconds(sim, args.steps))
            for label, sim in sims.items():
                state = sim.windkessel_state()
                rows.append({"case": labels[label][phase],
                             "fluid_nodes": int(sim.problem.n_fluid),
                             "links": int(sim.problem.iolets.n_links),
                             "event_s": statistics.median(events[label]),
                             "wall_s": statistics.median(walls[label]),
                             "finite_outlet_state": None if state is None
                             else bool(np.isfinite(state).all()),
                             "device": sim.backend.device_info()["name"]})
    finally:
        for sim in sims.values():
            sim.close()
    # rows: steady, waveform (phase 0); RCR, both (phase 1)
    base = rows[0]
    cost = {key: {"events": 1.0 - base["event_s"] / r["event_s"],
                  "wall": 1.0 - base["wall_s"] / r["wall_s"]}
            for key, r in zip(("waveform", "windkessel", "both"), rows[1:], strict=True)}
    meta = run_meta(base["device"], every=args.every, harmonics=args.harmonics, cost=cost)
    stem = results_stem(meta["device"], meta["date"]) + f"-{meta['commit']}-pulsatile"
    text = "\n".join([
        f"# Pulsatile openings' cost: {meta['device']}", "",
        f"Date {meta['date']}, commit {meta['commit']}, D3Q19 BGK float32 two-copy, "
        f"{base['fluid_nodes']:,} fluid nodes, {base['links']:,} opening links; medians of "
        f"{args.repeats} interleaved repeats.", "",
        "| case | s/step (events) | s/step (wall) | cost (events) | cost (wall) |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| {base['case']} | {base['event_s']:.4e} | {base['wall_s']:.4e} | | |",
        *(f"| {r['case']} | {r['event_s']:.4e} | {r['wall_s']:.4e} | "
          f"{100 * c['events']:.2f} % | {100 * c['wall']:.2f} % |"
          for r, c in zip(rows[1:], cost.values(), strict=True)), "",
        f"Waveform: {100 * cost['waveform']['events']:.2f} %, Windkessel coupling every "
        f"{args.every} steps: {100 * cost['windkessel']['events']:.2f} %, together: "
        f"{100 * cost['both']['events']:.2f} % of a step (CUDA events)."]) + "\n"
    write_json_md(RESULTS, stem, {"meta": meta, "results": rows}, text)
    print(text)


if __name__ == "__main__":
    main()
