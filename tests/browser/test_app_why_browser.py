"""Activation patching in the "Why this token" tab, in a real headless Chromium: pick
models/induction in the model menu, Step once after ``abcdefabcde`` (the model answers ``f``),
open the tab, type the corrupted ``abcdxfabcde``, the answer and the wrong token, patch each
head's output (noising), and read the drawn grid's cells back: they are the library's grid,
and the layer-0 previous-token head is the one that kills the answer. The opened cell draws its
patched run's attention (the weights :func:`~attnviz.analysis.patched_run.patched_run`
records); then the information-flow graph is drawn and one of its attention edges clicked: the
heads carrying it open, each head's attention map the model's recorded forward. Light and
dark; set ``ATTNVIZ_SHOTS=<folder>`` to keep the screenshots."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import browser_or_skip

browser_or_skip()  # skips the module without Chromium, Playwright or gradio

import attnviz  # noqa: E402  (after the skips)

CLEAN, CORRUPTED = "abcdefabcde", "abcdxfabcde"
SHOTS = os.environ.get("ATTNVIZ_SHOTS")
SHOWN = "(id) => { const e = document.querySelector(id); return e && e.offsetParent !== null; }"
# the cells as plotly drew them (its full data: base64 arrays decoded)
CELLS = """() => { const gd = document.querySelector('#why-patch-plot .js-plotly-plot');
  return Array.from(gd._fullData[0].z, (row) => Array.from(row)); }"""
TICKS = """(axis) => { const l = document.querySelector('#why-patch-plot .js-plotly-plot').layout;
  return Array.from(l[axis].ticktext); }"""
# the heatmaps of a plot as plotly drew them, in order
HEATS = """(sel) => { const gd = document.querySelector(sel + ' .js-plotly-plot');
  return gd._fullData.filter((t) => t.type === 'heatmap')
    .map((t) => Array.from(t.z, (row) => Array.from(row))); }"""
# page coordinates of edge `i`'s midpoint in the flow graph (its click target)
EDGE_AT = """(i) => { const gd = document.querySelector('#why-flow-plot .js-plotly-plot');
  const t = gd._fullData.find((d) => /^(attention|cross) edges$/.test(d.name) &&
    Array.from(d.customdata).map(Number).includes(i));
  const n = Array.from(t.customdata).map(Number).indexOf(i);
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, r = gd.getBoundingClientRect();
  return [r.left + xa._offset + xa.l2p(t.x[n]), r.top + ya._offset + ya.l2p(t.y[n])]; }"""
# WCAG contrast of the text in the tab's messages on their effective background
CONTRAST = """(sel) => {
  const rgb = (s) => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const blend = (el) => { let out = [255, 255, 255], stack = [];
    for (; el; el = el.parentElement) { const c = rgb(getComputedStyle(el).backgroundColor);
      if (c.length >= 3 && (c.length < 4 || c[3] > 0)) { stack.push(c); if (c.length < 4 || c[3] >= 1) break; } }
    for (const c of stack.reverse()) { const a = c.length < 4 ? 1 : c[3]; out = out.map((v, i) => v * (1 - a) + c[i] * a); }
    return out; };
  return Array.from(document.querySelectorAll(sel)).filter((el) => el.textContent.trim()).map((el) => {
    const a = lum(rgb(getComputedStyle(el).color)), b = lum(blend(el));
    return [el.textContent.trim().slice(0, 30), (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)];
  });
}"""
# the tab bar's overflow button (the one without text), opening the tabs that do not fit
OPEN_TAB = """() => { const b = [...document.querySelectorAll('#tabs button')].find(
  (b) => !b.innerText.trim() && !b.className.includes('av-') && b.offsetParent !== null);
  if (b) b.click(); }"""


def _open_tab(page, name: str = "Why this token", ready: str = "#why-patch-btn") -> None:
    tab = page.get_by_role("tab", name=name)
    if tab.count() and tab.first.is_visible():
        tab.first.click()
    else:  # past the tab bar's width: in its overflow menu
        page.evaluate(OPEN_TAB)
        page.get_by_role("button", name=name).filter(visible=True).click()
    page.wait_for_function(SHOWN, arg=ready)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_patching_in_the_why_tab_reads_back_the_library_grid(
    browser, url, models_dir, scheme, tmp_path
):
    page = browser.new_page(viewport={"width": 1400, "height": 1300}, color_scheme=scheme)
    page.set_default_timeout(120_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(url)
        page.wait_for_function(
            "() => document.querySelector('#model-info')?.innerText.includes('running on')"
        )
        page.locator("#model-picker input").click()
        page.get_by_role("option", name="induction", exact=True).click()
        page.wait_for_function(
            "() => document.querySelector('#model-info').innerText.includes('decoder-only')"
        )
        page.locator("#input-text textarea").fill(CLEAN)
        page.locator("#step-btn").click()
        page.wait_for_function("() => window.AttnViz.drawn.step === 1")
        _open_tab(page)
        page.locator("#why-corrupted textarea").fill(CORRUPTED)
        page.locator("#why-answer textarea").fill("f")
        page.locator("#why-wrong textarea").fill("x")
        page.locator("#why-what label:has-text('heads')").first.click()
        page.locator("#why-direction label:has-text('noising')").last.click()
        page.locator("#why-patch-btn").click()
        page.wait_for_function(SHOWN, arg="#why-patch-plot .js-plotly-plot")
        message = page.locator("#why-patch-message").inner_text()
        assert "⚠" not in message and "Most damaging" in message, message

        ckpt = attnviz.load_checkpoint(models_dir / "induction")
        want = attnviz.analysis.patch(ckpt, CLEAN, CORRUPTED, "f", "x", "heads",
                                      direction="noising", progress=False)  # fmt: skip
        drawn = np.asarray(page.evaluate(CELLS), dtype=float)
        np.testing.assert_allclose(drawn, want.grid, atol=1e-6)
        assert page.evaluate(TICKS, "yaxis") == ["decoder_self 0", "decoder_self 1"]
        assert page.evaluate(TICKS, "xaxis") == ["H0", "H1", "H2", "H3"]
        prev = int(attnviz.analysis.induction_scores(ckpt, n=20).prev_token[0].argmax())
        assert drawn[0, prev] == drawn.min() and drawn[0, prev] < 0.1  # the answer is gone
        assert f"Most damaging: decoder_self 0 · H{prev}" in message
        # the most damaging cell is chosen: opened, its run no longer answers "f"
        page.locator("#why-cell-btn").click()
        page.wait_for_function(SHOWN, arg="#why-cell-table")
        first = page.locator("#why-cell-table tbody tr").first.locator("td").first.inner_text()
        said = page.locator("#why-cell-message").inner_text()
        assert first.strip() != "f" and f"decoder_self 0 · H{prev} patched" in said, said
        shots = Path(SHOTS) if SHOTS else tmp_path
        shots.mkdir(parents=True, exist_ok=True)
        page.locator("#why-cell-table").screenshot(path=str(shots / f"why-cell-{scheme}.png"))
        # its attention beside it: the patched run's, as the library records it; then a
        # later head, chosen in the menu, whose attention the patch moves
        page.wait_for_function(SHOWN, arg="#why-cell-plot .js-plotly-plot")
        from attnviz.analysis.patched_run import patched_run

        run = patched_run(ckpt, CLEAN, CORRUPTED, "f", "x", "heads", [0, prev],
                          direction="noising")  # fmt: skip
        patched, base = (np.asarray(z, dtype=float) for z in page.evaluate(HEATS, "#why-cell-plot"))
        np.testing.assert_allclose(patched, run.trace.numpy("decoder_self", 0)[0, prev], atol=1e-6)
        page.locator("#why-cell-site input").click()
        page.get_by_role("option", name="decoder_self 1 · H2", exact=True).click()
        page.wait_for_function(
            "() => document.querySelector('#why-cell-message').innerText.includes('at decoder_self 1 · H2')"
        )
        patched, base = (np.asarray(z, dtype=float) for z in page.evaluate(HEATS, "#why-cell-plot"))
        np.testing.assert_allclose(patched, run.trace.numpy("decoder_self", 1)[0, 2], atol=1e-6)
        np.testing.assert_allclose(base, run.base.numpy("decoder_self", 1)[0, 2], atol=1e-6)
        assert not np.allclose(patched, base)
        page.locator("#why-cell-plot").screenshot(path=str(shots / f"why-cell-plot-{scheme}.png"))

        # information flow: click an attention edge into the predicting position
        page.locator("#why-flow-btn").click()
        page.wait_for_function(SHOWN, arg="#why-flow-plot .js-plotly-plot")
        flow = attnviz.analysis.flow(ckpt, list(ckpt.encode_source(CLEAN).ids), 0.04)
        edge = next(i for i in flow.route if flow.edges[i].site is not None
                    and flow.nodes[flow.edges[i].target]["position"] == flow.position
                    and flow.nodes[flow.edges[i].source]["position"] != flow.position)  # fmt: skip
        page.locator("#why-flow-plot").scroll_into_view_if_needed()
        x, y = page.evaluate(EDGE_AT, edge)
        page.mouse.move(x, y)
        page.mouse.click(x, y)
        page.wait_for_function(SHOWN, arg="#why-edge-plot .js-plotly-plot")
        said = page.locator("#why-edge-message").inner_text()
        assert "heads carry it" in said, said
        e = flow.edges[edge]
        page.locator("#why-edge-table").scroll_into_view_if_needed()
        table = page.locator("#why-edge-table").inner_text()
        assert re.findall(r"\bH\d+\b", table) == [f"H{h}" for h, _ in e.heads], table
        heats = [np.asarray(z, dtype=float) for z in page.evaluate(HEATS, "#why-edge-plot")]
        trace = _recorded(ckpt, list(ckpt.encode_source(CLEAN).ids))
        for n, (h, _) in enumerate(e.heads[:3]):
            np.testing.assert_allclose(heats[2 * n], trace.numpy(*e.site)[0, h], atol=1e-6)
            np.testing.assert_allclose(heats[2 * n + 1], flow.maps[e.site].contribution[h],
                                       atol=1e-6)  # fmt: skip
        page.locator("#why-edge-plot").screenshot(path=str(shots / f"why-edge-{scheme}.png"))
        page.locator("#why-flow-plot").screenshot(path=str(shots / f"why-flow-{scheme}.png"))

        worst = page.evaluate(CONTRAST, "#why-patch-message p, #why-patch-message strong")
        assert min(c for _, c in worst) >= 4.5, sorted(worst, key=lambda x: x[1])[:3]
        folder = Path(SHOTS) if SHOTS else tmp_path
        folder.mkdir(parents=True, exist_ok=True)
        page.locator("#why-patch-plot").scroll_into_view_if_needed()
        box = page.evaluate("""() => { const a = document.querySelector('#why-corrupted')
            .getBoundingClientRect(), b = document.querySelector('#why-patch-plot')
            .getBoundingClientRect(); return {x: 0, y: a.top + window.scrollY - 60,
            width: 1400, height: b.bottom - a.top + 80}; }""")
        page.screenshot(path=str(folder / f"why-patch-{scheme}.png"), clip=box, full_page=True)

        # the Export tab's HTML report holds the tab's results for this step
        _open_tab(page, "Export", "#export-html")
        page.locator("#export-html").click()
        page.wait_for_function(
            "() => document.querySelector('#export-message').innerText.includes('Wrote')"
        )
        href = page.locator("#export-file a").first.get_attribute("href")
        report = page.request.get(href if "://" in href else url.rstrip("/") + "/" + href).text()
        for heading in (
            "Why “f” (position 11): direct attribution",
            "Logit lens at position 11",
            "Activation patching of heads, noising",
            "Information flow to position 11",
        ):
            assert f"<h2>{heading}" in report, heading
        assert errors == [], errors
    finally:
        page.close()


def _recorded(ckpt, ids):
    """The attention of the model's own forward on ``ids``, recorded by the library."""
    import torch

    from attnviz.analysis.why import prepare

    prep = prepare(ckpt, ids, None)
    with torch.no_grad(), attnviz.record(ckpt.model) as trace:
        prep.last(prep.tensor(ckpt.device))
    return trace
