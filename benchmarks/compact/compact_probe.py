"""Can fluid-compacted storage follow the fluid? The compact probe next to the tiled kernel.

One call on the GPU machine (issue 20 item 1): checks the compact propagation probe against its
NumPy mirror on the device, then times it and the tiled kernel (propagation probe and BGK step)
on a dense periodic 256^3 box, a rock-like 192^3 pack (phi 0.2, grains of 22 nodes, eta_t about
0.5) and the 192^3 sphere packs phi 0.1, 0.3, ..., 0.9 (d = 40), float32 and float64, and
writes ``<gpu>-<date>-<commit>-compact.json`` / ``.md`` into ``--out`` after every case (a run
cut off still leaves its table). Each number is fluid node updates per second over the
fluid-only limit ``copy bandwidth / (2 q n_d)`` (bytes of the populations of the fluid nodes
only, read once and written once, at the copy bandwidth measured in the same process); target
0.85. The compact probe moves only fluid nodes (plus padding with ``pad`` > 1), so on the packs
its fraction is what a compact full step could reach at most; the tiled propagation probe is
the same bound for today's storage.

Usage, from the repository root: ``python benchmarks/compact/compact_probe.py --out DIR``
(estimated 3-4
minutes on an H100: 7 cases, 2 and 4 tiles per block; ``--quick`` for a 1-minute smoke run on
smaller cases; ``--precision float32 float16 --porosity 0.1 0.5`` for float16 storage against
float32 on fewer packs).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.benchmarking.compact_suite import CompactSuite, run_compact_suite  # noqa: E402
from solver.benchmarking.report import results_stem  # noqa: E402
from solver.benchmarking.results import write_json_md  # noqa: E402

TARGET = 0.85


def _table(rows: dict, title: str, tiled: str, compact: str) -> list[str]:
    """One table: the tiled kernel ``tiled`` and every compact kernel named ``compact ...``
    (in the order measured) per case."""
    variants = list(dict.fromkeys(k.removeprefix(compact + " ") for by_kernel in rows.values()
                                  for k in by_kernel if k.startswith(compact + " ")))
    kernels = [tiled] + [f"{compact} {v}" for v in variants]
    lines = [f"## {title}", "", "| case | eta_t | storage | tiled | "
             + " | ".join(f"compact {v}" for v in variants) + " | padded slots / fluid node |",
             "| --- | ---: | --- |" + " ---: |" * (len(kernels) + 1)]
    for (case, precision), by_kernel in rows.items():
        first = next(iter(by_kernel.values()))
        cells = [f"{by_kernel[k]['fluid_g_per_s']:.2f} ({by_kernel[k]['of_limit']:.3f})"
                 if k in by_kernel else "-" for k in kernels]
        slots = max((r.get("slots_per_fluid_node", 0) for r in by_kernel.values()), default=0)
        lines.append(f"| {case} | {first['eta_t']:.3f} | {precision} | " + " | ".join(cells)
                     + f" | {slots:.3f} |")
    return lines + [""]


def _verdicts(results: list[dict], compact: str) -> list[str]:
    """Per storage, the least fraction of the limit over the packs of the best variant."""
    packs = [r for r in results if r["porosity"] is not None
             and r["kernel"].startswith(compact)]
    lines = []
    for precision in sorted({r["precision"] for r in packs}):
        best: dict[str, dict[str, float]] = {}
        for r in packs:
            if r["precision"] == precision:
                best.setdefault(r["kernel"], {})[r["case"]] = r["of_limit"]
        kernel = max(best, key=lambda k: min(best[k].values()))
        worst = min(best[kernel], key=best[kernel].get)
        frac = best[kernel][worst]
        verdict = "reaches" if frac >= TARGET else "misses"
        lines.append(f"- {compact}, {precision}: best variant '{kernel}' at least {frac:.3f} "
                     f"({worst}): {verdict} {TARGET}")
    return lines


def markdown(result: dict) -> str:
    """Tables: the device check, then per case and storage each kernel's fraction of the limit."""
    meta = result["meta"]
    lines = [f"# Compact addressing probe: {meta['device']}", "",
             f"Date {meta['date']}, commit {meta['commit']}, D3Q19, copy bandwidth "
             f"{meta['copy_bandwidth'] / 1e9:.0f} GB/s measured in the same run. Each cell: "
             "fluid G updates/s (fraction of the fluid-only limit = copy bandwidth / (2 q n_d) "
             f"per fluid node; target {TARGET}). Best layout and tiles per block per kernel. "
             "exact: direction blocks of exactly the fluid count; sector-padded: rounded up to "
             "whole 32-byte sectors; halo: sources located once per tile halo node in shared "
             "memory; inner: tiles whose halo lies inside the domain locate it by columns "
             "(compile-time neighbour per entry), others in full; paired: a halo node's two "
             "ints in one 64-bit shared load per pull; r48: at most 48 registers per thread; "
             "packed K: K tiles per block, one thread per fluid node (else one per tile node, "
             "idle on solid ones).", "",
             "Device checks: the compact probe against its NumPy mirror (64^3 pack), one compact "
             "BGK step against the NumPy backend (48^3 pack, relative difference): "
             + ", ".join(f"{c.get('kernel', 'probe')} {c['precision']} pad {c['pad']}"
                         f"{' halo' if c.get('halo') else ''}"
                         + (f" {c['code']}" if c.get("code") else "")
                         + (f" packed {c['packed']}" if c.get("packed") else "") + ": "
                         + ("ok" if c["ok"] else f"DIFFERS by {c['max_abs_diff']:g}")
                         for c in result["checks"]), ""]
    rows: dict[tuple, dict] = {}
    for r in result["results"]:
        rows.setdefault((r["case"], r["precision"]), {})[r["kernel"]] = r
    lines += _table(rows, "Propagation only", "tiled propagation", "compact propagation")
    lines += _table(rows, "Full step, BGK incompressible", "tiled BGK", "compact BGK")
    verdicts = (_verdicts(result["results"], "compact propagation")
                + _verdicts(result["results"], "compact BGK"))
    if verdicts:
        lines += ["Least fraction of the limit over the packs (rock-like included):", *verdicts]
    if result["errors"]:
        lines += ["", "Errors:", *[f"- {e}" for e in result["errors"]]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the probe suite on the GPU; write JSON and markdown after every case."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--quick", action="store_true", help="smaller cases (smoke run)")
    parser.add_argument("--precision", nargs="+", default=list(CompactSuite.precisions),
                        choices=["float32", "float64", "float16"],
                        help="float16 = float16 storage (its kernels timed as runs step them)")
    parser.add_argument("--porosity", type=float, nargs="*", default=None,
                        help="sphere-pack porosities (default: the suite's)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from solver.backends import gpu_available
    from solver.benchmarking.probe_backend import ProbeBackend

    ok, why = gpu_available()
    if not ok:
        print(f"No usable GPU: {why}")
        return 2
    suite = (CompactSuite(porosities=(0.2, 0.8), pack_size=96, dense_size=128, rock_diameter=11)
             if args.quick else CompactSuite())
    suite.precisions = tuple(args.precision)
    if args.porosity is not None:
        suite.porosities = tuple(args.porosity)
    args.out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []

    def write(result: dict) -> None:
        meta = result["meta"]
        stem = results_stem(meta["device"], meta["date"]) + f"-{meta['commit']}-compact"
        paths[:] = write_json_md(args.out, stem, result, markdown(result))
        logging.info("%d rows written to %s", len(result["results"]), paths[1])

    result = run_compact_suite(ProbeBackend(), suite, progress=write)
    write(result)
    print(paths[1].read_text())
    return 0 if all(c["ok"] for c in result["checks"]) and not result["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
