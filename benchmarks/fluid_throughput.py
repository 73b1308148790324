"""Fluid updates per second against the fluid-only limit, from a GPU suite JSON.

The fluid-only limit is what a code that moved the populations of fluid nodes and nothing else
would reach at the measured device-to-device copy bandwidth: ``copy_bandwidth / B`` fluid node
updates per second, with ``B = 2 q n_d`` bytes per node and step (each population read once and
written once; float16 storage: ``n_d = 2``). The tiled kernel moves every node of a non-empty
tile, so on porous media its fluid throughput is near ``eta_t`` times the dense figure; this
table states how far it is from following the fluid instead (issue: throughput that follows
the fluid, target 0.85 of the limit).

Usage: ``python benchmarks/fluid_throughput.py results/<suite>.json [--kernel "BGK
incompressible"]`` writes ``<suite>-fluid.md`` next to the JSON and prints it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: The collision kernels a user runs (the probes are diagnostics, not results).
KERNELS = ("BGK incompressible", "TRT incompressible", "MRT incompressible")


def fluid_rows(suite: dict, kernel: str) -> list[dict]:
    """Per case, storage and streaming: fluid updates (1e9/s) and the fraction of the limit."""
    copy = suite["meta"]["copy_bandwidth"]
    rows = []
    for r in suite["results"]:
        if r["kernel"] != kernel:
            continue
        limit = copy / r["bytes_per_node"]
        rate = r["mflups"] * 1e6
        rows.append({"case": r["case"], "porosity": r["porosity"], "eta_t": r["eta_t"],
                     "storage": r["precision"], "streaming": r["streaming"],
                     "fluid_g_per_s": rate / 1e9, "limit_g_per_s": limit / 1e9,
                     "of_limit": rate / limit})
    return rows


def markdown(suite: dict, kernel: str) -> str:
    """The table of :func:`fluid_rows` with the run's GPU, date, commit and copy bandwidth."""
    meta = suite["meta"]
    lines = [f"# Fluid throughput against the fluid-only limit: {meta['device']}", "",
             f"Date {meta['date']}, commit {meta['commit']}, kernel {kernel}, D3Q19; "
             f"copy bandwidth {meta['copy_bandwidth'] / 1e9:.0f} GB/s measured in the same run. "
             "Fluid-only limit = copy bandwidth / (2 q n_d) bytes per fluid node and step; "
             "target 0.85 of it.", "",
             "| case | eta_t | storage | streaming | fluid G/s | limit G/s | of limit |",
             "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
    for row in sorted(fluid_rows(suite, kernel),
                      key=lambda r: (r["case"], r["storage"], r["streaming"])):
        lines.append(f"| {row['case']} | {row['eta_t']:.3f} | {row['storage']} | "
                     f"{row['streaming']} | {row['fluid_g_per_s']:.2f} | "
                     f"{row['limit_g_per_s']:.2f} | {row['of_limit']:.3f} |")
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
