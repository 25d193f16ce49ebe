"""The app in a real headless Chromium, as a person uses it.

Type, step to the end, heatmaps drawn with grey exactly where the recorded mask blocks;
every panel follows Back, scrub (mouse and keyboard), a new input and a model switch, also
when they happen while another tab is shown; the keyboard shortcuts; dark-mode text contrast.
Screenshots go to each test's temporary folder, or to the folder ``ATTNVIZ_SHOTS`` names (``ATTNVIZ_SHOTS=assets`` remakes the README's). No timings are
asserted here (``attnviz bench`` measures them).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import browser_or_skip  # noqa: E402

browser_or_skip()  # skips the module without Chromium, Playwright or gradio

from helpers import ALL_CONTRAST, SETTLED, launched_app, shots_folder  # noqa: E402

import attnviz  # noqa: E402  (after the skips)

TIMEOUT = 30_000  # ms; a 2-core machine that is also training is slow to draw

# Traces plotly.js built for the figure in a container (the labs still draw with plotly).
TRACES = """(sel) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot');
  if (!gd || !gd._fullData) return null;
  return gd._fullData.map(t => ({type: t.type, name: t.name,
                                 z: t.z ? Array.from(t.z, r => Array.from(r)) : null}));
}"""
TITLE_HAS = """([sel, text]) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot');
  return !!gd && !!gd._fullLayout && (gd._fullLayout.title.text || '').includes(text);
}"""
MESSAGE_HAS = """([sel, text]) => (document.querySelector(sel)?.innerText || '').includes(text)"""
# What a heatmap canvas shows at every cell's centre: 1 where the pixel is the masked grey.
GREY_CELLS = """(id) => {
  const c = document.querySelector('#' + id + ' canvas');
  const b = c._av[0], dpr = c.width / parseFloat(c.style.width);
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const out = [];
  for (let q = 0; q < b.mat.tq; q++) {
    const row = [];
    for (let k = 0; k < b.mat.tk; k++) {
      const x = Math.floor((b.x + (k + 0.5) * b.cell) * dpr);
      const y = Math.floor((b.y + (q + 0.5) * b.cell) * dpr);
      const i = (y * c.width + x) * 4;
      row.push(px[i] === 196 && px[i + 1] === 196 && px[i + 2] === 196 ? 1 : 0);
    }
    out.push(row);
  }
  return out;
}"""
# WCAG contrast of every visible text element's colour on its effective background.
CONTRAST = """(sel) => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const bg = (el) => { for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
    if (c.length >= 3 && (c.length < 4 || c[3] > 0.5)) return c; } return [255, 255, 255]; };
  const out = [];
  for (const el of document.querySelectorAll(sel)) {
    if (!el.offsetParent || !el.textContent.trim()) continue;
    const a = lum(rgb(getComputedStyle(el).color)), b = lum(bg(el));
    out.push([el.textContent.trim().slice(0, 30), (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)]);
  }
  return out;
}"""


def open_page(browser, url, **context):
    page = browser.new_page(viewport={"width": 1400, "height": 1600}, **context)
    page.set_default_timeout(TIMEOUT)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_function(
        "() => document.querySelector('#model-info')?.innerText.includes('running on')"
    )
    page.wait_for_function("() => window.AttnViz && document.querySelector('.av-root')")
    page.errors = errors
    return page


@pytest.fixture(scope="module")
def page(browser, url):
    page = open_page(browser, url)
    yield page
    assert page.errors == []
    page.close()


def output(page) -> str:
    return page.locator("#output-text textarea").input_value()


def wait_step(page, step: int, out: str | None = None) -> None:
    page.wait_for_function(f"() => window.AttnViz.drawn.step === {step}")
    if out is not None:
        page.wait_for_function(
            "(o) => document.querySelector('#output-text textarea').value === o", arg=out
        )


def title(page, kind: str) -> str:
    return page.locator(f"#heatmap-{kind} .av-title").inner_text()


def recorded(ckpt, text: str, steps: int):
    """The trace the model records when greedily decoding ``text`` for ``steps`` tokens."""
    cfg = ckpt.config
    src = np.array(ckpt.encode_source(text).ids)
    stepper = attnviz.GreedyStepper(ckpt.model, src, cfg.bos_id, cfg.eos_id)
    for _ in range(steps):
        stepper.step()
    return stepper.trace()


def test_type_step_to_the_end_and_heatmaps_render(page, tmp_path):
    page.locator("#input-text textarea").fill("helloworld")
    for n in range(1, 12):  # 10 letters, then EOS
        page.locator("#step-btn").click()
        wait_step(page, n)
    page.wait_for_function("() => document.querySelector('#status').innerText.includes('Done')")
    assert output(page) == "dlrowolleh"
    assert page.locator("#output-tokens .tok.newest").inner_text() == "<eos>"
    assert "step 11" in title(page, "cross") and "step 11" in title(page, "decoder_self")
    assert page.locator("#expected-tokens .tok").count() == 11  # dlrowolleh + <eos>
    assert page.locator("#expected-tokens .tok.mismatch").count() == 0
    for kind in ("encoder_self", "decoder_self", "cross"):
        assert page.locator(f"#heatmap-{kind} canvas").is_visible()
    dec = page.evaluate("() => window.AttnViz.maskedCells('decoder_self', 1)")
    assert len(dec) == 11 and dec[0][1] == 1 and dec[10][10] == 0  # BOS + 10 letters, causal
    bars = page.locator("#topk-plot .av-barrow")
    assert bars.count() >= 2 and "chosen" in bars.first.get_attribute("class")
    strip = page.locator("#output-tokens .tok .conf")  # the confidence strip: p of each token
    assert strip.count() == 11 and "step 1: p = " in page.locator(
        "#output-tokens .tok"
    ).first.get_attribute("title")
    page.screenshot(path=str(shots_folder(tmp_path) / "screenshot-main.png"), full_page=True)


def test_no_empty_room_under_the_buttons_and_no_empty_table(page):
    """Under the button row: one gap of the column, then the status line (hidden helpers and
    empty panels take no room); the Head ablation tab shows no table before heads are ranked."""
    room = page.evaluate(
        "() => document.querySelector('#status').getBoundingClientRect().top"
        " - document.querySelector('#beam-size').closest('.row').getBoundingClientRect().bottom"
    )
    assert room <= 17, room
    page.get_by_role("tab", name="Head ablation").click()
    page.wait_for_selector("#rank-btn")
    assert not page.locator("#rank-table").is_visible()
    assert page.locator("#tab-ablation table").count() == 0
    page.get_by_role("tab", name="Step through").click()


def test_every_heatmap_greys_exactly_the_recorded_mask(page, models_dir):
    wait_step(page, 11)
    trace = recorded(attnviz.load_checkpoint(models_dir / "reverse"), "helloworld", 11)
    for kind in ("encoder_self", "decoder_self", "cross"):
        for layer in (0, 1):
            want = trace.numpy(kind, layer, "mask")[0, 0].astype(int).tolist()
            assert page.evaluate(f"() => window.AttnViz.maskedCells('{kind}', {layer})") == want
            page.select_option(f"#heatmap-{kind} .av-layer", str(layer))
            page.select_option(f"#heatmap-{kind} .av-headsel", "H1")
            assert page.evaluate(GREY_CELLS, f"heatmap-{kind}") == want, (kind, layer)
    assert "layer 1 · head 1" in title(page, "cross")
    page.locator("#heatmap-cross canvas").scroll_into_view_if_needed()
    box = page.locator("#heatmap-cross canvas").bounding_box()
    cell = page.evaluate("() => document.querySelector('#heatmap-cross canvas')._av[0]")
    x, y = cell["x"] + 2.5 * cell["cell"], cell["y"] + 1.5 * cell["cell"]
    page.mouse.move(box["x"] + x, box["y"] + y)
    assert "→ key" in page.locator(".av-tip").inner_text()  # hover values come from the page
    vmax = "() => document.querySelector('#heatmap-cross canvas')._vmax"
    assert page.evaluate(vmax) < 1
    page.locator("#fixed-scale").check()  # one 0–1 scale for every figure
    assert page.evaluate(vmax) == 1
    page.locator("#fixed-scale").uncheck()
    with page.expect_download() as download:
        page.locator("#heatmap-cross .av-png").click()
    assert download.value.suggested_filename == "attnviz-heatmap-cross-L1-H1-step11.png"  # the view
    page.select_option("#heatmap-cross .av-headsel", "all heads")
    assert "all heads" in title(page, "cross")
    page.select_option("#heatmap-cross .av-headsel", "mean")


def test_back_scrub_and_reset_redraw_every_panel(page):
    page.locator("#back-btn").click()
    wait_step(page, 10, "dlrowolleh")
    assert "step 10" in title(page, "cross") and "step 10" in title(page, "decoder_self")
    assert "Done" not in page.locator("#status").inner_text()
    slider = page.locator("#step-slider input[type=range]")
    slider.focus()
    page.keyboard.press("ArrowLeft")  # the keyboard on the slider moves the page too
    wait_step(page, 9, "dlrowolle")
    assert "step 9" in title(page, "cross")
    assert "“e”" in page.locator("#topk-plot .av-title").inner_text()
    number = page.locator("#step-slider input[type=number]")
    number.fill("3")
    number.press("Enter")  # applies on Enter, not only on blur
    wait_step(page, 3, "dlr")
    assert "step 3" in page.locator("#heatmap-rows-cross .av-title").inner_text()
    page.locator("#reset-btn").click()
    wait_step(page, 0, "")
    assert page.locator("#heatmap-cross .av-empty").is_visible()
    page.locator("#run-btn").click()
    wait_step(page, 11, "dlrowolleh")


def test_keyboard_shortcuts_outside_text_fields(page):
    assert "→ or n Step" in page.locator("#key-hint").inner_text()
    page.locator("h1").first.click()  # focus outside any text field
    page.keyboard.press("Home")
    wait_step(page, 0, "")
    page.keyboard.press("ArrowRight")
    wait_step(page, 1, "d")
    page.keyboard.press("n")
    wait_step(page, 2, "dl")
    page.keyboard.press("ArrowLeft")
    wait_step(page, 1, "d")
    page.keyboard.press("b")
    wait_step(page, 0, "")
    page.keyboard.press("r")
    wait_step(page, 11, "dlrowolleh")
    page.locator("#input-text textarea").focus()
    page.keyboard.press("n")  # typing in the input is typing, not stepping
    assert page.locator("#input-text textarea").input_value() == "helloworldn"
    page.locator("#input-text textarea").fill("helloworld")


def test_a_new_input_replaces_every_panel(page):
    page.locator("#beam-btn").click()  # results computed for the old input ...
    page.wait_for_function(
        "() => document.querySelector('#beam-result').innerText.includes('“helloworld”')"
    )
    page.get_by_role("tab", name="Attribution").click()
    page.locator("#attr-btn").click()
    page.wait_for_function(
        "() => document.querySelector('#attr-message').innerText.includes('Explaining')"
    )
    page.get_by_role("tab", name="Step through").click()
    page.locator("#input-text textarea").fill("abc")
    page.locator("#step-btn").click()
    wait_step(page, 1, "c")
    page.wait_for_function("() => document.querySelector('#beam-result').innerText.trim() === ''")
    page.get_by_role("tab", name="Attribution").click()  # ... are gone, not shown as current
    assert "changed since" in page.locator("#attr-message").inner_text()
    # "Why this token" was never run: nothing of it can have changed
    assert "changed since" not in page.locator("#attr-vs-message").inner_text()
    assert page.locator("#attribution-src .js-plotly-plot").count() == 0
    page.get_by_role("tab", name="Step through").click()
    assert page.locator("#source-tokens .tok").all_inner_texts() == ["a", "b", "c"]
    assert page.locator("#expected-tokens .tok").all_inner_texts() == ["c", "b", "a", "<eos>"]
    assert page.evaluate("() => window.AttnViz.maskedCells('cross', 0)[0].length") == 3
    refused = "a" * 300
    page.locator("#input-text textarea").fill(refused)
    page.locator("#step-btn").click()
    page.wait_for_function("() => document.querySelector('#status').innerText.includes('at most')")
    assert "Ready" not in page.locator("#status").inner_text()
    assert page.locator("#source-tokens .tok").count() == 0 and output(page) == ""


def test_mask_lab_follows_the_step_and_the_input(page, tmp_path):
    page.locator("#input-text textarea").fill("helloworld")
    page.locator("#run-btn").click()
    wait_step(page, 11, "dlrowolleh")
    page.get_by_role("tab", name="Mask lab").click()
    page.wait_for_function(TITLE_HAS, arg=["#heatmap-mask", "input"])
    page.wait_for_function(TITLE_HAS, arg=["#mask-next", "step 11"])
    before = page.evaluate(TRACES, "#heatmap-mask")
    diff = next(t["z"] for t in before if t["name"] == "after - before")
    assert max(abs(x) for row in diff for x in row if x is not None) == 0
    page.locator("#causal-toggle input").check()
    page.wait_for_function(TITLE_HAS, arg=["#heatmap-mask", "Decoder masked self-attention"])
    page.wait_for_function(
        "() => document.querySelector('#mask-message').innerText.includes('Causal mask off')"
    )
    after = page.evaluate(TRACES, "#heatmap-mask")
    diff = next(t["z"] for t in after if t["name"] == "after - before")
    assert max(abs(x) for row in diff for x in row if x is not None) > 0.01
    page.screenshot(path=str(shots_folder(tmp_path) / "screenshot-mask-lab.png"), full_page=True)
    page.locator("#back-btn").click()  # the lab is shown: it reruns on the new step
    page.wait_for_function(TITLE_HAS, arg=["#mask-next", "step 10"])
    page.locator("#causal-toggle input").uncheck()
    page.locator("#input-text textarea").fill("abc")
    page.locator("#run-btn").click()  # a new input: the block choices are its tokens
    page.wait_for_function(TITLE_HAS, arg=["#heatmap-mask", "“abc”"])
    labels = page.locator("#block-tokens label").all_inner_texts()
    assert [x.strip() for x in labels] == ["0: a", "1: b", "2: c"]
    page.get_by_role("tab", name="Step through").click()


def test_model_switch_replaces_every_panel(page):
    page.get_by_role("tab", name="Step through").click()
    page.locator("#input-text textarea").fill("dcba")
    page.locator("#run-btn").click()
    wait_step(page, 5, "abcd")
    page.locator("#model-picker input").click()
    page.get_by_role("option", name="copy", exact=True).click()
    page.wait_for_function("() => document.querySelector('#model-info').innerText.includes('copy')")
    wait_step(page, 0, "")  # decoding restarts on the kept input, with the new model
    assert page.locator("#expected-tokens .tok").all_inner_texts() == ["d", "c", "b", "a", "<eos>"]
    page.locator("#step-btn").click()
    wait_step(page, 1, "d")
    page.locator("#model-picker input").click()
    page.get_by_role("option", name="reverse", exact=True).click()
    page.wait_for_function(
        "() => document.querySelector('#model-info').innerText.includes('reverse')"
    )
    wait_step(page, 0, "")


# Every panel of the step view, what it drew (data-drawn) and what the page holds now.
PANELS = ["topk-plot", "heatmap-rows-cross", "heatmap-rows-decoder", "heatmap-encoder_self",
          "heatmap-decoder_self", "heatmap-cross"]  # fmt: skip
DRAWN = """(ids) => {
  const root = document.querySelector('.av-root');
  const drawn = ids.map((id) => document.getElementById(id).dataset.drawn || '');
  return drawn.every((d) => d === root.dataset.state) && root.clientWidth > 0;
}"""
SHOWN = """(ids) => {
  const mat = (id) => { const c = document.querySelector('#' + id + ' canvas');
    if (!c || c.style.display === 'none' || !c._av) return null;
    const m = c._av[0].mat; return {xl: m.xl, yl: m.yl, z: Array.from(m.z)}; };
  return {state: document.querySelector('.av-root').dataset.state,
          titles: ids.map((id) => document.querySelector('#' + id + ' .av-title').innerText),
          encoder: mat('heatmap-encoder_self'), cross: mat('heatmap-cross'),
          decoder: mat('heatmap-decoder_self')};
}"""


def reference(ckpt, text: str, step: int):
    """(output text, trace) of the server's decoder on ``text`` after ``step`` steps."""
    stepper = ckpt.stepper(text)
    for _ in range(step):
        stepper.step()
    return ckpt.tgt_tokenizer.decode(stepper.tokens), stepper.trace()


