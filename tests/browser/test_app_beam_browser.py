"""The beam panel in a real headless Chromium: decode with beam 4, click a node of the tree, see
its hypothesis's attention rows, continue greedily from it in the step view.

Writes the README screenshot ``screenshot-beam.png`` (light mode) into the test's temporary
folder; set ``ATTNVIZ_SHOTS=<folder>`` to keep it and the dark-mode one
(``ATTNVIZ_SHOTS=assets`` remakes the README's).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import browser_or_skip, shots_folder  # noqa: E402

browser_or_skip()  # skips the module without Chromium, Playwright or gradio

from attnviz.app import store  # noqa: E402
from attnviz.decode.beam import beam_predict  # noqa: E402

SHOTS = os.environ.get("ATTNVIZ_SHOTS")
TEXT = "helloworld"
# WCAG contrast of each SVG node label's fill on its box's fill
NODE_CONTRAST = """() => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  return Array.from(document.querySelectorAll('#beam-tree .node')).flatMap((g) => {
    const box = lum(rgb(getComputedStyle(g.querySelector('.box')).fill));
    return Array.from(g.querySelectorAll('.tok, .lp, .score')).map((t) => {
      const a = lum(rgb(getComputedStyle(t).fill));
      return (Math.max(a, box) + 0.05) / (Math.min(a, box) + 0.05);
    });
  });
}"""


@pytest.fixture(scope="module")
def tree(models_dir):
    """The library's own search on the input, to hold the page to."""
    ckpt = store.get_checkpoint(str(models_dir / "reverse"))
    return ckpt, beam_predict(ckpt, TEXT, 4, return_tree=True).tree


def _open(browser, url, scheme: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1200}, color_scheme=scheme)
    page.set_default_timeout(120_000)
    page.goto(url)
    page.wait_for_function(
        "() => document.querySelector('#model-info')?.innerText.includes('running on')"
    )
    page.locator("#input-text textarea").fill(TEXT)
    page.locator("#step-btn").click()
    page.wait_for_function("() => window.AttnViz.drawn.step === 1")
    return page


def _decode_beam(page, n_nodes: int) -> None:
    page.locator("#beam-size input").fill("4")
    page.locator("#beam-btn").click()
    page.wait_for_function(
        f"() => document.querySelectorAll('#beam-tree [data-node-id]').length === {n_nodes}"
    )


def _shot(page, path: Path) -> None:
    """The beam panel: the tree, the selected node's attention and the files."""
    top = page.locator("#beam-result").bounding_box()
    bottom = page.locator("#beam-files").bounding_box()
    page.screenshot(
        path=str(path),
        clip={"x": 0, "y": top["y"] - 8, "width": 1400,
              "height": bottom["y"] + bottom["height"] - top["y"] + 16},
        full_page=True,
    )  # fmt: skip


def test_click_a_node_see_its_attention_and_continue_from_it(browser, url, tree, tmp_path):
    ckpt, t = tree
    page = _open(browser, url, "light")
    try:
        _decode_beam(page, len(t.nodes))
        best = page.evaluate(
            "() => Array.from(document.querySelectorAll('#beam-tree .node.best'))"
            ".map((g) => +g.dataset.nodeId)"
        )
        assert sorted(best) == [0, *(n.id for n in t.path(t.best))]
        # the tree scrolls inside its box, never widening the page
        assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        on_path = {0, *best}
        node = next(n for n in t.nodes if n.id not in on_path and n.step >= 2)
        tokens = t.tokens(node.id)
        page.locator(f'#beam-tree [data-node-id="{node.id}"]').click()
        page.wait_for_function(
            "() => document.querySelector('#beam-node-message')?.innerText.startsWith('Node')"
        )
        page.wait_for_selector("#beam-attn .js-plotly-plot")
        rows = page.evaluate(
            "() => document.querySelector('#beam-attn .js-plotly-plot')._fullData[0].z.length"
        )
        assert rows == len(tokens)  # one row (labelled) per token of the hypothesis
        assert page.locator(f'#beam-tree [data-node-id="{node.id}"].selected').count() == 1
        _shot(page, shots_folder(tmp_path) / "screenshot-beam.png")
        page.get_by_role("tab", name="Head ablation").click()  # continue from another tab
        page.locator("#beam-continue").click()
        want = ckpt.tgt_tokenizer.decode(tokens)
        page.wait_for_function(
            f"() => document.querySelector('#output-text textarea').value === {want!r}"
        )
        assert page.get_by_role("tab", name="Step through").get_attribute("aria-selected") == "true"
        page.wait_for_function(f"() => window.AttnViz.drawn.step === {len(tokens)}")
        assert page.locator("#output-tokens .tok.forced").count() >= 1  # marked as forced
        # the tree belongs to this decode: still shown; a new input clears it
        assert page.locator("#beam-tree [data-node-id]").count() == len(t.nodes)
        page.get_by_role("tab", name="Attribution").click()
        page.locator("#input-text textarea").fill("abc")
        page.locator("#step-btn").click()
        page.wait_for_function("() => document.querySelectorAll('#beam-tree .node').length === 0")
        page.get_by_role("tab", name="Step through").click()
        assert page.locator("#beam-tree").count() == 0
        assert not page.locator("#beam-node").is_visible()
    finally:
        page.close()


def test_a_bad_beam_size_is_one_line_and_the_tree_reads_in_dark_mode(browser, url, tree):
    _, t = tree
    page = _open(browser, url, "dark")
    try:
        assert page.evaluate("() => document.body.classList.contains('dark')")
        page.locator("#beam-size input").fill("12")
        page.locator("#beam-btn").click()
        page.wait_for_function(
            "() => document.querySelector('#beam-result').innerText.includes('whole number 1..8')"
        )
        _decode_beam(page, len(t.nodes))
        contrast = page.evaluate(NODE_CONTRAST)
        assert len(contrast) >= 3 * len(t.nodes) - 2 and min(contrast) >= 4.5, min(contrast)
        page.locator(f'#beam-tree [data-node-id="{t.best}"]').click()
        page.wait_for_selector("#beam-attn .js-plotly-plot")
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            _shot(page, Path(SHOTS) / "beam-dark.png")
    finally:
        page.close()
