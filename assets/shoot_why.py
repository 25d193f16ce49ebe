"""The README screenshot of the "Why this token" tab, in headless Chromium.

Launches the app on models/induction, Steps once after ``abcdefabcde`` (the model answers
``f``), opens the tab, draws the direct attribution, the logit lens, the patching of heads
against ``abcdxfabcde`` (noising) and the information flow, and writes
``assets/screenshot-why.png``. Run from the repository root:

    PYTHONPATH=$PWD .venv/bin/python assets/shoot_why.py [--dark] [--out FILE] [--full]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SHOWN = "(id) => { const e = document.querySelector(id); return e && e.offsetParent !== null; }"
# the tab bar's overflow button (the one without text), opening the tabs that do not fit
OPEN_TAB = """() => { const all = [...document.querySelectorAll('#tabs button')];
  const shown = (b) => b.offsetParent !== null && b.innerText.trim() === 'Why this token';
  if (all.some(shown)) return;
  const b = all.find((b) => !b.innerText.trim() && !b.className.includes('av-'));
  if (b) b.click(); }"""
# the tab from its top to the end of the section ``last`` (page coordinates)
BOX = """([first, last]) => { const a = document.querySelector(first).getBoundingClientRect(),
  b = document.querySelector(last).getBoundingClientRect(),
  t = document.querySelector('#tabs').getBoundingClientRect();
  return {x: t.left, y: a.top + window.scrollY - 8, width: t.width,
          height: b.bottom - a.top + 16}; }"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dark", action="store_true")
    ap.add_argument("--full", action="store_true", help="the whole tab, not the first panels")
    ap.add_argument("--out", default=str(ROOT / "assets" / "screenshot-why.png"))
    args = ap.parse_args()
    from helpers import launched_app
    from playwright.sync_api import sync_playwright

    from attnviz.bench.rows import CHROMIUM

    with launched_app(ROOT / "models" / "induction") as (_, port), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM))
        scheme = "dark" if args.dark else "light"
        page = browser.new_page(viewport={"width": 1600, "height": 1200}, color_scheme=scheme)
        page.set_default_timeout(120_000)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_function("() => window.AttnViz && document.querySelector('#model-info')?.innerText.includes('running on')")  # fmt: skip
        page.locator("#input-text textarea").fill("abcdefabcde")
        page.locator("#step-btn").click()
        page.wait_for_function("() => window.AttnViz.drawn.step === 1")
        tab = page.get_by_role("tab", name="Why this token")
        if tab.count():
            tab.click()
        else:  # past the tab bar's width: in its overflow menu
            page.evaluate(OPEN_TAB)
            page.get_by_role("button", name="Why this token").filter(visible=True).click()
        page.locator("#why-dla-btn").click()
        page.wait_for_function(SHOWN, arg="#why-dla-plot .js-plotly-plot")
        page.locator("#why-lens-btn").click()
        page.wait_for_function(SHOWN, arg="#why-lens-table")
        page.locator("#why-corrupted textarea").fill("abcdxfabcde")
        page.locator("#why-answer textarea").fill("f")
        page.locator("#why-wrong textarea").fill("x")
        page.locator("#why-what label:has-text('heads')").first.click()
        page.locator("#why-direction label:has-text('noising')").last.click()
        page.locator("#why-patch-btn").click()
        page.wait_for_function(SHOWN, arg="#why-patch-plot .js-plotly-plot")
        page.locator("#why-flow-btn").click()
        page.wait_for_function(SHOWN, arg="#why-flow-plot .js-plotly-plot")
        page.wait_for_timeout(800)
        for sel in ("#why-dla-message", "#why-lens-message", "#why-patch-message",
                    "#why-flow-message"):  # fmt: skip
            text = page.locator(sel).inner_text()
            print(sel, text[:160].replace("\n", " "))
            assert "⚠" not in text, text
        last = "#why-flow-plot" if args.full else "#why-patch-plot"
        page.screenshot(path=args.out, clip=page.evaluate(BOX, ["#why-versus", last]),
                        full_page=True)  # fmt: skip
        assert errors == [], errors
        print(f"wrote {args.out}")
        browser.close()


if __name__ == "__main__":
    main()