def test_the_step_view_is_redrawn_after_actions_on_other_tabs(browser, url, models_dir):
    """Switch the model, type and Step, press n, Back or Reset on another tab: back on Step
    through, every heatmap and the next-token chart show the current model, input and step."""
    ckpts = {m: attnviz.load_checkpoint(models_dir / m) for m in ("reverse", "copy")}
    page = open_page(browser, url)
    textbox = page.locator("#input-text textarea")
    now = {"model": "reverse", "text": "helloworld", "step": 0}
    state = "() => document.querySelector('.av-root').dataset.state"

    def act(name: str) -> None:
        before = page.evaluate(state)
        if name == "model":
            now.update(model="copy" if now["model"] == "reverse" else "reverse", step=0)
            page.locator("#model-picker input").click()
            page.get_by_role("option", name=now["model"], exact=True).click()
        elif name == "input":
            now.update(text=now["text"][1:] + now["text"][0], step=1)
            textbox.fill(now["text"])
            page.locator("#step-btn").click()
        elif name in ("back", "reset"):
            now["step"] = now["step"] - 1 if name == "back" else 0
            page.locator(f"#{name}-btn").click()
        else:  # the n key, with the focus outside a text field
            now["step"] += 1
            page.locator("h1").first.click()
            page.keyboard.press("n")
        out, _ = reference(ckpts[now["model"]], now["text"], now["step"])
        page.wait_for_function(  # the event is done (on the hidden step view's state) ...
            """([before, step, out]) => {
              const s = document.querySelector('.av-root').dataset.state;
              return s !== before && s.endsWith('|' + step)
                && document.querySelector('#output-text textarea').value === out;
            }""",
            arg=[before, now["step"], out],
            timeout=120_000,  # a model switch waits for the tab's lab work queued before it
        )

    def check(where: str) -> None:
        page.get_by_role("tab", name="Step through").click()
        page.wait_for_function(DRAWN, arg=PANELS, timeout=10_000)
        shown = page.evaluate(SHOWN, PANELS)
        ckpt, step = ckpts[now["model"]], now["step"]
        _, trace = reference(ckpt, now["text"], step)
        src = page.locator("#source-tokens .tok").all_inner_texts()
        assert shown["encoder"]["xl"] == src, where
        enc = trace.numpy("encoder_self", ckpt.config.n_encoder_layers - 1)[0].mean(0)
        np.testing.assert_allclose(shown["encoder"]["z"], enc.ravel(), atol=1e-5, err_msg=where)
        if step == 0:
            assert shown["cross"] is None and shown["decoder"] is None, where
            assert page.locator("#heatmap-cross .av-empty").is_visible(), where
            assert shown["titles"][0] == "Next-token probabilities", where
            return
        last = ckpt.config.n_decoder_layers - 1
        for kind, key in (("cross", "cross"), ("decoder_self", "decoder")):
            want = trace.numpy(kind, last)[0].mean(0)  # [step, Tk]
            assert len(shown[key]["yl"]) == step, where
            np.testing.assert_allclose(shown[key]["z"], want.ravel(), atol=1e-5, err_msg=where)
        assert shown["titles"][0].startswith(f"step {step}:"), (where, shown["titles"])
        assert all(f"step {step}" in t for t in shown["titles"][1:3] + shown["titles"][4:])

    tabs = ("Export", "Checkpoint health", "Mask lab", "Alignment", "Attribution")
    try:
        textbox.fill(now["text"])
        page.locator("#step-btn").click()
        wait_step(page, 1)
        page.locator("#back-btn").click()
        wait_step(page, 0, "")
        for tab in tabs:
            for name in ("model", "n", "input", "n", "back", "reset"):
                page.get_by_role("tab", name=tab).click()
                act(name)
                check(f"{name} on {tab}: {now}")
        assert page.errors == []
    finally:
        page.close()


