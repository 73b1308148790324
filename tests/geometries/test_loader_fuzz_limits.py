"""The independent loader fuzz (benchmarks/loader_fuzz/loader_fuzz.py) in CI: 700 generated hostile
uploads loaded by a process that plays the server, with a 3 GiB address-space limit and 10 s per
input. A crash or hang of that process, any exception but GeometryError, a MemoryError or a loaded
input that names a server file counts as a failure; there must be none."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_loader_fuzz_under_time_and_memory_limits_has_no_failure(tmp_path):
    script = ROOT / "benchmarks" / "loader_fuzz" / "loader_fuzz.py"
    command = [sys.executable, str(script), "--count", "700",
               "--seed", "7", "--out", str(tmp_path)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "loader-fuzz.json").read_text())
    assert result["inputs"] == 700 and result["failures"] == 0
    assert result["loaded"] + result["clean_errors"] == 700
    assert result["clean_errors"] > 300 and result["loaded"] > 50  # both paths were exercised
    assert set(result["per_format"]) >= {"vti", "vtk", "mha", "tiff", "nrrd", "npz", "npy"}


def test_fuzz_generator_is_reproducible(monkeypatch):
    """Same seed, same bytes, even when the wall clock moves on between the two generations."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "loader_fuzz"))
    try:
        import loader_fuzz
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "loader_fuzz"))
    first = loader_fuzz.generate(40, 3)
    later = time.time() + 10.0  # zip time stamps tick every 2 s; CI once straddled a tick
    monkeypatch.setattr(time, "time", lambda: later)
    assert loader_fuzz.generate(40, 3) == first
