"""A decoder-only model (models/induction) in a real headless Chromium.

The causal self-attention the page draws over prompt + generated tokens is the attention the
stepper recorded (read back from the drawn canvas, every layer and head), grey exactly above
the diagonal; the encoder and cross-attention panels are hidden with one sentence saying why;
switching to an encoder-decoder and back, while another tab is open, restores each panel;
the labs (head ranking, the health check) run on the one sequence's decoder_self heads.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import browser_or_skip  # noqa: E402

browser_or_skip()  # skips the module without Chromium, Playwright or gradio

from helpers import launched_app, shots_folder  # noqa: E402

import attnviz  # noqa: E402  (after the skips)
from attnviz.app.inputs import NOTES  # noqa: E402

TIMEOUT = 30_000
PROMPT = "qXb3LmZ7tRw2Kp9"
STEPS = 4
DRAWN = """(id) => { const b = document.querySelector('#' + id + ' canvas')._av[0];
  return {z: Array.from(b.mat.z), m: Array.from(b.mat.m), tq: b.mat.tq, tk: b.mat.tk,
          yl: b.mat.yl, xl: b.mat.xl}; }"""


@pytest.fixture(scope="module")
def url(models_dir):
    with launched_app(models_dir / "induction") as (_, port):
        yield f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def page(browser, url):
    from helpers import open_app_page

    page = open_app_page(browser, url, TIMEOUT)
    yield page
    assert page.errors == []
    page.close()


def wait_step(page, step: int) -> None:
    page.wait_for_function(f"() => window.AttnViz.drawn.step === {step}")


def pick_model(page, name: str) -> None:
    page.locator("#model-picker input").click()
    page.get_by_role("option", name=name, exact=True).click()
    page.wait_for_function(
        "(n) => document.querySelector('#model-info').innerText.includes(n)", arg=name
    )


def test_prompt_steps_and_the_causal_heatmap_is_the_recorded_attention(page, models_dir, tmp_path):
    ckpt = attnviz.load_checkpoint(models_dir / "induction")
    info = page.locator("#model-info").inner_text()
    assert "decoder-only, 2 layers" in info and "encoder +" not in info
    assert page.locator("#input-text label, #input-text span").first.inner_text() == "Prompt"
    page.locator("#input-text textarea").fill(PROMPT)
    for n in range(1, STEPS + 1):
        page.locator("#step-btn").click()
        wait_step(page, n)
    stepper = ckpt.stepper(PROMPT)
    for _ in range(STEPS):
        stepper.step()
    trace = stepper.trace()
    prompt = ckpt.encode_source(PROMPT).pieces
    out = [ckpt.tgt_tokenizer.token(t) for t in stepper.tokens]
    assert page.locator("#output-text textarea").input_value() == "".join(out)
    for layer in (0, 1):
        page.select_option("#heatmap-decoder_self .av-layer", str(layer))
        for h in range(ckpt.config.n_heads):
            page.select_option("#heatmap-decoder_self .av-headsel", f"H{h}")
            drawn = page.evaluate(DRAWN, "heatmap-decoder_self")
            want = trace.numpy("decoder_self", layer)[0, h]  # [T, T], T = P - 1 + STEPS
            t = len(prompt) - 1 + STEPS
            assert (drawn["tq"], drawn["tk"]) == want.shape == (t, t)
            z = np.array(drawn["z"]).reshape(t, t)
            m = np.array(drawn["m"]).reshape(t, t)
            np.testing.assert_allclose(z, want, atol=1e-3)
            upper = np.triu(np.ones((t, t), bool), 1)
            assert m[upper].all() and not m[~upper].any()  # the future, and only it, is grey
            assert (z[upper] == 0).all()
            # rows: the prompt (its last piece fed at the first step), then the output
            assert drawn["yl"] == [*prompt, *out[: STEPS - 1]] == drawn["xl"]
    assert (
        "layer 1 · head 3 · step 4" in page.locator("#heatmap-decoder_self .av-title").inner_text()
    )
    for kind in ("encoder_self", "cross"):
        assert not page.locator(f"#heatmap-{kind}").is_visible()
    assert not page.locator("#heatmap-rows-cross").is_visible()
    assert page.locator("#kind-note").inner_text() == NOTES["step"]
    assert page.locator("#source-label").inner_text() == "Prompt"
    assert not page.locator("#whatif-box").is_visible()
    assert page.locator("#kind-note-whatif").inner_text() == NOTES["whatif"]
    page.screenshot(path=str(shots_folder(tmp_path) / "decoder-only.png"), full_page=True)


def test_switching_kinds_with_another_tab_open_restores_every_panel(page, tmp_path):
    page.get_by_role("tab", name="Mask lab").click()
    page.wait_for_selector("#kind-note-mask", state="visible")
    assert page.locator("#kind-note-mask").inner_text() == NOTES["mask"]
    assert not page.locator("#block-tokens").is_visible()
    pick_model(page, "reverse")  # an encoder-decoder, while the Mask lab is shown
    page.wait_for_selector("#block-tokens", state="visible")
    assert not page.locator("#kind-note-mask").is_visible()
    page.get_by_role("tab", name="Alignment").click()
    page.wait_for_selector("#align-btn", state="visible")
    assert not page.locator("#kind-note-align").is_visible()
    page.get_by_role("tab", name="Step through").click()
    page.locator("#input-text textarea").fill("helloworld")
    page.locator("#step-btn").click()
    page.wait_for_function(
        "() => window.AttnViz.drawn.step === 1 && document.querySelector('#source-label')"
        ".innerText === 'Source'"
    )
    for kind in ("encoder_self", "decoder_self", "cross"):
        assert page.locator(f"#heatmap-{kind} canvas").is_visible()
    assert not page.locator("#kind-note").is_visible()
    assert page.locator("#whatif-box").is_visible()
    assert "2 encoder + 2 decoder layers" in page.locator("#model-info").inner_text()
    assert page.locator("#input-text label, #input-text span").first.inner_text() == "Input"
    page.get_by_role("tab", name="Head ablation").click()
    page.wait_for_selector("#ablate-btn", state="visible")
    assert "cross L0 H0" in page.locator("#ablate-heads").inner_text()
    pick_model(page, "induction")  # back, while Head ablation is shown: its own heads
    page.wait_for_function(
        "() => document.querySelector('#ablate-heads').innerText.includes('decoder_self L1 H3')"
        " && !document.querySelector('#ablate-heads').innerText.includes('cross')"
    )
    assert page.locator("#ablate-btn").is_visible()
    page.get_by_role("tab", name="Alignment").click()
    page.wait_for_selector("#kind-note-align", state="visible")
    for tab, button in (("Compare", "#compare-btn"), ("Export", "#export-json")):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_selector(button, state="visible")
    page.get_by_role("tab", name="Step through").click()
    page.locator("#step-btn").click()  # the kept input, on the decoder-only model
    page.wait_for_function(
        "() => window.AttnViz.drawn.step === 1 && document.querySelector('#source-label')"
        ".innerText === 'Prompt'"
    )
    for kind in ("encoder_self", "cross"):
        assert not page.locator(f"#heatmap-{kind}").is_visible()
    assert page.locator("#heatmap-decoder_self canvas").is_visible()
    assert page.locator("#kind-note").inner_text() == NOTES["step"]
    page.screenshot(path=str(shots_folder(tmp_path) / "decoder-only-back.png"), full_page=True)


def test_ranking_and_health_render_the_decoder_self_heads(page, tmp_path):
    page.get_by_role("tab", name="Step through").click()
    page.locator("#input-text textarea").fill(PROMPT)
    page.locator("#step-btn").click()
    page.wait_for_function("() => window.AttnViz.drawn.step >= 1")
    page.get_by_role("tab", name="Head ablation").click()
    page.locator("#rank-btn").click()
    page.wait_for_selector("#rank-table", state="visible")
    page.wait_for_function(
        "() => document.querySelector('#ablate-message').innerText.includes('Each head zeroed alone')"
    )
    table = page.locator("#rank-table").inner_text()
    assert "decoder_self L" in table and "cross" not in table
    page.wait_for_selector("#ablation-plot .js-plotly-plot")
    page.get_by_role("tab", name="Checkpoint health").click()
    page.locator("#health-btn").click()
    page.wait_for_selector("#health-report .health")
    page.wait_for_selector("#health-heads .js-plotly-plot")
    assert "Health check passed" in page.locator("#health-report").inner_text()
    assert "⚠ " not in page.locator("#health-report p").first.inner_text()
    page.screenshot(path=str(shots_folder(tmp_path) / "decoder-only-health.png"), full_page=True)
