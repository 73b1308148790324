"""sha256 (first 64 bits) of every kernel variant's generated CUDA code, by name (issue 27).

``python -m tests.solver.kernel_hashes`` writes ``tests/solver/data/kernel_hashes.json``: the
hash of every kernel of the variant space (``kernels.all_variants()``, exactly what the
execution plans launch). The table was first written on main at 1da8a13, before the kernels
were composed from parts, over every knob the generators had then; the knobs that lost their
timings left the variant space since, and their kernels the table, without any kept kernel's
hash changing, and the compact kernels' hashes were taken again when the dead paired-entry
branches left their templates (the same PTX: ``solver/backends/cuda/KERNELS.md``).
``tests/solver/test_kernel_hashes.py``
checks that every kernel of the space still has its hash. The code is hashed without its
``//`` comments (the templates' headers name the modules that fill them).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

TABLE = Path(__file__).with_name("data") / "kernel_hashes.json"


def _sha(text: str) -> str:
    """First 64 bits of the sha256 of ``text`` without its ``//`` comments (the templates'
    header comments name the modules that fill them, which may move; the code may not)."""
    return hashlib.sha256(re.sub(r"//[^\n]*", "", text).encode()).hexdigest()[:16]


def kernel_hashes() -> dict[str, str]:
    """Kernel name -> sha256 of its source, every variant of the space (sorted by name)."""
    from solver.backends.cuda.kernels import all_variants, kernel_source

    sources = {v.name: kernel_source(v) for v in all_variants()}
    return {name: _sha(sources[name]) for name in sorted(sources)}


def main(argv: list[str]) -> None:
    """Write the table (``--out PATH``, default :data:`TABLE`) and print its size."""
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else TABLE
    table = kernel_hashes()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(table, indent=0, sort_keys=True) + "\n")
    print(f"{len(table)} kernels -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
