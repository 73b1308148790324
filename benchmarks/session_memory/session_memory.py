"""Server memory across session cycles: open N browser sessions, close them, measure RSS.

Serves the app with ``panel serve app benchmarks/session_memory/session_memory_probe.py`` on a free
port (the probe is a debug hook that runs inside the server, see its docstring), then for each cycle
opens ``--sessions`` headless-Chromium pages at once (Debian's /usr/bin/chromium via playwright),
waits until each shows its counters and for ``--dwell`` seconds, closes them, waits until the server
has destroyed them (no Dashboard left, or ``--settle`` seconds), and asks the probe for the RSS
after ``gc.collect()`` (and after ``malloc_trim``), the live session objects and the growth of
object counts (``--trace``: tracemalloc lines too). Writes
``benchmarks/session_memory/results/session-memory-<tag>.json`` and ``.md``::

    python benchmarks/session_memory/session_memory.py --sessions 3 --cycles 4   # ~3 min on 2 cores
    python benchmarks/session_memory/session_memory.py --sessions 10 --cycles 5 --tag 10x5
    python benchmarks/session_memory/session_memory.py --sessions 3 --cycles 3 --trace --chain \
        --no-3d
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from solver.benchmarking.results import git_commit, write_json_md  # noqa: E402

CHROMIUM = os.environ.get("POROUS_LBM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
PROBE = "session_memory_probe"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(port: int, probe_dir: Path, log: Path, env: dict[str, str]) -> subprocess.Popen:
    """Start ``panel serve`` with the app and the probe; return once it answers (<= 180 s)."""
    command = [sys.executable, "-m", "panel", "serve", "app",
               f"benchmarks/session_memory/{PROBE}.py",
               "--port", str(port), "--address", "127.0.0.1",
               f"--allow-websocket-origin=127.0.0.1:{port}",
               # Closed sessions are destroyed within about a second (default 15 s).
               "--unused-session-lifetime", "1000", "--check-unused-sessions", "500"]
    environment = {**os.environ, "PYTHONPATH": str(ROOT),
                   "POROUS_LBM_MEMORY_PROBE_DIR": str(probe_dir), **env}
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=out,
                                   stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"panel serve exited:\n{log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read()
            return process
        except OSError:
            time.sleep(0.5)
    process.terminate()
    raise RuntimeError("panel serve did not answer within 180 s")


def probe(port: int, probe_dir: Path, **query: str) -> dict:
    """Ask the server's debug hook for one memory record."""
    before = set(probe_dir.glob("probe-*.json"))
    qs = urllib.parse.urlencode(query)
    urllib.request.urlopen(f"http://127.0.0.1:{port}/{PROBE}?{qs}", timeout=300).read()
    new = sorted(set(probe_dir.glob("probe-*.json")) - before)
    return json.loads(new[-1].read_text())


def run_cycle(browser: Any, url: str, sessions: int, dwell: float) -> None:
    """Open ``sessions`` pages together, wait for their counters, keep them ``dwell`` s, close."""
    contexts = []
    for _ in range(sessions):
        context = browser.new_context(viewport={"width": 1200, "height": 800})
        page = context.new_page()
        page.goto(url, timeout=300_000, wait_until="commit")
        contexts.append((context, page))
    for _, page in contexts:
        page.locator('[data-counter="steps"]').first.wait_for(timeout=300_000)
    time.sleep(dwell)
    for context, _ in contexts:
        context.close()


