"""The lab and health panels in a real headless Chromium: what a person reads there.

Dark-mode health labels readable, the fixed 0–1 scale switch under each lens, the key hint's
arrows drawn at text size, menus that look like menus. Set ``ATTNVIZ_SHOTS=<folder>`` to keep
screenshots of each tab in light and dark mode.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import browser_or_skip  # noqa: E402

browser_or_skip()  # skips the module without Chromium, Playwright or gradio

SHOTS = os.environ.get("ATTNVIZ_SHOTS")
# WCAG contrast of each element's own text colour on its effective background.
CONTRAST = """(sel) => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const bg = (el) => { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
    if (c.length >= 3 && (c.length < 4 || c[3] > 0.5)) return c; } return [255, 255, 255]; };
  return Array.from(document.querySelectorAll(sel)).filter((el) => el.textContent.trim()).map((el) => {
    const a = lum(rgb(getComputedStyle(el).color)), b = lum(bg(el));
    return [el.textContent.trim().slice(0, 30), (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)];
  });
}"""
# width of the key hint's "→" against its font size
ARROW = """() => {
  const hint = document.getElementById('key-hint'), node = hint.firstChild;
  const i = node.textContent.indexOf('→'), r = document.createRange();
  r.setStart(node, i); r.setEnd(node, i + 1);
  return r.getBoundingClientRect().width / parseFloat(getComputedStyle(hint).fontSize);
}"""


def _open(browser, url, scheme: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1400}, color_scheme=scheme)
    page.set_default_timeout(120_000)
    page.goto(url)
    page.wait_for_function(
        "() => document.querySelector('#model-info')?.innerText.includes('running on')"
    )
    page.locator("#input-text textarea").fill("helloworld")
    page.locator("#run-btn").click()
    page.wait_for_function("() => window.AttnViz.drawn.step > 0")
    return page


def _shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_health_labels_read_in_both_modes(browser, url, scheme):
    page = _open(browser, url, scheme)
    try:
        assert page.evaluate("() => document.body.classList.contains('dark')") == (scheme == "dark")
        _shot(page, f"{scheme}-step")
        page.get_by_role("tab", name="Checkpoint health").click()
        page.locator("#health-btn").click()
        page.wait_for_selector("#health-report .finding", timeout=600_000)
        # the labels themselves ("✓ ok", "accuracy"), not only the line around them
        labels = page.evaluate(CONTRAST, "#health-report .finding .level, #health-report b")
        assert len(labels) >= 10 and min(c for _, c in labels) >= 4.5, sorted(
            labels, key=lambda x: x[1]
        )[:3]
        _shot(page, f"{scheme}-health")
    finally:
        page.close()


@pytest.mark.slow
def test_fixed_scale_switch_under_each_lens_and_the_key_hint(browser, url):
    page = _open(browser, url, "light")
    try:
        vmax = "() => document.querySelector('#heatmap-cross canvas')._vmax"
        # measured: 0.60 em in the theme's font (drawn tiny), 0.84 em in one that has arrows
        assert page.evaluate(ARROW) > 0.75
        menu = page.evaluate(
            "() => getComputedStyle(document.getElementById('lens-select')).backgroundImage"
        )
        assert menu.startswith("url(")  # a chevron: it reads as a menu
        page.locator("#fixed-scale").check()
        assert page.evaluate(vmax) == 1
        page.select_option("#lens-select", "rollout")
        page.wait_for_function("() => document.querySelector('.av-title')?.textContent")
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('.av-title'))"
            ".some(t => t.textContent.includes('rollout'))"
        )
        assert page.evaluate(vmax) == 1  # rollout rows sum to 1: the 0–1 scale applies
        page.select_option("#lens-select", "norms")
        page.wait_for_function(
            "() => Array.from(document.querySelectorAll('.av-title'))"
            ".some(t => t.textContent.includes('norms'))"
        )
        assert page.locator("#fixed-scale").is_disabled()
        assert "sizes" in page.locator("#fixed-note").inner_text()
        assert page.evaluate(vmax) != 1  # norms keep their own scale, and say so
        page.select_option("#lens-select", "weights")
        assert not page.locator("#fixed-scale").is_disabled()
        assert page.locator("#fixed-note").inner_text() == ""
    finally:
        page.close()


@pytest.mark.slow
def test_an_edited_input_is_noted_until_it_is_run(browser, url):
    page = _open(browser, url, "light")
    try:
        note = page.locator("#input-note")
        page.locator("#input-text textarea").fill("helloworl")
        page.wait_for_function(
            "() => document.querySelector('#input-note')?.innerText.includes('still show')"
        )
        assert "“helloworld”" in note.inner_text()
        page.locator("#step-btn").click()
        page.wait_for_function("() => !document.querySelector('#input-note').innerText.trim()")
    finally:
        page.close()