def readable(page, where: str) -> list:
    """Every visible text and mark of the page once its events are done, with its contrast."""
    page.wait_for_function(SETTLED)
    page.wait_for_timeout(300)  # an output fading back in after its event
    measured = page.evaluate(ALL_CONTRAST, None)
    assert len(measured) > 100, where  # the whole page, not a sample
    return [(where, *m) for m in measured]


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_every_text_and_mark_is_readable(browser, url, scheme, tmp_path):
    """Each tab with its results shown, in both themes: every text and mark on the page (the
    theme's labels and buttons, the what-if marks, the beam legend, the compare strip ...) is
    at least 4.5:1 on its real background, semi-transparent fills composited."""
    page = open_page(browser, url, color_scheme=scheme)
    try:
        assert page.evaluate("() => document.body.classList.contains('dark')") == (scheme == "dark")
        page.locator("#input-text textarea").fill("heLLo")  # unknown letters: their marks too
        page.locator("#step-btn").click()
        wait_step(page, 1)
        page.locator("#whatif-box").get_by_text("What if this head had looked elsewhere").click()
        page.wait_for_selector("#whatif-strip [data-src-pos]")
        page.locator("#whatif-strip [data-src-pos]").nth(0).click()
        page.wait_for_selector("#whatif-result .av-wi-compare")
        page.locator("#run-btn").click()
        page.wait_for_function("() => document.querySelector('#status').innerText.includes('Done')")
        page.locator("#beam-btn").click()
        page.wait_for_selector("#beam-tree .node")
        page.locator("#reference-text textarea").fill("ollhe")
        page.locator("#reference-btn").click()
        page.wait_for_selector("#reference-strip .ref-tok")
        found = readable(page, "Step through")
        if scheme == "dark":
            page.screenshot(
                path=str(shots_folder(tmp_path) / "screenshot-dark.png"), full_page=True
            )
        tabs = {
            "Mask lab": lambda: page.wait_for_function(TITLE_HAS, arg=["#heatmap-mask", "input"]),
            "Head ablation": lambda: (page.locator("#rank-btn").click(),
                                      page.wait_for_selector("#ablation-plot .js-plotly-plot")),
            "Attribution": lambda: (page.locator("#attr-btn").click(), page.wait_for_function(
                MESSAGE_HAS, arg=["#attr-message", "Explaining"])),
            "Checkpoint health": lambda: (page.locator("#health-btn").click(),
                                          page.wait_for_selector("#health-report .finding")),
            "Training playback": lambda: page.wait_for_function(
                TITLE_HAS, arg=["#playback-plot", "training step"]),
            "Alignment": lambda: page.wait_for_selector("#align-grid .av-aer.best"),
            "Compare": lambda: (page.locator("#compare-model input").click(),
                                page.get_by_role("option", name="copy", exact=True).click(),
                                page.wait_for_selector("#compare-token-strip .av-cmp-tok")),
        }  # fmt: skip
        for tab, show in tabs.items():
            page.get_by_role("tab", name=tab).click()
            show()
            found += readable(page, tab)
        worst = sorted((f for f in found if f[2] < 4.5), key=lambda f: f[2])
        assert not worst, worst[:8]
        assert page.errors == []
    finally:
        page.close()