def settle(port: int, probe_dir: Path, timeout: float, **query: str) -> dict:
    """Probe until no Dashboard is left alive (closed sessions destroyed) or ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        record = probe(port, probe_dir, **query)
        if (record["live"]["Dashboard"] == 0 and record["runner_threads"] == 0) or \
                time.monotonic() > deadline:
            return record
        time.sleep(2)


def report_md(result: dict) -> str:
    """A short Markdown report of one benchmark run."""
    p = result["params"]
    lines = [f"# Server memory across session cycles ({result['tag']})", "",
             f"`{result['command']}` · {result['date']} · commit {result['commit']} · "
             f"{p['sessions']} sessions x {p['cycles']} cycles, 3D view "
             f"{'on' if p['scene_3d'] else 'off'}, autostart {'on' if p['autostart'] else 'off'}",
             "", "| after | RSS MiB (gc) | RSS MiB (gc + malloc_trim) | Dashboards | Controllers "
             "| Documents | runner threads |", "|---|---|---|---|---|---|---|"]
    for r in result["records"]:
        live = r["live"]
        lines.append(f"| {r['label']} | {r['rss_mib']:.1f} | {r['rss_trimmed_mib']:.1f} | "
                     f"{live['Dashboard']} | {live['Controller']} | {live['Document']} | "
                     f"{r['runner_threads']} |")
    lines += ["", f"RSS growth per cycle (least squares over the last {result['tail_cycles']} "
              "cycles, from cycle 2 on): "
              f"{result['growth_per_cycle_mib']:.1f} MiB (gc), "
              f"{result['growth_per_cycle_trimmed_mib']:.1f} MiB (trimmed)."]
    later = result["records"][2:]  # from cycle 2: imports and caches are done
    if len(later) > 1:
        gc_rss = [r["rss_mib"] for r in later]
        trimmed = [r["rss_trimmed_mib"] for r in later]
        lines.append(f"Spread (max - min) from cycle 2 on: {max(gc_rss) - min(gc_rss):.1f} MiB "
                     f"(gc), {max(trimmed) - min(trimmed):.1f} MiB (trimmed); net change "
                     f"cycle 2 -> last: {gc_rss[-1] - gc_rss[0]:+.1f} MiB (gc), "
                     f"{trimmed[-1] - trimmed[0]:+.1f} MiB (trimmed).")
    return "\n".join(lines) + "\n"


def _slope(values: list[float]) -> float:
    """Least-squares growth per step of a short series (MiB per cycle)."""
    n = len(values)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    return num / sum((i - mean_x) ** 2 for i in range(n))


def main(argv: list[str] | None = None) -> dict:
    """Run the benchmark; returns and writes the result."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=4)
    parser.add_argument("--dwell", type=float, default=3.0, help="seconds a page stays open")
    parser.add_argument("--settle", type=float, default=30.0,
                        help="seconds to wait for closed sessions to be destroyed")
    parser.add_argument("--no-3d", action="store_true", help="serve without the 3D view")
    parser.add_argument("--paused", action="store_true", help="sessions open paused")
    parser.add_argument("--trace", action="store_true", help="tracemalloc growth per cycle")
    parser.add_argument("--chain", action="store_true",
                        help="referrer chain of a surviving Controller")
    parser.add_argument("--tag", default="")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    port = free_port()
    work = Path(tempfile.mkdtemp(prefix="session-memory-"))
    env = {"POROUS_LBM_3D": "0" if args.no_3d else "1",
           "POROUS_LBM_AUTOSTART": "0" if args.paused else "1"}
    server = serve(port, work, work / "server.log", env)
    query = {"trace": "1"} if args.trace else {}
    if args.chain:
        query["chain"] = "1"
    records = []
    try:
        # Tracing starts at the first cycle's probe: the app's imports are not counted.
        records.append(probe(port, work, label="start"))
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for cycle in range(1, args.cycles + 1):
                t0 = time.monotonic()
                run_cycle(browser, f"http://127.0.0.1:{port}/app", args.sessions, args.dwell)
                record = settle(port, work, args.settle, label=f"cycle {cycle}", **query)
                record["cycle_s"] = round(time.monotonic() - t0, 1)
                records.append(record)
                print(json.dumps({k: record[k] for k in
                                  ("label", "rss_mib", "rss_trimmed_mib", "live",
                                   "runner_threads", "cycle_s")}), flush=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    # From cycle 2 on: the first session imports the plotting stack and fills its caches.
    tail = records[2:] if len(records) > 3 else records[1:]
    commit = git_commit()  # LBM_COMMIT: a copy without .git (a `git archive` of an old one)
    tag = args.tag or f"{args.sessions}x{args.cycles}-{'noscene' if args.no_3d else '3d'}"
    result = {
        "tag": tag, "command": " ".join(["python", "benchmarks/session_memory/session_memory.py",
                                         *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit, "machine": f"{platform.node()} {os.cpu_count()} CPUs",
        "params": {"sessions": args.sessions, "cycles": args.cycles, "dwell_s": args.dwell,
                   "scene_3d": not args.no_3d, "autostart": not args.paused},
        "records": records, "tail_cycles": len(tail),
        "growth_per_cycle_mib": _slope([r["rss_mib"] for r in tail]),
        "growth_per_cycle_trimmed_mib": _slope([r["rss_trimmed_mib"] for r in tail]),
        "server_log_tail": (work / "server.log").read_text(errors="replace")[-4000:],
    }
    stem = args.out / f"session-memory-{tag}"
    # with_suffix("") as before: a dot in the tag ends the file name there
    write_json_md(stem.parent, stem.with_suffix("").name, result, report_md(result))
    print(report_md(result))
    return result


if __name__ == "__main__":
    main()
