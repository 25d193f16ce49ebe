"""A long input in a real headless Chromium: step it, zoom and pan, switch to words.

The page asks for the encoder layer/head it shows; what it draws under zoom is the recorded
weights (read back cell by cell, colour checked pixel by pixel); words mode pools pieces by
the alignment rule and its rows sum to 1. No timings are asserted (``attnviz bench``).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import numpy as np
import pytest
from helpers import browser_or_skip  # noqa: E402

browser_or_skip()  # skips the module without Chromium, Playwright or gradio

from helpers import launched_app, small_long_checkpoint, stepped_page  # noqa: E402

from attnviz.analysis.words import pool_words, word_index  # noqa: E402
from attnviz.app import session  # noqa: E402
from attnviz.app.decoders import DECODERS  # noqa: E402
from attnviz.bench.app import long_text  # noqa: E402

TIMEOUT = 60_000
N = 300  # tokens: past the size whose every encoder layer and head comes with the first Step
SHOTS = Path(os.environ.get("ATTNVIZ_SHOTS", "")) if os.environ.get("ATTNVIZ_SHOTS") else None

# Every cell centre of a panel's first box: [q, k, value, masked, r, g, b] as drawn.
DRAWN = """(id) => {
  const c = document.querySelector('#' + id + ' canvas');
  const b = c._av[0], dpr = c.width / parseFloat(c.style.width), r = c.getBoundingClientRect();
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const out = [];
  for (let y = b.y + b.ch / 2; y < b.y + b.h; y += b.ch * 3)
    for (let x = b.x + b.cell / 2; x < b.x + b.w; x += b.cell * 5) {
      const p = window.AttnViz.probe(id, x, y);
      const i = (Math.floor(y * dpr) * c.width + Math.floor(x * dpr)) * 4;
      out.push([p.q, p.k, p.value, p.masked, px[i], px[i + 1], px[i + 2], ...window.AttnViz.colourOf(p.value, p.vmax)]);
    }
  return {cells: out, zoom: c._zoom, title: b.title};
}"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return small_long_checkpoint(tmp_path_factory.mktemp("long") / "m")


@pytest.fixture(scope="module")
def app(model, browser):
    with launched_app(model) as (_, port):
        yield browser, f"http://127.0.0.1:{port}/"


def _stepped(app, steps: int, **context):
    browser, url = app
    return stepped_page(browser, url, long_text(N), steps, TIMEOUT, **context)


@pytest.fixture(scope="module")
def page(app):
    page = _stepped(app, 3)
    yield page
    assert page.errors == []
    page.close()


def _recorded(model, layer):
    """The encoder weights [H, Ts, Ts] and mask of the same input, decoded on the server."""
    state = session.step(session.new_state(str(model)), long_text(N)).state
    with DECODERS.hold(state, session.checkpoint_of(state), state.version) as stepper:
        tr = stepper.encoder_trace
        return tr.numpy("encoder_self", layer)[0], tr.numpy("encoder_self", layer, "mask")[0, 0]


def _drawn_is_recorded(page, id, want, masked):
    got = page.evaluate(DRAWN, id)
    assert len(got["cells"]) > 20
    for q, k, value, is_masked, r, g, b, *colour in got["cells"]:
        assert is_masked == bool(masked[q, k])
        assert np.float32(value) == want[q, k], (q, k)
        assert [r, g, b] == (([196, 196, 196]) if is_masked else colour), (q, k)
    return got


def test_a_long_input_asks_for_the_encoder_head_it_shows(page, model):
    w, m = _recorded(model, 1)
    page.wait_for_selector("#heatmap-encoder_self canvas", state="visible")
    _drawn_is_recorded(page, "heatmap-encoder_self", w.mean(0), m)
    page.select_option("#heatmap-encoder_self .av-headsel", "H2")  # not on the page yet: asked for
    page.wait_for_function("() => document.querySelector('#heatmap-encoder_self .av-title').textContent.includes('head 2')")  # fmt: skip
    page.wait_for_selector("#heatmap-encoder_self canvas", state="visible")
    _drawn_is_recorded(page, "heatmap-encoder_self", w[2], m)


