"""Does moment storage beat population storage on compact tiles? One GPU call (issue 34 item 2).

In one process: builds the moment probe kernels (``moment_kernel.py``: regularized D3Q19, ten
moments a fluid node, compact tiles, bounce-back walls, body force), checks them on the device
against the NumPy float64 reference of the same scheme (``moment_reference.py``; a 40x36x28
pack with walls in y, 4 steps: float64 <= 1e-12, float32 <= 1e-5, float16 <= 5e-3 relative to
the largest moment), measures the device-to-device copy bandwidth, then times with CUDA events
around captured graphs (after warm-up launches; fluid node updates only) the probe in float32
and float16 storage against the compact kernels runs use today (BGK step, float32 per node
'inner' 2 tiles/block; float16 storage packed 4), on the rock-like 192^3 pack (phi 0.2, d 22)
and a dense periodic 256^3 box, each configuration twice in alternating order. Writes
``moment-probe-<gpu>-<date>-<commit>.json`` and ``.md`` into ``--out`` (default
``benchmarks/moment_storage/results``). Stop rule of the issue: the probe must reach 1.3x the
compact float32 step in fluid updates/s on the rock-like pack.

Usage, on the GPU machine from the repository root: ``python benchmarks/moment_storage/probe.py
--out DIR`` (about 4.6 minutes held on an H100, machine start included; ``--quick``: 96^3
and 128^3 cases, a smoke run). Set ``LBM_COMMIT`` where the copy has no ``.git``. The files are
written after the checks and after each case.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for p in (str(ROOT), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import moment_kernel as mk  # noqa: E402
from moment_reference import MomentGrid  # noqa: E402

from solver.backends.cuda.compact import CompactTiling  # noqa: E402
from solver.benchmarking.cases import BenchCase, sphere_pack  # noqa: E402
from solver.benchmarking.results import run_meta, write_json_md  # noqa: E402

#: The issue's stop rule: moment probe / compact float32 step, fluid updates/s, rock-like pack.
STOP_RULE = 1.3
#: Relative tolerance of the device check per storage (largest |difference| / largest |moment|).
TOLERANCE = {"float64": 1e-12, "float32": 1e-5, "float16": 5e-3}
TAU = 0.8
FORCE = (1e-6, 0.0, 0.0)
#: (storage precision, layout, tiles per block) of the moment probe timings: the per-moment
#: tile blocks ('soa') once, the node-major layout ('aos', fewer L2 sectors by
#: ``benchmarks/l2_sectors/sector_model.py --moments``) at several tiles per block.
MOMENT_RUNS = [("float32", "soa", 2), ("float32", "aos", 1), ("float32", "aos", 2),
               ("float32", "aos", 4), ("float16", "soa", 2), ("float16", "aos", 2),
               ("float16", "aos", 4)]
#: (label, precision, packed tiles per block, tiles per block): the compact kernels of runs.
COMPACT_RUNS = [("compact BGK float32", "float32", 0, 2), ("compact BGK float16", "float16", 4, 0)]


class MomentProbe:
    """Two compact copies of ten moments a fluid node on the device, stepped by the probe
    kernel of one storage and layout; CUDA events around captured graphs of 16 launches."""

    GRAPH_STEPS = 16

    def __init__(self, tiling, periodic, storage: str, layout: str = "soa", tau: float = TAU,
                 force=FORCE) -> None:
        import cupy as cp

        from solver.backends.cuda.capture import capture_graph

        self.cp, self.capture_graph, self.storage = cp, capture_graph, storage
        self.layout = layout
        self.compact = CompactTiling(tiling, 1)
        self.compact.check_offsets(mk.N_MOMENTS)
        name = mk.kernel_name(storage, layout=layout)
        module = cp.RawModule(code=mk.kernel_source(storage, layout=layout),
                              options=("-std=c++17",))
        self.kernel = module.get_function(name)
        self.tables = (cp.asarray(self.compact.masks.astype(np.uint64)),
                       cp.asarray(self.compact.base.astype(np.int32)),
                       cp.asarray(np.ascontiguousarray(tiling.tiles, dtype=np.int32).ravel()),
                       cp.asarray(np.ascontiguousarray(tiling.tile_map.transpose(),
                                                       dtype=np.int32).ravel()))
        self.ints = tuple(np.int32(v) for v in self.compact.int_args(periodic))
        real = np.dtype(mk.arith_dtype(storage)).type
        self.reals = (*(real(f) for f in force), real(1.0 / tau))
        self.extra = (cp.zeros(2, dtype=np.uint32),) if storage == "float16" else ()
        size = mk.N_MOMENTS * self.compact.n_slots
        self.f = [cp.zeros(size, dtype=mk.value_dtype(storage)) for _ in range(2)]
        self.current = 0
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.graphs: dict[int, object] = {}
        cp.cuda.Device().synchronize()

    def launch(self, tpb: int) -> None:
        """One step from the current copy into the other."""
        src, dst = self.f[self.current], self.f[1 - self.current]
        with self.stream:
            self.kernel((-(-self.compact.tiling.n_tiles // tpb),), (64 * tpb,),
                        (src, dst, *self.tables, *self.ints, *self.reals, *self.extra),
                        shared_mem=mk.shared_bytes(tpb, self.storage, self.layout))
        self.current = 1 - self.current

    def upload(self, values: np.ndarray) -> None:
        """Overwrite the current copy with host values (stored dtype, all slots)."""
        self.f[self.current][...] = self.cp.asarray(values)
        self.cp.cuda.Device().synchronize()

    def download(self) -> np.ndarray:
        """The current copy on the host, after the launches queued so far."""
        self.stream.synchronize()
        return self.cp.asnumpy(self.f[self.current])

    def time(self, n: int, tpb: int) -> float:
        """Seconds of ``n`` steps (CUDA events; graphs of GRAPH_STEPS launches)."""
        cp = self.cp
        if tpb not in self.graphs:
            self.launch(tpb)  # loads the kernel outside the capture
            self.launch(tpb)
            self.stream.synchronize()
            self.graphs[tpb] = self.capture_graph(self.stream, lambda: self.launch(tpb),
                                                  self.GRAPH_STEPS)
        start, end = cp.cuda.Event(), cp.cuda.Event()
        done = 0
        with self.stream:
            start.record(self.stream)
            while n - done >= self.GRAPH_STEPS:
                self.graphs[tpb].launch(self.stream)
                done += self.GRAPH_STEPS
            for _ in range(n - done):
                self.launch(tpb)
            end.record(self.stream)
        end.synchronize()
        return cp.cuda.get_elapsed_time(start, end) / 1e3

    def memory_bytes(self) -> int:
        """Device bytes: two copies of the moments and the compact tables."""
        return self.compact.memory_bytes(mk.N_MOMENTS, np.dtype(mk.value_dtype(self.storage))
                                         .itemsize)

    def release(self) -> None:
        """Free the device arrays."""
        self.f, self.tables, self.graphs = [], (), {}
        self.cp.get_default_memory_pool().free_all_blocks()


def check_case() -> tuple[np.ndarray, tuple[bool, bool, bool]]:
    """The device check's geometry: a 40x36x28 sphere pack, walls at the y faces."""
    return sphere_pack((40, 36, 28), 0.5, 10.0, 3), (True, False, True)