def test_a_checkpoint_rewritten_on_disk_renews_the_header(browser, models_dir, tmp_path):
    import shutil

    folder = tmp_path / "rewritten"
    shutil.copytree(models_dir / "reverse", folder)
    with launched_app(folder) as (_, port):
        page = open_page(browser, f"http://127.0.0.1:{port}/")
        try:
            page.locator("#input-text textarea").fill("abc")
            page.locator("#run-btn").click()
            wait_step(page, 4, "cba")
            assert "exact match 1.000" in page.locator("#model-info").inner_text()
            ckpt = attnviz.load_checkpoint(folder)
            meta = {**ckpt.meta, "metrics": {"val_exact_match": 0.5}}
            attnviz.save_checkpoint(
                folder, ckpt.model, ckpt.src_tokenizer, ckpt.tgt_tokenizer, meta
            )
            page.locator("#back-btn").click()
            page.wait_for_function(
                "() => document.querySelector('#status').innerText.includes('changed on disk')"
            )
            wait_step(page, 0, "")  # decoding restarted on the new weights
            page.wait_for_function(
                "() => document.querySelector('#model-info').innerText.includes('exact match 0.500')"
            )
            assert page.errors == []
        finally:
            page.close()


def test_training_playback_plays(page):
    page.get_by_role("tab", name="Training playback").click()
    page.wait_for_function(TITLE_HAS, arg=["#playback-plot", "training step"])
    page.locator("#play-btn").click()
    page.wait_for_function("() => document.querySelector('#play-btn').innerText.includes('Pause')")
    page.wait_for_function(
        "() => +document.querySelector('#tab-playback input[type=number]').value >= 2",
        timeout=60_000,
    )
    page.locator("#play-btn").click()
    page.wait_for_function("() => document.querySelector('#play-btn').innerText.includes('Play')")
    page.get_by_role("tab", name="Step through").click()


