"""How long from asking for a 3D flow update to its payload ready to send (issue 30 item 6).

The dashboard's 3D view asks the session's runner for the coarse flow (``set_flow3d``: the
view's isosurface field; streamlines use its velocity) whenever the user turns streamlines or
the isosurface on or changes the field, and every scene refresh period after that. The server's
part of one update is:

1. **device**: the request reaches the runner thread (between two step chunks), which reads the
   coarse flow on the device (:func:`solver.coarse_flow.coarse_flow`, every few voxels) with its
   next snapshot, the three probes gathered with the cut as every snapshot does;
2. **host meshes**: 60 streamlines and the isosurface built with PyVista from that coarse flow
   (:mod:`solver.flow_meshes`, what ``app/views/scene3d.py`` calls);
3. **serialise**: the vtk.js scene and the new arrays, as the 3D view's pane sends them
   (``FlowSyncVTK.synchronize(render=False)``: only arrays the browser lacks).

The dashboard then sends it within one poll (``refresh_ms``, 100 ms by default).

Part 1 runs wherever the solver runs (the GPU machine has CuPy but no PyVista or Panel); parts
2 and 3 run where PyVista and Panel are installed. Run on the GPU, the script times part 1 on a
256^3 sphere pack with three probes and the views on (and the runner's MFLUPS meanwhile against
headless stepping, item 6's cost), and saves the last coarse flow (``.npz``); ``--host-from``
that file times parts 2 and 3 on the very same coarse flow on a machine with PyVista and Panel.
Where all three are installed (``--backend numpy --small``, the CPU smoke run), one run times
everything.

Usage, from the repository root::

    python benchmarks/flow_views/flow_views_latency.py --backend cupy          # GPU, ~2 min
    python benchmarks/flow_views/flow_views_latency.py --host-from FILE.npz --device-from FILE.json
    python benchmarks/flow_views/flow_views_latency.py --backend numpy --small --out /tmp/fv

Writes ``flow-views-<device>-<date>.json``/``.md`` (and the ``.npz`` of the coarse flow) to
``--out`` (default: this folder's ``results/``). ``LBM_COMMIT`` names the commit where the
copy has no ``.git``.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from geometries.generators import random_sphere_pack  # noqa: E402
from solver.backends import get_backend  # noqa: E402
from solver.benchmarking.results import run_meta, write_json_md  # noqa: E402
from solver.coarse_flow import CoarseFlow  # noqa: E402
from solver.config import SimulationConfig  # noqa: E402
from solver.probes import Probe, ProbeSet  # noqa: E402
from solver.runner import CHUNK_SECONDS, SimulationRunner  # noqa: E402
from solver.simulation import Simulation  # noqa: E402
from solver.snapshot import SliceView  # noqa: E402

log = logging.getLogger("flow_views")

#: Streamline seeds (the 3D view's default count).
SEEDS = 60
#: Seconds between coarse flows while the views are on (the dashboard's scene refresh period;
#: a request re-reads at once whatever the period).
VIEWS_INTERVAL_S = 10.0
#: The isosurface fields a user switches between: each switch is a request for a new read.
FIELDS = ("qcrit", "umag")
#: The target of item 6: an update in the browser within 1 s.
TARGET_S = 1.0


@dataclass(frozen=True)
class Case:
    """Geometry and durations (seconds) of one measurement."""

    shape: tuple[int, int, int]
    porosity: float
    diameter: float
    headless_s: float
    stream_s: float
    warmup_s: float
    requests: int


FULL = Case((256, 256, 256), 0.6, 24.0, headless_s=8.0, stream_s=12.0, warmup_s=2.0,
            requests=10)
SMALL = Case((48, 48, 48), 0.6, 10.0, headless_s=3.0, stream_s=4.0, warmup_s=1.0, requests=4)


def case_config(backend: str) -> SimulationConfig:
    """The dashboard's default physics (D3Q19 TRT float32, a body force along x)."""
    return SimulationConfig(lattice="D3Q19", collision="TRT", tau=0.8, precision="float32",
                            body_force=(5e-5, 0.0, 0.0), backend=backend)


