"""Where the time of the float16-storage kernel goes: ablations timed on one GPU allocation.

The dense 256^3 cavity (D3Q19 BGK, XYZ layout, 2 tiles per block) is allocated once per storage
and stepped by kernels built from the generated source (``kernel_source``) with one part
changed by a text edit: rounding to nearest instead of stochastic rounding; no decode/encode at
all (the raw bits moved: garbage values, same memory traffic, no conversion or rounding work);
round-toward-zero conversion in place of the mask; and a kernel that stops right after the halo
phase (the fixed per-tile work before the block barrier). Each variant is timed with CUDA events
over back-to-back launches after warm-up (median of 3), MFLUPS of fluid nodes, bandwidth
against the device-to-device copy measured in the same process.

Usage on a GPU machine, from the repository root: ``python benchmarks/fp16_breakdown.py --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

import cupy as cp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from solver.backends.cuda.backend import CupyBackend, copy_bandwidth  # noqa: E402
from solver.backends.cuda.kernels import KernelVariant, kernel_source  # noqa: E402
from solver.backends.cuda.tables import launch_shape  # noqa: E402
from solver.benchmarking.cases import git_commit, precision_options  # noqa: E402
from solver.benchmarking.gpu_suite import dense_cases  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.problem import Problem  # noqa: E402

_ENCODE = ("    const unsigned int b = (float_bits(f * scale + offset) + r) & "
           "~((1u << DITHER_BITS) - 1u);\n    return float_to_half_bits(bits_float(b));")
_BARRIER = "    __syncthreads();"


def _edit(old: str, new: str):
    def apply(src: str) -> str:
        if old not in src:
            raise ValueError(f"anchor not found: {old[:60]!r}")
        return src.replace(old, new)
    return apply


EDITS = {
    "as generated": lambda src: src,
    "round to nearest (no dither)": _edit(_ENCODE,
                                          "    return float_to_half_bits(f * scale + offset);"),
    "round toward zero, no mask": _edit(_ENCODE, (
        "    const unsigned int b = float_bits(f * scale + offset) + r;\n"
        "    unsigned short h;\n"
        "    asm(\"cvt.rz.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(bits_float(b)));\n"
        "    return h;")),
    "no decode/encode (raw bits)": lambda src: _edit(_ENCODE, (
        "    return (store_t)float_bits(f);"))(
        _edit("    return shift + half_bits_to_float(h) * inv_scale;",
              "    return bits_float((unsigned int)h);")(src)),
    "halo phase only": _edit(_BARRIER, _BARRIER + " if (gx >= 0) return;"),
}
PLAN = {"float32": ["as generated", "halo phase only"],
        "float16": list(EDITS)}


def _time(fn, state, launches: int = 40) -> float:
    """Median seconds per launch of ``fn`` with the step kernel's launch shape and arguments."""
    blocks, threads, smem = launch_shape(state.problem, state.problem.tiles_per_block)
    grid, block = (blocks,), (threads,)
    tail = (*state.tables.values(), *state.int_args, *state.real_args,
            *(() if state.seeds is None else (state.seeds,)))
    times = []
    for rep in range(4):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(launches if rep else 3):
            fn(grid, block, (*state.copies(), *tail), shared_mem=smem)
            state.current = 1 - state.current
        end.record()
        end.synchronize()
        if rep:  # the first round is warm-up
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3 / launches)
    return float(np.median(times))


def main() -> int:
    """Time every planned variant; print a table and write JSON/markdown to ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--size", type=int, default=256)
    args = parser.parse_args()
    backend = CupyBackend()
    copy = copy_bandwidth(cp.cuda.Device().id)
    case = dense_cases([args.size])[0]
    rows = []
    for label, edits in PLAN.items():
        config = SimulationConfig(lattice="D3Q19", collision="BGK", tile_offset="origin",
                                  gpu_layout="xyz", tiles_per_block=2,
                                  **{f"{ax}_{side}": "wall" for ax in "xyz"
                                     for side in ("min", "max")},
                                  **precision_options(label))
        problem = Problem.from_config(case.solid, config)
        state = backend.allocate(problem)
        variant = KernelVariant.for_problem(problem)
        for name in edits:
            src = EDITS[name](kernel_source(variant))
            fn = cp.RawModule(code=src, options=("-std=c++17",)).get_function(variant.name)
            sec = _time(fn, state)
            mflups = problem.n_fluid / sec / 1e6
            rows.append({"storage": label, "variant": name, "mflups": round(mflups, 1),
                         "fraction_copy": round(mflups * 1e6
                                                * problem.bytes_per_fluid_node_step() / copy, 4),
                         "registers": int(fn.num_regs)})
            print(rows[-1], flush=True)
        backend.release(state)
    device = backend.device_info()["name"]
    meta = {"device": device, "date": date.today().isoformat(), "commit": git_commit(),
            "case": case.label, "copy_bandwidth": copy}
    lines = [f"# float16-storage kernel breakdown: {device}", "",
             f"Date {meta['date']}, commit {meta['commit']}, {case.label}, D3Q19 BGK, XYZ, "
             f"2 tiles per block; copy bandwidth {copy / 1e9:.0f} GB/s. Method: "
             "`benchmarks/fp16_breakdown.py` docstring.", "",
             "| storage | variant | MFLUPS | of copy | registers |",
             "| --- | --- | ---: | ---: | ---: |"]
    lines += [f"| {r['storage']} | {r['variant']} | {r['mflups']:.0f} | "
              f"{r['fraction_copy']:.3f} | {r['registers']} |" for r in rows]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fp16-breakdown.json").write_text(json.dumps({"meta": meta, "results": rows},
                                                        indent=1))
    (out / "fp16-breakdown.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
