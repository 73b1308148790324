"""Independent loader fuzz: the server's view of hostile uploads, with time and memory limits.

Usage: ``python benchmarks/loader_fuzz/loader_fuzz.py [--count N] [--seed S] [--out DIR]``
(default ``--out``: ``benchmarks/loader_fuzz/results``)

Inputs are generated here, independently of tests/geometries/test_fuzz.py: small valid files of
every format, then (a) random byte edits, (b) header numbers replaced by huge or negative
values, (c) injected header lines (detached data files naming server files, huge channel
counts), (d) binary words overwritten with huge values, (e) random bytes, (f) ``.npz`` members
recompressed with bzip2 or LZMA (at times a bzip2 bomb), (g) structure-aware ``.npz`` edits (a
member replaced by an array of negative, huge or wrongly-typed shape or dtype, or dropped), (h)
structure-aware TIFF edits (an IFD entry's count or value set huge, the IFD chain looped or
pointed past the end). Each input goes to ``geometries.load(bytes, format=...)`` exactly as an
upload does, in this process, which plays the server: its address space is limited
(``RLIMIT_AS``, default 3 GiB) and each input has a wall-time limit (default 10 s). (i) ``path:``
inputs (any edit above, written to a file) are loaded by path, as the CLI does, in a child
process that reports each result; a child killed by a signal (a native crash in path mode) or
silent past the limit is a failure, and a new child takes over. An input passes when it loads
or raises GeometryError; any other exception, a timeout, a MemoryError or a load that read the
canary file an injected header names (its all-zero bytes give an all-fluid geometry) is a
failure, and a crash of this process ends it (the caller sees the exit status). Writes
loader-fuzz.json and .md.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import random
import re
import resource
import signal
import sys
import tempfile
import time
import warnings
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import geometries  # noqa: E402
from geometries import GeometryError, VoxelGeometry  # noqa: E402
from solver.benchmarking.results import write_json_md  # noqa: E402

_OPTIONS = {"max_voxels": 20_000}
_HUGE = [2**31 - 1, 2**32, 2**40, 2**63, 10**20, -1, 0, 100_000_000, 4294967296]
_INJECTIONS = {
    "mha": ["ElementDataFile = /etc/passwd", "  ElementDataFile = {canary}",
            "ElementDataFile = {canary}", "ElementDataFile = ../../../../../..{canary}",
            "ElementNumberOfChannels = 100000000", "ElementType = MET_STRING",
            "CompressedData = True\nCompressedDataSize = 99999999999", "NDims = 4294967296",
            "HeaderSize = -1"],
    "nrrd": ["data file: /etc/passwd", "data file: {canary}", "data file: ../../../..{canary}",
             "encoding: gzip",
             "sizes: 100000 100000 100000", "byte skip: -1", "type: block"],
    "vti": ['<!-- <ImageData WholeExtent="0 1 0 1 0 1"> -->', '<!DOCTYPE x [<!ENTITY a "b">]>',
            '<DataArray type="UInt8" Name="z" NumberOfComponents="100000000" format="ascii">'
            "0</DataArray>"],
}  # fmt: skip
#: Size of the canary file: the 4 × 5 × 6 uint8 data the valid headers declare, all zeros, so
#: a load that reads it gives an all-fluid geometry (the generated uploads never do).
_CANARY_BYTES = 120


class _Timeout(Exception):
    """Raised by the per-input alarm."""


def valid_files(tmp: Path) -> dict[str, bytes]:
    """One small valid file per format (4 × 5 × 6 voxels, or a small sphere for STL)."""
    import pyvista as pv
    import tifffile
    import trimesh

    xyz = np.zeros((4, 5, 6), dtype=np.uint8)
    xyz[1:3, 1:4, 1:5] = 1
    files: dict[str, bytes] = {}
    out = io.BytesIO()
    np.save(out, xyz)
    files["npy"] = out.getvalue()
    out = io.BytesIO()
    VoxelGeometry(xyz.astype(bool), voxel_size=1e-6).save(out)
    files["npz"] = _rezip(out.getvalue(), zipfile.ZIP_DEFLATED, lambda name, body: body)
    files["raw"] = xyz.tobytes(order="F")
    out = io.BytesIO()
    tifffile.imwrite(out, xyz.T)
    files["tiff"] = out.getvalue()
    image = pv.ImageData(dimensions=xyz.shape)
    image.point_data["labels"] = xyz.reshape(-1, order="F")
    for suffix in ("vti", "vtk"):
        image.save(tmp / f"g.{suffix}")
        files[suffix] = (tmp / f"g.{suffix}").read_bytes()
    files["mha"] = (
        b"ObjectType = Image\nNDims = 3\nBinaryData = True\nBinaryDataByteOrderMSB = False\n"
        b"CompressedData = False\nElementSpacing = 1 1 1\nDimSize = 4 5 6\n"
        b"ElementType = MET_UCHAR\nElementDataFile = LOCAL\n" + xyz.tobytes(order="F")
    )
    files["nrrd"] = (
        b"NRRD0004\ntype: uint8\ndimension: 3\nsizes: 4 5 6\nencoding: raw\nendian: little\n\n"
        + xyz.tobytes(order="F")
    )
    sphere = trimesh.creation.icosphere(subdivisions=1)
    files["stl"] = sphere.export(file_type="stl")
    files["stl-ascii"] = sphere.export(file_type="stl_ascii").encode()
    return files


def _npy(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    np.save(out, array)
    return out.getvalue()


def _npy_header(header: str) -> bytes:
    """A .npy whose header dict is ``header`` (padded as numpy pads it) and 16 data bytes."""
    text = header + " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode() + bytes(16)


_NPZ_MEMBERS = [
    _npy_header("{'descr': '|b1', 'fortran_order': False, 'shape': (-2, -3), }"),
    _npy_header("{'descr': '|b1', 'fortran_order': False, 'shape': (-1, 0, 4), }"),
    _npy_header("{'descr': '|b1', 'fortran_order': True, 'shape': (1500, 1500, 1500), }"),
    _npy_header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }"),
    _npy_header("{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }"),
    _npy(np.array(["abc"])), _npy(np.array(["1", "2", "3"])), _npy(np.zeros((4, 5, 6))),
    _npy(np.array([[0.0, 1.0]])), _npy(np.array(10**18)), _npy(np.array(-1)),
    _npy(np.array(np.nan)), _npy(np.zeros((0,))), b"not a npy",
]
_TIFF_HUGE = [0, 1, 2**16 - 1, 2**31 - 1, 2**32 - 1]


# Members carry a fixed time stamp: zipfile stamps the wall clock, which made two generations of
# the same seed differ whenever they straddled a 2 s tick of the zip format's clock.
_STAMP = (2026, 1, 1, 0, 0, 0)


def _rezip(data: bytes, method: int, member) -> bytes:
    """The archive rewritten with ``method``; ``member(name, body)`` gives each body, or None."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w", method) as dst:
        for name in src.namelist():
            body = member(name, src.read(name))
            if body is not None:
                dst.writestr(zipfile.ZipInfo(name, date_time=_STAMP), body, compress_type=method)
    return out.getvalue()