def test_a_page_missing_rows_asks_for_everything(page):
    page.locator("#input-text textarea").fill("helloworld")
    page.locator("#run-btn").click()
    wait_step(page, 11, "dlrowolleh")
    epoch = page.evaluate("() => document.querySelector('.av-root').dataset.epoch")
    t0 = page.evaluate("() => window.AttnViz.drawn.t")
    page.evaluate(  # a reply that assumes rows this page never got
        "(e) => window.AttnViz.apply({started: true, epoch: e, full: false, from: 50, n: 60, step: 60})",
        epoch,
    )
    # resent in full by the server, drawn again (after t0: step 11 alone was already drawn)
    page.wait_for_function("(t0) => window.AttnViz.drawn.t > t0", arg=t0)
    wait_step(page, 11, "dlrowolleh")
    assert len(page.evaluate("() => window.AttnViz.maskedCells('cross', 0)")) == 11


def test_alignment_tab_opens_a_head_in_the_step_view(page, tmp_path):
    page.locator("#input-text textarea").fill("helloworld")
    page.locator("#run-btn").click()
    wait_step(page, 11, "dlrowolleh")
    page.get_by_role("tab", name="Alignment").click()  # computed when the tab opens
    # wait for this input's own result: the message names its output (a title or a grid left
    # from an earlier input would pass at once, with the message still "processing")
    page.wait_for_function(MESSAGE_HAS, arg=["#align-message", "aligned with “dlrowolleh”"],
                           timeout=120_000)  # fmt: skip
    page.wait_for_selector("#align-grid .av-aer.best")
    assert "AER on 40 test sentences" in page.locator("#align-message").inner_text()
    page.wait_for_function(TITLE_HAS, arg=["#align-links", "cross L"])
    page.screenshot(path=str(shots_folder(tmp_path) / "screenshot-alignment.png"), full_page=True)
    cell = page.locator("#align-grid [data-av-open='cross 0 2']")
    assert cell.inner_text().startswith("0.")
    cell.click()
    page.wait_for_function(  # the step view is shown, cross-attention on that head
        "() => document.querySelector('#heatmap-cross .av-title').innerText"
        ".includes('layer 0 · head 2')"
    )
    assert page.locator("#heatmap-cross canvas").is_visible()
    assert page.locator("#heatmap-cross .av-headsel").input_value() == "H2"
    page.locator("#input-text textarea").fill("abc")  # a new input: the tab's results go
    page.locator("#run-btn").click()
    wait_step(page, 4, "cba")
    page.get_by_role("tab", name="Alignment").click()  # ... and come back for it on opening
    page.wait_for_function(MESSAGE_HAS, arg=["#align-message", "aligned with “cba”"],
                           timeout=120_000)  # fmt: skip
    page.wait_for_function(TITLE_HAS, arg=["#align-links", "cross L"])
    page.get_by_role("tab", name="Step through").click()


