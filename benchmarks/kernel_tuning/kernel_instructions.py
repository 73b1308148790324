"""Static SASS instruction counts of the generated kernels: a CPU-side look at the per-node work.

Each variant is compiled with the local ``nvcc`` for one architecture (default sm_90, the
H100/H200) and disassembled with ``nvdisasm`` (CUDA toolkit, or the ``nvidia-cuda-nvdisasm``
wheel: ``pip download --no-deps nvidia-cuda-nvdisasm`` and point ``--nvdisasm`` at
``nvidia/cu13/bin/nvdisasm`` inside it). Counted per variant:

- ``node``: instructions from the block barrier to the end, the straight-line path every fluid
  node runs once per step (pull, collision, stores); static, so it is the per-thread count of
  that path, not a dynamic count;
- ``halo``: instructions before the barrier (the halo-source resolution: both the inner-tile
  and the edge-tile paths, of which a tile runs one);
- ``inner_halo``: the same with the edge-tile path compiled out, i.e. what a thread of an
  inner tile (halo inside the domain: nearly every tile of a large geometry) runs before the
  barrier;
- ``registers`` per thread (ptxas).

Where the kernel is bound by instruction issue rather than DRAM (float16 storage: the paper's
read/write probe reaches 2x float32, the full step 1.38x) fewer ``node`` instructions are the
lever; where it is bound by DRAM (float32, float64 dense) they change little. This counts, it
does not time: what it suggests is timed on the GPU (``tune_kernel.py``, ``python -m solver
bench``). Usage:
``python benchmarks/kernel_tuning/kernel_instructions.py --nvdisasm PATH --out DIR``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.backends.cuda.compact_source import CompactCode  # noqa: E402
from solver.backends.cuda.kernels import KernelVariant, kernel_source  # noqa: E402
from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402

#: The measured variants: D3Q19 incompressible, XYZ layout, two copies unless named.
VARIANTS = {
    "BGK float32": KernelVariant("D3Q19", "float32", "BGK", True, "xyz", sector_fill=False),
    "BGK float32 sector fill": KernelVariant("D3Q19", "float32", "BGK", True, "xyz"),
    "BGK float16 storage": KernelVariant("D3Q19", "float32", "BGK", True, "xyz",
                                         storage="float16", sector_fill=False),
    "BGK float16 storage, sector fill": KernelVariant("D3Q19", "float32", "BGK", True, "xyz",
                                                      storage="float16"),
    "BGK float64": KernelVariant("D3Q19", "float64", "BGK", True, "xyz", sector_fill=False),
    "BGK float64 paper layout": KernelVariant("D3Q19", "float64", "BGK", True, "paper"),
    "MRT float32": KernelVariant("D3Q19", "float32", "MRT", True, "xyz", sector_fill=False),
    "MRT float16 storage": KernelVariant("D3Q19", "float32", "MRT", True, "xyz",
                                         storage="float16", sector_fill=False),
    "TRT float32": KernelVariant("D3Q19", "float32", "TRT", True, "xyz", sector_fill=False),
    "BGK float32 compressible": KernelVariant("D3Q19", "float32", "BGK", False, "xyz",
                                              sector_fill=False),
    "BGK float32 in place (neighbour step)": KernelVariant(
        "D3Q19", "float32", "BGK", True, "xyz", streaming="aa_neighbour"),
    "BGK float32 in place (local step)": KernelVariant(
        "D3Q19", "float32", "BGK", True, "xyz", streaming="aa_local"),
    "BGK float16 storage in place (neighbour step)": KernelVariant(
        "D3Q19", "float32", "BGK", True, "xyz", storage="float16", streaming="aa_neighbour"),
    "BGK float64 in place (neighbour step)": KernelVariant(
        "D3Q19", "float64", "BGK", True, "xyz", streaming="aa_neighbour"),
    "BGK float32, 64-bit sources": KernelVariant(
        "D3Q19", "float32", "BGK", True, "xyz", sector_fill=False, wide_sources=True),
    "BGK float16 storage, 64-bit sources": KernelVariant(
        "D3Q19", "float32", "BGK", True, "xyz", storage="float16", sector_fill=False,
        wide_sources=True),
}
#: Fluid-compacted storage (issue 20), exact padding, one thread per tile node unless packed:
#: the halo codes of solver.backends.cuda.compact.CompactCode. Their 'halo' counts include the
#: first barrier's neighbourhood load; 'inner' is what an inner tile's warps run there.
_INNER = CompactCode(inner=True)
for _prec in ("float32", "float64"):
    for _label, _code, _packed in (("", CompactCode(), 0), (" inner", _INNER, 0),
                                   (" packed 4", CompactCode(), 4),
                                   (" inner packed 4", _INNER, 4)):
        VARIANTS[f"compact BGK {_prec}{_label}"] = KernelVariant(
            "D3Q19", _prec, "BGK", True, "xyz", compact=1, packed=_packed, code=_code)
for _kind, _streaming in (("", "pull"), (" in place (neighbour step)", "aa_neighbour")):
    VARIANTS[f"compact BGK float16 storage inner{_kind}"] = KernelVariant(
        "D3Q19", "float32", "BGK", True, "xyz", streaming=_streaming, storage="float16",
        compact=1, code=_INNER)
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)")


#: The kernel's choice between the inner-tile and the edge-tile halo paths (tiled, compact).
_INNER_HALO = ("if (halo_inside(t, size, off))",
               "if (INNER && halo_inside(t[0], t[1], t[2], sizex, sizey, sizez, offx, offy, offz))",
               "if (halo_inside(tx, ty, tz, sizex, sizey, sizez, offx, offy, offz))")


def disassemble(variant: KernelVariant, arch: str, nvcc: str, nvdisasm: str,
                inner_only: bool = False) -> tuple[str, int]:
    """SASS text of the variant's kernel and its registers per thread; ``inner_only``: with
    the edge-tile halo path compiled out."""
    source = kernel_source(variant)
    if inner_only and not (variant.compact and not variant.code.inner):  # else: one path
        assert any(m in source for m in _INNER_HALO), "the kernel no longer chooses its halo " \
            "path this way"
        for marker in _INNER_HALO:
            source = source.replace(marker, "if (true)")
    with tempfile.TemporaryDirectory() as tmp:
        cu, cubin = Path(tmp) / "k.cu", Path(tmp) / "k.cubin"
        cu.write_text(source)
        out = subprocess.run([nvcc, f"-arch={arch}", "-cubin", "--resource-usage", "-o",
                              str(cubin), str(cu)], capture_output=True, text=True, check=True)
        registers = int(re.search(r"Used (\d+) registers", out.stderr).group(1))
        sass = subprocess.run([nvdisasm, "-c", str(cubin)], capture_output=True, text=True,
                              check=True).stdout
    return sass, registers


def count(sass: str) -> dict:
    """Instructions before and from the (last) block barrier, and the opcode mix of the node
    path (the compact kernels have two barriers: the neighbourhood, then the halo)."""
    ops = [m.group(1) for line in sass.splitlines() if (m := _INSTRUCTION.match(line))]
    barrier = max((k for k, op in enumerate(ops) if op == "BAR"), default=0)  # none: no halo
    mix = Counter(op for op in ops[barrier:])
    return {"halo": barrier, "node": len(ops) - barrier,
            "node_mix": dict(mix.most_common(12))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    parser.add_argument("--nvdisasm", default=shutil.which("nvdisasm") or "nvdisasm")
    args = parser.parse_args()
    version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True,
                             check=True).stdout.strip().splitlines()[-1]
    rows = []
    for label, variant in VARIANTS.items():
        sass, registers = disassemble(variant, args.arch, args.nvcc, args.nvdisasm)
        inner = count(disassemble(variant, args.arch, args.nvcc, args.nvdisasm, True)[0])
        rows.append({"variant": label, "kernel": variant.canonical().name,
                     "registers": registers, **count(sass), "inner_halo": inner["halo"]})
        print(f"{label:40s} node {rows[-1]['node']:4d}  inner halo {inner['halo']:4d}  "
              f"halo {rows[-1]['halo']:4d}  registers {registers}", flush=True)
    if args.out is None:
        return
    commit = git_commit()
    record = {"arch": args.arch, "nvcc": version, "date": date.today().isoformat(),
              "commit": commit, "rows": rows}
    stem = args.out / f"kernel-instructions-{args.arch}-{record['date']}-{commit}"
    lines = [f"# Static SASS instructions per thread, {args.arch}", "",
             f"{version}; {record['date']}; commit {commit}; "
             "`python benchmarks/kernel_tuning/kernel_instructions.py` (counts, not timings).", "",
             "| variant | kernel | node path | halo, inner tile | halo, both paths | registers |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['variant']} | `{r['kernel']}` | {r['node']} | {r['inner_halo']} | "
              f"{r['halo']} | {r['registers']} |" for r in rows]
    write_json_md(stem.parent, stem.name, record, "\n".join(lines) + "\n", newline=True)
    print(f"wrote {stem}.json and .md")


if __name__ == "__main__":
    main()
