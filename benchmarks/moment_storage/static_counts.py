"""Static SASS counts of the moment probe against the compact population kernels (CPU, sm_90).

Why the probe lost (issue 34), seen without a GPU: each kernel of the H100 timing
(``results/moment-probe-*.md``) is compiled with the local ``nvcc`` for sm_90 and disassembled
with ``nvdisasm`` (the ``nvidia-cuda-nvdisasm`` wheel, as
``benchmarks/kernel_tuning/kernel_instructions.py``).
Per kernel: registers and spill bytes (ptxas), dynamic shared memory of the timed block, the
theoretical occupancy on an H100 SM that follows from them, and the static instruction counts
split at the block barriers (``__syncthreads``): per segment and by class (FP32 arithmetic,
global loads/stores, shared loads/stores, conversions). Static counts: a loop body counts once.
The runtime compiler of the timing (NVRTC under CuPy) may allocate registers differently.

Usage: ``python benchmarks/moment_storage/static_counts.py --nvdisasm PATH [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for _p in (str(ROOT), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import moment_kernel as mk  # noqa: E402

from solver.backends.cuda.compact_source import (  # noqa: E402
    CompactCode,
    packed_threads,
    probe_shared_bytes,
)
from solver.backends.cuda.kernels import KernelVariant, kernel_source  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402

#: H100 (sm_90) per-SM limits: registers, threads, blocks, shared memory (228 KB carveout,
#: 1 KB reserved per block), register allocation granularity per warp.
SM = {"registers": 65536, "threads": 2048, "blocks": 32, "shared": 233472,
      "reserved": 1024, "reg_unit": 256}
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)")
#: Opcode classes counted (sm_90 SASS mnemonics, before the first '.').
CLASSES = {
    "fp32": ("FFMA", "FADD", "FMUL", "FMNMX", "FSEL", "FSETP", "FSET", "FCHK", "MUFU"),
    "global load": ("LDG", "LD"),
    "global store": ("STG", "ST"),
    "shared load": ("LDS",),
    "shared store": ("STS",),
    "convert": ("F2F", "F2FP", "HADD2", "HMUL2", "HFMA2", "I2F", "F2I"),
    "barrier": ("BAR",),
}


def _moment(storage: str, layout: str, tpb: int) -> tuple[str, str, int, int]:
    return (mk.kernel_source(storage, layout=layout), mk.kernel_name(storage, layout=layout),
            64 * tpb, mk.shared_bytes(tpb, storage, layout))


def _compact(storage: str, packed: int, tpb: int) -> tuple[str, str, int, int]:
    variant = KernelVariant("D3Q19", "float32", "BGK", True, "xyz", storage=storage,
                            compact=1, packed=packed, code=CompactCode(inner=True))
    return (kernel_source(variant), variant.canonical().name,
            packed_threads(packed) if packed else 64 * tpb,
            probe_shared_bytes(tpb, True, packed))


def _float_weights(built: tuple[str, str, int, int]) -> tuple[str, str, int, int]:
    """The same kernel with each rebuilt population's weight a float literal: the timed probe
    writes ``w_i`` as a double literal, so float32/float16 storage multiply in float64."""
    source, *rest = built
    fixed, n = _WEIGHT.subn(r"\1(real)\2 *", source)
    assert n == 19, f"expected 19 weight literals, found {n}"
    return (fixed, *rest)


_WEIGHT = re.compile(r"(\bg\d+ = )(\d\.\d+(?:e-?\d+)?) \*")
#: The inner-tile halo choice of both kernels ('if (true)': the edge-tile path compiled out).
_INNER_HALO = re.compile(r"if \((?:INNER && )?halo_inside\([^)]*\)\)")

#: The kernels and block shapes of the H100 timing's best configurations (and one variant).
KERNELS = {
    "moments aos float32, 2 tiles/block": lambda: _moment("float32", "aos", 2),
    "moments aos float32, float weights (not timed)":
        lambda: _float_weights(_moment("float32", "aos", 2)),
    "moments soa float32, 2 tiles/block": lambda: _moment("float32", "soa", 2),
    "moments aos float16, 2 tiles/block": lambda: _moment("float16", "aos", 2),
    "compact BGK float32, inner, 2 tiles/block": lambda: _compact("auto", 0, 2),
    "compact BGK float16 storage, packed 4": lambda: _compact("float16", 4, 0),
}


def compile_counts(source: str, nvcc: str, nvdisasm: str) -> tuple[str, dict]:
    """SASS text and the ptxas resource line's numbers of one kernel source (sm_90)."""
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        cu.write_text(source)
        out = subprocess.run([nvcc, "-arch=sm_90", "-std=c++17", "-cubin", "-Xptxas", "-v",
                              "-o", str(cubin), str(cu)], capture_output=True, text=True,
                             check=True).stderr
        sass = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    number = lambda pattern: int(m.group(1)) if (m := re.search(pattern, out)) else 0  # noqa: E731
    return sass, {"registers": number(r"Used (\d+) registers"),
                  "spill_stores_bytes": number(r"(\d+) bytes spill stores"),
                  "spill_loads_bytes": number(r"(\d+) bytes spill loads"),
                  "stack_bytes": number(r"(\d+) bytes stack frame")}


