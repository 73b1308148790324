"""The flow views of issue 30 in headless Chromium, one served session: a field picked in the
slice (vorticity, in SI), probes and a line typed in that stream values which change with the
flow and survive a Reset, and streamlines plus an isosurface drawn in the 3D view (pixels)."""

from __future__ import annotations

import html
import os
import re
import time

import numpy as np
import pytest

from .conftest import ARTIFACTS, browser_missing
from .test_browser import served_page, steps, wait_until
from .test_browser_vessel_flow import SLICE_MAX

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]


#: Chromium's console warning when a page holds too many WebGL contexts and it forcibly loses
#: the least recently drawn one (it may be the 3D view's).
TOO_MANY_CONTEXTS = "Too many active WebGL contexts"


@pytest.fixture(scope="module")
def page(chromium, tmp_path_factory):
    """The default case served running, its 3D view re-synchronised every 15 s; the browser's
    forced WebGL context losses are collected in ``page.lost_contexts``."""
    if browser_missing():
        pytest.skip(browser_missing())
    with served_page(chromium, tmp_path_factory.mktemp("flow-views"),
                     {"POROUS_LBM_SCENE_REFRESH_S": "15"}) as page:
        page.lost_contexts = []
        page.on("console", lambda m: page.lost_contexts.append(m.text)
                if TOO_MANY_CONTEXTS in m.text else None)
        wait_until(lambda: steps(page) > 0, 120, "the default case to start stepping")
        yield page


def contexts_kept(page) -> None:
    """Every vtk.js window replaced so far gave its WebGL context back, and none was lost
    forcibly (each scene sync replaces the window: without the release, Chromium lost the
    least recently drawn context once per sync past 16, the geometry preview's among them)."""
    assert page.lost_contexts == [], f"WebGL contexts forcibly lost: {page.lost_contexts}"
    assert page.evaluate("() => window.porousLbmReleasedContexts || 0") > 0, \
        "no replaced vtk.js window released its WebGL context"


def probe_step(page) -> int:
    """The step of the probes' latest reading shown, -1 before one."""
    box = page.locator(".probe-step").first
    return int(box.get_attribute("data-step")) if box.count() else -1


def scene_pixels(page) -> np.ndarray:
    """RGB pixels of the 3D view's canvas (a page clip)."""
    from io import BytesIO

    from matplotlib.image import imread

    canvas = page.locator(".scene3d canvas").first
    box = canvas.bounding_box()
    rgba = imread(BytesIO(page.screenshot(clip=box)), format="png")
    return np.rint(rgba[..., :3] * 255).astype(np.uint8)


def blue_pixels(pixels: np.ndarray) -> int:
    """Pixels near the streamlines' colour (#1d4ed8)."""
    return int((np.abs(pixels.astype(int) - (29, 78, 216)).sum(axis=2) < 90).sum())


FLOW_INFO = """() => {
  for (const doc of Bokeh.documents) {
    for (const model of doc.all_models) {
      const text = model.text;
      if (typeof text === 'string' && text.includes('flow3d-step')) return text;
    }
  }
  return null;
}"""


def flow_delays(page, count: int, timeout: float) -> list[tuple[int, float]]:
    """(step, seconds) of the next ``count`` coarse flows the 3D view shows: from the runner
    reading the flow (its ``read_at``, this machine's clock) to the browser's document
    holding the view's new meshes (polled every 20 ms; the note of the flow they show is
    sent with them)."""
    seen, last, deadline = [], None, time.monotonic() + timeout
    while len(seen) < count and time.monotonic() < deadline:
        match = re.search(r'data-step="(-?\d+)" data-read="([\d.]+)"',
                          html.unescape(page.evaluate(FLOW_INFO) or ""))
        now = time.time()
        if match and int(match[1]) >= 0 and match[1] != last:
            if last is not None:  # the first one may have arrived before this poll began
                seen.append((int(match[1]), now - float(match[2])))
            last = match[1]
        time.sleep(0.02)
    assert len(seen) == count, f"only {len(seen)} new 3D flows reached the page in {timeout} s"
    return seen


