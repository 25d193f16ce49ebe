"""The offline HTML report in a real headless Chromium with the network cut off: every figure
draws from the inline plotly.js, and nothing is requested from anywhere."""

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
from tests.conftest import MODELS  # noqa: E402

DRAWN = """() => Array.from(document.querySelectorAll('.js-plotly-plot'))
  .filter(gd => gd._fullData && gd._fullData.length && gd.querySelector('.main-svg')).length"""


@pytest.mark.slow
def test_the_report_draws_every_figure_offline(tmp_path):
    page_file = tmp_path / "report.html"
    assert (
        main(["inspect", str(MODELS / "reverse"), "--text", "hello", "--html", str(page_file)]) == 0
    )
    n_figures = page_file.read_text().count('class="plotly-graph-div"')
    assert n_figures > 6
    requests, errors = [], []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        context = browser.new_context(offline=True)
        page = context.new_page()
        page.on("request", lambda r: requests.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_file.as_uri())
        page.wait_for_function(f"() => ({DRAWN})() === {n_figures}", timeout=60_000)
        assert page.locator("text=Output (greedy)").count() == 1
        browser.close()
    assert errors == []
    assert [u for u in requests if not u.startswith("file://")] == []
