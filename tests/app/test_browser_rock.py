"""The Rock tab's "Measure k (x, y, z)" in headless Chromium (issue 19 item 2): k along x, y
and z one after another with progress and the anisotropy ratio, on a tiny uploaded sample, as
commands on the session's runner; the session's own simulation goes on stepping after it."""

from __future__ import annotations

import re

import numpy as np
import pytest

from geometries import VoxelGeometry

from .test_browser import steps, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]


def _layers(path) -> bytes:
    """An open slab along x and y crossed along z by a narrow chimney (k_z << k_x = k_y)."""
    solid = np.ones((8, 8, 8), bool)
    solid[:, :, 2:6] = False
    solid[3:5, 3:5, :] = False
    VoxelGeometry(solid, voxel_size=1e-6, name="layers").save(path)
    return path.read_bytes()


def _tensor_text(page) -> str:
    """Text of the tensor pane (an HTML pane inside shadow roots)."""
    return page.evaluate("""() => {
        let found = '';
        const walk = root => root.querySelectorAll('*').forEach(e => {
            if (e.tagName === 'TABLE' && (e.textContent || '').includes('change per 1000'))
                found = e.parentElement.textContent;
            if (e.shadowRoot) walk(e.shadowRoot); });
        walk(document); return found; }""")


def _pane_text(page, marker: str) -> str:
    """Text of the HTML pane holding ``marker`` (inside shadow roots); '' when absent."""
    return page.evaluate("""marker => {
        let found = '';
        const walk = root => root.querySelectorAll('*').forEach(e => {
            if (e.tagName === 'TABLE' && (e.textContent || '').includes(marker))
                found = e.parentElement.textContent;
            if (e.shadowRoot) walk(e.shadowRoot); });
        walk(document); return found; }""", marker)


def test_measure_k_button_gives_the_tensor_and_keeps_the_run(chromium, served_app, tmp_path):
    context = chromium.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(120_000)  # the CI machine has 2 busy cores
    try:
        page.goto(served_app.url, timeout=180_000)
        wait_until(lambda: steps(page) > 0, 180, "the default case to start stepping")
        page.get_by_text("Geometry", exact=True).click()
        page.get_by_role("button", name="Upload").click()
        page.locator("input[type=file]").first.set_input_files(files=[
            {"name": "layers.npz", "mimeType": "application/octet-stream",
             "buffer": _layers(tmp_path / "layers.npz")}])
        page.get_by_text(re.compile("Ready: press")).first.wait_for(timeout=120_000)
        page.get_by_role("button", name="Use this geometry").click()
        page.get_by_text(re.compile("Simulating")).first.wait_for(timeout=60_000)
        page.get_by_text("Rock", exact=True).click()
        page.get_by_role("button", name="Measure k (x, y, z)").click()
        wait_until(lambda: "Measuring" in _tensor_text(page) or "Done." in _tensor_text(page),
                   60, "the tensor's progress table")
        before = steps(page)
        text = wait_until(lambda: (t := _tensor_text(page)) and "Done." in t and t, 400,
                          "the three axes to converge")
        assert text.count("converged") >= 3 and "not converged" not in text, text
        ratio = re.search(r"Anisotropy k_max/k_min = ([0-9.]+)", text)
        assert ratio and float(ratio.group(1)) > 2, text  # the chimney throttles k_z
        assert page.get_by_role("button", name="Measure k (x, y, z)").is_enabled()
        # Each k with its interval; F and F·φ per axis and the time of each part (issue 29).
        assert "interval (mD)" in text and "±" in text, text
        extras = wait_until(lambda: _pane_text(page, "formation factor F"), 60,
                            "the formation factor table")
        assert "electrical tortuosity" in extras and "Time: k x" in extras, extras
        assert page.get_by_text("JSON", exact=True).count() >= 1
        assert page.get_by_text("CSV", exact=True).count() >= 1
        # The session's simulation was never stopped or replaced: it kept stepping.
        wait_until(lambda: steps(page) > before, 60, "the running simulation to go on")
    finally:
        context.close()
