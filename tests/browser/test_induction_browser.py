"""Induction heads forming, in the app: models/induction's Training playback shows layer 1's
self-attention on the repeated probe and, under it, the induction and previous-token scores
with the loss on each half over training, the snapshot shown marked.
``ATTNVIZ_SHOTS=assets`` remakes the README's figure of it."""

from __future__ import annotations

import pytest
from helpers import browser_or_skip  # noqa: E402

browser_or_skip()

from helpers import launched_app, shots_folder  # noqa: E402

from attnviz.train.snapshots import Snapshots  # noqa: E402

TIMEOUT = 60_000
CURVES = """() => {
  const gd = document.querySelector('#playback-curves .js-plotly-plot');
  if (!gd || !gd._fullData) return null;
  return {names: gd._fullData.map(t => t.name), x: Array.from(gd._fullData[2].x),
          y: Array.from(gd._fullData[2].y),
          marked: (gd._fullLayout.shapes || []).map(s => s.x0)};
}"""
TITLE_HAS = """([sel, text]) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot');
  return !!gd && !!gd._fullLayout && (gd._fullLayout.title.text || '').includes(text);
}"""


@pytest.fixture(scope="module")
def induction_url(models_dir):
    with launched_app(models_dir / "induction") as (_, port):
        yield f"http://127.0.0.1:{port}/"


def test_playback_draws_induction_scores_and_losses_on_one_time_axis(
    browser, induction_url, models_dir, tmp_path
):
    snaps = Snapshots.load(models_dir / "induction")
    at = snaps.steps.index(400)  # just after the phase change
    page = browser.new_page(viewport={"width": 1400, "height": 1400})
    page.set_default_timeout(TIMEOUT)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(induction_url)
        page.wait_for_function(
            "() => document.querySelector('#model-info')?.innerText.includes('running on')"
        )
        page.get_by_role("tab", name="Training playback").click()
        page.wait_for_function(TITLE_HAS, arg=["#playback-plot", "training step 0"])
        page.wait_for_function(
            "() => !!document.querySelector('#playback-curves .js-plotly-plot')?._fullData"
        )
        slider = page.locator("#tab-playback input[type=number]").first
        slider.fill(str(at))
        slider.press("Enter")
        page.wait_for_function(TITLE_HAS, arg=["#playback-plot", "training step 400"])
        page.wait_for_function(
            "(x) => { const gd = document.querySelector('#playback-curves .js-plotly-plot');"
            " return gd && (gd._fullLayout.shapes || []).some(s => s.x0 === x); }",
            arg=400,
        )
        got = page.evaluate(CURVES)
        assert got["names"] == ["loss on the repeat", "loss on the first run",
                                "induction score", "previous-token score"]  # fmt: skip
        assert got["x"] == snaps.steps
        best = [max(max(row) for row in s["induction"][1:]) for s in snaps.scores]
        assert got["y"] == pytest.approx(best, abs=1e-6)  # what training measured
        message = page.locator("#play-message").inner_text()
        assert "Best induction score" in message and "at step 400" in message
        page.locator("#tab-playback").screenshot(
            path=str(shots_folder(tmp_path) / "screenshot-induction.png")
        )
        assert errors == []
    finally:
        page.close()
