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
        page.wait_for_function(f"() => ({DRAWN})() === {n_figures}", timeout=60_000)
        assert page.locator("text=Output (greedy)").count() == 1
        assert page.evaluate(TABLE_CELLS) >= 14 * 25  # 14 columns, a header and 24 heads
        assert page.evaluate(CLIPPED) == []  # every heading and cell is whole
        browser.close()
    assert errors == []
    assert [u for u in requests if not u.startswith("file://")] == []
