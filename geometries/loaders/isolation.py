"""Running a loader that reaches native code in a limited worker process.

VTK's readers, tifffile's page walk and SciPy's MATLAB reader (Cython) are C/C++ or loops
driven by the file: a hostile upload
can abort them (``std::bad_alloc``), corrupt their heap, crash them (SIGSEGV) or make them spin.
In the server process that would kill every session, so for uploads these loaders run in a
child process with an address-space limit (``RLIMIT_AS``) and a wall-time limit. The child sends
back only plain bytes: a JSON status and the geometry as ``.npz``, which the parent reads with
the pickle-free reader of :mod:`geometries.npyfile`; nothing is ever unpickled in the parent.
Children come from a ``forkserver`` that has VTK imported already, so one costs ~30 ms.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import types
import warnings
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

from ..errors import GeometryError, GeometryWarning
from ..voxel import VoxelGeometry

__all__ = ["ISOLATED_FORMATS", "Limits", "load_isolated"]

#: Formats whose loaders reach native code, walk file-driven structures or do file-driven work.
#: ``mat``: a mutated MATLAB file crashed scipy.io.loadmat 1.17 with SIGSEGV in its mio5 reader
#: (CI fuzz test). ``stl``: voxelising costs triangles × resolution², hours for a 30 MB upload.
ISOLATED_FORMATS = frozenset({"vti", "vtk", "mha", "mhd", "tiff", "mat", "stl"})

_PRELOAD = ["geometries.loaders.dispatch", "pyvista", "vtkmodules.vtkIOXML",
            "vtkmodules.vtkIOImage", "vtkmodules.vtkIOLegacy", "tifffile", "scipy.io",
            "trimesh"]  # fmt: skip
_GIB = 1024**3


@dataclass(frozen=True)
class Limits:
    """Resources of one worker: address space (bytes) and wall time (seconds)."""

    memory_bytes: int = 4 * _GIB
    seconds: float = 60.0

    @classmethod
    def for_voxels(cls, max_voxels: int) -> Limits:
        """Limits for a geometry of up to ``max_voxels``: base VTK footprint + 24 B per voxel.

        The wall time is ``POROUS_LBM_LOADER_SECONDS`` (default 60 s), the same for uploads and
        trusted paths.
        """
        return cls(memory_bytes=2 * _GIB + 24 * int(max_voxels), seconds=loader_seconds())


def loader_seconds() -> float:
    """Wall-time limit (s) of one isolated load: ``POROUS_LBM_LOADER_SECONDS`` or 60."""
    text = os.environ.get("POROUS_LBM_LOADER_SECONDS", "")
    try:
        value = float(text) if text.strip() else 60.0
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise GeometryError(
            f"POROUS_LBM_LOADER_SECONDS must be a positive number of seconds, got {text!r}."
        )
    return value


def _context() -> multiprocessing.context.BaseContext:
    """The forkserver context (VTK preloaded), or spawn where forkserver is unavailable."""
    try:
        ctx = multiprocessing.get_context("forkserver")
    except ValueError:  # pragma: no cover - not on Linux
        return multiprocessing.get_context("spawn")
    ctx.set_forkserver_preload([*_PRELOAD, *_main_imports()])
    return ctx


def _main_imports() -> list[str]:
    """Modules the main script imported (``panel.command`` under ``panel serve``).

    Each child re-runs a main *script* (multiprocessing's rule; Python 3.11's forkserver
    ignores a ``__main__`` preload); with its imports preloaded that costs ms, not seconds.
    """
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        return []  # `python -m ...`: the child does not re-run it
    names = {v.__name__ for v in vars(main).values() if isinstance(v, types.ModuleType)}
    names |= {
        v.__module__
        for v in vars(main).values()
        if callable(v) and isinstance(getattr(v, "__module__", None), str)
    }
    return sorted(n for n in names if n not in ("__main__", "builtins"))


def load_isolated(
    source: bytes | Path, fmt: str, options: dict, limits: Limits
) -> VoxelGeometry:
    """Run loader ``fmt`` on uploaded bytes or a trusted path in a limited child.

    Its failures (a crash, the memory or time limit) become a GeometryError. Temporary files
    the child makes go to a folder of ours, removed here whatever happened to the child.
    """
    ctx = _context()
    receive, send = ctx.Pipe(duplex=False)
    scratch = tempfile.mkdtemp(prefix="geometry-")
    source = str(source) if isinstance(source, Path) else source
    args = (send, source, fmt, options, limits.memory_bytes, scratch)
    worker = ctx.Process(target=_work, args=args, daemon=True)
    try:
        worker.start()
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    send.close()
    try:
        if not receive.poll(limits.seconds):
            raise GeometryError(
                f"Reading the {fmt} file took longer than {limits.seconds:.0f} s and was stopped; "
                "the file is malformed or far too large. Check the file, or crop it."
            )
        try:
            status = json.loads(receive.recv_bytes(1 << 20))
            if not isinstance(status, dict):
                raise ValueError("malformed status")
            body = b""
            if status.get("ok"):
                if not receive.poll(limits.seconds):  # the child is ours, but bound it anyway
                    raise EOFError
                body = receive.recv_bytes(limits.memory_bytes)
        except (EOFError, OSError, ValueError):
            worker.join(5)
            raise GeometryError(_crash_message(fmt, worker.exitcode)) from None
    finally:
        receive.close()
        if worker.is_alive():
            worker.kill()
        worker.join(5)
        shutil.rmtree(scratch, ignore_errors=True)  # a killed child leaves its upload copy
    if not status.get("ok"):
        raise GeometryError(str(status.get("error", f"The {fmt} file could not be read.")))
    for message in status.get("warnings", []):
        warnings.warn(str(message), GeometryWarning, stacklevel=3)
    geometry = VoxelGeometry.from_npz(body, max_voxels=int(options.get("max_voxels", 1024**3)))
    geometry.notes = tuple(str(note) for note in status.get("notes", ()))  # not in the .npz
    return geometry


def _crash_message(fmt: str, exitcode: int | None) -> str:
    """Say that the reader died on this file, with the signal or exit code."""
    how = f"exit code {exitcode}"
    if exitcode is not None and exitcode < 0:
        with contextlib.suppress(ValueError):  # a signal number Python has no name for
            how = signal.Signals(-exitcode).name
    return (
        f"The {fmt} reader failed on this file ({how}, usually a malformed header or a size "
        "beyond the memory limit). The server is unaffected; check the file or export it again."
    )


def _native_loader(fmt: str):
    """The loader of an isolated format (imported here, not from dispatch, which imports us)."""
    if fmt == "tiff":
        from .tiff import load_tiff

        return load_tiff
    if fmt == "mat":
        from .mat import load_mat

        return load_mat
    if fmt == "stl":
        from .stl import load_stl

        return load_stl
    from .vtkimage import load_vtk_image

    return functools.partial(load_vtk_image, format=fmt)


def _work(
    send: Connection, source: bytes | str, fmt: str, options: dict, memory_bytes: int,
    scratch: str,
) -> None:
    """Child: limit resources, load, send a JSON status and the geometry as ``.npz`` bytes."""
    import resource

    tempfile.tempdir = scratch  # the parent removes it, even when this child is killed
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]  # a limit cannot rise above the parent's
    limit = memory_bytes if hard == resource.RLIM_INFINITY else min(memory_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    from .source import Payload

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GeometryWarning)
            geometry = _native_loader(fmt)(Payload(source), **options)
        buffer = io.BytesIO()
        geometry.save(buffer, compress=False)  # zlib would cost seconds for 256³; a pipe is free
        notes = [str(w.message) for w in caught if issubclass(w.category, GeometryWarning)]
        send.send_bytes(json.dumps({"ok": True, "warnings": notes,
                                    "notes": list(geometry.notes)}).encode())
        send.send_bytes(buffer.getbuffer())
    except GeometryError as exc:
        send.send_bytes(json.dumps({"ok": False, "error": str(exc)}).encode())
    except MemoryError:
        send.send_bytes(json.dumps({"ok": False, "error": _memory_message(fmt)}).encode())
    except BrokenPipeError:  # the parent stopped waiting (time limit): nobody reads the result
        pass
    send.close()


def _memory_message(fmt: str) -> str:
    """Say that the file needs more memory than a geometry of the limit may take."""
    return (
        f"Reading the {fmt} file needed more memory than the upload limit allows; its header "
        "declares more data than it holds, or the image is too large. Crop or downsample it."
    )
