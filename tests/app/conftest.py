"""Fixtures for the app tests: a served app in a subprocess and headless Chromium.

Browser tests need Debian's Chromium (``apt-get install -y chromium``) and the ``playwright``
package; without either they are skipped with the reason. Playwright never downloads a browser.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"
CHROMIUM = os.environ.get("POROUS_LBM_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"Chromium not found at {CHROMIUM} (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed"
    return None


@dataclass
class ServedApp:
    """A ``panel serve app`` subprocess."""

    process: subprocess.Popen
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/app"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(tmp: Path, env: dict[str, str] | None = None, timeout: float = 180.0) -> ServedApp:
    """Start the app the way the README does and wait until it answers."""
    port = free_port()
    log = tmp / f"panel-{port}.log"
    command = [
        sys.executable, "-m", "panel", "serve", "app", "--port", str(port),
        "--address", "127.0.0.1", f"--allow-websocket-origin=127.0.0.1:{port}",
        # Destroy closed sessions within about a second (default 15 s).
        "--unused-session-lifetime", "1000", "--check-unused-sessions", "500",
    ]
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=out,
                                   stderr=subprocess.STDOUT)
    app = ServedApp(process, port, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"panel serve exited:\n{app.log_text()[-3000:]}")
        if _answers(port):
            return app
        time.sleep(0.5)
    stop(app)
    raise RuntimeError(f"panel serve did not answer within {timeout} s")


def _answers(port: int) -> bool:
    """Whether the server answers; the index only redirects to /app, creating no session."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/")
        return connection.getresponse().status in (200, 302)
    except OSError:
        return False
    finally:
        connection.close()


def stop(app: ServedApp) -> None:
    """End the server process this fixture started."""
    app.process.terminate()
    try:
        app.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        app.process.kill()
        app.process.wait(timeout=20)


@pytest.fixture(scope="module")
def served_app(tmp_path_factory) -> Iterator[ServedApp]:
    """The dashboard served in a subprocess for one test module.

    The 3D view is built once when the page opens but re-synchronised only once a minute:
    headless Chromium renders WebGL in software, and each vtk.js rebuild starves the page.
    """
    reason = browser_missing()
    if reason:
        pytest.skip(f"browser tests skipped: {reason}")
    app = serve(tmp_path_factory.mktemp("served"), env={"POROUS_LBM_SCENE_REFRESH_S": "60"})
    yield app
    stop(app)


@pytest.fixture(scope="module")
def chromium():
    """A headless Debian Chromium driven by Playwright."""
    reason = browser_missing()
    if reason:
        pytest.skip(f"browser tests skipped: {reason}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
