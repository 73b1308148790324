"""The openings of a vessel in headless Chromium: labelled rows after a preview, an opening
closed from its row reaches the config the solver gets (#18 item 4)."""

from __future__ import annotations

import re
import time

import pytest

from .conftest import ARTIFACTS, browser_missing
from .test_browser import served_page, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def page(chromium, tmp_path_factory):
    """A page on an app served paused (less CPU), on its Geometry tab."""
    if browser_missing():
        pytest.skip(browser_missing())
    with served_page(chromium, tmp_path_factory.mktemp("openings"),
                     {"POROUS_LBM_SCENE_REFRESH_S": "60", "POROUS_LBM_AUTOSTART": "0"}) as page:
        page.get_by_text("Geometry", exact=True).click()
        yield page


def row(page, opening: int):
    """The table row of one opening (Panel's rows live in shadow roots; CSS pierces them)."""
    return page.locator(".opening-row").filter(
        has=page.locator(f'.opening-label[data-opening="{opening}"]')).first


def lattice(page, opening: int) -> str:
    return row(page, opening).locator(".opening-lattice").first.text_content() or ""


def test_vessel_openings_are_listed_and_closing_one_changes_the_config(page):
    page.get_by_role("button", name="Sample").click()
    page.locator("select").filter(
        has=page.locator("option", has_text="vessel_bifurcation.stl")).first.select_option(
        "vessel_bifurcation.stl")
    page.get_by_role("button", name="Preview").click()
    page.locator(".opening-label").first.wait_for()
    labels = [t.strip() for t in page.locator(".opening-label").all_text_contents()]
    assert labels[0] == "1 (d 2 mm)"
    assert [re.match(r"(\d) \(d [\d.]+ mm\)", t).group(1) for t in labels] == ["1", "2", "3"]
    # Defaults: the largest is the velocity inlet, the others 0 Pa outlets.
    # Its lattice speed follows the tau chosen from the SI values (solver.lattice_parameters):
    # under the Mach 0.1 target, c_s = 1/sqrt(3).
    inlet = re.fullmatch(r"u\* ([\d.]+) uniform", lattice(page, 1))
    assert inlet and 0 < float(inlet.group(1)) <= 0.1 / 3**0.5
    assert lattice(page, 2) == "ρ* 1"
    kind = row(page, 2).locator("select").first
    assert kind.input_value() == "outlet pressure"
    kind.select_option("closed")
    wait_until(lambda: lattice(page, 2) == "closed", 60, "opening 2's config to be closed")
    wait_until(lambda: not row(page, 2).locator("input").first.is_visible(), 30,
               "a closed opening to take no value")
    assert lattice(page, 3) == "ρ* 1"
    page.get_by_role("button", name="Use this geometry").click()
    page.get_by_text(re.compile("Simulating")).first.wait_for()
    # The rows now edit the session's settings, and show what was applied.
    assert lattice(page, 2) == "closed"
    row(page, 3).locator("select").first.select_option("outflow")
    wait_until(lambda: lattice(page, 3) == "outflow", 60, "opening 3's config to be outflow")
    page.get_by_role("button", name=re.compile(r"Apply settings\s+•\s+changed")).wait_for()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "vessel-openings-table.png"))
    page.get_by_text("Flow", exact=True).click()
    time.sleep(3)
    page.screenshot(path=str(ARTIFACTS / "vessel-openings-3d.png"))
    assert page.errors == [], f"console errors: {page.errors}"
