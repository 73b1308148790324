"""Each default run's k against a deep run of the same image: the error the default stop leaves,
and whether the stated convergence remainder covers it.

Reads ``rock_tensor.py`` reports: the default runs (``--default``) and the deep references of the
same images (``--deep``: ``rock_tensor.py`` with ``PermeabilitySettings.tolerance`` 1e-5 per 1000
steps, ``--tolerance 1e-5``). Runs are matched by image edge, protocol and axis. A deep run's own
remainder is its change per 1000 steps times its decay, well below the errors compared here
(recorded per run, ``deep_change_per_1000``). Where a default report holds each run's history
(``rock_tensor.py`` since 2026-11-28), the remainder this checkout's estimator gives on it is
compared too (``replayed``): an estimator change checked on GPU runs without running them again.

    python benchmarks/rock_time_to_answer/deep_compare.py \\
        --default results/rock_tensor-...-200-300-b3b8bbc.json \\
        --deep results/rock_tensor-...-200-300-deep-570555f.json --tag h200
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from solver.benchmarking.results import run_meta, write_json_md  # noqa: E402
from solver.rock.uncertainty import convergence_remainder  # noqa: E402

OUT = Path(__file__).parent / "results"


def runs_of(path: Path) -> tuple[str, dict[tuple[int, str, str], dict]]:
    """The device and ``{(edge, protocol, axis): run with its interval}`` of one report."""
    report = json.loads(path.read_text())
    found = {}
    for row in report["rows"]:
        study = row["study"]
        intervals = {(i["protocol"], i["axis"]): i for i in study.get("intervals", [])}
        # the benchmark's own rows hold each run's check history (the study's summary not)
        histories = {(r["protocol"], r["axis"]): r.get("history") for r in row.get("runs", [])}
        for run in study["runs"]:
            key = (row["size"], run["protocol"], run["axis"])
            found[key] = {**run, "interval": intervals.get((run["protocol"], run["axis"])),
                          "history": histories.get((run["protocol"], run["axis"]))}
    return report.get("device", "unknown"), found


def compare(default: dict, deep: dict) -> list[dict]:
    """Per run found in both: k of each (mD), the default's relative error against the deep k,
    its stated remainder and whether it covers the error."""
    rows = []
    for key in sorted(set(default) & set(deep)):
        run, ref = default[key], deep[key]
        error = run["k_mD"] / ref["k_mD"] - 1.0
        remainder = run["interval"]["remainder"] if run["interval"] else None
        replayed = (convergence_remainder([tuple(h) for h in run["history"]])
                    if run.get("history") else None)
        rows.append({
            "size": key[0], "protocol": key[1], "axis": key[2],
            "k_mD": run["k_mD"], "steps": run["steps"],
            "deep_k_mD": ref["k_mD"], "deep_steps": ref["steps"],
            "deep_converged": ref["converged"], "deep_change_per_1000": ref["change_per_1000"],
            "error": error, "remainder": remainder,
            "covered": None if remainder is None else abs(error) <= remainder,
            "error_over_remainder": None if not remainder else error / remainder,
            "replayed": replayed,
            "replayed_covered": None if replayed is None else abs(error) <= replayed,
        })
    return rows


def markdown(rows: list[dict], meta: dict, sources: dict) -> str:
    """The table of :func:`compare`, with the count of runs the remainder covers."""
    covered = [r for r in rows if r["covered"] is not None]
    lines = [f"# Default stop against a deep run ({meta['device']}, {meta['date']}, "
             f"commit {meta['commit']})", "",
             f"Default runs: {', '.join(sources['default'])}; deep runs (1e-5 per 1000 steps): "
             f"{', '.join(sources['deep'])}.", "",
             f"The stated convergence remainder covers the error in "
             f"**{sum(r['covered'] for r in covered)} of {len(covered)}** runs"
             + _replayed_count(rows) + ".", "",
             "| edge | protocol | axis | k (mD) | steps | deep k (mD) | deep steps | error | "
             "stated remainder | error / remainder | replayed remainder |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ratio = "" if r["error_over_remainder"] is None else f"{r['error_over_remainder']:.2f}"
        rem = _percent(r["remainder"])
        deep_steps = f"{r['deep_steps']}" + ("" if r["deep_converged"] else " (stopped)")
        lines.append(f"| {r['size']} | {r['protocol']} | {r['axis']} | {r['k_mD']:.1f} | "
                     f"{r['steps']} | {r['deep_k_mD']:.1f} | {deep_steps} | "
                     f"{100 * r['error']:+.3f} % | {rem} | {ratio} | {_percent(r['replayed'])} |")
    return "\n".join(lines) + "\n"


def _percent(value: float | None) -> str:
    return "" if value is None else f"{100 * value:.3f} %"


def _replayed_count(rows: list[dict]) -> str:
    """', this checkout's estimator replayed on the histories: N of M' where any was."""
    replayed = [r for r in rows if r["replayed"] is not None]
    if not replayed:
        return ""
    return (f"; this checkout's estimator, replayed on the runs' histories, in "
            f"**{sum(r['replayed_covered'] for r in replayed)} of {len(replayed)}**")


def main(argv: list[str] | None = None) -> int:
    """Compare, write ``results/deep_compare-DEVICE-DATE-TAG.{json,md}`` and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--default", nargs="+", type=Path, required=True,
                        help="rock_tensor.py reports of the default runs")
    parser.add_argument("--deep", nargs="+", type=Path, required=True,
                        help="rock_tensor.py reports of the deep runs of the same images")
    parser.add_argument("--tag", default="", help="suffix of the report's name")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    default, deep, devices = {}, {}, set()
    for paths, into in ((args.default, default), (args.deep, deep)):
        for path in paths:
            device, runs = runs_of(path)
            devices.add(device)
            into.update(runs)
    rows = compare(default, deep)
    if not rows:
        parser.error("no run (edge, protocol, axis) is in both the default and the deep reports")
    meta = run_meta(" / ".join(sorted(devices)))
    sources = {"default": [p.name for p in args.default], "deep": [p.name for p in args.deep]}
    text = markdown(rows, meta, sources)
    stem = f"deep_compare-{meta['device'].replace(' ', '-')}-{meta['date']}"
    write_json_md(args.out, stem + (f"-{args.tag}" if args.tag else ""),
                  {**meta, "sources": sources, "rows": rows}, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
