"""Fluid updates per second against the fluid-only limit, from a GPU suite JSON.

The fluid-only limit is what a code that moved the populations of fluid nodes and nothing else
would reach at the measured device-to-device copy bandwidth: ``copy_bandwidth / B`` fluid node
updates per second, with ``B = 2 q n_d`` bytes per node and step (each population read once and
written once; float16 storage: ``n_d = 2``). The tiled kernel moves every node of a non-empty
tile, so on porous media its fluid throughput is near ``eta_t`` times the dense figure; this
table states how far it is from following the fluid instead (issue: throughput that follows
the fluid, target 0.85 of the limit).

Usage: ``python benchmarks/throughput/fluid_throughput.py results/<suite>.json [--kernel "BGK
incompressible"]`` writes ``<suite>-fluid.md`` next to the JSON and prints it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: The collision kernels a user runs (the probes are diagnostics, not results).
KERNELS = ("BGK incompressible", "TRT incompressible", "MRT incompressible")


def fluid_rows(suite: dict, kernel: str) -> list[dict]:
    """Per case, storage, tile storage and streaming: the fastest layout and tiles per block's
    fluid updates (1e9/s) and fraction of the limit."""
    copy = suite["meta"]["copy_bandwidth"]
    best: dict[tuple, dict] = {}
    for r in suite["results"]:
        if r["kernel"] != kernel:
            continue
        key = (r["case"], r["precision"], r.get("tile_storage", "tiled"), r["streaming"])
        if key not in best or r["mflups"] > best[key]["mflups"]:
            best[key] = r
    rows = []
    for (case, precision, tiles, streaming), r in best.items():
        limit = copy / r["bytes_per_node"]
        rate = r["mflups"] * 1e6
        rows.append({"case": case, "porosity": r["porosity"], "eta_t": r["eta_t"],
                     "storage": precision, "tile_storage": tiles, "streaming": streaming,
                     "mflups": r["mflups"], "fluid_g_per_s": rate / 1e9,
                     "limit_g_per_s": limit / 1e9, "of_limit": rate / limit})
    return rows


def _option(row: dict) -> str:
    return f"{row['storage']} {row['tile_storage']} {row['streaming']}"


def _cases(rows: list[dict]) -> list[tuple[str, float]]:
    """Cases in the order dense first, then by porosity."""
    seen = {(r["case"], r["eta_t"]): r["porosity"] for r in rows}
    return sorted(seen, key=lambda c: (seen[c] is not None, seen[c] or 0.0, c[0]))


def throughput_table(suite: dict, kernel: str) -> list[str]:
    """Per case (rows) and option (columns: storage, tile storage, streaming): fluid G
    updates/s and, in brackets, the fraction of the fluid-only limit."""
    rows = fluid_rows(suite, kernel)
    options = sorted({_option(r) for r in rows})
    cell = {(r["case"], _option(r)): r for r in rows}
    lines = ["| case | eta_t | " + " | ".join(options) + " |",
             "| --- | ---: |" + " ---: |" * len(options)]
    for case, eta in _cases(rows):
        cells = [f"{cell[case, o]['fluid_g_per_s']:.2f} ({cell[case, o]['of_limit']:.3f})"
                 if (case, o) in cell else "-" for o in options]
        lines.append(f"| {case} | {eta:.3f} | " + " | ".join(cells) + " |")
    return lines


def ratio_table(suite: dict, base: str = KERNELS[0]) -> list[str]:
    """Issue 20 item 4 per case and storage: MRT over BGK (two copies) and in place over two
    copies (BGK), each for the tiled storage and, where timed, the compact one."""
    by = {}
    for kernel in KERNELS:
        for r in fluid_rows(suite, kernel):
            by[(kernel, r["case"], r["storage"], r["tile_storage"], r["streaming"])] = r
    storages = sorted({k[2] for k in by})
    tiles = sorted({k[3] for k in by})
    heads, lines = [], []
    for t in tiles:
        for st in storages:
            heads += [f"MRT/BGK {st} {t}", f"in place/two-copy {st} {t}"]
    rows = fluid_rows(suite, base)
    for case, eta in _cases(rows):
        cells = []
        for t in tiles:
            for st in storages:
                two = by.get((base, case, st, t, "two-copy"))
                mrt = by.get(("MRT incompressible", case, st, t, "two-copy"))
                aa = by.get((base, case, st, t, "in-place"))
                cells += [f"{mrt['mflups'] / two['mflups']:.3f}" if two and mrt else "-",
                          f"{aa['mflups'] / two['mflups']:.3f}" if two and aa else "-"]
        lines.append(f"| {case} | {eta:.3f} | " + " | ".join(cells) + " |")
    return ["| case | eta_t | " + " | ".join(heads) + " |",
            "| --- | ---: |" + " ---: |" * len(heads), *lines]


def markdown(suite: dict, kernel: str) -> str:
    """Both tables with the run's GPU, date, commit and copy bandwidth."""
    meta = suite["meta"]
    lines = [f"# Fluid throughput against the fluid-only limit: {meta['device']}", "",
             f"Date {meta['date']}, commit {meta['commit']}, kernel {kernel}, D3Q19; "
             f"copy bandwidth {meta['copy_bandwidth'] / 1e9:.0f} GB/s measured in the same run. "
             "Fluid-only limit = copy bandwidth / (2 q n_d) bytes per fluid node and step; "
             "target 0.85 of it. Each cell: fluid G updates/s (fraction of the limit), the "
             "fastest layout and tiles per block; columns: storage precision (float16 = float16 "
             "storage, float32 arithmetic), tile storage (every node of a tile, or its fluid "
             "nodes only), streaming.", "", *throughput_table(suite, kernel), "",
             "Ratios of fluid updates/s (issue 20 item 4: each at least 0.9):", "",
             *ratio_table(suite, kernel)]
    skipped = meta.get("skipped") or {}
    if skipped:
        lines += ["", "Not timed:", *[f"- {k}: {v}" for k, v in sorted(skipped.items())]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Write ``<suite>-fluid.md`` next to the suite JSON and print it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path, help="GPU suite JSON (python -m solver bench)")
    parser.add_argument("--kernel", default=KERNELS[0], choices=KERNELS)
    args = parser.parse_args(argv)
    suite = json.loads(args.suite.read_text())
    text = markdown(suite, args.kernel)
    args.suite.with_name(args.suite.stem + "-fluid.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
