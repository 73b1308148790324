"""Run the validation cases and write the markdown report ``validation-<device>-<date>.md``."""

from __future__ import annotations

import logging
import re
from datetime import date
from pathlib import Path

from ..benchmarking.cases import git_commit
from .core import CASES, CaseResult, run_case

__all__ = ["run_all", "write_report", "report_markdown"]

log = logging.getLogger(__name__)


def run_all(size: str = "ci", backend: str = "numpy",
            names: list[str] | None = None) -> list[CaseResult]:
    """Results of the named cases (default: all that run at ``size``) on ``backend``."""
    results: list[CaseResult] = []
    for name in names or [n for n, c in CASES.items() if size in c.sizes]:
        results.extend(run_case(name, size, backend))
    return results


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|")


def report_markdown(results: list[CaseResult], device: str, size: str, backend: str) -> str:
    """The report as markdown: one table row per checked or informational number."""
    lines = [
        f"# Validation, size `{size}`, backend `{backend}`", "",
        f"Device: {device}  ", f"Date: {date.today().isoformat()}  ", f"Commit: {git_commit()}",
        "", f"Passed {sum(r.passed for r in results if r.checked)} of "
            f"{sum(r.checked for r in results)} checks.", "",
        "| case | quantity | measured | reference | error | tolerance | result | size | steps "
        "| time (s) | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        verdict = ("pass" if r.passed else "FAIL") if r.checked else "info"
        error = f"{100 * r.error:.2f} %" if r.relative else f"{r.error:.4g}"
        tol = "-" if r.tolerance is None else (
            f"{100 * r.tolerance:.1f} %" if r.relative else f"{r.tolerance:.3g}")
        lines.append(f"| {r.case} | {_cell(r.quantity)} | {_fmt(r.measured)} "
                     f"| {_fmt(r.reference)} | {error} | {tol} | {verdict} | {r.size} "
                     f"| {r.steps} | {r.seconds:.1f} | {_cell(r.note)} |")
    return "\n".join(lines) + "\n"


def write_report(results: list[CaseResult], device: str, out_dir: Path, size: str,
                 backend: str) -> Path:
    """Write ``validation-<device>-<date>.md`` into ``out_dir``; return its path."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-").lower() or "device"
    path = Path(out_dir) / f"validation-{slug}-{date.today().isoformat()}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report_markdown(results, device, size, backend))
    log.info("wrote %s", path)
    return path
