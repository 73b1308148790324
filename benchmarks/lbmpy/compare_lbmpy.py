"""Side by side on one GPU: this solver against lbmpy's generated CUDA kernel (D3Q19 SRT/BGK).

Fairness rules (the report repeats them):

- One process on one GPU; both codes run the same cases in the same precision (float32 and
  float64), D3Q19 with single-relaxation-time BGK at the same rate (tau = 0.8), the same
  incompressible second-order equilibrium and the same number of steps. Times are CUDA events
  around back-to-back steps after warm-up, median of repeats; the device-to-device copy
  bandwidth is measured in the same process.
- MFLUPS count fluid nodes only, for both. lbmpy updates its whole dense box (solid cells too)
  and its time includes its boundary kernels (no-slip on the walls and solid cells, the moving
  lid), as a user runs it; its kernel-only rate and all-cell rate are reported beside.
- Same geometry: the lid-driven cavity (our cavity3D case of
  ``solver.benchmarking.gpu_suite``: all nodes fluid, walls on every face, here with the y_max
  face moving at (0.05, 0, 0)) and the random sphere packs of ``geometries.generators``
  (``solver.benchmarking.gpu_suite.pack_cases``: diameter 40 in 192^3, seed 0) closed by resting
  walls on every face; halfway bounce-back in both codes.
- Physics first: both codes run small lid-driven cases (the cavity and two packs with a lid) and
  their velocity fields must agree (relative L2 over fluid nodes) before anything is timed.
- Each code gets its best of a few settings: ours the XYZ layout with 1, 2 or 4 tiles per
  block; lbmpy pystencils' default block size and three others (``--block-sizes``), then two
  more code variants (int32 index arithmetic, and that with lbmpy's ``cse_global``) at the two
  fastest block sizes.

How lbmpy is set up and how its boundaries are applied: see ``benchmarks/lbmpy/lbmpy_box.py``.

On the GPU machine, from the repository root (lbmpy, pystencils and their pure-Python
dependencies installed beside CuPy; the project does not depend on them):
``python benchmarks/lbmpy/compare_lbmpy.py --out DIR``. Without a GPU,
``python benchmarks/lbmpy/compare_lbmpy.py --target cpu --check-size 24`` runs the physics check
alone
against the NumPy backend (lbmpy's CPU kernels).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import replace
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(Path(__file__).resolve().parent)]

from lbmpy_box import VARIANTS, build_box, versions  # noqa: E402
from lbmpy_report import FAIRNESS, markdown, summary_rows, table  # noqa: E402

from solver.benchmarking.cases import BenchCase, sphere_pack  # noqa: E402
from solver.benchmarking.gpu_suite import dense_cases, pack_cases  # noqa: E402
from solver.benchmarking.report import results_stem  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.problem import Problem  # noqa: E402
from solver.simulation import Simulation  # noqa: E402

log = logging.getLogger("compare_lbmpy")
START = time.perf_counter()
TAU = 0.8
LID = (0.05, 0.0, 0.0)
#: Relative L2 difference of the velocity fields allowed by the physics check.
TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


def our_config(case: BenchCase, precision: str, lid, backend: str = "auto") -> SimulationConfig:
    """BGK incompressible D3Q19 at TAU with ``case``'s faces, y_max moving at ``lid`` if given."""
    faces = {f"{ax}_{side}": case.faces for ax in "xyz" for side in ("min", "max")}
    if lid is not None:
        faces |= {"y_max": "moving_wall", "y_max_value": tuple(lid)}
    return SimulationConfig(lattice="D3Q19", precision=precision, collision="BGK",
                            fluid_model="incompressible", tau=TAU, tile_offset=case.tile_offset,
                            gpu_layout="xyz", backend=backend, **faces)


