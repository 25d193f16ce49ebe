"""The README screenshot of the Similarity tab, in headless Chromium.

Launches the app (on the shipped reversal model), opens the Similarity tab (its one line for a
model that embeds nothing), picks the packaged ``all-MiniLM-L6-v2`` in the model menu, compares
three sentences and writes ``assets/screenshot-similarity.png``: the tab from its tab bar to
the ranking of B and C (1400 px wide). Run from the repository root:

    PYTHONPATH=$PWD .venv/bin/python assets/shoot_similarity.py [--out FILE] [--dark]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

SENTENCES = (
    "A cat sits on the mat by the window.",
    "A kitten is resting on a rug.",
    "Stock prices fell sharply this morning.",
)
#: page y of an element's top and bottom (a full-page clip is in page coordinates)
SPAN_JS = (
    "(s) => { const r = document.querySelector(s).getBoundingClientRect();"
    " return [r.top + window.scrollY, r.bottom + window.scrollY]; }"
)


def shoot(page, url: str, out: Path, dark: bool) -> None:
    """The tab opened, MiniLM picked, the sentences compared, the clip written to ``out``."""
    page.goto(url + ("?__theme=dark" if dark else ""))
    picked = "(() => { const i = document.querySelector('#model-picker input'); return i && i.value; })()"
    page.wait_for_function(picked, timeout=120_000)
    time.sleep(4)  # the page's load chain has set what the panels show
    tab = page.get_by_role("tab", name="Similarity")
    if tab.count():
        tab.click()
    else:  # the tab bar's overflow menu holds it
        page.click('button[aria-label="More tabs"]')
        page.locator(".overflow-menu button", has_text="Similarity").first.click()
    page.wait_for_selector("#similarity-note", state="visible", timeout=30_000)
    picker = page.locator("#model-picker input")
    picker.click()
    picker.fill("all-MiniLM")
    page.get_by_role("option", name="all-MiniLM-L6-v2").click()
    page.wait_for_selector("#similarity-a", state="visible", timeout=120_000)
    time.sleep(2)
    for box, text in zip("abc", SENTENCES, strict=True):
        page.fill(f"#similarity-{box} textarea", text)
    page.click("#similarity-btn")
    page.wait_for_selector("#similarity-ig .js-plotly-plot", timeout=120_000)
    time.sleep(1.5)
    top = page.evaluate(SPAN_JS, "#tabs")[0] - 8
    bottom = page.evaluate(SPAN_JS, "#similarity-rank")[1] + 12
    clip = {"x": 0, "y": top, "width": 1400, "height": bottom - top}
    page.screenshot(path=str(out), full_page=True, clip=clip)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "assets" / "screenshot-similarity.png"))
    ap.add_argument("--dark", action="store_true")
    args = ap.parse_args(argv)
    from helpers import CHROMIUM, launched_app
    from playwright.sync_api import sync_playwright

    with launched_app() as (_, port), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM))
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        shoot(page, f"http://127.0.0.1:{port}/", Path(args.out), args.dark)
        browser.close()
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
