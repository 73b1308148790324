"""A vessel that really flows, watched in headless Chromium (#18 item 4 end to end): the sample
bifurcation with the default drive (largest opening a velocity inlet, the others 0 Pa outlets)
runs on the CPU backend; the flow cards show inflow at opening 1, outflow at 2 and 3, a positive
pressure drop and a mass balance that settles within a few percent of the inflow, and the
velocity cut is non-zero in the lumen."""

from __future__ import annotations

import re
import time

import pytest

from .conftest import ARTIFACTS, browser_missing
from .test_browser import counter, served_page, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

#: The largest finite value of the slice image Bokeh holds in the browser (NaN = solid).
SLICE_MAX = """() => {
  let best = null;
  for (const doc of Bokeh.documents) {
    for (const model of doc.all_models) {
      const data = model.data;
      if (!data) continue;
      const images = data instanceof Map ? data.get('image') : data.image;
      if (!images) continue;
      for (const image of images) {
        for (const v of image) {
          if (Number.isFinite(v) && (best === null || v > best)) best = v;
        }
      }
    }
  }
  return best;
}"""


@pytest.fixture(scope="module")
def page(chromium, tmp_path_factory):
    """A page on an app served paused; the 3D view refreshed every 15 s (its syncs checked)."""
    if browser_missing():
        pytest.skip(browser_missing())
    with served_page(chromium, tmp_path_factory.mktemp("vessel"),
                     {"POROUS_LBM_SCENE_REFRESH_S": "15", "POROUS_LBM_AUTOSTART": "0"}) as page:
        yield page


#: Largest |inflow - outflow| / inflow in percent once the default vessel's start-up waves have
#: passed (a zero-gradient outflow in a slow flow passes only a third of it:
#: tests/solver/test_outflow_slow; the steady bifurcation balances to 0.5 %: solver validate).
MAX_IMBALANCE_PERCENT = 5.0
#: Readings in a row (one a second) that must all lie within MAX_IMBALANCE_PERCENT: settled.
SETTLED_READINGS = 3


def card(page, key: str) -> tuple[str, str]:
    """(value, detail) of a flow card."""
    box = page.locator(f'[data-counter="{key}"]').first
    return ((box.locator(".value").first.text_content() or "").strip(),
            (box.locator(".sub").first.text_content() or "").strip())


def number(text: str) -> float:
    """The leading number of a card's value ("1.2e-05 mL/s", "-3.1 %")."""
    match = re.match(r"\s*([-+]?[\d.]+(?:e[-+]?\d+)?)", text)
    assert match, f"no number in {text!r}"
    return float(match.group(1))


def preview_vessel(page) -> None:
    """Preview the vessel sample on the Geometry tab."""
    page.get_by_text("Geometry", exact=True).click()
    page.get_by_role("button", name="Sample").click()
    page.locator("select").filter(
        has=page.locator("option", has_text="vessel_bifurcation.stl")).first.select_option(
        "vessel_bifurcation.stl")
    page.get_by_role("button", name="Preview").click()
    page.locator(".opening-label").first.wait_for()


def test_the_preview_shows_the_openings_in_3d_before_use(page):
    preview_vessel(page)
    # vtk.js draws into a canvas inside the preview's 3D holder (CSS pierces shadow roots).
    canvas = page.locator(".openings-3d canvas").first
    canvas.wait_for()
    wait_until(lambda: (canvas.bounding_box() or {}).get("height", 0) > 200, 60,
               "the 3D preview canvas to be drawn")
    page.get_by_text(re.compile("drag to turn")).first.wait_for()
    time.sleep(3)  # let vtk.js finish building the scene: errors would come now
    # A kind changed in the table recolours the disc (a scene sync in the browser).
    page.locator(".opening-row").filter(has=page.locator(
        '.opening-label[data-opening="2"]')).first.locator("select").first.select_option(
        "closed")
    time.sleep(3)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "vessel-openings-preview-3d.png"))
    assert page.errors == [], f"console errors: {page.errors}"


def test_the_vessel_sample_flows_in_the_browser(page):
    start = time.monotonic()
    preview_vessel(page)
    page.get_by_role("button", name="Use this geometry").click()
    page.get_by_text(re.compile("Simulating")).first.wait_for()
    page.get_by_text("Flow", exact=True).click()
    page.locator(".run-button", has_text="Start").first.click()
    wait_until(lambda: page.locator('[data-counter="mass-balance"]').count()
               and card(page, "mass-balance")[0] != "—", 90, "the flow cards")
    first_step = int(counter(page, "steps").replace(",", "") or 0)

    def settled() -> bool:
        steps = int(counter(page, "steps").replace(",", "") or 0)
        return steps > first_step + 200 and not card(page, "opening-3")[0].startswith("0 ")
    wait_until(settled, 120, "the run to go on for 200 steps", interval=1)
    inlet, outlets = card(page, "opening-1"), [card(page, f"opening-{i}") for i in (2, 3)]
    # The cards say which opening is the inlet, and their units.
    label = page.locator('[data-counter="opening-1"] .label').first.text_content()
    assert label == "Opening 1 · inlet", label
    assert re.fullmatch(r"[\d.e+-]+ (mL|µL)/s", inlet[0]) and inlet[1].endswith(" Pa"), inlet
    assert inlet[1].startswith("in · p"), inlet
    assert number(inlet[0]) > 0, inlet
    for value, detail in outlets:
        assert detail.startswith("out · p"), (value, detail)
        assert number(value) > 0, (value, detail)
    assert number(card(page, "pressure-drop")[0]) > 0, card(page, "pressure-drop")
    # Settled, not at a fixed step: pressure waves cross the vessel during the start, and how
    # many steps a reading lands after depends on the machine's speed (CI read -0.03 % then
    # -2.05 %, and once -5.98 % just after 200 steps): the balance must come within 5 % of the
    # inflow and stay there for SETTLED_READINGS readings.
    readings: list[float] = []

    def balanced() -> bool:
        readings.append(number(card(page, "mass-balance")[0]))
        recent = readings[-SETTLED_READINGS:]
        return len(recent) == SETTLED_READINGS and all(
            abs(b) < MAX_IMBALANCE_PERCENT for b in recent)
    try:
        wait_until(balanced, 240, "the mass balance to settle", interval=1)
    except pytest.fail.Exception:
        pytest.fail(f"the mass balance did not settle within {MAX_IMBALANCE_PERCENT} % of the "
                    f"inflow in 240 s; last readings (%): {readings[-10:]}")
    balance = readings[-1]
    peak = page.evaluate(SLICE_MAX)
    assert peak is not None and peak > 0, f"the velocity cut is {peak} in the lumen"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "vessel-flowing.png"))
    assert page.errors == [], f"console errors: {page.errors}"
    print(f"vessel flowing in the browser after {time.monotonic() - start:.0f} s, mass balance "
          f"{balance} %")
