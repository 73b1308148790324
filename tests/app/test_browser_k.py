"""The permeability card in the browser: the run monitor's convergence flag and estimate are
shown on the counters row (issue 19 item 3), not cut off."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

FLAGS = ("measuring", "not converged", "converged", "not an answer", "—")


def test_permeability_card_shows_the_convergence_flag(chromium, served_app):
    context = chromium.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    try:
        page.goto(served_app.url, timeout=180_000)
        card = page.locator('[data-counter="k"]').first
        card.wait_for(timeout=180_000)
        deadline = time.monotonic() + 120
        value = ""
        while time.monotonic() < deadline:
            value = (card.locator(".value").text_content() or "").strip()
            if value in FLAGS[:4]:
                break
            time.sleep(0.5)
        assert value in FLAGS[:4], f"permeability card shows {value!r}"
        detail = card.locator(".sub").text_content() or ""
        assert "1000 steps" in detail
        steps, box, pane = _boxes(page, card)
        assert abs(box["y"] - steps["y"]) < 1, "the card must sit on the counters row"
        assert box["y"] + box["height"] <= pane["y"] + pane["height"] + 1
    finally:
        context.close()


def _boxes(page, card, tries: int = 40):
    """Bounding boxes of the steps card, the k card and the card row. The cards' HTML is
    replaced on every refresh, so a box read during a swap is None: read again."""
    for _ in range(tries):
        boxes = (page.locator('[data-counter="steps"]').first.bounding_box(),
                 card.bounding_box(), page.locator(".cards").first.bounding_box())
        if all(b is not None for b in boxes):
            return boxes
        time.sleep(0.25)
    raise AssertionError(f"the counters row never showed all three boxes: {boxes}")
