"""The offline HTML report in a real headless Chromium with the network cut off: every figure
draws from the inline plotly.js, nothing is requested from anywhere, and no table text is cut
off by its column."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install playwright)"
)

from attnviz.cli import main  # noqa: E402  (after the skips)

DRAWN = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
  .filter(gd => gd._fullData && gd._fullData.length && gd.querySelector('.main-svg')).length"""
# table cells (headers included) whose text is wider than the cell: plotly clips them
CLIPPED = """() => Array.from(document.querySelectorAll('.table .column-cell')).flatMap(cell => {
  const rect = cell.querySelector('rect.cell-rect');
  const text = cell.querySelector('text.cell-text');
  if (!rect || !text || !text.textContent) return [];
  const need = text.getBBox().width + 8;  // plotly's left padding
  return need > rect.width.baseVal.value ? [text.textContent] : [];
})"""
SCROLL = """async () => { for (let y = 0; y <= document.body.scrollHeight; y += 500) {
  window.scrollTo(0, y); await new Promise((r) => setTimeout(r, 20)); } }"""
PLAYER = """() => {
  const gd = Array.from(document.querySelectorAll('.js-plotly-plot')).find(g => g.layout.sliders);
  const box = (el) => { const r = el.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  return {active: gd._fullLayout.sliders[0].active, title: gd._fullLayout.title.text,
          slider: box(gd.querySelector('.slider-group .slider-rail-rect') || gd.querySelector('.slider-group')),
          buttons: box(gd.querySelector('.updatemenu-container'))};
}"""
TABLE_CELLS = "() => document.querySelectorAll('.table .column-cell text.cell-text').length"


@pytest.mark.slow
def test_the_report_draws_every_figure_offline(tmp_path, models_dir):
    page_file = tmp_path / "report.html"
    assert (
        main(["inspect", str(models_dir / "reverse"), "--text", "hello", "--html", str(page_file)])
        == 0
    )
    n_figures = page_file.read_text().count('class="plotly-graph-div"')
    assert n_figures > 6
    requests, errors = [], []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        context = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_file.as_uri())
        page.wait_for_function(f"() => ({DRAWN})() >= 1", timeout=60_000)
        page.evaluate(SCROLL)  # figures are drawn as they near the viewport
        page.wait_for_function(f"() => ({DRAWN})() === {n_figures}", timeout=60_000)
        assert page.locator("text=Output (greedy)").count() == 1
        assert page.evaluate(TABLE_CELLS) >= 14 * 25  # 14 columns, a header and 24 heads
        assert page.evaluate(CLIPPED) == []  # every heading and cell is whole
        browser.close()
    assert errors == []
    assert [u for u in requests if not u.startswith("file://")] == []


@pytest.mark.slow
def test_the_apps_export_opens_at_its_step_with_playback_at_the_start(tmp_path, models_dir):
    """Exported at step 4: the attribution section explains step 4, the playback slider
    stands on the first snapshot with its buttons beside it, and the page stays light."""
    from attnviz.app import panels, session

    state = session.start(session.new_state(str(models_dir / "reverse")), "helloworld").state
    for _ in range(4):
        state = session.step(state).state
    view = panels.export(state, "html")
    assert view.path, view.message
    text = Path(view.path).read_text()
    assert "<h2>Step 4 (o): Integrated Gradients" in text and "<h2>Step 1 (d): Int" not in text
    assert len(text.encode()) < 2_500_000  # measured: 5.0 MB with plotly.js inline, 2.1 MB gzipped
    n = text.count('class="plotly-graph-div"')
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(Path(view.path).as_uri())
        page.evaluate(SCROLL)
        page.wait_for_function(f"() => ({DRAWN})() === {n}", timeout=60_000)
        page.wait_for_timeout(1500)  # an animation started on load would have moved by now
        player = page.evaluate(PLAYER)
        browser.close()
    assert player["active"] == 0 and player["title"].startswith(
        "cross layer 1, mean over heads · step 0"
    )
    slider, buttons = player["slider"], player["buttons"]
    assert buttons["right"] <= slider["left"] or buttons["top"] >= slider["bottom"], player
