"""Debug hook served next to the app by ``benchmarks/session_memory/session_memory.py`` (not prod).

``panel serve app benchmarks/session_memory/session_memory_probe.py`` runs this script in the server
process for every GET of ``/session_memory_probe``: it collects garbage, then writes one JSON record
to ``$POROUS_LBM_MEMORY_PROBE_DIR/probe-<n>.json`` with the server's RSS (MiB, before and after
``malloc_trim``: what the allocator keeps but Python freed), live instances of the session classes
(Dashboard, Controller, runners, simulations, Bokeh documents and sessions, PyVista plotters), the
gc-tracked types whose counts grew since the previous probe, and, with ``?trace=1``, the tracemalloc
lines that grew since the previous traced probe (tracing starts at the first traced probe, so
warm-up allocations are not counted). ``?chain=1`` adds the referrer chain of one surviving
Controller, which names whatever keeps a closed session alive.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import json
import os
import sys
import threading
import tracemalloc
from pathlib import Path

import panel as pn

WATCHED = ("Dashboard", "Controller", "SimulationRunner", "Simulation", "Scene3D", "Document",
           "ServerSession", "BokehSessionContext", "Plotter", "BootstrapTemplate", "VTK",
           "PeriodicCallback", "SettingsCards")
#: State kept between probes of one server process (this script is re-run per request).
_STATE = sys.modules.setdefault("_session_memory_probe_state", type(sys)("state"))


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _malloc_trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        pass


def _type_counts() -> collections.Counter:
    return collections.Counter(type(o).__name__ for o in gc.get_objects())


def _describe(obj: object) -> str:
    if isinstance(obj, dict):
        keys = list(obj)[:6]
        return f"dict(len={len(obj)}, keys={keys!r})"[:200]
    if isinstance(obj, list | tuple | set):
        return f"{type(obj).__name__}(len={len(obj)})"
    if type(obj).__name__ == "module":
        return f"module {obj.__name__}"
    if type(obj).__name__ == "function":
        return f"function {obj.__qualname__} ({obj.__module__})"
    if type(obj).__name__ == "cell":
        return "cell"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _chain(target: object, depth: int = 12) -> list[str]:
    """A referrer path from ``target`` up to a module, a frame or a class (breadth first)."""
    seen = {id(target)}
    ignore = {id(sys._getframe()), id(_STATE.__dict__)}
    frontier = [(target, [])]
    for _ in range(depth):
        nxt = []
        for obj, path in frontier:
            for ref in gc.get_referrers(obj):
                if id(ref) in seen or id(ref) in ignore or ref is frontier or ref is nxt:
                    continue
                if type(ref).__name__ == "frame":
                    continue
                seen.add(id(ref))
                here = path + [_describe(ref)]
                if type(ref).__name__ in ("module", "type") or (
                        isinstance(ref, dict) and "__name__" in ref and "__file__" in ref):
                    return here
                nxt.append((ref, here))
        frontier = nxt[:400]
        if not frontier:
            break
    return ["(no root found)"] + (frontier[0][1] if frontier else [])


def probe() -> dict:
    """One record of the server's memory and live session objects."""
    args = {k: v[0].decode() for k, v in (pn.state.session_args or {}).items()}
    gc.collect()
    gc.collect()
    record: dict = {"label": args.get("label", ""), "rss_mib": _rss_mib()}
    _malloc_trim()
    record["rss_trimmed_mib"] = _rss_mib()
    counts = _type_counts()
    record["live"] = {name: counts.get(name, 0) for name in WATCHED}
    record["runner_threads"] = sum(t.name.startswith("lbm-runner")
                                   for t in threading.enumerate())
    previous = getattr(_STATE, "counts", None)
    if previous is not None:
        growth = counts - previous
        record["type_growth"] = dict(growth.most_common(25))
    _STATE.counts = counts
    if args.get("trace") == "1":
        if not tracemalloc.is_tracing():
            tracemalloc.start(int(args.get("frames", "8")))
            _STATE.snapshot = tracemalloc.take_snapshot()
        else:
            snapshot = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__)])
            stats = snapshot.compare_to(_STATE.snapshot, "traceback")
            record["trace_growth"] = [
                {"kib": round(s.size_diff / 1024, 1), "count": s.count_diff,
                 "where": s.traceback.format()[-16:]}
                for s in stats[:12] if s.size_diff > 0]
            record["traced_total_growth_kib"] = round(
                sum(s.size_diff for s in stats) / 1024, 1)
            _STATE.snapshot = snapshot
    if args.get("chain") == "1":
        kept = [o for o in gc.get_objects() if type(o).__name__ == "Controller"]
        if kept:
            record["controller_chain"] = _chain(kept[0])
    out = Path(os.environ.get("POROUS_LBM_MEMORY_PROBE_DIR", "."))
    n = len(list(out.glob("probe-*.json")))
    (out / f"probe-{n:03d}.json").write_text(json.dumps(record, indent=1))
    return record


if __name__.startswith("bokeh_app"):  # served (importable for its helpers otherwise)
    pn.pane.Str(json.dumps(probe())).servable()
