"""The one writer of a benchmark's results: who measured (device), when (date) and on which code
(commit), and the ``STEM.json`` + ``STEM.md`` pair every script under ``benchmarks/`` leaves in
its ``results/`` folder. Light on purpose (no solver import at load): a script imports it before it
knows whether it runs on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

__all__ = ["git_commit", "checkout_commit", "run_meta", "write_json_md", "gpu_slug"]

#: The checkout this package lies in (what a result's commit names).
REPO = Path(__file__).resolve().parents[2]


def checkout_commit(where: Path | str = REPO) -> str:
    """Short hash of the commit checked out at ``where`` (default: this package's checkout),
    "unknown" where git cannot tell (a copy without ``.git``)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where,
                             capture_output=True, text=True, check=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def git_commit() -> str:
    """Short hash of the checked-out commit (``LBM_COMMIT`` overrides, for copies without .git)."""
    return os.environ.get("LBM_COMMIT") or checkout_commit()


def run_meta(device: str, **extra: Any) -> dict[str, Any]:
    """``{'device', 'date' (today, ISO), 'commit', **extra}``, in that order: the head of a
    result's record."""
    return {"device": device, "date": date.today().isoformat(), "commit": git_commit(), **extra}


def write_json_md(out: Path, stem: str, record: Any, markdown: str, indent: int = 1,
                  default: Callable[[Any], Any] | None = None, newline: bool = False
                  ) -> tuple[Path, Path]:
    """Write ``out/STEM.json`` (``record`` as JSON, ``indent`` and ``default`` as
    :func:`json.dumps` takes them, a final line break with ``newline``) and ``out/STEM.md``
    (``markdown`` as it is), making ``out``; return both paths."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{stem}.json", out / f"{stem}.md"
    json_path.write_text(json.dumps(record, indent=indent, default=default)
                         + ("\n" if newline else ""))
    md_path.write_text(markdown)
    return json_path, md_path


def gpu_slug() -> str:
    """The CUDA device's name as a file-name part ('nvidia-h200'), from the CuPy backend."""
    from ..backends import get_backend

    name = str(get_backend("cupy").device_info().get("name") or "gpu")
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")