def test_fields_probes_and_3d_flow_views_in_one_session(page):
    # 1. A field in SI: vorticity on the slice, its caption in 1/s and values above zero.
    page.locator(".field-select select").first.select_option(label="vorticity |ω|")
    wait_until(lambda: "vorticity |ω| (1/s)" in (
        page.locator(".slice-title div").first.text_content() or ""), 90, "the vorticity slice")
    wait_until(lambda: (page.evaluate(SLICE_MAX) or 0) > 0, 60, "a non-zero vorticity")
    # 2. Probes and a line: live readings that follow the run.
    page.get_by_placeholder(re.compile(r"^10 10 10; ")).fill("12 24 24; 36 24 24")
    page.get_by_placeholder(re.compile(r"^10 10 10 -> ")).fill("24 0 24 -> 24 47 24")
    page.get_by_role("button", name="Set probes").click()
    wait_until(lambda: probe_step(page) > 0, 60, "the first probe reading")
    first = probe_step(page)
    wait_until(lambda: probe_step(page) > first, 60, "a later probe reading")
    assert "2 probes, 1 lines" in page.locator(".probe-step").first.text_content()
    # 3. Streamlines and an isosurface appear in the 3D view.
    before = scene_pixels(page)
    boxes = page.locator(".flow3d-controls input[type=checkbox]")
    boxes.nth(0).check()  # streamlines
    boxes.nth(1).check()  # isosurface
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        wait_until(lambda: blue_pixels(scene_pixels(page)) > blue_pixels(before) + 200, 90,
                   "streamlines drawn in the 3D view", interval=2)
    finally:
        page.screenshot(path=str(ARTIFACTS / "flow-views-3d.png"))
    page.screenshot(path=str(ARTIFACTS / "flow-views.png"))
    # The 3D plane's own colour bar: the slice's field, in SI, with the plane's range.
    bar = page.locator(".scene3d-colourbar .colourbar").first
    wait_until(lambda: "vorticity |ω| (1/s)" in (bar.text_content() or ""), 60,
               "the 3D colour bar of the vorticity")
    assert float(bar.get_attribute("data-high")) > float(bar.get_attribute("data-low")) >= 0
    # 4. Reset: the views stay and the probes read the new run.
    page.get_by_role("button", name="Reset").click()
    wait_until(lambda: steps(page) == 0, 60, "the reset to step 0")
    page.get_by_role("button", name="Start").click()
    wait_until(lambda: 0 < probe_step(page) < first + 10_000 and steps(page) > 0, 60,
               "probe readings of the new run")
    # The 3D view's streamlines come back from the new run's flow.
    wait_until(lambda: blue_pixels(scene_pixels(page)) > blue_pixels(before) + 200, 90,
               "streamlines of the new run", interval=2)
    time.sleep(2)
    assert page.errors == [], f"console errors: {page.errors}"
    contexts_kept(page)


def test_a_new_3d_flow_reaches_the_browser_within_a_second(page):
    """Issue 30 item 6: each new coarse flow (one per scene refresh period, 15 s here) is in
    the browser within a second of the runner reading it, sent on the next poll rather than
    at the scene's next periodic sync. The delays are written to the artifacts."""
    boxes = page.locator(".flow3d-controls input[type=checkbox]")
    for k in (0, 1):  # streamlines and isosurface (on since the first test unless run alone)
        if not boxes.nth(k).is_checked():
            boxes.nth(k).check()
    delays = flow_delays(page, 3, 120)
    ARTIFACTS.mkdir(exist_ok=True)
    load = os.getloadavg()[0]
    (ARTIFACTS / "flow3d-delays.txt").write_text(
        f"load average {load:.1f} on {os.cpu_count()} cores\n"
        + "".join(f"step {step}: {delay:.3f} s\n" for step, delay in delays))
    assert page.errors == [], f"console errors: {page.errors}"
    if load > 2 * (os.cpu_count() or 1):
        pytest.skip(f"delays {delays} measured at load {load:.0f} on {os.cpu_count()} cores: "
                    "a time limit needs a machine that is not overloaded")
    assert float(np.median([delay for _, delay in delays])) <= 1.0, \
        f"3D flow updates took {delays} s from the runner to the browser"