def test_lens_switch_redraws_the_step_view_and_weights_stay_the_fast_path(page):
    page.locator("#input-text textarea").fill("helloworld")
    page.locator("#reset-btn").click()
    wait_step(page, 0, "")
    page.locator("#step-btn").click()
    wait_step(page, 1, "d")
    weights = page.evaluate(
        "() => Array.from(document.querySelector('#heatmap-cross canvas')._av[0].mat.z)"
    )
    page.select_option("#lens-select", "norms")  # asks the server once
    page.wait_for_function(
        "() => document.querySelector('#heatmap-cross .av-title').innerText.endsWith('step 1 · norms')"
    )
    norms = page.evaluate(
        "() => Array.from(document.querySelector('#heatmap-cross canvas')._av[0].mat.z)"
    )
    assert len(norms) == len(weights) and norms != weights
    page.locator("#step-btn").click()  # past what the page holds: it asks again
    page.wait_for_function(
        "() => document.querySelector('#heatmap-cross .av-title').innerText.endsWith('step 2 · norms')"
    )
    page.select_option("#lens-select", "weights")  # back on the page's own rows, no request
    assert title(page, "cross").endswith("step 2")
    page.locator("#step-btn").click()
    wait_step(page, 3, "dlr")
    assert title(page, "cross").endswith("step 3")


