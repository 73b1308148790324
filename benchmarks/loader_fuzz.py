"""Independent loader fuzz: the server's view of hostile uploads, with time and memory limits.

Usage: ``python benchmarks/loader_fuzz.py [--count N] [--seed S] [--out benchmarks/results]``

Inputs are generated here, independently of tests/geometries/test_fuzz.py: small valid files of
every format, then (a) random byte edits, (b) header numbers replaced by huge or negative
values, (c) injected header lines (detached data files naming server files, huge channel
counts), (d) binary words overwritten with huge values, (e) random bytes. Each input goes to
``geometries.load(bytes, format=...)`` exactly as an upload does, in this process, which plays
the server: its address space is limited (``RLIMIT_AS``, default 3 GiB) and each input has a
wall-time limit (default 10 s). An input passes when it loads or raises GeometryError; any other
exception, a timeout, a MemoryError or a load that read the canary file an injected header
names (its all-zero bytes give an all-fluid geometry) is a failure, and a crash ends this
process (the caller sees the exit status). Writes loader-fuzz.json and .md.
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
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import geometries  # noqa: E402
from geometries import GeometryError, VoxelGeometry  # noqa: E402

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
    files["npz"] = out.getvalue()
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


def generate(count: int, seed: int, canary: str = "/nonexistent/canary.raw"
             ) -> list[tuple[str, str, bytes]]:
    """Return ``count`` (kind, format, bytes) inputs from ``seed``; injections name ``canary``."""
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as folder:
        files = valid_files(Path(folder))
    formats = sorted(files)
    kinds = ["bytes-edit", "header-number", "injection", "binary-word", "random"]
    inputs = []
    for _ in range(count):
        kind, fmt = rng.choice(kinds), rng.choice(formats)
        data = bytearray(files[fmt])
        if kind == "bytes-edit":
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
        inputs.append((kind, fmt, bytes(data)))
    return inputs


def _options(fmt: str) -> dict:
    base = fmt.split("-")[0]
    extra = {"stl": {"resolution": 12}, "raw": {"shape": (4, 5, 6)}}.get(base, {})
    return {"format": base, **_OPTIONS, **extra}


def run(inputs: list[tuple[str, str, bytes]], seconds: float, canary: str) -> dict:
    """Load every input like an upload; return counts and the first failures."""
    counts: Counter = Counter()
    failures: list[str] = []

    def alarm(signum, frame):
        raise _Timeout

    signal.signal(signal.SIGALRM, alarm)
    start = time.monotonic()
    for index, (kind, fmt, data) in enumerate(inputs):
        outcome = "loaded"
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                geometry = geometries.load(data, **_options(fmt))
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
        if outcome == "loaded" and canary.encode() in data and not geometry.solid.any():
            outcome = "read the canary file its header names"
        if outcome in ("loaded", "clean_error"):
            counts[outcome] += 1
        else:
            counts["failures"] += 1
            if len(failures) < 20:
                failures.append(f"#{index} {kind} {fmt}: {outcome}")
    return {
        "inputs": len(inputs),
        "loaded": counts["loaded"],
        "clean_errors": counts["clean_error"],
        "failures": counts["failures"],
        "failure_examples": failures,
        "seconds": round(time.monotonic() - start, 1),
        "per_format": dict(Counter(fmt for _, fmt, _ in inputs)),
        "per_kind": dict(Counter(kind for kind, _, _ in inputs)),
    }


def write(result: dict, folder: Path) -> tuple[Path, Path]:
    """Write loader-fuzz.json and a short loader-fuzz.md to ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder / "loader-fuzz.json", folder / "loader-fuzz.md"
    json_path.write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Loader fuzz (benchmarks/loader_fuzz.py)",
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
        "Per kind: " + ", ".join(f"{k} {v}" for k, v in sorted(result["per_kind"].items())),
    ]
    lines += ["", "Failures:", *[f"- {f}" for f in result["failure_examples"]]] * bool(
        result["failure_examples"]
    )
    md_path.write_text("\n".join(lines) + "\n")
    return json_path, md_path


def main(argv: list[str] | None = None) -> int:
    """Run the fuzz; exit 0 when no input failed, 1 otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0, help="limit per input")
    parser.add_argument("--memory-gib", type=float, default=3.0, help="address-space limit")
    parser.add_argument("--out", default="benchmarks/results")
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
    result = run(inputs, args.seconds, canary)
    result.update(seed=args.seed, per_input_seconds=args.seconds, memory_gib=args.memory_gib,
                  command=f"python benchmarks/loader_fuzz.py --count {args.count} "
                          f"--seed {args.seed}")  # fmt: skip
    json_path, md_path = write(result, Path(args.out))
    print(f"{result['inputs']} inputs: {result['loaded']} loaded, {result['clean_errors']} clean "
          f"errors, {result['failures']} failures in {result['seconds']} s; wrote {json_path}")
    for line in result["failure_examples"]:
        print(line)
    return 0 if result["failures"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