def bench_cases(cavity: int, pack_size: int, porosities, diameter: float) -> list[tuple]:
    """(case, lid) pairs: the lid-driven cavity and the wall-closed sphere packs."""
    cases = [(replace(c, label=f"lid cavity {cavity}^3"), LID) for c in dense_cases([cavity])]
    packs = pack_cases(pack_size, porosities, diameter) if porosities else []
    return cases + [(replace(c, faces="wall", label=c.label + " walls"), None) for c in packs]


def check_cases(n: int) -> list[tuple]:
    """Small lid-driven cases for the physics check: the cavity and two packs (d = n/4)."""
    cases = [(replace(c, label=f"lid cavity {n}^3"), LID) for c in dense_cases([n])]
    for porosity in (0.8, 0.3):
        solid = sphere_pack((n, n, n), porosity, n / 4, seed=0)
        cases.append((BenchCase(f"spheres {n}^3 phi={porosity} lid", solid, faces="wall",
                                porosity=porosity), LID))
    return cases


def physics_check(n: int, steps: int, precisions, target: str) -> list[dict]:
    """Velocity fields of both codes after ``steps`` steps; relative L2 over fluid nodes.

    lbmpy's default code variant runs every case, its other variants the last (densest) pack.
    """
    rows = []
    cases = check_cases(n)
    for k, (case, lid) in enumerate(cases):
        for precision in precisions:
            backend = "cupy" if target == "cuda" else "numpy"
            sim = Simulation(case.solid, our_config(case, precision, lid, backend))
            sim.step(steps)
            ours = sim.fields()["u"][:, ~case.solid]
            sim.close()
            for variant in VARIANTS if k == len(cases) - 1 else ["defaults"]:
                row = {"case": case.label, "precision": precision, "variant": variant,
                       "steps": steps, "max_speed": float(np.sqrt((ours ** 2).sum(0)).max()),
                       "tolerance": TOLERANCE[precision], "relative_l2": float("nan")}
                try:
                    box = build_box(case.solid, lid, 1.0 / TAU, precision, target, variant)
                    box.step(steps)
                    theirs = box.velocity()[:, ~case.solid]
                    del box
                    row["relative_l2"] = float(np.linalg.norm(theirs - ours)
                                               / np.linalg.norm(ours))
                except Exception as exc:  # reported in the table; the other cases still run
                    log.exception("lbmpy failed on %s %s %s", case.label, precision, variant)
                    row["error"] = f"{exc.__class__.__name__}: {exc}"[:500]
                row["passed"] = bool(row["relative_l2"] <= TOLERANCE[precision])
                rows.append(row)
                log.info("check %s", row)
    return rows


def _median_spread(times: list[float]) -> tuple[float, float]:
    sec = float(np.median(times))
    return sec, (max(times) - min(times)) / sec


def time_ours(backend, problem: Problem, tpbs, steps: int, repeats: int) -> list[dict]:
    """Seconds per step (median of ``repeats`` x ``steps``) for each tiles-per-block value."""
    state = backend.allocate(problem)
    rows = []
    try:
        for tpb in tpbs:
            state = backend.reconfigure(state, layout="xyz", tiles_per_block=tpb)
            backend.step(state, 2 * steps)  # compile, CUDA-graph capture, clocks
            sec, spread = _median_spread([backend.step(state, steps) / steps
                                          for _ in range(repeats)])
            rows.append({"code": "ours", "setting": f"xyz, {tpb} tiles/block",
                         "seconds_per_step": sec, "spread": round(spread, 4)})
    finally:
        backend.release(state)
    return rows


def _lbmpy_seconds(box, steps: int, repeats: int, boundaries: bool = True):
    """Median CUDA-event seconds per step, its spread, and host seconds per step (launch cost)."""
    cp = box.xp
    box.step(steps, boundaries)  # compile, load, clocks
    times, host = [], []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        t0 = time.perf_counter()
        start.record()
        box.step(steps, boundaries)
        end.record()
        host.append((time.perf_counter() - t0) / steps)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3 / steps)
    sec, spread = _median_spread(times)
    return sec, spread, float(np.median(host))


