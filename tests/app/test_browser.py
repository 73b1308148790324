"""The served dashboard driven in headless Chromium: load, run, slice updates, uploads."""

from __future__ import annotations

import logging
import re
import time
from contextlib import contextmanager

import pytest

from geometries import samples

from .conftest import ARTIFACTS, serve, stop

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]
log = logging.getLogger(__name__)

#: Console messages that are not errors of the app: Chromium reporting blocked network access.
IGNORED_CONSOLE = ("net::ERR_NAME_NOT_RESOLVED",)


def wait_until(condition, timeout: float, what: str, interval: float = 0.5):
    """Poll ``condition`` until it returns a truthy value; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def counter(page, key: str) -> str:
    """Text of a counter card's value (locators pierce Panel's shadow roots)."""
    return (page.locator(f'[data-counter="{key}"] .value').first.text_content() or "").strip()


def steps(page) -> int:
    """Time steps shown, -1 while the counter is not rendered yet."""
    text = counter(page, "steps").replace(",", "")
    return int(text) if text.isdigit() else -1


def mflups(page) -> float:
    try:
        return float(counter(page, "mflups"))
    except ValueError:
        return -1.0


def status(page) -> str:
    return counter(page, "status").strip()


def recording_page(chromium, url: str, height: int = 1000):
    """A context and a page open on ``url`` with its counters shown; console errors and uncaught
    exceptions (with their stack) are collected in ``page.errors``."""
    context = chromium.new_context(viewport={"width": 1500, "height": height})
    page = context.new_page()
    page.errors = []
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" and not any(
        s in m.text for s in IGNORED_CONSOLE) else None)
    page.on("pageerror", lambda e: page.errors.append(f"uncaught: {e} {e.stack}"))
    page.set_default_timeout(120_000)  # the CI machine has 2 busy cores
    try:
        page.goto(url, timeout=180_000)
        wait_until(lambda: page.locator('[data-counter="steps"]').count(), 120, "the counters")
    except BaseException:
        context.close()
        raise
    return context, page


@contextmanager
def served_page(chromium, folder, env: dict[str, str], height: int = 1100):
    """A :func:`recording_page` on an app served from ``folder`` with ``env`` (``page.app``);
    the page is closed and the app stopped afterwards."""
    app = serve(folder, env=env)
    try:
        context, page = recording_page(chromium, app.url, height=height)
    except BaseException:
        stop(app)
        raise
    page.app = app
    try:
        yield page
    finally:
        context.close()
        stop(app)


def slice_png(page) -> bytes:
    """Pixels of the slice plot (a page clip: the element never waits to be 'stable')."""
    box = page.locator(".slice-plot").first.bounding_box()
    return page.screenshot(clip=box)


@pytest.fixture(scope="module")
def page(chromium, served_app):
    """One page on the served app for the whole module; console errors are collected."""
    start = time.monotonic()
    context, page = recording_page(chromium, served_app.url)
    wait_until(lambda: steps(page) > 0, 120, "the default case to start stepping")
    page.load_to_first_frame = time.monotonic() - start
    yield page
    context.close()


def test_page_loads_without_console_errors_and_autostarts(page):
    assert status(page) == "running", "the default case must run at once"
    wait_until(lambda: mflups(page) > 0, 60, "a positive MFLUPS counter")
    time.sleep(3)  # let the first 3D synchronisation and a few frames happen
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"))
    assert page.locator(".bk-panel-models-vtk-VTKSynchronizedPlot canvas, canvas").count() >= 2
    log.warning("page load to first frame: %.1f s", page.load_to_first_frame)
    assert page.errors == [], f"console errors: {page.errors}"


def test_start_runs_and_the_slice_changes(page):
    page.get_by_role("button", name="Pause").click()
    wait_until(lambda: status(page) == "paused", 60, "the run to pause")
    paused = steps(page)
    time.sleep(2)
    assert steps(page) == paused, "Pause must stop the steps"
    page.get_by_role("button", name="Reset").click()
    wait_until(lambda: steps(page) == 0, 60, "the reset to step 0")
    before = slice_png(page)
    clicked = time.monotonic()
    page.get_by_role("button", name="Start").click()
    wait_until(lambda: steps(page) > 0, 60, "steps after Start")
    first_frame = time.monotonic() - clicked
    wait_until(lambda: mflups(page) > 0, 60, "a positive MFLUPS counter")
    wait_until(lambda: slice_png(page) != before, 60, "the slice image to change", interval=1)
    middle = slice_png(page)
    count = steps(page)
    wait_until(lambda: steps(page) > count + 2, 60, "more steps")
    wait_until(lambda: slice_png(page) != middle, 60, "the slice to keep changing", interval=1)
    log.warning("Start to first frame: %.2f s", first_frame)
    assert page.errors == [], f"console errors: {page.errors}"


def test_garbage_upload_is_a_message_and_the_run_goes_on(page):
    if status(page) != "running":
        page.get_by_role("button", name="Start").click()
        wait_until(lambda: status(page) == "running", 60, "the run to start")
    page.get_by_text("Geometry", exact=True).click()
    page.get_by_role("button", name="Upload").click()
    before = steps(page)
    page.locator("input[type=file]").set_input_files(files=[{
        "name": "garbage.npy", "mimeType": "application/octet-stream",
        "buffer": b"definitely not a numpy array " * 40}])
    page.get_by_text(re.compile(r"garbage\.npy failed")).first.wait_for(timeout=60_000)
    assert page.get_by_role("button", name="Use this geometry").is_disabled()
    wait_until(lambda: steps(page) > before + 2, 60, "the previous simulation to keep running")
    assert status(page) == "running"


def test_upload_of_a_shipped_sample(page):
    name = "sphere_pack_48.tif"
    expected = samples.load_sample(name)
    page.get_by_text("Geometry", exact=True).click()
    page.get_by_role("button", name="Upload").click()
    page.locator("input[type=file]").set_input_files(files=[{
        "name": name, "mimeType": "image/tiff",
        "buffer": samples.sample_path(name).read_bytes()}])
    page.get_by_text(re.compile("Ready: press")).first.wait_for(timeout=120_000)
    page.get_by_text(f"{expected.n_fluid:,}", exact=True).first.wait_for(timeout=10_000)
    use = page.get_by_role("button", name="Use this geometry")
    assert use.is_enabled()
    use.click()
    wait_until(lambda: f"{expected.n_fluid:,} fluid nodes" in (page.locator(
        '[data-counter="eta"] .sub').first.text_content() or ""), 120,
        "the uploaded geometry to run")
    count = steps(page)
    wait_until(lambda: steps(page) > count, 60, "the new simulation to step")
    page.get_by_text("Flow", exact=True).click()
    time.sleep(2)
    page.screenshot(path=str(ARTIFACTS / "dashboard-uploaded.png"))
    assert page.errors == [], f"console errors: {page.errors}"


def test_rock_tab_checks_the_sample_and_prices_choices(page):
    page.get_by_text("Rock", exact=True).first.click()
    page.get_by_role("button", name="Check sample").click()
    table = page.get_by_text("percolating").first
    wait_until(lambda: table.is_visible(), 30, "the pore table")
    page.get_by_role("button", name="Price choices").click()
    wait_until(lambda: page.get_by_text("downsample x2").first.is_visible(), 60,
               "the priced choices")
    assert page.get_by_text("estimated time").first.is_visible()
    assert status(page) == "running", "checks must not stop the simulation"
    assert page.errors == [], f"console errors: {page.errors}"
