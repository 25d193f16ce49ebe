"""The notebook view executed in a real notebook kernel (nbclient): two views drawn offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CHROMIUM

ROOT = Path(__file__).resolve().parents[2]


# -- a notebook, executed, then drawn in Chromium offline ------------------------------------------
# pixels of a canvas that are a heatmap colour (saturated), not the white card, text or grey
COLOURED = """(c) => {
  const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < px.length; i += 4) {
    const hi = Math.max(px[i], px[i + 1], px[i + 2]), lo = Math.min(px[i], px[i + 1], px[i + 2]);
    if (hi - lo > 40) n++;
  }
  return n;
}"""
# Insert outputs the way JupyterLab does: innerHTML, then each script re-created to run it.
INSERT = """(outputs) => {
  for (const html of outputs) {
    const box = document.createElement('div');
    document.body.appendChild(box);
    box.innerHTML = html;
    for (const old of box.querySelectorAll('script')) {
      const s = document.createElement('script');
      s.textContent = old.textContent;
      old.replaceWith(s);
    }
  }
}"""


def _notebook(models_dir: Path):
    nbformat = pytest.importorskip("nbformat")
    cells = [
        f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nimport attnviz",
        f"attnviz.show({str(models_dir / 'reverse')!r}, 'hello')",
        f"attnviz.show({str(models_dir / 'sort')!r}, 'dcba', kind='decoder_self', head=1)",
    ]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


@pytest.mark.slow
def test_a_notebook_with_two_views_draws_both_offline(models_dir, tmp_path):
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    nb = _notebook(models_dir)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={})
    client.execute()
    outputs = [
        o["data"]["text/html"]
        for cell in nb.cells
        for o in cell.get("outputs", [])
        if "text/html" in o.get("data", {})
    ]
    assert len(outputs) == 2
    static = tmp_path / "static.html"  # as an exported notebook: scripts run as parsed
    static.write_text("<!doctype html><meta charset='utf-8'><body>" + "\n".join(outputs))
    blank = tmp_path / "blank.html"
    blank.write_text("<!doctype html><meta charset='utf-8'><body></body>")
    refused, errors = [], []

    def refuse(route):
        if route.request.url.startswith("file://"):
            return route.continue_()
        refused.append(route.request.url)
        return route.abort()

    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        context = browser.new_context(offline=True, viewport={"width": 1100, "height": 900})
        context.route("**/*", refuse)
        for how in ("static", "inserted"):
            page = context.new_page()
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto((static if how == "static" else blank).as_uri())
            if how == "inserted":
                page.evaluate(INSERT, outputs)
            page.wait_for_function(
                "() => document.querySelectorAll('.attnviz-view[data-drawn]').length === 2",
                timeout=30_000,
            )
            views = page.locator(".attnviz-view")
            ids = [views.nth(i).get_attribute("id") for i in range(2)]
            assert len(set(ids)) == 2, how
            for vid in ids:
                assert "trust the notebook" not in page.inner_text(f"#{vid}")  # the note went
                for cls in ("av-main", "av-grid"):
                    canvas = page.locator(f"#{vid} canvas.{cls}").element_handle()
                    assert page.evaluate(COLOURED, canvas) > 100, (how, vid, cls)
            page.close()
        browser.close()
    assert errors == []
    assert refused == []
