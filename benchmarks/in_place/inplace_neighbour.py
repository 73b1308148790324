"""Where the in-place (AA) step loses: each kernel alone, and patches of the neighbour step.

``inplace_patterns.py`` shows a plain AA kernel on the solver's memory layout within 10 % of
two copies on the dense box, and the solver's own in-place step further behind. This times the
solver's two AA kernels apart (phase 0, the neighbour step, reads and writes neighbours' slots;
phase 1, the local step, only its own node) next to the probe's, with the registers of each,
and then source patches of the solver's neighbour step, each compiled by NVRTC under the
kernel's own name and launched with its own arguments: stores in increasing direction order
(the generator writes them reversed to save registers), the store addresses' shared loads
without ``volatile`` (the compiler may keep the load addresses), loads through L2 only
(``__ldcg``), stores marked for L2 (``__stcg``) or streaming (``__stcs``), and both. A kernel
launched alone again and again steps meaningless values: the times are valid, the results not.

Usage, on the GPU machine from the repository root:
``python benchmarks/in_place/inplace_neighbour.py --out DIR`` (about 1 minute on an H100); writes
``inplace-neighbour-<gpu>-<date>-<commit>.json`` and ``.md``: G node updates/s of fluid nodes, D3Q19
BGK, the dense periodic 256^3 box and the rock-like 192^3 pack.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import inplace_patterns  # noqa: E402

_STORE = re.compile(r"^(\s*)fout\[(.*)\] = (out\d+);$", re.M)
_LOAD = re.compile(r"= fin\[at\];")
_VOLATILE_STORE = re.compile(r"    \{\n        const src_t s = \(\(const volatile src_t\*\)s_src\)"
                             r"\[[^\n]*\n        fout\[[^\n]*\n    \}\n")


def forward(source: str) -> str:
    """The neighbour step's moving-direction stores in increasing direction order."""
    blocks = _VOLATILE_STORE.findall(source)
    start, end = source.index(blocks[0]), source.index(blocks[-1]) + len(blocks[-1])
    return source[:start] + "".join(reversed(blocks)) + source[end:]


#: Source patches of the neighbour step (name -> text transform).
PATCHES = {
    "none": lambda s: s,
    "forward stores": forward,
    "no volatile": lambda s: s.replace("((const volatile src_t*)s_src)", "s_src"),
    "ldcg": lambda s: _LOAD.sub("= __ldcg(&fin[at]);", s),
    "stcg": lambda s: _STORE.sub(r"\1__stcg(&fout[\2], \3);", s),
    "stcs": lambda s: _STORE.sub(r"\1__stcs(&fout[\2], \3);", s),
    "ldcg stcg": lambda s: _STORE.sub(r"\1__stcg(&fout[\2], \3);",
                                      _LOAD.sub("= __ldcg(&fin[at]);", s)),
}


def seconds(cp, launch, n: int = 40) -> float:
    """Seconds per launch (CUDA events, after one warm-up launch), the best of 3."""
    launch()
    best = np.inf
    for _ in range(3):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(n):
            launch()
        end.record()
        end.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, end) / 1e3 / n)
    return best