def test_clicking_a_candidate_forces_it_and_back_undoes_it(browser, url):
    page = open_page(browser, url)
    try:
        page.locator("#input-text textarea").fill("helloworld")
        for n in range(1, 4):
            page.locator("#step-btn").click()
            wait_step(page, n)
        wait_step(page, 3, "dlr")
        rows = page.locator("#topk-plot .av-barrow")
        assert "chosen" in rows.first.get_attribute("class")
        other = rows.nth(1)  # a candidate other than the top one
        token_id = other.get_attribute("data-token-id")
        label = other.locator(".av-bartok").inner_text()
        assert token_id and token_id.isdigit()
        other.click()
        page.wait_for_function(
            "() => document.querySelectorAll('#output-tokens .tok.forced').length === 1"
        )
        wait_step(page, 3, "dl" + label)
        mark = page.locator("#output-tokens .tok.forced")
        assert mark.inner_text() == label and "forced" in mark.get_attribute("title")
        assert "forced" in page.locator("#topk-plot .av-title").inner_text()
        page.locator("#step-btn").click()  # greedy on from the new prefix
        wait_step(page, 4)
        assert output(page).startswith("dl" + label) and len(output(page)) == 4
        for n in (3, 2):
            page.locator("#back-btn").click()
            wait_step(page, n)
        wait_step(page, 2, "dl")
        assert page.locator("#output-tokens .tok.forced").count() == 0
        page.locator("#step-btn").click()  # Back undid it: the argmax again
        wait_step(page, 3, "dlr")
        assert page.errors == []
    finally:
        page.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_reference_strip_beside_a_forced_token(browser, url, scheme, tmp_path):
    page = open_page(browser, url, color_scheme=scheme)
    try:
        page.locator("#input-text textarea").fill("helloworld")
        page.wait_for_function(  # pre-filled with the task's answer
            "() => document.querySelector('#reference-text textarea').value === 'dlrowolleh'"
        )
        for n in range(1, 3):
            page.locator("#step-btn").click()
            wait_step(page, n)
        page.locator("#topk-plot .av-barrow").nth(1).click()
        page.wait_for_function("() => document.querySelector('#output-tokens .tok.forced')")
        page.locator("#reference-text textarea").fill("dlrowollhe")
        page.locator("#reference-btn").click()
        page.wait_for_function(
            "() => document.querySelectorAll('#reference-strip .ref-tok').length === 11"
        )
        chips = page.locator("#reference-strip .ref-tok")
        marked = [i for i in range(11) if "diverge" in chips.nth(i).get_attribute("class")]
        assert marked == [8] and "rank" in chips.nth(8).get_attribute("title")
        assert "step 9" in page.locator("#reference-message").inner_text()
        page.wait_for_selector("#reference-attn .js-plotly-plot")
        worst = page.evaluate(CONTRAST, ".ref-tok, #reference-message, .tok")
        assert min(c for _, c in worst) >= 4.5, sorted(worst, key=lambda x: x[1])[:5]
        page.screenshot(path=str(tmp_path / f"force-reference-{scheme}.png"), full_page=True)
        assert page.errors == []
    finally:
        page.close()


