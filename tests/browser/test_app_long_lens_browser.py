"""Norms and rollout on a long input in a real headless Chromium.

The page asks for the encoder layer/head it shows through the lens picked (rollout: the
layer's one matrix) and the model view gets the lens's thumbnails, downsampled on the server;
what is drawn is :func:`attnviz.analysis.lens` of the recorded pass, read back cell by cell.
No timings are asserted (they are measured, not promised, here).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers import browser_or_skip  # noqa: E402

browser_or_skip()  # skips the module without Chromium, Playwright or gradio

from helpers import launched_app, small_long_checkpoint, stepped_page  # noqa: E402

from attnviz.analysis import lens  # noqa: E402
from attnviz.app import session  # noqa: E402
from attnviz.bench.app import long_text  # noqa: E402
from attnviz.core.record import record  # noqa: E402

TIMEOUT = 60_000
N = 300  # tokens: past the size whose every encoder layer and head comes with the first Step
STEPS = 3
SHOTS = Path(os.environ.get("ATTNVIZ_SHOTS", "")) if os.environ.get("ATTNVIZ_SHOTS") else None

# Every few cells of a panel's first box as the page shows them: [q, k, value, masked].
DRAWN = """(id) => {
  const c = document.querySelector('#' + id + ' canvas'), b = c._av[0], out = [];
  for (let y = b.y + b.ch / 2; y < b.y + b.h; y += b.ch * 3)
    for (let x = b.x + b.cell / 2; x < b.x + b.w; x += b.cell * 5) {
      const p = window.AttnViz.probe(id, x, y);
      out.push([p.q, p.k, p.value, p.masked]);
    }
  return out;
}"""
# the panel is drawn, through `name`, showing `part` in its title
SHOWN = """([id, name, part]) => { const c = document.querySelector('#' + id + ' canvas');
  return c && c.style.display !== 'none' && c._av && (c._title || '').includes(' · ' + name)
    && c._title.includes(part); }"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return small_long_checkpoint(tmp_path_factory.mktemp("longlens") / "m")


@pytest.fixture(scope="module")
def recorded(model):
    """The model and a teacher-forced pass over what the page decodes, recorded with values."""
    state = session.step(session.new_state(str(model)), long_text(N)).state
    for _ in range(STEPS - 1):
        state = session.step(state).state
    ckpt = session.checkpoint_of(state)
    src, tgt = (
        torch.tensor([state.src_ids]),
        torch.tensor([[ckpt.config.bos_id, *state.tokens[:-1]]]),
    )
    with torch.no_grad(), record(ckpt.model, capture=("weights", "mask", "values")) as trace:
        ckpt.model(src, tgt)
    return ckpt.model, trace


@pytest.fixture(scope="module")
def page(model, browser):
    with launched_app(model) as (_, port):
        page = stepped_page(browser, f"http://127.0.0.1:{port}/", long_text(N), STEPS, TIMEOUT)
        yield page
        assert page.errors == []
        page.close()


def _wait(page, id, name, part=""):
    page.wait_for_function(SHOWN, arg=[id, name, part])


def _drawn_is(page, id, want):
    cells = page.evaluate(DRAWN, id)
    assert len(cells) > 20
    for q, k, value, masked in cells:
        assert not masked
        assert abs(value - want[q, k]) <= 1e-6, (q, k, value, want[q, k])


def test_norms_then_rollout_draw_the_lens_of_the_recorded_pass(page, recorded):
    model, trace = recorded
    enc = "heatmap-encoder_self"
    page.select_option("#lens-select", "norms")
    _wait(page, enc, "norms")
    _wait(page, "heatmap-cross", "norms")
    assert page.locator("#lens-msg").inner_text().strip() == ""
    layer = int(page.locator(f"#{enc} .av-layer").input_value())
    assert page.locator(f"#{enc} .av-headsel").input_value() == "mean"
    _drawn_is(page, enc, lens(model, trace, "encoder_self", layer, "norms")[0].mean(0))
    page.select_option(f"#{enc} .av-headsel", "H2")  # not on the page yet: asked for
    _wait(page, enc, "norms", "head 2")
    _drawn_is(page, enc, lens(model, trace, "encoder_self", layer, "norms")[0, 2])
    cross = lens(model, trace, "cross", 1, "norms")[0]  # the cross panel: layer 1, mean
    assert page.locator("#heatmap-cross .av-layer").input_value() == "1"
    _drawn_is(page, "heatmap-cross", cross.mean(0))

    page.select_option("#lens-select", "rollout")
    _wait(page, enc, "rollout", "head 2")
    _drawn_is(page, enc, lens(model, trace, "encoder_self", layer, "rollout")[0, 0])
    page.select_option(f"#{enc} .av-layer", "0")
    _wait(page, enc, "rollout", "layer 0")
    _drawn_is(page, enc, lens(model, trace, "encoder_self", 0, "rollout")[0, 0])
    _wait(page, "heatmap-cross", "rollout")
    # back to norms: the page kept it for this decode, no request (encoder layer 0 is asked for)
    page.evaluate("() => { window.lensAsks = 0; document.querySelector('#lens-norms-btn').addEventListener('click', () => window.lensAsks++); }")  # fmt: skip
    page.select_option("#lens-select", "norms")
    _wait(page, enc, "norms", "layer 0")
    _drawn_is(page, enc, lens(model, trace, "encoder_self", 0, "norms")[0, 2])
    assert page.evaluate("() => window.lensAsks") == 0
    heap = page.evaluate("() => performance.memory.usedJSHeapSize")
    assert heap < 200e6, heap
    assert page.errors == []


def test_the_model_view_draws_the_lens_thumbnails_downsampled(page):
    page.select_option("#lens-select", "norms")
    _wait(page, "heatmap-encoder_self", "norms")
    page.locator("#model-view summary").click()
    page.select_option("#heatmap-model .av-modelkind", "encoder_self")
    page.wait_for_function(SHOWN, arg=["heatmap-model", "norms", "downsampled"])
    boxes = page.evaluate("() => document.querySelector('#heatmap-model canvas')._av.map(b => [b.mat.tq, b.mat.tk])")  # fmt: skip
    assert len(boxes) == 8 and all(tq <= 64 and tk <= 64 for tq, tk in boxes)
    assert "largest norm" in page.evaluate("() => document.querySelector('#heatmap-model canvas')._title")  # fmt: skip
    if SHOTS:
        page.screenshot(path=str(SHOTS / "long-lens-norms-light.png"), full_page=True)
    page.select_option("#lens-select", "rollout")
    page.wait_for_function(SHOWN, arg=["heatmap-model", "rollout", "downsampled"])
    boxes = page.evaluate("() => document.querySelector('#heatmap-model canvas')._av.length")
    assert boxes == 2  # one matrix per layer
    page.select_option("#lens-select", "weights")
    page.wait_for_function("() => !document.querySelector('#heatmap-model canvas')._title.includes('rollout')")  # fmt: skip
    assert page.errors == []