def solver_rows(cp, backend, case, precision: str) -> list[dict]:
    """Each kernel of the solver's two-copy and in-place steps alone, then the patches of the
    neighbour step, at 2 and 4 tiles per block."""
    from solver.backends.cuda.kernels import KernelVariant, kernel_source
    from solver.benchmarking.gpu_suite import _problem

    rows = []
    for streaming in ("two-copy", "in-place"):
        problem = _problem(case, precision, streaming, "tiled")
        state = backend.allocate(problem)
        try:
            for tpb in (2, 4):
                for phase in (0, 1) if streaming == "in-place" else (0,):
                    state.current = phase
                    kernel, grid, block, tail, smem = state.entry("full", tpb)
                    copies = state.copies()

                    def launch(k=kernel, grid=grid, block=block, tail=tail, smem=smem,
                               copies=copies):
                        k(grid, block, (*copies, *tail), shared_mem=smem)
                    if streaming == "in-place" and phase == 0:
                        variant = KernelVariant.for_problem(problem, "full", 0)
                        source = kernel_source(variant)
                        for name, patch in PATCHES.items():
                            patched = patch(source)
                            if name != "none" and patched == source:
                                continue  # nothing to patch (float16 decodes its loads)
                            k = cp.RawModule(code=patched, options=("-std=c++17",)) \
                                .get_function(variant.name)
                            rows.append(_row(case, precision, f"solver {streaming} neighbour "
                                             f"step, patch {name}", tpb, problem.n_fluid,
                                             seconds(cp, lambda k=k: launch(k)), k.num_regs))
                    else:
                        step = {0: "step", 1: "local step"}[phase] if streaming == "in-place" \
                            else "step"
                        rows.append(_row(case, precision, f"solver {streaming} {step}", tpb,
                                         problem.n_fluid, seconds(cp, launch), kernel.num_regs))
        finally:
            backend.release(state)
    return rows


def probe_rows(cp, n: int, precision: str) -> list[dict]:
    """Each kernel of the probe alone (dense periodic box), 128 and 256 threads per block."""
    real = {"float32": "float", "float64": "double"}[precision]
    module = cp.RawModule(code=inplace_patterns.source(real), options=("-std=c++17",))
    dtype = np.dtype(precision)
    f = cp.asarray(inplace_patterns.initial(n, dtype))
    other = cp.empty_like(f)
    g = n // 4
    ints = (np.int32(n), np.int32(g), np.int32(g**3), dtype.type(1 / 0.6))
    rows = []
    for threads in (128, 256):
        for name in ("pull", "aa_neighbour", "aa_local", "esoteric_even", "esoteric_odd"):
            k = module.get_function(name)
            args = (f, other, *ints) if name == "pull" else (f, *ints)
            sec = seconds(cp, lambda k=k, args=args, t=threads: k((g**3 * 64 // t,), (t,),
                                                                    args))
            rows.append(_row(None, precision, f"probe {name}", threads // 64, n**3, sec,
                             k.num_regs))
    return rows


def _row(case, precision: str, kernel: str, tpb: int, nodes: int, sec: float,
         registers: int) -> dict:
    return {"case": case.label if case else "periodic box (probe)", "precision": precision,
            "kernel": kernel, "tiles_per_block": tpb, "g_per_s": nodes / sec / 1e9,
            "registers": int(registers)}


def main() -> None:
    import cupy as cp

    from solver.backends.cuda.backend import CupyBackend
    from solver.benchmarking.cases import BenchCase
    from solver.benchmarking.gpu_suite import rock_case
    from solver.benchmarking.results import run_meta, write_json_md

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    backend = CupyBackend()
    name = backend.device_info()["name"]
    cases = [BenchCase("periodic box 256^3", np.zeros((256,) * 3, dtype=bool),
                       tile_offset="origin"), rock_case(192, 22)]
    rows = []
    for precision in ("float32", "float64", "float16"):
        for case in cases:
            rows += solver_rows(cp, backend, case, precision)
        if precision != "float16":
            rows += probe_rows(cp, 256, precision)
        print(json.dumps(rows[-3:]), flush=True)
    meta = run_meta(name)
    stem = f"inplace-neighbour-{name.lower().replace(' ', '-')}-{meta['date']}-{meta['commit']}"
    lines = [f"# The in-place step's kernels alone: {name}", "",
             f"Date {meta['date']}, commit {meta['commit']}, D3Q19 BGK, fluid G node updates/s "
             "of each kernel launched alone "
             "(`python benchmarks/in_place/inplace_neighbour.py`).", "",
             "| case | precision | kernel | tiles/block | G/s | registers |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    lines += [f"| {r['case']} | {r['precision']} | {r['kernel']} | {r['tiles_per_block']} | "
              f"{r['g_per_s']:.2f} | {r['registers']} |" for r in rows]
    write_json_md(args.out, stem, {"meta": meta, "rows": rows}, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