def occupancy(registers: int, threads: int, shared: int) -> dict:
    """Resident blocks and warps per H100 SM of a kernel, and which limit binds."""
    warps = -(-threads // 32)
    per_warp = -(-registers * 32 // SM["reg_unit"]) * SM["reg_unit"]
    limits = {"registers": (SM["registers"] // per_warp) // warps,
              "threads": SM["threads"] // threads, "blocks": SM["blocks"],
              "shared": SM["shared"] // (shared + SM["reserved"])}
    blocks = min(limits.values())
    return {"blocks_per_sm": blocks, "warps_per_sm": blocks * warps,
            "occupancy": blocks * warps / (SM["threads"] // 32),
            "bound_by": min(limits, key=limits.get)}


def _classes(ops: list[str]) -> dict:
    mix = Counter(ops)
    return {name: sum(mix[o] for o in codes) for name, codes in CLASSES.items()}


def count(sass: str) -> dict:
    """Instructions in total, by class, and per barrier segment (count and classes)."""
    ops = [m.group(1).split(".")[0] for line in sass.splitlines()
           if (m := _INSTRUCTION.match(line))]
    cuts = [k for k, op in enumerate(ops) if op == "BAR"]
    bounds = [0, *cuts, len(ops)]
    parts = [ops[bounds[k]:bounds[k + 1]] for k in range(len(bounds) - 1)]
    return {"total": len(ops), "segments": [len(part) for part in parts],
            "segment_classes": [_classes(part) for part in parts], **_classes(ops),
            "top": dict(Counter(ops).most_common(10)), "doubles": sum(
                1 for op in ops if op in ("DMUL", "DADD", "DFMA") or op == "F2F")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    parser.add_argument("--nvdisasm", default=shutil.which("nvdisasm") or "nvdisasm")
    args = parser.parse_args()
    version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-1]
    rows = []
    for label, build in KERNELS.items():
        source, name, threads, shared = build()
        sass, resources = compile_counts(source, args.nvcc, args.nvdisasm)
        inner_source, n = _INNER_HALO.subn("if (true)", source)
        assert n == 1, f"{label}: expected one inner-tile halo choice, found {n}"
        inner = count(compile_counts(inner_source, args.nvcc, args.nvdisasm)[0])
        rows.append({"kernel": label, "name": name, "threads": threads, "shared_bytes": shared,
                     **resources, **occupancy(resources["registers"], threads, shared),
                     **count(sass), "inner_segments": inner["segments"],
                     "inner_segment_classes": inner["segment_classes"]})
        print(json.dumps(rows[-1]), flush=True)
    if args.out is None:
        return
    commit = git_commit()
    stem = args.out / f"static-counts-sm_90-{date.today().isoformat()}-{commit}"
    lines = ["# Static SASS counts, moment probe vs compact population kernels (sm_90)", "",
             f"{version}; commit {commit}; `python benchmarks/moment_storage/static_counts.py`"
             " (counts per thread, static: a loop body counts once; not timings).", "",
             "| kernel | registers | spills (B) | shared B/block | threads/block | warps/SM "
             "(occupancy, bound by) | SASS total | per barrier segment, inner tile | FP32 | LDG "
             "| STG | LDS | STS | convert | BAR | float64 ops + F2F |",
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: "
             "| ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['kernel']} | {r['registers']} | {r['spill_stores_bytes']} | "
              f"{r['shared_bytes']} | {r['threads']} | {r['warps_per_sm']} "
              f"({r['occupancy']:.0%}, {r['bound_by']}) | {r['total']} | "
              f"{' / '.join(map(str, r['inner_segments']))} | {r['fp32']} | {r['global load']} | "
              f"{r['global store']} | {r['shared load']} | {r['shared store']} | "
              f"{r['convert']} | {r['barrier']} | {r['doubles']} |" for r in rows]
    write_json_md(stem.parent, stem.name, {"nvcc": version, "commit": commit, "sm": SM,
                                           "rows": rows}, "\n".join(lines) + "\n", newline=True)
    print(f"wrote {stem}.json and .md")


if __name__ == "__main__":
    main()
