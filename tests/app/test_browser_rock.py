"""The Rock tab's "Measure k (x, y, z)" in headless Chromium (issue 19 item 2, issue 29 item 5):
k along x, y and z one after another with progress and the anisotropy ratio, on a small uploaded
TIFF, as commands on the session's runner, Stop and the exports; the session's own simulation
goes on stepping after it. One browser session for all of it: CI's browser time is the budget."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest

from .test_browser import steps, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]


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


def _tiff(solid: np.ndarray) -> bytes:
    """A uint8 0/255 TIFF stack (pages z, rows y) as a micro-CT export: 255 = grain."""
    import tifffile

    out = io.BytesIO()
    tifffile.imwrite(out, np.where(solid, 255, 0).astype(np.uint8).transpose(2, 1, 0))
    return out.getvalue()


def test_a_tiff_is_measured_stopped_measured_again_and_exported(chromium, served_app):
    """A user's TIFF stack (no voxel size in the file), measured with the defaults: Stop ends
    the measurement, the app stays usable and the JSON export says it is not converged;
    measured again, k along x, y and z with the anisotropy, each k in mD with its interval at
    the Physics tab's voxel size (the tab said nothing in mD before), F, the time of each part
    (issue 29), the CSV in m² and voxel², and the session's own run kept stepping."""
    from geometries.generators import random_sphere_pack

    # 20³: each axis runs long enough (seconds) for Stop to land inside the first measurement
    solid = random_sphere_pack((20, 20, 20), 0.35, diameter=8, seed=3).solid
    context = chromium.new_context(viewport={"width": 1500, "height": 1000},
                                   accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(120_000)
    try:
        page.goto(served_app.url, timeout=180_000)
        wait_until(lambda: steps(page) > 0, 180, "the default case to start stepping")
        page.get_by_text("Geometry", exact=True).click()
        page.get_by_role("button", name="Upload").click()
        page.locator("input[type=file]").first.set_input_files(files=[
            {"name": "pack.tif", "mimeType": "image/tiff", "buffer": _tiff(solid)}])
        page.get_by_text(re.compile("Ready: press")).first.wait_for(timeout=120_000)
        page.get_by_role("button", name="Use this geometry").click()
        page.get_by_text(re.compile("Simulating")).first.wait_for(timeout=60_000)
        page.get_by_text("Rock", exact=True).click()
        measure = page.get_by_role("button", name="Measure k (x, y, z)")
        measure.click()
        page.get_by_role("button", name="Stop measuring").click()
        text = wait_until(lambda: (t := _tensor_text(page)) and "Done." in t and t, 120,
                          "the stopped measurement to end")
        assert "cancelled" in text, text
        wait_until(measure.is_enabled, 30, "Measure to be enabled again")
        with page.expect_download() as download:
            page.get_by_text("JSON", exact=True).first.click()
        data = json.loads(Path(download.value.path()).read_text())
        assert data["converged"] is False and "cancelled" in str(data["axes"])
        measure.click()
        wait_until(lambda: "Measuring" in _tensor_text(page), 60, "the second measurement")
        before = steps(page)
        text = wait_until(lambda: (t := _tensor_text(page)) and "Done." in t and t, 400,
                          "k along x, y and z to converge")
        assert text.count("converged") >= 3 and "not converged" not in text, text
        ratio = re.search(r"Anisotropy k_max/k_min = ([0-9.]+)", text)
        assert ratio and float(ratio.group(1)) >= 1, text
        assert "interval (mD)" in text and "±" in text, text
        extras = wait_until(lambda: _pane_text(page, "formation factor F"), 60,
                            "the formation factor table")
        assert "electrical tortuosity" in extras and "Time: k x" in extras, extras
        x_row = text.split("Done.")[0]
        assert re.search(r"x\s*converged\s*\d+\s*[0-9.e+]+\s*\[", x_row), text  # k (mD), interval
        note = wait_until(lambda: _voxel_note(page), 30, "the voxel size note")
        assert "10 µm" in note and "Physics tab" in note, note
        with page.expect_download() as download:
            page.get_by_text("CSV", exact=True).first.click()
        table = Path(download.value.path()).read_text()
        rows = list(csv.reader(io.StringIO(table)))
        assert len(rows) > 1, (table, _tensor_text(page))
        header, x = rows[0], rows[1]
        k_voxel2 = float(x[header.index("k_voxel2")])
        assert float(x[header.index("k_m2")]) == pytest.approx(k_voxel2 * 1e-10)
        assert float(x[header.index("voxel_size_m")]) == pytest.approx(1e-5)
        # The session's simulation was never stopped or replaced: it kept stepping.
        wait_until(lambda: steps(page) > before, 60, "the running simulation to go on")
    finally:
        context.close()


def _voxel_note(page) -> str:
    """Text of the Rock tab's voxel-size note ('' before it is shown)."""
    return page.evaluate("""() => {
        let found = '';
        const walk = root => root.querySelectorAll('*').forEach(e => {
            if (e.tagName === 'P' && (e.className || '') === 'voxel-size') found = e.textContent;
            if (e.shadowRoot) walk(e.shadowRoot); });
        walk(document); return found; }""")
