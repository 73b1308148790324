"""In-place (AA) streaming against two copies, per tuning of the in-place kernels (issue 20 item 4).

For each case (dense periodic box, sphere pack) and precision (float32, float16 storage,
float64) the script allocates the two-copy and the in-place state once and times full steps
through the backend (CUDA graphs, the same path as ``python -m solver bench``): the two-copy
step, then the in-place pair of kernels under each :class:`~solver.backends.cuda.streaming.
AATuning` of the list (register cap ``rN``, read-only-cache loads ``nc``), set as the
backend's choice for that precision (``streaming.AA_TUNING``, what a tuning that wins becomes).
Each row gives MFLUPS (fluid nodes), the ratio to two-copy of the same case, precision and
tiles per block, and what the driver reports for both in-place kernels: registers per thread
and local memory (spills). Goal: in place within 10 % of two-copy (ratio >= 0.9).

Usage on the GPU machine (about 2 minutes on an H100, compiles included)::

    python benchmarks/in_place/inplace_tune.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.backends.cuda import streaming  # noqa: E402
from solver.backends.cuda.kernels import KernelVariant  # noqa: E402
from solver.backends.cuda.streaming import AATuning  # noqa: E402
from solver.benchmarking.cases import BenchCase, git_commit, sphere_pack  # noqa: E402
from solver.benchmarking.gpu_suite import _problem, rock_case  # noqa: E402

#: Tunings timed per precision: the compiler's choice first, then register caps between the
#: neighbour step's registers under NVRTC (float32 and float16 storage 56, float64 76) and the
#: caps that spilled in the 54698e2 run (40 and 56; read-only-cache loads were level there).
TUNINGS = {
    "float32": [AATuning(), AATuning(48), AATuning(44), AATuning(40)],
    "float16": [AATuning(), AATuning(48), AATuning(44), AATuning(40)],
    "float64": [AATuning(), AATuning(72), AATuning(68), AATuning(64)],
}


def _seconds(backend, state, tpb: int, min_seconds: float, repeats: int) -> float:
    """Median seconds per full step (an even count: in place ends in phase 0)."""
    warm = backend.probe(state, "full", 4, tpb) / 4  # compiles and captures first
    steps = int(np.clip(2 * np.ceil(min_seconds / max(warm, 1e-6) / 2), 16, 400))
    return float(np.median([backend.probe(state, "full", steps, tpb) / steps
                            for _ in range(repeats)]))


def _variants(state) -> list[KernelVariant]:
    """Step variants of both phases (in place) or the one two-copy step variant."""
    phases = (0, 1) if state.in_place else (0,)
    return [KernelVariant.for_problem(state.problem, "full", p) for p in phases]


def measure(backend, compile_kernel, case: BenchCase, precision: str, tpbs,
            min_seconds: float = 0.05, repeats: int = 5) -> list[dict]:
    """Rows of one case and precision: two-copy, then in place per tuning (``compile_kernel``:
    variant -> compiled kernel, for its registers and local memory)."""
    rows = []
    for mode in ("two-copy", "in-place"):
        problem = _problem(case, precision, mode)
        base = backend.allocate(problem)
        state = backend.reconfigure(base, layout="xyz")
        try:
            for tuning in TUNINGS[precision] if mode == "in-place" else [AATuning()]:
                streaming.AA_TUNING[precision] = tuning
                state.launches.clear()  # resolve the kernels again under this tuning
                state.graphs.clear()
                kernels = [compile_kernel(v) for v in _variants(state)]
                for tpb in tpbs:
                    sec = _seconds(backend, state, tpb, min_seconds, repeats)
                    rows.append({
                        "case": case.label, "precision": precision, "streaming": mode,
                        "tuning": tuning.suffix.strip("_") or "-", "tpb": tpb,
                        "eta_t": round(problem.tiling.eta_t, 4),
                        "mflups": round(problem.n_fluid / sec / 1e6, 1),
                        "kernels": [v.name for v in _variants(state)],
                        "registers": [int(k.num_regs) for k in kernels],
                        "local_bytes": [int(k.local_size_bytes) for k in kernels]})
                    print(json.dumps(rows[-1]), flush=True)
        finally:
            streaming.AA_TUNING[precision] = AATuning()
            backend.release(base)
    two = {r["tpb"]: r["mflups"] for r in rows if r["streaming"] == "two-copy"}
    for r in rows:
        r["of_two_copy"] = round(r["mflups"] / two[r["tpb"]], 4)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--dense", type=int, default=256)
    parser.add_argument("--pack", type=int, default=192)
    parser.add_argument("--porosity", type=float, default=0.5)
    parser.add_argument("--rock", type=float, default=0.0,
                        help="grain diameter of a rock-like pack (phi 0.2) also timed; 0: none")
    parser.add_argument("--precisions", nargs="*", default=list(TUNINGS))
    parser.add_argument("--tpb", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--min-seconds", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from solver.backends.cuda.device import compile_kernel  # CuPy: the GPU machine only
    from solver.backends.cuda.probe_backend import ProbeBackend

    backend = ProbeBackend()
    info = dict(backend.device_info())
    cases = [BenchCase(f"periodic box {args.dense}^3", np.zeros((args.dense,) * 3, dtype=bool),
                       tile_offset="origin"),
             BenchCase(f"spheres {args.pack}^3 phi={args.porosity}",
                       sphere_pack((args.pack,) * 3, args.porosity, 40.0, 0),
                       porosity=args.porosity)]
    if args.rock:
        cases.append(rock_case(args.pack, args.rock))
    rows = [r for case in cases for p in args.precisions
            for r in measure(backend, compile_kernel, case, p, args.tpb, args.min_seconds,
                             args.repeats)]
    meta = {"device": info["name"], "copy_bandwidth": info["copy_bandwidth"],
            "commit": git_commit()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "inplace_tune.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                           indent=1))
    lines = [f"{meta['device']}, copy {meta['copy_bandwidth'] / 1e9:.0f} GB/s, "
             f"commit {meta['commit']}", "",
             "| case | precision | streaming | tuning | tpb | MFLUPS | of two-copy | registers "
             "| local bytes |", "| --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |"]
    lines += [f"| {r['case']} | {r['precision']} | {r['streaming']} | {r['tuning']} | "
              f"{r['tpb']} | {r['mflups']:.0f} | {r['of_two_copy']:.3f} | "
              f"{'/'.join(map(str, r['registers']))} | "
              f"{'/'.join(map(str, r['local_bytes']))} |" for r in rows]
    (args.out / "inplace_tune.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
