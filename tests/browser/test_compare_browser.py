"""The Compare tab in headless Chromium: the grid drawn and a clicked head opened."""

from __future__ import annotations

import pytest
import torch
from helpers import launched_app

# -- the clickable grid and model B uploaded in the tab -------------------------------------------


@pytest.mark.browser
def test_browser_compare_tab_draws_the_grid_and_a_clicked_head(models_dir, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    from helpers import CHROMIUM as chromium

    if not chromium.exists():
        pytest.skip(f"{chromium} is not installed")
    from attnviz.bench.suite import CHROMIUM_ARGS

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
                "() => document.querySelectorAll('#compare-grid button[data-kind=cross]').length"
                " === 8 && document.querySelector('#compare-head .js-plotly-plot') && "
                "document.querySelectorAll('#compare-token-strip .av-cmp-tok').length === 11"
            )
            assert page.locator("#compare-grid .av-cmp-match").first.inner_text().startswith("→H")
            # click a head cell: it is drawn A | B | A−B and marked as the one drawn
            cell = page.locator('#compare-grid button[data-kind=decoder_self][data-layer="1"]'
                                '[data-head="2"]')  # fmt: skip
            cell.click()
            page.wait_for_function(
                "() => { const gd = document.querySelector('#compare-head .js-plotly-plot');"
                " return gd && gd._fullLayout.title.text.includes('layer 1 · head 2') &&"
                " gd._fullLayout.title.text.toLowerCase().includes('decoder'); }"
            )
            page.wait_for_function(
                "() => { const b = document.querySelector('#compare-grid button.best');"
                " return b && b.dataset.kind === 'decoder_self' && b.dataset.layer === '1' &&"
                " b.dataset.head === '2'; }"
            )
            assert page.locator("#compare-head-menu input").input_value() == "H2"
            page.screenshot(path=str(tmp_path / f"compare-{scheme}.png"), full_page=True)
            if scheme == "light":  # model B uploaded inside the tab is compared at once
                files = [str(models_dir / "copy" / n) for n in ("model.safetensors", "config.json")]
                page.locator("#compare-upload input[type=file]").set_input_files(files)
                page.wait_for_function(  # the grid names the new B (copy's grid had 24 cells too)
                    "() => { const b = document.querySelector('#compare-model input').value;"
                    " return b && b !== 'copy' && document.querySelector('#compare-grid"
                    " .av-cmp-names')?.innerText.includes('B = ' + b) &&"
                    " document.querySelectorAll('#compare-grid button[data-kind]').length === 24; }"
                )
                uploaded = page.locator("#compare-model input").input_value()
                # a refused upload: the warning, the grid still labelled with what it compares,
                # and the box holds that upload alone (not added to the last one's files)
                pickle = tmp_path / "model.pt"
                torch.save({"w": torch.zeros(2)}, pickle)
                page.locator("#compare-upload input[type=file]").set_input_files([str(pickle)])
                page.wait_for_function(
                    "() => document.querySelector('#compare-message').innerText.includes('⚠')"
                )
                names = page.locator("#compare-grid .av-cmp-names").inner_text()
                assert names == f"A = reverse vs B = {uploaded}"
                assert (
                    f"still compares A with B = {uploaded}"
                    in page.locator("#compare-message").inner_text()
                )
                page.wait_for_function(
                    "() => document.querySelectorAll('#compare-upload .file').length === 1"
                )
                page.locator("#compare-upload button[aria-label=Clear]").click()  # warning goes
                page.wait_for_function(
                    "() => { const m = document.querySelector('#compare-message').innerText;"
                    " return m.startsWith('A = ') && !m.includes('⚠'); }"
                )
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
