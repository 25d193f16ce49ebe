"""The analysis labs on an encoder-only model (a tiny random BERT) in a real headless Chromium:
after Read, Checkpoint health reports on the sentence read and Head ablation reruns it with
heads off and ranks every head; the Attribution tab says it explains the mask's filler.
"""

from __future__ import annotations

import re

import pytest
from helpers import browser_or_skip  # noqa: E402

browser_or_skip()  # skips the module without Chromium, Playwright or gradio

from helpers import launched_app, open_app_page, tiny_bert  # noqa: E402

TIMEOUT = 60_000
TEXT = "the [MASK] sat on the [MASK]"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    tiny_bert(folder)
    with launched_app(folder) as (_, port):
        yield f"http://127.0.0.1:{port}/"


@pytest.mark.slow
def test_health_and_head_ablation_run_on_the_sentence_read(browser, url):
    page = open_app_page(browser, url, TIMEOUT)
    try:
        page.locator("#input-text textarea").fill(TEXT)
        page.locator("#run-btn").click()
        page.wait_for_selector("#topk-plot .av-fillers")
        page.get_by_role("tab", name="Checkpoint health").click()
        page.locator("#health-btn").click()
        page.wait_for_selector("#health-report .finding")
        report = page.locator("#health-report").inner_text()
        assert "Health check passed on 1 given input" in report
        assert "causal: does not apply: an encoder-only model" in report
        assert "encoder_self L0 H0" in report  # the heads it judged are the encoder's
        page.wait_for_selector("#health-heads .js-plotly-plot")

        page.get_by_role("tab", name="Head ablation").click()
        sites = page.locator("#ablate-heads label")
        assert sites.all_inner_texts() == [f"encoder_self L{i} H{h}" for i in (0, 1)
                                           for h in range(4)]  # fmt: skip
        sites.nth(0).click()
        sites.nth(5).click()
        page.locator("#ablate-btn").click()
        msg = "() => document.querySelector('#ablate-message')?.innerText.includes('Switched off')"
        page.wait_for_function(msg)
        text = page.locator("#ablate-message").inner_text()
        assert "Switched off 2 head(s): encoder_self L0 H0, encoder_self L1 H1." in text
        assert "largest probability drop" in text and "at position 2" in text
        page.wait_for_selector("#ablation-plot .js-plotly-plot")
        ticks = page.locator("#ablation-plot .xtick text").all_text_contents()
        assert ticks[0].startswith("2:") and ticks[1].startswith("6:")  # the two mask positions

        page.locator("#rank-btn").click()
        page.wait_for_selector("#rank-table", state="visible")
        assert "Each head zeroed alone on 1 input" in page.locator("#ablate-message").inner_text()
        rows = re.findall(r"(encoder_self L\d H\d)\s+(\S+)\s+(\S+)\s+(\S+)",
                          page.locator("#rank-table").inner_text())  # fmt: skip
        assert len(rows) == 8 and len({r[0] for r in rows}) == 8
        assert float(rows[0][2]) > 0  # the largest effect (~1e-5 here) is not rounded away

        page.get_by_role("tab", name="Attribution").click()
        assert page.locator("#attr-btn").inner_text() == "Attribute the filler at the first mask"
        assert page.errors == []
    finally:
        page.close()