def test_subword_pieces_marker_and_words_in_the_token_rows(browser, tmp_path):
    """A BPE model's pieces: the word-start ▁ is drawn small, subdued and off the probability
    strip; the words switch turns the Source and Output rows into words too."""
    import random

    from attnviz.train.loop import TrainOptions, train

    rng = random.Random(0)
    words = ["le", "chat", "noir", "sur", "la", "table", "grand", "arbre"]
    pairs = [(" ".join(w), " ".join(reversed(w))) for w in
             (rng.choices(words, k=rng.randint(2, 5)) for _ in range(80))]  # fmt: skip
    folder = tmp_path / "bpe-model"
    train(TrainOptions(out=str(folder), tokenizer="bpe", vocab_size=60, steps=2, eval_every=2,
                       d_model=32, n_heads=2, d_ff=64, batch_size=8),  # fmt: skip
          progress=False, pairs=pairs, dev_pairs=pairs[:4])  # fmt: skip
    text = "le chat noir"
    with launched_app(folder) as (_, port):
        page = open_page(browser, f"http://127.0.0.1:{port}/")
        try:
            page.locator("#input-text textarea").fill(text)
            for n in (1, 2, 3):
                page.locator("#step-btn").click()
                wait_step(page, n)
            marks = page.locator("#source-tokens .tok .av-ws")
            assert marks.count() >= 3  # one per word start
            style = page.evaluate(
                """() => { const m = document.querySelector('#source-tokens .tok .av-ws');
                  const c = m.parentElement, a = getComputedStyle(m), b = getComputedStyle(c);
                  return {mark: a.color, text: b.color, small: parseFloat(a.fontSize) < parseFloat(b.fontSize)}; }"""
            )
            assert style["mark"] != style["text"] and style["small"], style
            clear = page.evaluate(  # every output marker ends above its chip's strip
                """() => Array.from(document.querySelectorAll('#output-tokens .tok')).flatMap((c) => {
                  const m = c.querySelector('.av-ws'), s = c.querySelector('.conf');
                  return m && s ? [m.getBoundingClientRect().bottom <= s.getBoundingClientRect().top] : []; })"""
            )
            assert all(clear), clear
            page.locator(".av-tokens").screenshot(path=str(shots_folder(tmp_path) / "pieces.png"))
            pieces = page.locator("#source-tokens .tok").count()
            page.select_option("#unit-select", "words")
            page.wait_for_function(
                "(n) => document.querySelectorAll('#source-tokens .tok').length === n", arg=3
            )
            assert page.locator("#source-tokens .tok").all_inner_texts() == text.split()
            page.locator(".av-tokens").screenshot(path=str(shots_folder(tmp_path) / "words.png"))
            assert pieces >= 3 and "▁" not in "".join(
                page.locator("#output-tokens .tok").all_inner_texts()
            )
            page.select_option("#unit-select", "pieces")
            page.wait_for_function(
                "(n) => document.querySelectorAll('#source-tokens .tok').length === n", arg=pieces
            )
            assert page.errors == []
        finally:
            page.close()
