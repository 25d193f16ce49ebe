"""The Compare tab (two checkpoints side by side) and the beam panel, without and with a browser."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import launched_app

import attnviz
from attnviz import plots
from attnviz.analysis import compare as analysis_compare
from attnviz.app import compare_lab, session, store, views
from attnviz.model import KINDS


@pytest.fixture(scope="module")
def done(models_dir) -> session.SessionState:
    """helloworld decoded to the end on the shipped reversal model."""
    return session.run(session.new_state(str(models_dir / "reverse")), "helloworld").state


def test_comparing_a_model_with_itself_gives_an_all_zero_grid(done):
    view = compare_lab.compare(done, "reverse", "cross", "L1", "H2")
    assert view.comparison is not None and not view.message.startswith("⚠")
    for kind, fig in zip(KINDS, view.grids, strict=True):
        z = np.asarray(fig.data[0].z)
        assert z.shape == (2, 4) and np.allclose(z, 0, atol=1e-9), kind
        assert "→H" in fig.data[0].text[0][0]
    # the head drawn: A and B identical, A − B exactly 0, the shared mask grey in both
    a, b, diff = (t for t in view.head.data if t.name in ("A", "B", "A - B"))
    assert np.array_equal(np.nan_to_num(a.z), np.nan_to_num(b.z))
    assert np.nanmax(np.abs(diff.z)) == 0
    assert "same output" in view.message
    assert view.tokens_html.count('class="av-cmp-tok"') == len("dlrowolleh") + 1  # + EOS


def test_comparing_reverse_with_copy_gives_what_the_library_gives(done, models_dir):
    view = compare_lab.compare(done, "copy", "decoder_self", "L0", "H1")
    ref = analysis_compare(
        attnviz.load_checkpoint(models_dir / "reverse"),
        attnviz.load_checkpoint(models_dir / "copy"),
        ["helloworld"],
    )
    for kind, fig in zip(KINDS, view.grids, strict=True):
        assert np.allclose(np.asarray(fig.data[0].z), ref.divergence[kind], atol=1e-6)
        cells = np.asarray(fig.data[0].text)  # the matched head of b, written in each cell
        for (layer, head), b_head in np.ndenumerate(ref.matching[kind]):
            assert cells[layer, head].endswith(f"→H{b_head}")
    assert ref.divergence["cross"].max() > 0.05  # the two models attend differently
    assert view.comparison.outputs == ref.outputs
    # A | B | A − B: the difference is the difference of the two heads as recorded
    a, b, diff = (t for t in view.head.data if t.name in ("A", "B", "A - B"))
    assert np.allclose(np.nan_to_num(diff.z), np.nan_to_num(a.z) - np.nan_to_num(b.z))
    assert view.head.layout.coloraxis2.cmin == -view.head.layout.coloraxis2.cmax  # centred on 0
    # the token strip: each token's hover names both probabilities and ranks
    first = ref.tokens[0][0]
    assert f"A: p={first.prob_a:.4f}, rank {first.rank_a}" in view.tokens_html
    assert f"B: p={first.prob_b:.4f}, rank {first.rank_b}" in view.tokens_html


def test_incomparable_models_say_why_in_one_line(done):
    view = compare_lab.compare(done, "translate")
    assert view.message == "⚠ the checkpoints use different source tokenizers"
    assert view.comparison is None and len(view.grids) == len(KINDS)
    assert "\n" not in view.message


def test_compare_needs_an_input_and_a_real_head(models_dir, done):
    fresh = session.new_state(str(models_dir / "reverse"))
    assert compare_lab.compare(fresh, "copy").message.startswith("⚠ type an input")
    assert "head 9 does not exist" in compare_lab.compare(done, "copy", "cross", "L0", "H9").message
    assert compare_lab.model_choices(done)[:2] == ["reverse", "copy"]


def test_a_compare_result_goes_stale_with_a_new_input_not_with_a_step(done):
    shown = {"compare": views.panel_stamps(done)["compare"]}
    assert not views.stale_panels(shown, session.back(done).state)
    assert views.follow(shown, session.start(done, "abc").state, "compare").clear == {"compare"}


def test_beam_panel_follows_the_checkpoints_length_limit(models_dir, tmp_path):
    folder = tmp_path / "reverse-short"
    shutil.copytree(models_dir / "reverse", folder)
    state = session.new_state(str(folder))
    ckpt = store.get_checkpoint(folder)  # the app's own copy of this folder
    ckpt.max_new_tokens = 3  # what a Hugging Face folder's generation config sets
    out = session.beam(state, 4, text="helloworld")
    assert "<b>dlr</b>" in out, out  # beam search stops at the limit, as greedy does
    assert "the same as greedy <b>dlr</b>" in out


def test_plots_refuse_a_matching_of_another_shape():
    with pytest.raises(attnviz.AttnvizError, match="does not fit"):
        plots.head_divergence(np.zeros((2, 4)), np.zeros((2, 3), dtype=int))
    with pytest.raises(attnviz.AttnvizError, match="differ in shape"):
        plots.attention_difference(np.zeros((2, 3)), np.zeros((3, 3)), None, None)


@pytest.mark.browser
def test_browser_compare_tab_draws_the_grid(models_dir, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("/usr/bin/chromium is not installed")
    from attnviz.bench import CHROMIUM_ARGS

    timeout = 30_000
    with launched_app(models_dir / "reverse") as (_, port), sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        for scheme in ("light", "dark"):
            page = browser.new_page(viewport={"width": 1300, "height": 1800}, color_scheme=scheme)
            page.set_default_timeout(timeout)
            page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded")
            page.locator("#input-text textarea").fill("helloworld")
            page.locator("#run-btn").click()
            page.wait_for_function(
                "() => document.querySelector('#output-text textarea').value === 'dlrowolleh'"
            )
            page.get_by_role("tab", name="Compare").click()
            page.locator("#compare-model input").click()
            page.get_by_role("option", name="copy", exact=True).click()
            page.wait_for_function(
                "() => document.querySelectorAll('#compare-grid-cross .js-plotly-plot').length"
            )
            page.wait_for_function(
                "() => document.querySelector('#compare-head .js-plotly-plot') && "
                "document.querySelectorAll('#compare-token-strip .av-cmp-tok').length === 11"
            )
            cells = page.evaluate(
                "() => document.querySelector('#compare-grid-cross .js-plotly-plot')"
                "._fullData[0].z.length"
            )
            assert cells == 2  # two layers of cross-attention
            page.locator("#compare-head-menu input").click()  # pick a head: it is drawn A | B | A−B
            page.get_by_role("option", name="H2", exact=True).click()
            page.wait_for_function(
                "() => { const gd = document.querySelector('#compare-head .js-plotly-plot');"
                " return gd && gd._fullLayout.title.text.includes('layer 0 · head 2'); }"
            )
            page.screenshot(path=str(tmp_path / f"compare-{scheme}.png"), full_page=True)
            if scheme == "light":  # a new input: the result for the old one is cleared, with a note
                page.locator("#input-text textarea").fill("abc")
                page.locator("#step-btn").click()
                page.wait_for_function(
                    "() => document.querySelector('#compare-message').innerText"
                    ".includes('changed since this was computed')"
                )
                assert page.locator("#compare-token-strip").count() == 0
            page.close()
        browser.close()