def device_check(storage: str, layout: str = "soa", steps: int = 4, tpb: int = 2,
                 case=None) -> dict:
    """The probe kernel of ``storage`` and ``layout`` against the NumPy reference from random
    moments, on ``case`` (solid, periodic axes; default :func:`check_case`)."""
    from solver.tiling import Tiling

    solid, periodic = case or check_case()
    grid = MomentGrid(solid, periodic)
    probe = MomentProbe(Tiling.build(solid, 4, (1, 2, 3)), periodic, storage, layout,
                        force=(2e-5, -1e-5, 5e-6))
    try:
        m = np.random.default_rng(1).normal(size=(mk.N_MOMENTS, grid.n_fluid)) * 1e-3
        stored = mk.pack(probe.compact, grid, m, storage, layout)
        ref = mk.unpack(probe.compact, grid, stored, storage, layout)  # from the stored values
        probe.upload(stored)
        for _ in range(steps):
            probe.launch(tpb)
            ref = grid.step(ref, 1.0 / TAU, (2e-5, -1e-5, 5e-6))
        got = mk.unpack(probe.compact, grid, probe.download(), storage, layout)
    finally:
        probe.release()
    rel = float(np.abs(got - ref).max() / np.abs(ref).max())
    return dict(storage=storage, layout=layout, steps=steps, relative_difference=rel,
                tolerance=TOLERANCE[storage], ok=bool(rel <= TOLERANCE[storage]))


