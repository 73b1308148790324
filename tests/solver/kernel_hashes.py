"""sha256 (first 64 bits) of every kernel variant's generated CUDA code, by name (issue 27).

``python -m tests.solver.kernel_hashes`` writes ``tests/solver/data/kernel_hashes.json``; it
was first run on main at 1da8a13, before the kernels were composed from parts, and
``tests/solver/test_kernel_hashes.py`` checks that every variant generated now has the hash it
had there. The enumeration covers every knob the generators had then: the tiled variants of
every streaming (RR included), the larger tile edges and 64-bit halo sources, the in-place
tuning (register caps, read-only loads), and the compact family (every collision, storage,
mode, pad, packing, address pattern and halo code, and the probes without halo addressing).
A knob the refactor removed (``solver/backends/cuda/KERNELS.md``) is skipped where the
variant no longer takes it, so the same script runs on both sides. The code is hashed without
its ``//`` comments (the templates' headers name the modules that fill them).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import sys
from dataclasses import replace
from pathlib import Path

TABLE = Path(__file__).with_name("data") / "kernel_hashes.json"
#: Arithmetic precision and storage of every variant ('auto': stored as computed).
STORAGES = (("float32", "auto"), ("float64", "auto"), ("float32", "float16"))
LATTICES_3D = ("D3Q19", "D3Q27", "D3Q13")


def _sha(text: str) -> str:
    """First 64 bits of the sha256 of ``text`` without its ``//`` comments (the templates'
    header comments name the modules that fill them, which may move; the code may not)."""
    return hashlib.sha256(re.sub(r"//[^\n]*", "", text).encode()).hexdigest()[:16]


def _aa_tunings() -> list:
    """The in-place tunings the generator takes (only the default once the knob is gone)."""
    from solver.backends.cuda.kernels import KernelVariant

    try:
        from solver.backends.cuda.streaming import AATuning
    except ImportError:
        return [None]
    if "aa" not in KernelVariant.__dataclass_fields__:
        return [None]
    return [None, AATuning(max_registers=40), AATuning(nc_loads=True), AATuning(48, True)]


def _compact_codes() -> list:
    """The compact halo codes the generator takes (those it still has)."""
    from solver.backends.cuda.compact_source import CompactCode

    wanted = ({}, {"inner": True}, {"inner": True, "paired": True}, {"registers": 48},
              {"inner": True, "registers": 48})
    codes = []
    for kwargs in wanted:
        try:
            codes.append(CompactCode(**kwargs))
        except TypeError:  # a removed knob
            continue
    return codes


def tiled_sources() -> dict[str, str]:
    """Name -> source of every tiled variant."""
    from solver.backends.cuda.kernels import KernelVariant, all_variants, kernel_source
    from solver.backends.cuda.streaming import KERNEL_STREAMING

    variants = list(all_variants(streaming=KERNEL_STREAMING))
    variants += all_variants({"D2Q9": (16,), "D3Q19": (8,), "D3Q27": (8,), "D3Q13": (8,)},
                             streaming=KERNEL_STREAMING)
    variants += [replace(v, wide_sources=True) for v in all_variants(streaming=KERNEL_STREAMING)]
    tuned = []
    for aa in _aa_tunings()[1:]:
        tuned += [replace(v, aa=aa) for v in variants if v.tile_edge == 4]
    out = {}
    for v in variants + tuned:
        v = v.canonical()
        out.setdefault(v.name, kernel_source(v))
    assert all(isinstance(v, KernelVariant) for v in variants)
    return out


def compact_sources() -> dict[str, str]:
    """Name -> source of every compact variant (through KernelVariant) and probe."""
    from solver.backends.cuda.compact_source import probe_name, probe_source
    from solver.backends.cuda.kernels import KernelVariant, kernel_source
    from solver.collisions import COLLISION_MODELS

    out = {}
    for lattice in LATTICES_3D:
        models = [m.name for m in COLLISION_MODELS.values() if lattice in m.lattices]
        for (prec, store), coll, inc, mode, pad, packed, access, code in itertools.product(
                STORAGES, models, (True, False), ("full", "propagate", "swap"), (1, 8), (0, 4),
                ("pull", "aa_neighbour", "aa_local"), _compact_codes()):
            v = KernelVariant(lattice, prec, coll, inc, "xyz", mode, 4, "none", access, store,
                              compact=pad, packed=packed, code=code).canonical()
            if v.name in out:
                continue
            try:
                out[v.name] = kernel_source(v)
            except ValueError:  # e.g. a register cap on the packed kernel
                continue
        for (prec, store), coll, inc, pad, access in itertools.product(
                STORAGES, [None, *models], (True, False), (1, 4, 8),
                ("pull", "aa_neighbour", "aa_local", "swap")):
            if access == "swap" and coll is not None:
                continue
            name = probe_name(lattice, prec, pad, False, coll, inc, 0, access, storage=store)
            out.setdefault(name, probe_source(lattice, prec, pad, False, coll, inc, 0, access,
                                              storage=store))
    return out


def kernel_hashes() -> dict[str, str]:
    """Kernel name -> sha256 of its source, every variant the generators make (sorted)."""
    sources = tiled_sources()
    compact = compact_sources()
    assert not set(sources) & set(compact)
    sources.update(compact)
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