def time_lbmpy(case: BenchCase, lid, precision: str, block_sizes, steps: int,
               repeats: int) -> list[dict]:
    """lbmpy's full step for each code variant and block size, then its best kernel alone.

    The default variant tries every block size; the others the two fastest of those.
    """
    first = next(iter(VARIANTS))
    box = build_box(case.solid, lid, 1.0 / TAU, precision, "cuda")
    rows = []
    try:
        for variant in VARIANTS:
            if variant != first:
                box.use_variant(variant)
                ranked = sorted((r for r in rows if r["variant"] == first),
                                key=lambda r: r["seconds_per_step"])
                block_sizes = [r["block_size"] for r in ranked[:2]]
            for bs in block_sizes:
                box.use_block_size(bs)
                rows.append(_lbmpy_row(box, "lbmpy", steps, repeats))
        best = min(rows, key=lambda r: r["seconds_per_step"])
        box.use_variant(best["variant"])
        box.use_block_size(best["block_size"])
        rows.append(_lbmpy_row(box, "lbmpy kernel only", steps, repeats, boundaries=False))
    finally:
        del box
        import cupy as cp

        cp.get_default_memory_pool().free_all_blocks()
    return rows


def _lbmpy_row(box, code: str, steps: int, repeats: int, boundaries: bool = True) -> dict:
    """One timing row of lbmpy at the box's current variant and block size."""
    sec, spread, host = _lbmpy_seconds(box, steps, repeats, boundaries)
    return {"code": code, "setting": f"{box.variant}, {_bs_label(box.block_size)}",
            "variant": box.variant, "block_size": box.block_size, "seconds_per_step": sec,
            "spread": round(spread, 4), "host_seconds_per_step": host, "links": box.n_links}


def _bs_label(bs) -> str:
    return "default block" if bs is None else f"block {bs[0]}x{bs[1]}x{bs[2]}"


def run_timing(args, info: dict, save) -> list[dict]:
    """Time both codes on every case and precision; ``save(rows)`` after each of them."""
    from solver.benchmarking.probe_backend import ProbeBackend

    backend = ProbeBackend()
    block_sizes = [None] + [tuple(int(v) for v in s.split("x")) for s in args.block_sizes]
    rows = []
    for case, lid in bench_cases(args.cavity, args.pack_size, args.porosity, args.diameter):
        for precision in args.precision:
            t0 = time.perf_counter()
            problem = Problem.from_config(case.solid, our_config(case, precision, lid))
            meta = {"case": case.label, "porosity": case.porosity, "precision": precision,
                    "nodes": int(case.solid.size), "fluid_nodes": problem.n_fluid,
                    "eta_t": round(problem.tiling.eta_t, 4), "steps": args.steps,
                    "repeats": args.repeats,
                    "bytes_per_node": problem.bytes_per_fluid_node_step()}
            found = time_ours(backend, problem, (1, 2, 4), args.steps, args.repeats)
            try:
                found += time_lbmpy(case, lid, precision, block_sizes, args.steps, args.repeats)
            except Exception:  # keep our rows and the other cases; the log has the reason
                log.exception("lbmpy timing failed on %s %s", case.label, precision)
            for r in found:
                rows.append(_with_rates(meta | r, info["copy_bandwidth"]))
                log.info("%s", rows[-1])
            seconds = round(time.perf_counter() - t0, 1)
            info.setdefault("case_seconds", {})[f"{case.label} {precision}"] = seconds
            log.info("%s %s done in %.1f s", case.label, precision, seconds)
            save(rows)  # a run cut off by a time limit keeps what it measured
    return rows