def three_probes(solid: np.ndarray) -> ProbeSet:
    """Three fluid nodes at a quarter, half and three quarters along x, middle y."""
    nx, ny, _ = solid.shape
    probes = []
    for k, x in enumerate((nx // 4, nx // 2, 3 * nx // 4)):
        column = np.flatnonzero(~solid[x, ny // 2])
        z = int(column[len(column) // 2]) if column.size else 0
        probes.append(Probe(f"p{k + 1}", (x, ny // 2, z)))
    return ProbeSet(tuple(probes))


def headless_mflups(geometry, config: SimulationConfig, case: Case) -> float:
    """MFLUPS of ~CHUNK_SECONDS chunks of steps, as the runner steps (after a warm-up)."""
    sim = Simulation(geometry, config)
    sim.allocate()
    chunk, steps, wall = 1, 0, 0.0
    measuring_from = time.perf_counter() + case.warmup_s
    deadline = measuring_from + case.headless_s
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        sim.step(chunk)
        elapsed = max(time.perf_counter() - start, 1e-6)
        if start >= measuring_from:
            steps, wall = steps + chunk, wall + elapsed
        chunk = int(min(max(1, round(chunk * CHUNK_SECONDS / elapsed)), 2 * chunk, 100_000))
    fluid = sim.problem.n_fluid
    sim.close()
    return fluid * steps / wall / 1e6 if wall else 0.0


def _mark(runner: SimulationRunner) -> tuple[int, float]:
    """(time step, perf_counter) read on the runner thread between two chunks."""
    return runner.submit(lambda sim: (sim.time_step, time.perf_counter())).result(timeout=120)


def device_part(geometry, config: SimulationConfig, case: Case) -> tuple[dict, CoarseFlow]:
    """The runner with three probes and the views on: its MFLUPS over ``stream_s``, then
    ``requests`` field switches, each timed from ``set_flow3d`` to the snapshot holding the
    new coarse flow (polled every millisecond); the last coarse flow."""
    solid = np.asarray(geometry.solid, dtype=bool)
    runner = SimulationRunner(geometry, config, view=SliceView("umag", 2, solid.shape[2] // 2))
    runner.set_probes(three_probes(solid))
    runner.set_flow3d(FIELDS[0], VIEWS_INTERVAL_S)
    runner.start()
    try:
        runner.wait_for(lambda s: s.step > 0 and s.flow3d is not None, timeout=300)
        time.sleep(case.warmup_s)
        step0, t0 = _mark(runner)
        time.sleep(case.stream_s)
        step1, t1 = _mark(runner)
        streaming = {"steps": step1 - step0, "seconds": t1 - t0}
        rows = []
        for k in range(case.requests):
            name = FIELDS[(k + 1) % len(FIELDS)]
            asked = time.time()
            runner.set_flow3d(name, VIEWS_INTERVAL_S)
            while True:
                snap = runner.snapshot()
                flow = snap.flow3d
                if flow is not None and flow.name == name and flow.read_at >= asked:
                    break
                if time.time() - asked > 60:
                    raise RuntimeError(f"No coarse flow of {name} within 60 s of the request.")
                time.sleep(0.001)
            seen = time.time()
            rows.append({"field": name, "step": flow.step, "read_s": flow.read_at - asked,
                         "published_s": seen - asked, "probes": snap.probes is not None})
            time.sleep(0.3)  # the user's next click; the runner steps meanwhile
        status, error = snap.status, snap.error
    finally:
        runner.stop(timeout=30.0)
    published = [r["published_s"] for r in rows]
    return {"streaming": streaming, "requests": rows,
            "published_median_s": float(np.median(published)),
            "published_max_s": float(np.max(published)), "status": status, "error": error,
            "coarse_shape": list(flow.scalar.shape), "stride": flow.stride}, flow


def save_flow(path: Path, flow: CoarseFlow) -> None:
    """The coarse flow as an ``.npz`` (float32 arrays and its step, stride and field)."""
    np.savez_compressed(path, velocity=flow.velocity, scalar=flow.scalar, fluid=flow.fluid,
                        step=flow.step, stride=flow.stride, name=flow.name)


def load_flow(path: Path) -> CoarseFlow:
    """The coarse flow :func:`save_flow` wrote."""
    with np.load(path, allow_pickle=False) as data:
        return CoarseFlow(int(data["step"]), int(data["stride"]), data["velocity"],
                          data["scalar"], str(data["name"]), data["fluid"], time.time())


def host_part(flow: CoarseFlow, geometry, repeats: int = 3) -> dict | None:
    """Median seconds of SEEDS streamlines, the isosurface and the pane's serialisation of the
    new meshes from ``flow``; None without PyVista (serialisation None without Panel)."""
    try:
        import pyvista as pv

        from solver import flow_meshes as fm
    except ImportError:
        return None
    pv.OFF_SCREEN = True
    solid = np.asarray(geometry.solid, dtype=bool)
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        grid = fm.coarse_grid(flow)
        seeds = fm.seed_points(geometry, "slice plane", SEEDS, 2, solid.shape[2] // 2)
        lines = fm.streamlines(grid, seeds)
        middle = time.perf_counter()
        surface = fm.isosurface(grid, fm.auto_level(flow.scalar, flow.name))
        runs.append({"streamlines_s": middle - start,
                     "isosurface_s": time.perf_counter() - middle})
    out = {key: float(np.median([r[key] for r in runs])) for key in runs[0]}
    out.update(streamline_points=int(lines.n_points), isosurface_cells=int(surface.n_cells),
               serialise_s=None, payload_bytes=None)
    out.update(serialisation(solid, lines, surface, repeats) or {})
    return out


def serialisation(solid: np.ndarray, lines, surface, repeats: int) -> dict | None:
    """Median seconds of the 3D view's pane sending new streamlines and isosurface to a browser
    that holds the rest of the scene, and the bytes of the arrays sent; None without Panel."""
    try:
        import pyvista as pv

        from app.views.scene3d import FlowSyncVTK, _servable
        from solver.scene_frames import solid_surface
    except ImportError:
        return None
    plotter = pv.Plotter(off_screen=True, window_size=(640, 480))
    meshes = {"solid": solid_surface(solid), "lines": _servable(pv.PolyData()),
              "iso": _servable(pv.PolyData())}
    for mesh in meshes.values():
        plotter.add_mesh(mesh)
    pane = FlowSyncVTK(plotter.ren_win)
    model = pane.get_root()
    times, sent = [], 0
    for k in range(repeats + 1):
        # New meshes each time (as a new coarse flow brings): the browser lacks only them.
        meshes["lines"].copy_from(_servable(_changed(lines, k)))
        meshes["iso"].copy_from(_servable(_changed(surface, k)))
        start = time.perf_counter()
        pane.synchronize(render=False)
        if k:  # the first sync sends the whole scene: the browser's first view, not an update
            times.append(time.perf_counter() - start)
            sent = sum(len(v) for v in (model.arrays or {}).values())
    plotter.close()
    return {"serialise_s": float(np.median(times)), "payload_bytes": int(sent)}


def _changed(mesh, k: int):
    """A copy of ``mesh`` whose points and point arrays differ from the ``k - 1``-th copy's (the
    pane sends arrays by content hash: an unchanged copy would send nothing)."""
    out = mesh.copy()
    if out.n_points:
        out.points = out.points + np.float32(1e-3 * k)
        for name in out.point_data.keys():
            out.point_data[name] = np.asarray(out.point_data[name]) * (1.0 + 1e-6 * k)
    return out


def markdown(result: dict) -> str:
    """The report: metadata and one table of measured values against the targets."""
    meta, d, h = result["meta"], result.get("device"), result.get("host")
    rows = []
    if d:
        rows += [
            ("headless MFLUPS (runner-style chunks)", f"{d['headless_mflups']:.4g}", "", ""),
            ("runner MFLUPS with 3 probes + coarse flow every "
             f"{VIEWS_INTERVAL_S:g} s", f"{d['streaming_mflups']:.4g}", "", ""),
            ("cost 1 - streaming / headless", f"{100 * d['cost_fraction']:.1f} %", "<= 10 %",
             _yes(d["cost_fraction"] <= 0.10)),
            (f"request to snapshot with the new coarse flow (median of {len(d['requests'])})",
             f"{1e3 * d['published_median_s']:.0f} ms", "", ""),
            ("request to snapshot, slowest", f"{1e3 * d['published_max_s']:.0f} ms", "", ""),
        ]
    if h:
        rows += [
            (f"{SEEDS} streamlines (PyVista, host)", f"{1e3 * h['streamlines_s']:.0f} ms", "", ""),
            ("isosurface (PyVista, host)", f"{1e3 * h['isosurface_s']:.0f} ms", "", ""),
            ("serialise the new meshes (the 3D view's pane)",
             "n/a (no Panel)" if h["serialise_s"] is None else f"{1e3 * h['serialise_s']:.0f} ms",
             "", ""),
            ("arrays sent", "n/a" if h["payload_bytes"] is None
             else f"{h['payload_bytes'] / 1e3:.0f} kB", "", ""),
        ]
    if d and h and h["serialise_s"] is not None:
        total = d["published_median_s"] + h["streamlines_s"] + h["isosurface_s"] + h["serialise_s"]
        rows.append(("request to payload ready (median device part + host parts)",
                     f"{total:.2f} s", f"<= {TARGET_S:g} s with the poll and the browser",
                     _yes(total <= TARGET_S)))
    lines = [f"# Flow views: request to payload, {meta['device']}", "",
             f"Date {meta['date']}, commit {meta['commit']}, host {meta['host']}. "
             f"{meta['case_text']}", "",
             "| quantity | value | target | met |", "| --- | ---: | ---: | :---: |",
             *[f"| {a} | {b} | {c} | {e} |" for a, b, c, e in rows], ""]
    return "\n".join(lines)


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def _meta(device: str, case: Case | None, text: str) -> dict:
    return run_meta(device, host=platform.node(), python=platform.python_version(),
                    case=None if case is None else asdict(case), case_text=text)


def run(args: argparse.Namespace, out: Path) -> dict:
    """The device part (and the host parts where PyVista is) of one case."""
    case = SMALL if args.small else FULL
    geometry = random_sphere_pack(case.shape, case.porosity, case.diameter, seed=0)
    config = case_config(args.backend)
    device = str(dict(get_backend(args.backend).device_info()).get("name"))
    log.info("%s: pack %s porosity %.3f", device, case.shape, geometry.porosity)
    headless = headless_mflups(geometry, config, case)
    log.info("headless %.1f MFLUPS", headless)
    d, flow = device_part(geometry, config, case)
    fluid = int((~np.asarray(geometry.solid, dtype=bool)).sum())
    d["headless_mflups"] = headless
    d["streaming_mflups"] = fluid * d["streaming"]["steps"] / d["streaming"]["seconds"] / 1e6
    d["cost_fraction"] = 1.0 - d["streaming_mflups"] / headless
    slug = _slug(device)
    save_flow(out / f"coarse-flow-{slug}.npz", flow)
    shape = "x".join(map(str, case.shape))
    text = (f"Sphere pack {shape} (d {case.diameter:g}, porosity {geometry.porosity:.3f}, "
            f"{fluid:,} fluid nodes), D3Q19 TRT float32, backend {args.backend}; coarse grid "
            f"{'x'.join(map(str, d['coarse_shape']))} (stride {d['stride']}).")
    return {"meta": _meta(device, case, text), "device": d,
            "host": host_part(flow, geometry)}


def run_host(args: argparse.Namespace) -> dict:
    """The host parts on a saved coarse flow of the FULL (or --small) case's geometry."""
    case = SMALL if args.small else FULL
    geometry = random_sphere_pack(case.shape, case.porosity, case.diameter, seed=0)
    flow = load_flow(Path(args.host_from))
    text = (f"Host parts on the coarse flow {Path(args.host_from).name} (step {flow.step}, "
            f"field {flow.name}, grid {'x'.join(map(str, flow.scalar.shape))}).")
    device = None
    if args.device_from:  # the device part measured where the flow was read
        found = json.loads(Path(args.device_from).read_text())
        device = found["device"]
        text += (f" Device part from {Path(args.device_from).name} ({found['meta']['device']}, "
                 f"commit {found['meta']['commit']}): {found['meta']['case_text']}")
    return {"meta": _meta(f"host {platform.machine()}", case, text),
            "device": device, "host": host_part(flow, geometry)}


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def main() -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"),
                        help="folder for the JSON, markdown and npz (default: results/)")
    parser.add_argument("--backend", choices=("cupy", "numpy"), default="cupy")
    parser.add_argument("--small", action="store_true", help="48^3 pack, short phases (CPU)")
    parser.add_argument("--host-from", help="time the host parts on this saved coarse flow")
    parser.add_argument("--device-from", help="with --host-from: the JSON of the device run "
                        "that saved it, for one report with the total")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = run_host(args) if args.host_from else run(args, out)
    stem = f"flow-views-{_slug(result['meta']['device'])}-{result['meta']['date']}"
    if args.host_from:
        stem += "-host"
    report = markdown(result)
    write_json_md(out, stem, result, report, indent=2, default=str)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
