"""An encoder-only model (a tiny random BERT saved as transformers saves it) in a real
headless Chromium.

Read draws the self-attention of fill_mask's own pass (read back from the drawn canvas, every
layer and head) and the fillers at the mask token; the decoding buttons, the what-if and
reference boxes are hidden with one sentence saying why, in light and dark.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import browser_or_skip  # noqa: E402

browser_or_skip()  # skips the module without Chromium, Playwright or gradio

from helpers import launched_app, shots_folder, tiny_bert  # noqa: E402

import attnviz  # noqa: E402  (after the skips)
from attnviz.analysis import fill_mask  # noqa: E402
from attnviz.app.inputs import ENCODER_NOTES  # noqa: E402

TIMEOUT = 30_000
TEXT = "the [MASK] sat on the mat"
DRAWN = """(id) => { const b = document.querySelector('#' + id + ' canvas')._av[0];
  return {z: Array.from(b.mat.z), m: Array.from(b.mat.m), tq: b.mat.tq, tk: b.mat.tk,
          yl: b.mat.yl, xl: b.mat.xl}; }"""


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    tiny_bert(folder)
    return folder


@pytest.fixture(scope="module")
def url(bert):
    with launched_app(bert) as (_, port):
        yield f"http://127.0.0.1:{port}/"


def open_page(browser, url, scheme):
    from helpers import open_app_page

    page = open_app_page(browser, url, TIMEOUT, color_scheme=scheme)
    return page, page.errors


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_read_draws_the_recorded_attention_and_the_fillers(browser, url, bert, scheme, tmp_path):
    ckpt = attnviz.load_checkpoint(bert)
    page, errors = open_page(browser, url, scheme)
    info = page.locator("#model-info").inner_text()
    assert "encoder-only, 2 layers, 4 heads, d_model 32" in info
    label = page.locator("#input-text label, #input-text span").first.inner_text()
    assert label == "Sentence (or a pair: first [SEP] second; [MASK] to fill)"
    for hidden in ("#step-btn", "#back-btn", "#reset-btn", "#beam-btn", "#step-slider",
                   "#output-text", "#whatif-box", "#reference-box"):  # fmt: skip
        assert not page.locator(hidden).is_visible(), hidden
    assert page.locator("#kind-note-decode").inner_text() == ENCODER_NOTES["decode"]
    assert page.locator("#kind-note-whatif").inner_text() == ENCODER_NOTES["whatif"]
    assert page.locator("#run-btn").inner_text().startswith("Read")
    page.locator("#input-text textarea").fill(TEXT)
    page.locator("#run-btn").click()
    page.wait_for_selector("#topk-plot .av-fillers")
    fill = fill_mask(ckpt, TEXT, k=5)
    for layer in (0, 1):
        page.select_option("#heatmap-encoder_self .av-layer", str(layer))
        for h in range(ckpt.config.n_heads):
            page.select_option("#heatmap-encoder_self .av-headsel", f"H{h}")
            drawn = page.evaluate(DRAWN, "heatmap-encoder_self")
            want = fill.trace.numpy("encoder_self", layer)[0, h]  # [T, T]
            t = len(fill.ids)
            assert (drawn["tq"], drawn["tk"]) == want.shape == (t, t)
            np.testing.assert_allclose(np.array(drawn["z"]).reshape(t, t), want, atol=1e-3)
            assert not any(drawn["m"])  # one sentence, no padding: nothing masked
            assert drawn["yl"] == fill.pieces == drawn["xl"]
    pos, top = fill.fillers[0]
    group = page.locator(f"#topk-plot .av-fillers[data-position='{pos}']")
    assert group.locator(".av-bartok").all_inner_texts() == [p for p, _ in top]
    values = [float(v) for v in group.locator(".av-barval").all_inner_texts()]
    np.testing.assert_allclose(values, [q for _, q in top], atol=1e-3)
    for kind in ("decoder_self", "cross"):
        assert not page.locator(f"#heatmap-{kind}").is_visible()
    assert page.locator("#kind-note").inner_text() == ENCODER_NOTES["step"]
    assert page.locator("#source-label").inner_text() == "Sentence"
    page.locator("#model-view summary").click()  # every layer x head of the one pass
    page.wait_for_function("() => document.querySelector('#heatmap-model canvas')?._av?.length")
    assert page.evaluate("() => document.querySelector('#heatmap-model canvas')._av.length") == 8
    page.screenshot(path=str(shots_folder(tmp_path) / f"encoder-only-{scheme}.png"), full_page=True)
    page.locator("#input-text textarea").fill("the cat sat [SEP] a dog ran")
    page.locator("#run-btn").click()
    page.wait_for_selector("#no-fill")
    assert page.locator("#no-fill").inner_text() == "no [MASK] in the input: nothing to fill"
    page.get_by_role("tab", name="Mask lab").click()
    page.wait_for_selector("#kind-note-mask", state="visible")
    assert page.locator("#kind-note-mask").inner_text() == ENCODER_NOTES["mask"]
    page.close()
    assert errors == []