def _zip_method(data: bytes, rng: random.Random) -> bytes:
    """The archive's members recompressed with bzip2 or LZMA; at times one is a bzip2 bomb."""
    method = rng.choice((zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA))

    def member(name: str, body: bytes) -> bytes:
        if name == "solid.npy" and rng.random() < 0.3:
            return body + bytes(8 * 2**20)  # inflates to 8 MiB from a few hundred bytes
        return body
    return _rezip(data, method, member)


def _npz_edit(data: bytes, rng: random.Random) -> bytes:
    """A member replaced by a hostile array, or dropped, keeping the rest of the archive."""
    method = rng.choice((zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED))
    with zipfile.ZipFile(io.BytesIO(data)) as src:
        target = rng.choice(src.namelist())

    def member(name: str, body: bytes) -> bytes | None:
        if name != target:
            return body
        return rng.choice(_NPZ_MEMBERS) if rng.random() < 0.85 else None
    return _rezip(data, method, member)


def _tiff_edit(data: bytearray, rng: random.Random) -> bytearray:
    """An entry of the first IFD set to a huge count or value, or the IFD chain looped or cut."""
    order = "little" if data[:2] == b"II" else "big"
    ifd = int.from_bytes(data[4:8], order)
    if ifd + 2 > len(data):
        return data
    entries = int.from_bytes(data[ifd : ifd + 2], order)
    choice = rng.random()
    if choice < 0.15 or not entries:  # the next-IFD offset: back at this IFD, or past the end
        at = ifd + 2 + 12 * entries
        value = rng.choice((ifd, len(data) + 1000, 2**32 - 1))
        data[at : at + 4] = value.to_bytes(4, order)
    else:
        at = ifd + 2 + 12 * rng.randrange(entries) + (4 if choice < 0.3 else 8)
        data[at : at + 4] = rng.choice(_TIFF_HUGE).to_bytes(4, order)
    return data


