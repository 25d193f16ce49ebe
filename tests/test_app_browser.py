"""The app in a real headless Chromium: type, step to the end, heatmaps drawn, mask lab reacts.

This is also the check that figures made by our pinned plotly render in Gradio's bundled
plotly.js (typed-array encoding, heatmap traces, layouts). Screenshots go to ``assets/``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)
pytest.importorskip("gradio")

from tests.conftest import launched_app  # noqa: E402  (after the skips)

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "assets"
TIMEOUT = 30_000  # ms; a 2-core machine that is also training is slow to draw

# Traces plotly.js actually built for the figure in a container (null before it has drawn).
TRACES = """(sel) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot');
  if (!gd || !gd._fullData) return null;
  return gd._fullData.map(t => ({type: t.type, name: t.name,
                                 z: t.z ? Array.from(t.z, r => Array.from(r)) : null}));
}"""
TITLE_HAS = """([sel, text]) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot');
  return !!gd && !!gd._fullLayout && (gd._fullLayout.title.text || '').includes(text);
}"""


@pytest.fixture(scope="module")
def url():
    with launched_app() as (_, port):
        yield f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def page(url):
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.set_default_timeout(TIMEOUT)
        page.goto(url)
        page.wait_for_function(
            "() => document.querySelector('#model-info')?.innerText.includes('running on')"
        )
        yield page
        browser.close()


def output(page) -> str:
    return page.locator("#output-text textarea").input_value()


def test_type_step_to_the_end_and_heatmaps_render(page):
    page.locator("#input-text textarea").fill("helloworld")
    for n in range(1, 12):  # 10 letters, then EOS
        page.locator("#step-btn").click()
        if n <= 10:
            page.wait_for_function(
                f"() => document.querySelector('#output-text textarea').value.length == {n}"
            )
    page.wait_for_function("() => document.querySelector('#status').innerText.includes('Done')")
    assert output(page) == "dlrowolleh"
    assert page.locator("#output-tokens .tok.newest").inner_text() == "<eos>"
    page.wait_for_function(TITLE_HAS, arg=["#heatmap-cross", "step 11"])
    for kind in ("encoder_self", "decoder_self", "cross"):
        sel = f"#heatmap-{kind}"
        assert page.locator(f"{sel} .js-plotly-plot .main-svg").count() > 0
        traces = page.evaluate(TRACES, sel)
        assert traces and traces[0]["type"] == "heatmap", kind
        assert page.locator(f"{sel} .hm image, {sel} g.trace").count() > 0, kind
    dec = page.evaluate(TRACES, "#heatmap-decoder_self")
    assert [t["name"] for t in dec] == ["weights", "masked"]  # the causal mask drawn apart
    assert len(dec[0]["z"]) == 11  # BOS + 10 letters as query rows
    ticks = [t.text_content() for t in page.locator("#heatmap-decoder_self .ytick text").all()]
    assert ticks[:3] == ["<bos>", "d", "l"]
    assert page.evaluate(TRACES, "#topk-plot")[0]["type"] == "bar"
    page.screenshot(path=str(ASSETS / "screenshot-main.png"), full_page=True)


def test_back_and_reset_in_the_page(page):
    page.locator("#back-btn").click()
    page.wait_for_function(TITLE_HAS, arg=["#heatmap-cross", "step 10"])
    assert output(page) == "dlrowolleh"
    page.locator("#reset-btn").click()
    page.wait_for_function("() => document.querySelector('#output-text textarea').value === ''")
    page.locator("#run-btn").click()
    page.wait_for_function(
        "() => document.querySelector('#output-text textarea').value === 'dlrowolleh'"
    )


def test_mask_lab_causal_toggle_changes_the_view(page):
    page.get_by_role("tab", name="Mask lab").click()
    page.wait_for_function(TITLE_HAS, arg=["#heatmap-mask", "input"])
    before = page.evaluate(TRACES, "#heatmap-mask")
    diff = next(t["z"] for t in before if t["name"] == "after - before")
    assert max(abs(x) for row in diff for x in row if x is not None) == 0
    page.locator("#causal-toggle input").check()
    page.wait_for_function(TITLE_HAS, arg=["#heatmap-mask", "Decoder masked self-attention"])
    page.wait_for_function(
        "() => document.querySelector('#mask-message').innerText.includes('Causal mask off')"
    )
    after = page.evaluate(TRACES, "#heatmap-mask")
    diff = next(t["z"] for t in after if t["name"] == "after - before")
    assert max(abs(x) for row in diff for x in row if x is not None) > 0.01
    page.screenshot(path=str(ASSETS / "screenshot-mask-lab.png"), full_page=True)
