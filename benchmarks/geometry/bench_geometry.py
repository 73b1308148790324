"""Geometry-layer benchmark: STL voxelisation and raw image loading on the CPU.

Run ``python benchmarks/geometry/bench_geometry.py`` from the repository root. It voxelises a ~100k
triangle STL (a bumpy UV sphere, binary STL bytes through ``geometries.load``) at 256 voxels
along its longest axis, loads a 512³ uint8 ``.raw`` volume from disk, and builds the paper's
Table 6 sphere pack (diameter 40 in 192³, porosity 0.1). Targets: STL < 10 s, raw < 2 s. The
figures go to ``benchmarks/geometry/results/geometry-cpu.md`` and ``geometry-cpu.json``.
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import trimesh

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import geometries  # noqa: E402
from geometries.generators import random_sphere_pack  # noqa: E402
from solver.benchmarking.results import write_json_md  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
REPEATS = 3


def bumpy_sphere(count: int = 158) -> trimesh.Trimesh:
    """Return a watertight UV sphere with radial bumps, ~4·count² triangles (~100k)."""
    mesh = trimesh.creation.uv_sphere(radius=1.0, count=[count, count])
    v = mesh.vertices
    theta = np.arccos(np.clip(v[:, 2] / np.linalg.norm(v, axis=1), -1, 1))
    phi = np.arctan2(v[:, 1], v[:, 0])
    mesh.vertices = v * (1 + 0.15 * np.sin(5 * theta) * np.cos(4 * phi))[:, None]
    return mesh


def best_of(run: Callable[[], object]) -> tuple[float, object]:
    """Return (fastest wall time in s, last result) over REPEATS runs."""
    times, result = [], None
    for _ in range(REPEATS):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return min(times), result


def bench_stl() -> dict:
    """Time voxelising a ~100k-triangle binary STL at 256³ through geometries.load."""
    mesh = bumpy_sphere()
    data = mesh.export(file_type="stl")
    seconds, geom = best_of(lambda: geometries.load(data, filename="bumpy.stl", resolution=256))
    error = abs(np.count_nonzero(geom.solid) * geom.voxel_size**3 / mesh.volume - 1)
    return {
        "case": "STL voxelise",
        "triangles": len(mesh.faces),
        "shape": list(geom.shape),
        "seconds": round(seconds, 3),
        "target_seconds": 10.0,
        "volume_error": round(float(error), 5),
    }


def bench_raw() -> dict:
    """Time loading a 512³ uint8 raw volume (x fastest) from a file."""
    shape = (512, 512, 512)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "volume.raw"
        (rng.random(shape, dtype=np.float32) < 0.3).astype(np.uint8).tofile(path)
        seconds, geom = best_of(lambda: geometries.load(path, shape=shape, dtype="uint8"))
    return {
        "case": "raw load",
        "shape": list(shape),
        "seconds": round(seconds, 3),
        "target_seconds": 2.0,
        "porosity": round(geom.porosity, 4),
    }


def bench_pack() -> dict:
    """Time the Table 6 sphere pack (d = 40, 192³, porosity 0.1)."""
    seconds, geom = best_of(lambda: random_sphere_pack((192, 192, 192), 0.1, diameter=40))
    return {
        "case": "sphere pack",
        "shape": [192, 192, 192],
        "seconds": round(seconds, 3),
        "target_seconds": None,
        "porosity": round(geom.porosity, 4),
    }


def machine() -> dict:
    """Return the CPU model, core count, Python and library versions."""
    model = platform.processor() or "unknown"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model,
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "trimesh": trimesh.__version__,
        "date": datetime.date.today().isoformat(),
        # Other jobs may share the machine; the 1-minute load average says how much.
        "load_average": round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else None,
    }


def write_report(rows: list[dict], info: dict) -> None:
    """Write the results as Markdown and JSON under benchmarks/geometry/results/."""
    lines = [
        "# Geometry layer on the CPU",
        "",
        f"Machine: {info['cpu']}, {info['nproc']} cores; Python {info['python']}, "
        f"NumPy {info['numpy']}, trimesh {info['trimesh']}. Date: {info['date']}. "
        f"Load average while running: {info['load_average']}.",
        f"Best of {REPEATS} runs, wall-clock seconds; "
        "`python benchmarks/geometry/bench_geometry.py`.",
        "",
        "| case | size | time (s) | target (s) | note |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        size = " × ".join(str(n) for n in row["shape"])
        note = ", ".join(
            f"{k} {v}" for k, v in row.items() if k in ("triangles", "porosity", "volume_error")
        )
        target = "—" if row["target_seconds"] is None else f"< {row['target_seconds']:g}"
        lines.append(f"| {row['case']} | {size} | {row['seconds']:.2f} | {target} | {note} |")
    write_json_md(RESULTS, "geometry-cpu", {"machine": info, "results": rows},
                  "\n".join(lines) + "\n", indent=2, newline=True)


def main() -> None:
    """Run the benchmarks, print the figures and write the report."""
    rows = []
    for bench in (bench_stl, bench_raw, bench_pack):
        rows.append(bench())
        print(f"{rows[-1]['case']:<13} {rows[-1]['seconds']:7.2f} s   {rows[-1]}", flush=True)
    write_report(rows, machine())
    print(f"wrote {RESULTS / 'geometry-cpu.md'}")


if __name__ == "__main__":
    main()