def generate(count: int, seed: int, canary: str = "/nonexistent/canary.raw"
             ) -> list[tuple[str, str, bytes]]:
    """Return ``count`` (kind, format, bytes) inputs from ``seed``; injections name ``canary``.

    A ``path:<edit>`` input is loaded from a file in a child process (see :func:`run`).
    """
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as folder:
        files = valid_files(Path(folder))
    formats = sorted(files)
    kinds = ["bytes-edit", "header-number", "injection", "binary-word", "random", "zip-method",
             "npz-structure", "tiff-structure", "path"]
    structured = {"zip-method": "npz", "npz-structure": "npz", "tiff-structure": "tiff"}
    inputs = []
    for _ in range(count):
        kind, fmt = rng.choice(kinds), rng.choice(formats)
        prefix = ""
        if kind == "path":  # an edit of any kind, read by path in a child process
            prefix, kind = "path:", rng.choice(kinds[:-1])
        fmt = structured.get(kind, fmt)
        data = bytearray(files[fmt])
        if kind == "zip-method":
            data = bytearray(_zip_method(bytes(data), rng))
        elif kind == "npz-structure":
            data = bytearray(_npz_edit(bytes(data), rng))
        elif kind == "tiff-structure":
            data = _tiff_edit(data, rng)
        elif kind == "bytes-edit":
            for _ in range(rng.randint(1, 8)):
                pos = rng.randrange(len(data) + 1)
                if rng.random() < 0.1:
                    del data[pos:]
                elif pos < len(data):
                    data[pos] = rng.randrange(256)
        elif kind == "header-number":
            head = bytes(data[:1024])
            numbers = list(re.finditer(rb"-?\d+", head))
            if numbers:
                m = rng.choice(numbers)
                data[m.start() : m.end()] = str(rng.choice(_HUGE)).encode()
        elif kind == "injection" and fmt.split("-")[0] in _INJECTIONS:
            line = rng.choice(_INJECTIONS[fmt]).replace("{canary}", canary).encode()
            lines = bytes(data).split(b"\n")
            at = rng.randint(1, min(len(lines) - 1, 10))
            data = bytearray(b"\n".join([*lines[:at], line, *lines[at:]]))
        elif kind in ("binary-word", "injection"):
            pos = rng.randrange(max(len(data) - 8, 1))
            width = rng.choice((2, 4, 8))
            value = rng.choice(_HUGE) % (1 << (8 * width))
            data[pos : pos + width] = value.to_bytes(width, rng.choice(("little", "big")))
        else:
            data = bytearray(rng.randbytes(rng.randint(0, 600)))
        inputs.append((prefix + kind, fmt, bytes(data)))
    return inputs


def _options(fmt: str) -> dict:
    base = fmt.split("-")[0]
    extra = {"stl": {"resolution": 12}, "raw": {"shape": (4, 5, 6)}}.get(base, {})
    return {"format": base, **_OPTIONS, **extra}