def _median_seconds(run, min_seconds: float = 0.05, repeats: int = 5) -> float:
    """Median seconds per step of ``repeats`` timings of enough steps (warm-up excluded)."""
    warm = run(3) / 3
    steps = int(np.clip(np.ceil(min_seconds / max(warm, 1e-6)), 16, 800)) // 16 * 16
    return float(np.median([run(steps) / steps for _ in range(repeats)]))


def cases(quick: bool) -> list[BenchCase]:
    """The rock-like pack (eta_t about 0.5) and the dense periodic box."""
    from solver.benchmarking.gpu_suite import rock_case

    n, box = (96, 128) if quick else (192, 256)
    return [rock_case(n, 22 * n / 192),
            BenchCase(f"periodic box {box}^3", np.zeros((box,) * 3, dtype=bool),
                      tile_offset="origin")]


def time_case(case: BenchCase, copy: float) -> list[dict]:
    """Timings of the moment probes and today's compact kernels on one case, twice each."""
    from solver.backends.cuda.compact_run import CompactRun
    from solver.backends.plan import COMPACT_CODE
    from solver.benchmarking.gpu_suite import _problem

    problems = {p: replace(_problem(case, p), tile_storage="compact")
                for p in ("float32", "float16")}
    tiling = problems["float32"].tiling
    periodic = problems["float32"].periodic
    n_fluid = problems["float32"].n_fluid
    jobs = ([("moments", f"moments {layout} {p}", p, layout, tpb)
             for p, layout, tpb in MOMENT_RUNS] + [("compact", *r) for r in COMPACT_RUNS])
    rows = []
    for rep in range(2):
        for kind, label, precision, *shape in (jobs if rep == 0 else jobs[::-1]):
            if kind == "moments":
                layout, tpb = shape
                run = MomentProbe(tiling, periodic, precision, layout)
                sec = _median_seconds(lambda k, run=run, tpb=tpb: run.time(k, tpb))
                value_bytes, values = np.dtype(mk.value_dtype(precision)).itemsize, mk.N_MOMENTS
                config = f"{tpb} tiles/block"
            else:
                packed, tpb = shape
                run = CompactRun(problems[precision], 1, tiles_per_block=tpb or 2,
                                 packed=packed, code=COMPACT_CODE)
                sec = _median_seconds(run.step)
                value_bytes, values = (2 if precision == "float16" else 4), 19
                config = f"packed {packed}" if packed else f"{tpb} tiles/block"
            memory = run.memory_bytes()
            run.release()
            g = n_fluid / sec / 1e9
            rows.append(dict(case=case.label, eta_t=round(tiling.eta_t, 3), kernel=label,
                             storage=precision, config=config, rep=rep,
                             seconds_per_step=sec, fluid_g_per_s=g,
                             bytes_per_fluid_node=2 * values * value_bytes,
                             memory_per_fluid_node=memory / n_fluid,
                             of_own_limit=g * 1e9 * 2 * values * value_bytes / copy))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def summary(result: dict) -> str:
    """Markdown: device checks, the best configuration of each kernel per case (mean of its two
    timings), its speed over today's compact float32 step, and the stop rule's verdict."""
    meta = result["meta"]
    lines = [f"# Moment storage probe on {meta['device']}", "",
             f"Date {meta['date']}, commit {meta['commit']}, copy bandwidth "
             f"{meta['copy_bandwidth'] / 1e9:.0f} GB/s (same run). Regularized D3Q19 in moment "
             "representation (10 values a fluid node) vs the compact population kernels runs "
             "use (BGK, 19 values). Cells: fluid G updates/s, mean of two timings, best "
             "configuration; 'own limit': copy bandwidth / (2 x values x bytes) per node.", "",
             "Device checks against the NumPy float64 reference: " + ", ".join(
                 f"{c['layout']} {c['storage']} {c['relative_difference']:.1e} "
                 f"({'ok' if c['ok'] else 'FAILS'} <= {c['tolerance']:g})"
                 for c in result["checks"]), "",
             "| case | kernel | best config | G fluid updates/s | of own limit | B/node/step "
             "(DRAM ideal) | memory B/fluid node | vs compact float32 |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    verdict = None
    for case in dict.fromkeys(r["case"] for r in result["results"]):
        best: dict[str, dict] = {}
        for r in result["results"]:
            if r["case"] != case:
                continue
            key = (r["kernel"], r["config"])
            best.setdefault(key, {**r, "gs": []})["gs"].append(r["fluid_g_per_s"])
        per_kernel: dict[str, dict] = {}
        for (kernel, _), r in best.items():
            r["mean"] = float(np.mean(r["gs"]))
            if kernel not in per_kernel or r["mean"] > per_kernel[kernel]["mean"]:
                per_kernel[kernel] = r
        base = per_kernel.get("compact BGK float32", {}).get("mean")
        for kernel, r in per_kernel.items():
            ratio = r["mean"] / base if base else float("nan")
            lines.append(f"| {case} | {kernel} | {r['config']} | {r['mean']:.2f} | "
                         f"{r['of_own_limit'] * r['mean'] / r['fluid_g_per_s']:.3f} | "
                         f"{r['bytes_per_fluid_node']} | {r['memory_per_fluid_node']:.1f} | "
                         f"{ratio:.2f} |")
            if case.startswith("rock") and kernel.startswith("moments"):
                verdict = max(verdict or 0.0, ratio)
    if verdict is not None:
        lines += ["", f"Stop rule (moments >= {STOP_RULE} x compact float32 on the rock-like "
                  f"pack): best moment probe {verdict:.2f} x: "
                  + ("PASSES, build the storage option (item 3)." if verdict >= STOP_RULE
                     else "FAILS, a measured negative result (resolve per the issue).")]
    if result.get("errors"):
        lines += ["", "Errors:", *[f"- {e}" for e in result["errors"]]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Check, time, write JSON and markdown; exit 1 when a check fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--quick", action="store_true", help="96^3 and 128^3 cases")
    args = parser.parse_args(argv)
    from solver.backends.cuda.device import device_info

    started = time.perf_counter()
    info = device_info()
    copy = info["copy_bandwidth"]
    result = {"meta": run_meta(info["name"], copy_bandwidth=copy, tau=TAU, force=FORCE),
              "checks": [], "results": [], "errors": []}
    gpu = "".join(ch if ch.isalnum() else "-" for ch in info["name"].lower()).strip("-")
    stem = f"moment-probe-{gpu}-{result['meta']['date']}-{result['meta']['commit']}"

    def write() -> str:  # after every stage: a run cut off still leaves its table
        result["meta"]["seconds"] = round(time.perf_counter() - started, 1)
        table = summary(result)
        write_json_md(args.out, stem, result, table)
        return table

    for layout in mk.LAYOUTS:
        for storage in ("float64", "float32", "float16"):
            try:
                result["checks"].append(device_check(storage, layout))
            except Exception as exc:  # a kernel that does not build or launch
                result["checks"].append(dict(storage=storage, layout=layout, ok=False,
                                             relative_difference=float("nan"),
                                             tolerance=TOLERANCE[storage]))
                result["errors"].append(f"check {layout} {storage}: {type(exc).__name__}: "
                                        f"{exc}"[:400])
    print(json.dumps(result["checks"]), flush=True)
    write()
    if all(c["ok"] for c in result["checks"]):
        for case in cases(args.quick):
            try:
                result["results"] += time_case(case, copy)
            except Exception as exc:  # keep what was measured
                result["errors"].append(f"{case.label}: {type(exc).__name__}: {exc}"[:400])
            write()
    else:
        result["errors"].append("a device check failed: nothing timed")
    print(write())
    return 0 if not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
