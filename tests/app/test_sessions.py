"""Closed sessions of a served app end their runner threads and free their memory.

Issue 16 item 6 (:func:`test_destroyed_sessions_free_their_dashboards`): a destroyed session's
dashboard, controller and 3D scene must be garbage once the server has torn it down; before,
Panel's per-document tables kept every closed session alive (see :mod:`app.session_refs`).

Issue 7 item 4: 20 sessions are opened and closed against a served app and the server's live
runner threads (:func:`solver.runner.live_runners`, shown in every page's sidebar as
``data-live-runners``) must return to the baseline. Three sessions are real browser pages that
are closed; seventeen are plain HTTP requests of ``/app``, which run the app (a full dashboard
with its runner thread) and are then abandoned without connecting, the other way a session
ends. Sessions open paused (``POROUS_LBM_AUTOSTART=0``) and without the 3D view so that the
test fits a 2-core machine; a browser page's runner thread exists all the same, while a plain
HTTP request, which never loads the page, builds no simulation at all (issue 17). An observer
page that runs reads the live count.

Sessions normally stop their runner when bokeh destroys them. A session whose document lock
hangs (seen when a client disconnects while the server writes to it, a Bokeh/Panel issue) is
never destroyed; its runner then stops by itself after ``POROUS_LBM_IDLE_TIMEOUT_S`` (20 s
here) without a poll. Either way the runner threads must all end.
"""

from __future__ import annotations

import gc
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from .conftest import ROOT, browser_missing, free_port, serve, stop
from .test_browser import wait_until

BROWSER_SESSIONS = 3
HTTP_SESSIONS = 17


@pytest.fixture(scope="module")
def light_app(tmp_path_factory):
    reason = browser_missing()
    if reason:
        pytest.skip(f"browser tests skipped: {reason}")
    app = serve(tmp_path_factory.mktemp("sessions"),
                env={"POROUS_LBM_3D": "0", "POROUS_LBM_AUTOSTART": "0",
                     "POROUS_LBM_IDLE_TIMEOUT_S": "20"})
    yield app
    stop(app)


def live_runners(page) -> int:
    """Runner threads alive in the server, as the page's sidebar reports them."""
    value = page.locator("[data-live-runners]").first.get_attribute("data-live-runners")
    return int(value) if value and value.isdigit() else -1


def open_page(browser, url: str):
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    page.goto(url, timeout=180_000)
    page.locator('[data-counter="steps"]').first.wait_for(timeout=180_000)
    return context, page


def request_session(url: str) -> int:
    with urllib.request.urlopen(url, timeout=180) as response:
        response.read()
        return response.status


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_closed_sessions_stop_their_runner_threads(chromium, light_app):
    observer_context, observer = open_page(chromium, light_app.url)
    # A running observer republishes its snapshot, and with it the live count, several times
    # a second.
    observer.get_by_role("button", name="Start").click()
    wait_until(lambda: live_runners(observer) == 1, 60, "only the observer's runner")
    baseline = live_runners(observer)
    peak = [baseline]

    def sample() -> None:
        peak.append(live_runners(observer))

    for _ in range(BROWSER_SESSIONS):
        context, page = open_page(chromium, light_app.url)
        # The page's simulation is built once the browser has loaded it.
        wait_until(lambda: live_runners(observer) > baseline, 60, "the page's runner thread")
        sample()
        context.close()
    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(request_session, [light_app.url] * HTTP_SESSIONS))
    sample()
    assert statuses == [200] * HTTP_SESSIONS
    assert max(peak) > baseline, "the opened sessions must have had runner threads"

    wait_until(lambda: live_runners(observer) == baseline, 120,
               f"the live runner count to return to {baseline}")
    # Sessions without a browser hold no runner: the server destroys them on its unused-session
    # clock (1 s lifetime, checked every 0.5 s), which may finish after the count above did.
    closing = BROWSER_SESSIONS + HTTP_SESSIONS
    wait_until(lambda: light_app.log_text().count("dashboard closed") >= closing, 60,
               f"all {closing} closed sessions to be destroyed ('dashboard closed' in the log)")
    started = light_app.log_text().count(" started (live runners")
    assert started == 1 + BROWSER_SESSIONS, "only pages a browser loaded start a simulation"
    observer_context.close()


def _live(name: str) -> int:
    """Instances of the app class ``name`` alive in this process (after a full collection)."""
    gc.collect()
    return sum(type(o).__name__ == name and type(o).__module__.startswith("app.")
               for o in gc.get_objects())


@pytest.mark.timeout(300)
def test_destroyed_sessions_free_their_dashboards():
    """Issue 16 item 6: a destroyed session's dashboard, controller and Bokeh document are freed.

    The app runs in this process (Panel's threaded server, no browser) so that the test can
    count live objects: sessions are opened by plain HTTP requests, as crawlers do, and
    destroyed by the server a second later. Before the fix Panel's per-document tables
    (``pn.config.exception_handler`` and ``pn.state.onload``, keyed weakly by the document)
    held bound methods of the controller, whose views lead back to the document, so the entry
    and the whole session (50-75 MiB per 3 sessions in the served app) were never freed.
    """
    import panel as pn

    port = free_port()
    before = {name: _live(name) for name in ("Dashboard", "Controller", "Scene3D")}
    server = pn.serve({"app": str(ROOT / "app" / "main.py")}, port=port, address="127.0.0.1",
                      websocket_origin=[f"127.0.0.1:{port}"], threaded=True, show=False,
                      unused_session_lifetime_milliseconds=2000,
                      check_unused_sessions_milliseconds=500)
    try:
        url = f"http://127.0.0.1:{port}/app"
        wait_until(lambda: _answers(url), 120, "the in-process server to answer")
        for _ in range(2):
            assert request_session(url) == 200
        bokeh_server = pn.state._servers[server.server_id][0]
        assert _live("Dashboard") >= before["Dashboard"] + 2, "the requests built dashboards"
        wait_until(lambda: not bokeh_server.get_sessions("/app"), 60,
                   "the server to destroy the unconnected sessions")
        # The server's loop finishes tearing a destroyed session down a moment later.
        deadline = time.monotonic() + 30
        while True:
            after = {name: _live(name) for name in before}
            if after == before or time.monotonic() > deadline:
                break
            time.sleep(1)
    finally:
        server.stop()
    assert after == before, f"objects of destroyed sessions still alive: {after} vs {before}"


def _answers(url: str) -> bool:
    try:
        return request_session(url) == 200
    except OSError:
        return False


def test_weak_callback_calls_while_alive_and_does_not_keep_alive():
    """The wrapper forwards calls to a live object and lets the object be collected."""
    from app.session_refs import weak_callback

    class Target:
        def report(self, value):
            return value * 2

    target = Target()
    call = weak_callback(target.report)
    assert call(21) == 42
    del target
    gc.collect()
    assert call(21) is None