#: The child that loads ``path:`` inputs by path, as the CLI does; one JSON reply per line.
_CHILD = r"""
import json, logging, sys, warnings
sys.path.insert(0, sys.argv[1])
logging.disable(logging.CRITICAL)
import geometries
for line in sys.stdin:
    request = json.loads(line)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            geometry = geometries.load(request["path"], **request["options"])
        reply = {"outcome": "loaded", "all_fluid": not bool(geometry.solid.any())}
    except geometries.GeometryError:
        reply = {"outcome": "clean_error"}
    except MemoryError:
        reply = {"outcome": "MemoryError (memory limit)"}
    except Exception as exc:
        reply = {"outcome": f"{type(exc).__name__}: {str(exc)[:120]}"}
    print(json.dumps(reply), flush=True)
"""


class _PathChild:
    """A child process that loads files by path; restarted after it dies or hangs."""

    def __init__(self, folder: Path, memory_bytes: int) -> None:
        self.folder, self.memory_bytes, self.process = folder, memory_bytes, None

    def _limit(self) -> None:
        resource.setrlimit(resource.RLIMIT_AS, (self.memory_bytes, resource.RLIM_INFINITY))

    def load(self, fmt: str, data: bytes, seconds: float) -> tuple[str, bool]:
        """(outcome, all_fluid) of loading ``data`` from a file of ``fmt``'s extension."""
        import select
        import subprocess

        if self.process is None or self.process.poll() is not None:
            root = str(Path(__file__).resolve().parents[2])
            self.process = subprocess.Popen(
                [sys.executable, "-c", _CHILD, root], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                preexec_fn=self._limit)
        base = fmt.split("-")[0]
        path = self.folder / f"input.{base}"
        path.write_bytes(data)
        options = {k: v for k, v in _options(fmt).items() if k != "format"}
        self.process.stdin.write(json.dumps({"path": str(path), "options": options}) + "\n")
        self.process.stdin.flush()
        # The first load imports VTK and starts the worker: allow it more time.
        ready = select.select([self.process.stdout], [], [], seconds + 30)[0]
        line = self.process.stdout.readline() if ready else ""
        if line:
            reply = json.loads(line)
            return reply["outcome"], bool(reply.get("all_fluid"))
        self.process.kill()
        code = self.process.wait()
        self.process = None
        if not ready:
            return f"path mode: no answer within {seconds + 30:.0f} s", False
        how = signal.Signals(-code).name if code < 0 else f"exit code {code}"
        return f"path mode: the loading process died ({how})", False

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait(30)


def run(inputs: list[tuple[str, str, bytes]], seconds: float, canary: str,
        memory_bytes: int = 3 * 1024**3) -> dict:
    """Load every input like an upload (``path:`` ones by path in a child); return counts."""
    counts: Counter = Counter()
    failures: list[str] = []

    def alarm(signum, frame):
        raise _Timeout

    signal.signal(signal.SIGALRM, alarm)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fuzz-path-") as folder:
        child = _PathChild(Path(folder), memory_bytes)
        for index, (kind, fmt, data) in enumerate(inputs):
            if kind.startswith("path:"):
                outcome, all_fluid = child.load(fmt, data, seconds)
            else:
                outcome, all_fluid = _upload(fmt, data, seconds)
            if outcome == "loaded" and canary.encode() in data and all_fluid:
                outcome = "read the canary file its header names"
            if outcome in ("loaded", "clean_error"):
                counts[outcome] += 1
                counts[f"path {outcome}"] += kind.startswith("path:")
            else:
                counts["failures"] += 1
                if len(failures) < 20:
                    failures.append(f"#{index} {kind} {fmt}: {outcome}")
        child.close()
    return {
        "inputs": len(inputs),
        "loaded": counts["loaded"],
        "clean_errors": counts["clean_error"],
        "failures": counts["failures"],
        "path_inputs": sum(kind.startswith("path:") for kind, _, _ in inputs),
        "path_loaded": counts["path loaded"],
        "path_clean_errors": counts["path clean_error"],
        "failure_examples": failures,
        "seconds": round(time.monotonic() - start, 1),
        "per_format": dict(Counter(fmt for _, fmt, _ in inputs)),
        "per_kind": dict(Counter(kind.split(":")[0] for kind, _, _ in inputs)),
    }