def test_zoom_and_pan_draw_the_recorded_cells_crisply(page, model):
    w, m = _recorded(model, 1)
    panel = "#heatmap-encoder_self"
    page.select_option(f"{panel} .av-headsel", "H1")
    page.wait_for_function("() => document.querySelector('#heatmap-encoder_self .av-title').textContent.includes('head 1')")  # fmt: skip
    page.wait_for_selector(f"{panel} canvas", state="visible")
    before = page.evaluate(
        "() => document.querySelector('#heatmap-encoder_self canvas')._av[0].cell"
    )
    for _ in range(3):
        page.locator(f"{panel} .av-zoom", has_text="+").click()
    got = _drawn_is_recorded(page, "heatmap-encoder_self", w[1], m)
    assert got["zoom"]["z"] == 8
    k0, q0 = got["zoom"]["k0"], got["zoom"]["q0"]  # zoomed about the centre
    cell = page.evaluate("() => document.querySelector('#heatmap-encoder_self canvas')._av[0].cell")
    assert cell == 8 * before and float(cell).is_integer()  # whole pixels per cell: crisp
    # pan: drag the view 10 cells left and 4 up
    page.locator(f"{panel} canvas").scroll_into_view_if_needed()
    box = page.locator(f"{panel} canvas").bounding_box()
    b = page.evaluate("() => { const b = document.querySelector('#heatmap-encoder_self canvas')._av[0]; return [b.x, b.y, b.w, b.h]; }")  # fmt: skip
    x, y = box["x"] + b[0] + b[2] / 2, box["y"] + b[1] + b[3] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - 10 * cell, y - 4 * cell, steps=5)
    # the tip follows the pan: it names the cell now under the pointer, not the one grabbed
    under = page.evaluate(
        "([x, y]) => { const c = document.querySelector('#heatmap-encoder_self canvas');"
        " const r = c.getBoundingClientRect(); return window.AttnViz.probe("
        "'heatmap-encoder_self', x - r.left, y - r.top); }",
        [x - 10 * cell, y - 4 * cell],
    )
    assert f"query {under['q']} " in page.locator(".av-tip").inner_text()
    assert f"key {under['k']} " in page.locator(".av-tip").inner_text()
    page.mouse.up()
    got = _drawn_is_recorded(page, "heatmap-encoder_self", w[1], m)
    assert (got["zoom"]["k0"], got["zoom"]["q0"]) == (k0 + 10, q0 + 4)
    # the mouse wheel zooms the cross-attention heatmap around the pointer
    page.locator("#heatmap-cross canvas").scroll_into_view_if_needed()
    cross = page.locator("#heatmap-cross canvas").bounding_box()
    c = page.evaluate("() => { const b = document.querySelector('#heatmap-cross canvas')._av[0]; return [b.x + b.w / 3, b.y + b.h / 2]; }")  # fmt: skip
    page.mouse.move(cross["x"] + c[0], cross["y"] + c[1])
    page.mouse.wheel(0, -100)
    page.wait_for_function("() => document.querySelector('#heatmap-cross canvas')._zoom.z === 2")
    for _ in range(4):  # five notches in all: 1-2-3-4-5-6 (about 1.25x a notch), not x32
        page.mouse.wheel(0, -100)
    page.wait_for_function("() => document.querySelector('#heatmap-cross canvas')._zoom.z === 6")
    if SHOTS:
        page.screenshot(path=str(SHOTS / "long-zoomed-light.png"), full_page=True)
    page.locator(f"{panel} .av-zoom", has_text="1:1").click()
    assert (
        page.evaluate("() => document.querySelector('#heatmap-encoder_self canvas')._zoom.z") == 1
    )


