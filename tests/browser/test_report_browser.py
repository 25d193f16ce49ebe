"""The offline HTML report in a real headless Chromium with the network cut off: every figure
draws with the app's canvas renderer inlined in the page, nothing is requested from anywhere,
the playback slider moves, and a figure's CSV download holds the weights it shows."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers import CHROMIUM, browser_or_skip, why_results  # noqa: E402

sync_api = browser_or_skip()

from attnviz.analysis import export  # noqa: E402
from attnviz.bench.report import bench_report  # noqa: E402
from attnviz.cli import main  # noqa: E402
from attnviz.render import report  # noqa: E402  (after the skips)

ALL_DRAWN = "() => window.AttnViz && AttnViz.report.total > 0 && AttnViz.report.times.length === AttnViz.report.total"
# every canvas of the page: its size and whether any pixel differs from the white background
CANVASES = """() => Array.from(document.querySelectorAll('.av-fig canvas')).map((c) => {
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let ink = 0;
  for (let i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i + 1] < 250 || d[i + 2] < 250) ink++;
  return {w: c.width, h: c.height, ink};
})"""
PLAYER = """() => { const f = document.querySelector('.av-fig[data-kind=playback]');
  return {frame: +f.dataset.frame, max: +f.querySelector('.av-frame').max,
          title: f._shown[0].name}; }"""
# page coordinates of cell (q, k) in the main canvas of attention figure `i`
CELL = """([i, q, k]) => { const c = document.querySelectorAll('.av-fig[data-kind=attention] .av-main')[i];
  const r = c.getBoundingClientRect(), b = c._av[0];
  return [r.left + b.x + (k + 0.5) * b.cell, r.top + b.y + (q + 0.5) * b.cell]; }"""
MOVE = """(i) => { const r = document.querySelector('.av-fig[data-kind=playback] .av-frame');
  r.value = String(i); r.dispatchEvent(new Event('input', {bubbles: true})); }"""


def _open(pw, path: Path, errors: list, requests: list):
    browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
    context = browser.new_context(
        offline=True, viewport={"width": 1280, "height": 900}, accept_downloads=True
    )
    page = context.new_page()
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(path.as_uri())
    page.wait_for_function(ALL_DRAWN, timeout=60_000)
    return browser, page


@pytest.mark.slow
def test_the_report_draws_every_figure_offline(tmp_path, models_dir, reverse_ckpt):
    page_file = tmp_path / "report.html"
    ckpt = str(models_dir / "reverse")
    assert main(["inspect", ckpt, "--text", "helloworld", "--html", str(page_file)]) == 0
    text = page_file.read_text()
    n_canvas_figs = len(report.report_data(text))
    assert n_canvas_figs == 6  # 3 kinds, head statistics, causal mask off, training playback
    requests, errors = [], []
    with sync_api.sync_playwright() as pw:
        browser, page = _open(pw, page_file, errors, requests)
        assert page.evaluate("() => AttnViz.report.total") == n_canvas_figs
        drawn = page.evaluate("() => [...document.querySelectorAll('.av-fig')].map((e) => e.dataset.drawn)")  # fmt: skip
        assert drawn and set(drawn) == {"1"}  # canvas figures and the HTML/SVG ones
        canvases = page.evaluate(CANVASES)
        # per kind a heatmap and its layers x heads grid, 2 + 1 for causal mask off, ...
        assert len(canvases) == 3 * 2 + 1 + 2 + 1
        assert all(c["w"] > 100 and c["h"] > 50 and c["ink"] > 1000 for c in canvases), canvases
        assert page.locator("text=Output (greedy)").count() == 1
        assert page.locator("table.av-stats tbody tr").count() == 24
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)

        # the playback slider starts at the first snapshot and moves
        player = page.evaluate(PLAYER)
        assert player["frame"] == 0 and player["max"] > 0
        page.evaluate(MOVE, player["max"])
        moved = page.evaluate(PLAYER)
        assert moved["frame"] == player["max"] and moved["title"] != player["title"]

        # layer/head switch, then the CSV of what the cross-attention figure shows
        fig = page.locator(".av-fig[data-kind=attention]").nth(2)
        fig.locator(".av-layer").select_option("0")
        fig.locator(".av-headsel").select_option("H2")
        fig.locator(".av-main").scroll_into_view_if_needed()
        page.mouse.move(*page.evaluate(CELL, [2, 1, 3]))  # query 1, key 3 of that figure
        page.locator(".av-tip").wait_for(state="visible", timeout=5_000)
        tip = page.locator(".av-tip").inner_text()
        with page.expect_download() as dl:
            fig.locator("button", has_text="CSV").click()
        body = Path(dl.value.path()).read_text()
        with page.expect_download() as js:
            fig.locator("button", has_text="JSON").click()
        every = json.loads(Path(js.value.path()).read_text())
        with page.expect_download() as png:
            fig.locator("button", has_text="PNG").first.click()
        assert Path(png.value.path()).read_bytes()[:4] == b"\x89PNG"
        browser.close()
    assert errors == []
    assert [u for u in requests if not u.startswith("file://")] == []
    lines = body.splitlines()
    assert lines[0] == "# layer 0 head 2"
    table = list(csv.reader(io.StringIO("\n".join(lines[1:]))))
    table = [r for r in table if r]
    ins = export.inspect_text(reverse_ckpt, "helloworld")
    want = ins.trace.numpy("cross", 0)[0, 2]  # [Tq, Tk], the recorded head
    assert table[0][1:] == list("helloworld") and [r[0] for r in table[1:]][0] == "<bos>"
    got = np.array([[float(x) for x in r[1:]] for r in table[1:]])
    np.testing.assert_allclose(got, want, atol=1e-5)
    for layer, block in enumerate(every["layers"]):  # every head of every layer, as recorded
        np.testing.assert_allclose(block["weights"], ins.trace.numpy("cross", layer)[0], atol=1e-7)
        assert not np.array(block["mask"]).any()  # no padding: cross-attention blocks nothing
    assert every["keys"] == list("helloworld") and every["kind"] == "cross"
    assert tip.startswith("query 1 “d” → key 3 “l”: weight ") and float(tip.split()[-1]) == (
        pytest.approx(float(want[1, 3]), abs=1e-4)
    )


@pytest.mark.slow
def test_the_apps_export_opens_at_its_step_with_playback_at_the_start(tmp_path, models_dir):
    """Exported at step 4: the attribution section explains step 4, the playback slider
    stands on the first snapshot after a while (nothing animates on load), the page is small."""
    from attnviz.app import session
    from attnviz.app.panels import export as export_panel

    state = session.start(session.new_state(str(models_dir / "reverse")), "helloworld").state
    for _ in range(4):
        state = session.step(state).state
    view = export_panel.export(state, "html")
    assert view.path, view.message
    text = Path(view.path).read_text()
    assert "<h2>Step 4 (o): Integrated Gradients" in text and "<h2>Step 1 (d): Int" not in text
    # measured: 0.18 MB with the canvas renderer (5.0 MB with plotly.js inline, 2.1 MB gzipped)
    assert len(text.encode()) < 400_000
    errors, requests = [], []
    with sync_api.sync_playwright() as pw:
        browser, page = _open(pw, Path(view.path), errors, requests)
        page.wait_for_timeout(1500)  # an animation started on load would have moved by now
        player = page.evaluate(PLAYER)
        browser.close()
    assert errors == []
    assert player["frame"] == 0 and player["title"].startswith("cross layer 1 · step 0")


@pytest.mark.slow
def test_the_bench_compares_the_canvas_page_with_the_plotly_page():
    rows = bench_report(quick=True)
    names = [r.name for r in rows]
    for what in ("report page size", "report first figure drawn", "report every figure drawn"):
        assert sum(n.startswith(what) for n in names) == 2, names  # models/reverse, opus-shaped
    for r in rows:
        assert np.isfinite(r.value) and r.value > 0 and "Plotly page" in r.detail, r
    sizes = [r for r in rows if r.name.startswith("report page size")]
    assert all(r.met for r in sizes), sizes  # measured: 0.19 vs 2.24 MB, 1.56 vs 16.8 MB


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_apps_report_holds_the_why_results(tmp_path, models_dir, scheme):
    """Exported after the Why this token tab patched and drew the routes at step 1 of
    models/induction: the page draws the direct attribution and the patching grid on canvas
    (every drawn number the library's), the lens as a table and the route as SVG, offline; its
    attribution JSON download holds the library's parts."""
    from attnviz import analysis
    from attnviz.app import session
    from attnviz.app.panels import export as export_panel
    from attnviz.app.panels import why as wv

    state = session.step(session.new_state(str(models_dir / "induction")), "abcdefabcde").state
    kept = why_results(state, "abcdxfabcde")
    view = export_panel.export(state, "html", "pieces", kept)
    assert view.path, view.message
    path = Path(view.path)
    errors, requests = [], []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900},
                                      accept_downloads=True, color_scheme=scheme)  # fmt: skip
        page = context.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.as_uri())
        page.wait_for_function(ALL_DRAWN, timeout=60_000)
        heads = page.evaluate("() => [...document.querySelectorAll('h2')].map((h) => h.innerText)")
        assert any(h.startswith("Why “f” (position 11): direct attribution") for h in heads)
        assert any(h.startswith("Logit lens at position 11") for h in heads)
        assert any(h.startswith("Activation patching of heads, noising") for h in heads)
        assert any(h.startswith("Information flow to position 11") for h in heads)
        why = page.locator(".av-fig[data-kind=heat]").filter(has=page.locator("canvas"))
        shown = page.evaluate("""() => [...document.querySelectorAll('.av-fig[data-kind=heat]')]
            .map((f) => (f._shown || []).map((s) => [s.name, Array.from(s.mat.z)]))""")
        assert why.count() >= 3 and all(c["ink"] > 500 for c in page.evaluate(CANVASES))
        drawn = {name: z for fig in shown for name, z in fig}
        np.testing.assert_allclose(np.asarray(drawn["patching heads (noising)"]).reshape(2, 4),
                                   kept["why_patch"][1].grid, atol=1e-6)  # fmt: skip
        assert page.locator("svg.av-flow line").count() >= len(kept["why_flow"][1].route)
        assert page.locator("table.av-lens tbody tr").count() == len(
            analysis.logit_lens(wv.shown(state).ckpt, state.src_ids).layers
        )
        fig = page.locator("h2:has-text('direct attribution') + .av-fig")
        fig.scroll_into_view_if_needed()
        with page.expect_download() as js:
            fig.locator("button", has_text="JSON").click()
        every = json.loads(Path(js.value.path()).read_text())
        for section in ("why-attribution", "why-patching", "information-flow", "logit-lens"):
            assert section in page.content()
        box = page.evaluate("""() => { const y = (e) => e.getBoundingClientRect().top + scrollY;
            const h = [...document.querySelectorAll('h2')].find((x) => x.innerText.includes(
              'direct attribution')), s = document.querySelector('svg.av-flow');
            return {x: 0, y: y(h) - 10, width: 1280, height: y(s) + s.getBoundingClientRect()
              .height - y(h) + 20}; }""")
        page.screenshot(path=str(tmp_path / f"why-report-{scheme}.png"), full_page=True, clip=box)
        if os.environ.get("ATTNVIZ_SHOTS"):  # kept to be looked at
            shutil.copy(tmp_path / f"why-report-{scheme}.png", os.environ["ATTNVIZ_SHOTS"])
        browser.close()
    assert errors == [] and [u for u in requests if not u.startswith("file://")] == []
    want = analysis.direct_attribution(wv.shown(state).ckpt, state.src_ids)
    values = [v for p in every["panels"] for row in p["values"] for v in row]
    inside = sorted(p.value for p in want.parts)
    assert sorted(v for v in values if v) == pytest.approx([v for v in inside if v], abs=1e-5)