def _upload(fmt: str, data: bytes, seconds: float) -> tuple[str, bool]:
    """(outcome, all_fluid) of loading ``data`` as an upload in this process."""
    outcome, all_fluid = "loaded", False
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            all_fluid = not geometries.load(data, **_options(fmt)).solid.any()
    except GeometryError:
        outcome = "clean_error"
    except _Timeout:
        outcome = f"timeout after {seconds} s"
    except MemoryError:
        outcome = "MemoryError (memory limit)"
    except Exception as exc:  # noqa: BLE001 - any other exception is what we count
        outcome = f"{type(exc).__name__}: {str(exc)[:120]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return outcome, bool(all_fluid)


def write(result: dict, folder: Path) -> tuple[Path, Path]:
    """Write loader-fuzz.json and a short loader-fuzz.md to ``folder``."""
    lines = [
        "# Loader fuzz (benchmarks/loader_fuzz/loader_fuzz.py)",
        "",
        f"`{result['command']}`: {result['inputs']} generated uploads, seed {result['seed']}, "
        f"{result['memory_gib']} GiB address-space limit on the server process, "
        f"{result['per_input_seconds']} s per input.",
        "",
        "| inputs | loaded | clean errors | failures | seconds |",
        "|---:|---:|---:|---:|---:|",
        f"| {result['inputs']} | {result['loaded']} | {result['clean_errors']} | "
        f"{result['failures']} | {result['seconds']} |",
        "",
        "Per format: " + ", ".join(f"{k} {v}" for k, v in sorted(result["per_format"].items())),
        "",
        "Per kind: " + ", ".join(f"{k} {v}" for k, v in sorted(result["per_kind"].items()))
        + " (a path input is one of the other edits, loaded by path in a child process)",
        "",
        f"Path mode: {result['path_inputs']} inputs, {result['path_loaded']} loaded, "
        f"{result['path_clean_errors']} clean errors.",
    ]
    lines += ["", "Failures:", *[f"- {f}" for f in result["failure_examples"]]] * bool(
        result["failure_examples"]
    )
    return write_json_md(folder, "loader-fuzz", result, "\n".join(lines) + "\n", indent=2,
                         newline=True)


def main(argv: list[str] | None = None) -> int:
    """Run the fuzz; exit 0 when no input failed, 1 otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0, help="limit per input")
    parser.add_argument("--memory-gib", type=float, default=3.0, help="address-space limit")
    parser.add_argument("--out", default="benchmarks/loader_fuzz/results")
    args = parser.parse_args(argv)
    logging.disable(logging.CRITICAL)  # trimesh and VTK log every broken input they see
    with tempfile.TemporaryDirectory(prefix="fuzz-canary-") as folder:
        canary = Path(folder) / "canary.raw"
        canary.write_bytes(bytes(_CANARY_BYTES))
        return _fuzz(args, str(canary))


def _fuzz(args: argparse.Namespace, canary: str) -> int:
    """Generate, run and write the fuzz with the canary file at ``canary``."""
    inputs = generate(args.count, args.seed, canary)
    limit = int(args.memory_gib * 1024**3)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    # A server starts its loader worker once (VTK, trimesh imported: seconds on a busy CPU);
    # the first input's time limit should not pay for that.
    with tempfile.TemporaryDirectory() as folder:
        geometries.load(valid_files(Path(folder))["vti"], format="vti")
    result = run(inputs, args.seconds, canary, limit)
    result.update(seed=args.seed, per_input_seconds=args.seconds, memory_gib=args.memory_gib,
                  command=f"python benchmarks/loader_fuzz/loader_fuzz.py --count {args.count} "
                          f"--seed {args.seed}")  # fmt: skip
    json_path, md_path = write(result, Path(args.out))
    print(f"{result['inputs']} inputs: {result['loaded']} loaded, {result['clean_errors']} clean "
          f"errors, {result['failures']} failures in {result['seconds']} s; wrote {json_path}")
    for line in result["failure_examples"]:
        print(line)
    return 0 if result["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