def orange_pixels(pixels: np.ndarray) -> int:
    """Pixels near the isosurface's colour (#f59e0b, 60 % opaque over the scene)."""
    return int((np.abs(pixels.astype(int) - (240, 160, 40)).sum(axis=2) < 90).sum())


def flow_step(page) -> int:
    """The step of the coarse flow the 3D view's streamlines and isosurface show, -1 before
    one."""
    match = re.search(r'data-step="(-?\d+)"', html.unescape(page.evaluate(FLOW_INFO) or ""))
    return int(match[1]) if match else -1


def views_follow_the_run(page, fresh, what: str) -> None:
    """The probes, the line and the 3D view's flow show the run after a change (``fresh(step)``:
    a step of that run), and the 3D view draws its streamlines and isosurface."""
    wait_until(lambda: fresh(probe_step(page)), 60, f"probe readings of {what}")
    assert "2 probes, 1 lines" in page.locator(".probe-step").first.text_content()
    wait_until(lambda: fresh(flow_step(page)), 60, f"the 3D flow of {what}")
    boxes = page.locator(".flow3d-controls input[type=checkbox]")
    assert boxes.nth(0).is_checked() and boxes.nth(1).is_checked()
    wait_until(lambda: blue_pixels(pixels := scene_pixels(page)) > 200
               and orange_pixels(pixels) > 200, 60,
               f"streamlines and the isosurface of {what}", interval=1)
    contexts_kept(page)


def test_the_flow_views_survive_apply_and_a_new_geometry(page):
    """Issue 30 item 7: with probes, a line, streamlines and an isosurface on (the tests
    above), Apply settings (the run rebuilt, its flow carried over) and a second built-in
    geometry (the shipped 48^3 TIFF pack, whose box the probes still fit: the run starts from
    rest) keep every view on the run; the 3D view never shows the old run's flow."""
    boxes = page.locator(".flow3d-controls input[type=checkbox]")
    if not (boxes.nth(0).is_checked() and boxes.nth(1).is_checked()):  # run alone
        page.get_by_placeholder(re.compile(r"^10 10 10; ")).fill("12 24 24; 36 24 24")
        page.get_by_placeholder(re.compile(r"^10 10 10 -> ")).fill("24 0 24 -> 24 47 24")
        page.get_by_role("button", name="Set probes").click()
        for k in (0, 1):
            boxes.nth(k).check()
    wait_until(lambda: steps(page) > 20, 60, "the run to go on")
    # 1. Apply settings: the simulation is rebuilt with the settings, its flow carried over,
    # and the 3D flow read again at once (not at the next 15 s period).
    applied = steps(page)
    page.get_by_role("button", name=re.compile(r"^Apply settings")).click()
    page.get_by_text("Settings applied").first.wait_for()
    views_follow_the_run(page, lambda step: step >= applied, "the applied settings")
    # 2. A new geometry: the shipped sphere-pack sample, used from the Geometry tab.
    before = steps(page)
    page.get_by_text("Geometry", exact=True).click()
    page.get_by_role("button", name="Sample").click()
    page.locator("select").filter(
        has=page.locator("option", has_text="sphere_pack_48.tif")).first.select_option(
        "sphere_pack_48.tif")
    page.get_by_role("button", name="Preview").click()
    use = page.get_by_role("button", name="Use this geometry")
    wait_until(lambda: use.is_enabled(), 60, "the sample's preview")
    use.click()
    page.get_by_text("Flow", exact=True).click()
    # The status says so with the first snapshot of the new run: any reading after is its.
    try:
        page.get_by_text("Loaded sphere_pack_48.tif").first.wait_for()
    except Exception:  # what the page said instead, for the failure's report
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "flow-views-new-geometry-failed.png"))
        raise AssertionError("no 'Loaded sphere_pack_48.tif'; the status said "
                             f"{page.locator('.run-status').first.text_content()!r}") from None
    views_follow_the_run(page, lambda step: 0 <= step < before, "the new geometry")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "flow-views-new-geometry.png"))
    assert page.errors == [], f"console errors: {page.errors}"