def test_words_mode_pools_pieces_and_rows_sum_to_one(page, model):
    page.select_option("#unit-select", "words")
    page.wait_for_function("() => document.querySelector('#heatmap-cross .av-title').textContent.includes('words')")  # fmt: skip
    state = session.step(session.step(session.step(session.new_state(str(model)), long_text(N)).state).state).state  # fmt: skip
    ckpt = session.checkpoint_of(state)
    with DECODERS.hold(state, ckpt, state.version) as stepper:
        trace = stepper.trace(upto=3)
        w = trace.numpy("cross", 0)[0].mean(0)  # [3, Ts]
        mask = trace.numpy("cross", 0, "mask")[0, 0]
    sw = word_index(state.src_pieces, "char")
    tok = ckpt.tgt_tokenizer
    tw = word_index([tok.token(ckpt.config.bos_id), *(tok.token(t) for t in state.tokens[:2])], "char")  # fmt: skip
    want, want_mask = pool_words(w, mask, tw, sw)
    got = page.evaluate("() => window.AttnViz.matrixOf('cross', 0, -1)")
    z = np.array(got["z"], np.float32).reshape(got["tq"], got["tk"])
    np.testing.assert_allclose(z, want, rtol=1e-5, atol=1e-7)
    assert np.array(got["m"], bool).reshape(z.shape).tolist() == want_mask.tolist()
    np.testing.assert_allclose(z.sum(1), 1.0, rtol=1e-5)
    assert got["tk"] == max(sw) + 1 and got["tk"] < N / 3  # words, not pieces
    # the causal mask pools too: a word cell is masked where every piece cell under it is
    dw = trace.numpy("decoder_self", 0)[0].mean(0)  # [3, 3]
    dm = trace.numpy("decoder_self", 0, "mask")[0, 0]
    want_d, want_dm = pool_words(dw, dm, tw, tw)
    dec = page.evaluate("() => window.AttnViz.matrixOf('decoder_self', 0, -1)")
    np.testing.assert_allclose(
        np.array(dec["z"]).reshape(want_d.shape), want_d, rtol=1e-5, atol=1e-7
    )
    assert np.array(dec["m"], bool).reshape(want_dm.shape).tolist() == want_dm.tolist()
    enc = page.evaluate("() => window.AttnViz.matrixOf('encoder_self', 1, 1)")
    ez = np.array(enc["z"]).reshape(enc["tq"], enc["tk"])
    np.testing.assert_allclose(ez.sum(1), 1.0, rtol=1e-5)
    # the CSV export follows the switch: the word matrix drawn, a masked cell empty
    text = page.evaluate(
        "() => window.AttnViz.csv(document.querySelector('#heatmap-cross canvas'))"
    )
    rows = list(csv.reader(io.StringIO(text)))
    shown = page.evaluate("() => window.AttnViz.matrixOf('cross', 1, -1)")
    assert rows[0][1:] == shown["xl"] and [r[0] for r in rows[1:]] == shown["yl"]
    cells = np.array([[float(x) if x else np.nan for x in r[1:]] for r in rows[1:]])
    want = np.array(shown["z"]).reshape(shown["tq"], shown["tk"])
    np.testing.assert_array_equal(np.isnan(cells), np.array(shown["m"], bool).reshape(want.shape))
    np.testing.assert_array_equal(np.nan_to_num(cells), np.where(np.isnan(cells), 0, want))
    if SHOTS:
        page.screenshot(path=str(SHOTS / "long-words-light.png"), full_page=True)
    page.select_option("#unit-select", "pieces")


def test_the_model_view_draws_downsampled_thumbnails(page):
    page.locator("#model-view summary").click()
    page.select_option("#heatmap-model .av-modelkind", "encoder_self")
    page.wait_for_selector("#heatmap-model canvas", state="visible")
    page.wait_for_function("() => (document.querySelector('#heatmap-model canvas')._av || []).length === 8")  # fmt: skip
    boxes = page.evaluate("() => document.querySelector('#heatmap-model canvas')._av.map(b => [b.mat.tq, b.mat.tk])")  # fmt: skip
    assert all(tq <= 64 and tk <= 64 for tq, tk in boxes)
    cross = page.select_option("#heatmap-model .av-modelkind", "cross")
    assert cross == ["cross"]
    boxes = page.evaluate("() => document.querySelector('#heatmap-model canvas')._av.map(b => [b.mat.tq, b.mat.tk])")  # fmt: skip
    assert all(tk <= 64 for _, tk in boxes)
    if SHOTS:
        page.screenshot(path=str(SHOTS / "long-model-view-light.png"), full_page=True)


def test_dark_mode_zoomed_and_in_words(app):
    page = _stepped(app, 2, color_scheme="dark")
    try:
        assert page.evaluate("() => document.body.classList.contains('dark')")
        page.wait_for_selector("#heatmap-encoder_self canvas", state="visible")
        for _ in range(2):
            page.locator("#heatmap-encoder_self .av-zoom", has_text="+").click()
        page.select_option("#unit-select", "words")
        page.wait_for_function("() => document.querySelector('#heatmap-encoder_self .av-title').textContent.includes('words')")  # fmt: skip
        page.locator("#heatmap-encoder_self .av-zoom", has_text="+").click()
        assert page.evaluate("() => document.querySelector('#heatmap-encoder_self canvas')._zoom.z") == 2  # fmt: skip
        # the canvas background is the dark card's, not white
        corner = page.evaluate("() => Array.from(document.querySelector('#heatmap-encoder_self canvas').getContext('2d').getImageData(1, 1, 1, 1).data)")  # fmt: skip
        assert sum(corner[:3]) < 200
        if SHOTS:
            page.screenshot(path=str(SHOTS / "long-words-zoomed-dark.png"), full_page=True)
        assert page.errors == []
    finally:
        page.close()
