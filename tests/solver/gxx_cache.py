"""The C++ emulators' shared libraries, compiled by g++ once per source and cached in the
system temp folder; each is written under a name of its own and renamed into place, so that
another process compiling the same source (a second pytest-xdist worker, another test run on
the machine) never reads a half-written source or loads a half-written library."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Sequence
from pathlib import Path


def compile_once(src: str, lib: Path, flags: Sequence[str], compiler: str = "g++") -> Path:
    """``lib`` (a shared library) compiled from C++ ``src`` with ``flags``, unless it exists;
    the source is kept next to it as ``lib`` with the suffix ``.cpp``."""
    if lib.exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    own = f"{lib.stem}-{uuid.uuid4().hex}"
    cpp, so = lib.with_name(f"{own}.cpp"), lib.with_name(f"{own}.so")
    try:
        cpp.write_text(src)
        subprocess.run([compiler, *flags, "-o", str(so), str(cpp)], check=True,
                       capture_output=True)
        os.replace(so, lib)
        os.replace(cpp, lib.with_suffix(".cpp"))
    finally:
        cpp.unlink(missing_ok=True)
        so.unlink(missing_ok=True)
    return lib