def _with_rates(row: dict, copy: float) -> dict:
    """Add fluid MFLUPS, all-cell MLUPS and the fractions of the copy bandwidth."""
    sec, bytes_node = row["seconds_per_step"], row["bytes_per_node"]
    cells = row["fluid_nodes"] if row["code"] == "ours" else row["nodes"]
    row["mflups"] = round(row["fluid_nodes"] / sec / 1e6, 1)
    row["cell_mlups"] = round(cells / sec / 1e6, 1)  # nodes the code updates per second
    row["fraction_copy"] = round(row["mflups"] * 1e6 * bytes_node / copy, 4)
    row["cell_fraction_copy"] = round(row["cell_mlups"] * 1e6 * bytes_node / copy, 4)
    return row


def device_meta(target: str) -> dict:
    """GPU name, bandwidths and library versions (CuPy only on the GPU target)."""
    meta = {"date": date.today().isoformat(), "commit": git_commit(), "tau": TAU,
            "lid_velocity": LID, "fairness": FAIRNESS, "numpy": np.__version__} | versions()
    if target != "cuda":
        return meta | {"device": "CPU (lbmpy C kernels, NumPy backend)"}
    import cupy as cp

    from solver.backends import get_backend

    info = get_backend("cupy").device_info()
    return meta | {"device": info["name"], "cupy": cp.__version__,
                   "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
                   "peak_bandwidth": info.get("peak_bandwidth"),
                   "copy_bandwidth": info["copy_bandwidth"]}


def parse_args(argv=None) -> argparse.Namespace:
    """Command-line options (defaults: the full GPU comparison, about 2-3 minutes)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="benchmarks/lbmpy/results", help="folder for the JSON and .md")
    p.add_argument("--target", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: physics check only, lbmpy's C kernels against the NumPy backend")
    p.add_argument("--check-only", action="store_true", help="skip the timing")
    p.add_argument("--check-size", type=int, default=64)
    p.add_argument("--check-steps", type=int, default=500)
    p.add_argument("--cavity", type=int, default=256, help="edge of the lid-driven cavity")
    p.add_argument("--pack-size", type=int, default=192)
    p.add_argument("--diameter", type=float, default=40.0)
    p.add_argument("--porosity", type=float, nargs="*", default=[0.3, 0.8])
    p.add_argument("--precision", nargs="+", default=["float32", "float64"],
                   choices=["float32", "float64"])
    p.add_argument("--steps", type=int, default=128, help="steps per measurement (x16)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--block-sizes", nargs="*", default=["128x1x1", "64x4x1", "32x8x1"],
                   help="lbmpy block sizes tried besides pystencils' default")
    args = p.parse_args(argv)
    if args.steps % 16:
        p.error("--steps must be a multiple of 16 (our CUDA graphs replay 16 steps)")
    return args


def main(argv=None) -> int:
    """Physics check, then timing; writes ``lbmpy-<gpu>-<date>.json/.md``; table printed last."""
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        handlers=[logging.StreamHandler(),
                                  logging.FileHandler(out / "compare_lbmpy.log", mode="w")],
                        force=True)  # an imported library may have configured logging
    meta = device_meta(args.target)
    log.info("device %s, versions %s", meta["device"], versions())
    stem = "lbmpy-" + results_stem(meta["device"] if args.target == "cuda" else "cpu",
                                   meta["date"])
    check = physics_check(args.check_size, args.check_steps, args.precision, args.target)
    meta["check_done_seconds"] = round(time.perf_counter() - START, 1)
    log.info("physics check done at %.0f s", meta["check_done_seconds"])

    def save(rows: list[dict]) -> dict:
        meta["seconds"] = round(time.perf_counter() - START, 1)
        report = {"meta": meta, "physics_check": check, "results": rows,
                  "summary": summary_rows(rows)}
        write_json_md(out, stem, report, markdown(report), default=str)
        return report

    rows = []
    save(rows)
    if args.target == "cuda" and not args.check_only:
        rows = run_timing(args, meta, save)
    report = save(rows)
    print(f"wrote {out / stem}.json and .md ({meta['seconds']:.0f} s)")
    print(table(report))
    return 0 if all(c["passed"] for c in check) else 1


if __name__ == "__main__":
    sys.exit(main())
