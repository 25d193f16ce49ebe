"""The what-if panel and "why this token and not that one" in a real headless Chromium.

Open the step view's what-if panel, click a source token, see the comparison; force a token,
open the Attribution tab and see the contrastive attribution beside both attention rows. Set
``ATTNVIZ_SHOTS=<folder>`` to keep the screenshots (light and dark).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import browser_or_skip  # noqa: E402

browser_or_skip()  # skips the module without Chromium, Playwright or gradio

SHOTS = os.environ.get("ATTNVIZ_SHOTS")
# WCAG contrast of each element's own text colour on its effective background (the same
# measure as the other browser tests).
CONTRAST = """(sel) => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const blend = (el) => { let out = [255, 255, 255], stack = [];
    for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length >= 3 && (c.length < 4 || c[3] > 0)) { stack.push(c); if (c.length < 4 || c[3] >= 1) break; } }
    for (const c of stack.reverse()) { const a = c.length < 4 ? 1 : c[3]; out = out.map((v, i) => v * (1 - a) + c[i] * a); }
    return out; };
  return Array.from(document.querySelectorAll(sel)).filter((el) => el.textContent.trim()).map((el) => {
    const a = lum(rgb(getComputedStyle(el).color)), b = lum(blend(el));
    return [el.textContent.trim().slice(0, 30), (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)];
  });
}"""


def _open(browser, url, scheme: str, steps: int):
    page = browser.new_page(viewport={"width": 1400, "height": 1400}, color_scheme=scheme)
    page.set_default_timeout(120_000)
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(url)
    page.wait_for_function(
        "() => document.querySelector('#model-info')?.innerText.includes('running on')"
    )
    page.locator("#input-text textarea").fill("helloworld")
    for n in range(1, steps + 1):
        page.locator("#step-btn").click()
        page.wait_for_function(f"() => window.AttnViz.drawn.step === {n}")
    return page


def _shot(page, name: str, tmp_path: Path, selector: str | None = None) -> None:
    folder = Path(SHOTS) if SHOTS else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    target = page.locator(selector) if selector else page
    target.screenshot(path=str(folder / f"{name}.png"))


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_whatif_click_a_source_token_shows_the_comparison(browser, url, scheme, tmp_path):
    page = _open(browser, url, scheme, 1)
    try:
        page.locator("#whatif-box").get_by_text("What if this head had looked elsewhere").click()
        chips = page.locator("#whatif-strip [data-src-pos]")
        page.wait_for_function(
            "() => document.querySelectorAll('#whatif-strip [data-src-pos]').length === 10"
        )
        assert "step 1" in page.locator("#whatif-strip .av-wi-title").inner_text()
        chips.nth(0).click()  # every head of the last layer onto "h" at step 1
        page.wait_for_selector("#whatif-result .av-wi-compare")
        line = page.locator("#whatif-result .av-wi-compare").inner_text()
        assert line.startswith("“dlrowolleh” → “h") and "changed" in line
        changed = page.locator("#whatif-result td.changed")
        assert changed.count() >= 2 and "≠" in changed.first.inner_text()
        assert "p = " in changed.first.get_attribute("title")
        assert "av-wi-chosen" in chips.nth(0).get_attribute("class")
        worst = page.evaluate(CONTRAST, "#whatif-strip .av-wi-src, #whatif-result td")
        assert min(c for _, c in worst) >= 4.5, sorted(worst, key=lambda x: x[1])[:3]
        _shot(page, f"whatif-{scheme}", tmp_path, "#whatif-box")
        page.locator("#step-btn").click()  # the panel follows the step; the old result goes
        page.wait_for_function(
            "() => document.querySelector('#whatif-strip .av-wi-title')?.innerText.includes('step 2')"
        )
        page.wait_for_function("() => !document.querySelector('#whatif-result .av-wi-compare')")
        assert "step shown is now 2" in page.locator("#whatif-message").inner_text()
        assert page.errors == []
    finally:
        page.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_why_a_forced_token_and_not_the_models_choice(browser, url, scheme, tmp_path):
    page = _open(browser, url, scheme, 2)
    try:
        page.locator("#topk-plot .av-barrow").nth(1).click()  # force the runner-up
        page.wait_for_function("() => document.querySelector('#output-tokens .tok.forced')")
        forced = page.locator("#output-tokens .tok.forced").inner_text()
        page.get_by_role("tab", name="Attribution").click()
        alt = page.locator("#attr-alt input")
        page.wait_for_function(  # the default: the model's own choice at the forced step ("l")
            "() => (document.querySelector('#attr-alt input')?.value || '').startsWith('“l”')"
        )
        assert "id" in alt.input_value()
        page.locator("#attr-vs-btn").click()
        page.wait_for_selector("#attribution-contrast .js-plotly-plot", timeout=300_000)
        traces = page.evaluate(
            "() => document.querySelector('#attribution-contrast .js-plotly-plot').data"
            ".map((t) => t.name)"
        )
        assert traces == [
            "Integrated Gradients (contrast)",
            f"next step after “{forced}”",
            "next step after “l”",
        ]
        caption = page.locator("#attr-vs-message").inner_text()
        assert f"Why “{forced}”" in caption and "after feeding" in caption
        _shot(page, f"contrast-{scheme}", tmp_path, "#tab-attribution")
        assert page.errors == []
    finally:
        page.close()
