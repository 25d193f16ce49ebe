"""``attnviz bench``'s report rows: the offline report (:mod:`attnviz.render.report`) drawn by the
canvas renderer against the Plotly page of the same inspection, timed in headless Chromium.

:mod:`attnviz.render.report` re-exports :func:`bench_report` and :func:`page_times`.
"""

from __future__ import annotations

from pathlib import Path

#: Runs from the document's start: each animation frame, counts the figures drawn (canvas:
#: ``AttnViz.report``; Plotly: plots with their SVG) and keeps when the first and the last
#: were on screen; on the Plotly page it scrolls to the next undrawn figure, as a reader
#: scrolling straight on would (that page draws a figure as it nears the viewport).
_TIMES_JS = """(() => {
  const t = (window.__avTimes = { first: null, all: null, n: 0 });
  const plotted = (g) => g._fullData && g.querySelector(".main-svg");
  const tick = () => {
    let drawn = 0, total = 0;
    const r = window.AttnViz && window.AttnViz.report;
    if (r && r.total) { drawn = r.times.length; total = r.total; }
    else {
      const divs = [...document.querySelectorAll(".plotly-graph-div")];
      total = divs.length; drawn = divs.filter(plotted).length;
      if (drawn && drawn < total) divs.find((g) => !plotted(g)).scrollIntoView();
    }
    if (drawn && t.first === null) t.first = performance.now();
    if (total && drawn === total) { t.all = performance.now(); t.n = total; return; }
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
})();"""


def page_times(browser, path: Path, repeats: int = 3) -> dict[str, float]:
    """Median ms from navigation to the first and to every figure drawn, opening ``path``
    (``file://``, network off) in a fresh Playwright ``browser`` context ``repeats`` times."""
    import statistics

    got: dict[str, list[float]] = {"first": [], "all": []}
    for _ in range(repeats):
        ctx = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
        ctx.add_init_script(_TIMES_JS)
        page = ctx.new_page()
        page.goto(path.as_uri())
        page.wait_for_function("() => window.__avTimes && window.__avTimes.all !== null",
                               timeout=600_000, polling=100)  # fmt: skip
        t = page.evaluate("() => window.__avTimes")
        got["first"].append(t["first"])
        got["all"].append(t["all"])
        ctx.close()
    return {k: statistics.median(v) for k, v in got.items()}


def bench_report(quick: bool) -> list:
    """``attnviz bench`` rows: the offline report's size and time to its first and to all
    figures drawn in headless Chromium (``file://``, offline), the canvas page against the
    Plotly page of the same inspection, on models/reverse (experiments included) and an
    opus-mt-shaped random model (attention, statistics and next tokens: its experiments
    take minutes on a CPU)."""
    import tempfile

    from ..analysis.export import inspect_text
    from ..checkpoint import load_checkpoint
    from ..render.report import inspection_page, plotly_page
    from .rows import CHROMIUM, CHROMIUM_ARGS, MODELS, Row

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return [Row("report rows", float("nan"), "ms", "-", None, "skipped: no playwright")]
    if not CHROMIUM.exists():
        return [Row("report rows", float("nan"), "ms", "-", None, f"skipped: no {CHROMIUM}")]
    from .app import opus_shaped_checkpoint

    rows, repeats, steps = [], 1 if quick else 3, 10 if quick else 40
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        cases = []
        if (MODELS / "reverse" / "model.safetensors").is_file():
            cases.append(("models/reverse, 'helloworld'", MODELS / "reverse", "helloworld", None, True))  # fmt: skip
        opus = opus_shaped_checkpoint(Path(tmp) / "opus-shaped")
        cases.append((f"opus-mt-shaped random model, 43 chars, {steps} steps", opus,
                      "the quick brown fox jumps over the lazy dog", steps, False))  # fmt: skip
        for name, folder, text, max_len, experiments in cases:
            ckpt = load_checkpoint(folder, device="cpu")
            ins = inspect_text(ckpt, text, max_len)
            shown = ckpt if experiments else None
            new = Path(tmp) / "canvas.html"
            new.write_text(inspection_page(ins, shown), encoding="utf-8")
            old = Path(tmp) / "plotly.html"
            old.write_text(plotly_page(ins, shown), encoding="utf-8")
            a, b = page_times(browser, new, repeats), page_times(browser, old, repeats)
            mb_new, mb_old = new.stat().st_size / 1e6, old.stat().st_size / 1e6
            rows += [
                Row(f"report page size, {name}", mb_new, "MB", f"< Plotly page ({mb_old:.2f} MB)",
                    mb_new < mb_old, f"Plotly page {mb_old:.2f} MB (plotly.js gzipped inline)"),
                Row(f"report first figure drawn (file://, offline), {name}", a["first"], "ms",
                    f"< Plotly page ({b['first']:.0f} ms)", a["first"] < b["first"],
                    f"Plotly page {b['first']:.0f} ms; median of {repeats}"),
                Row(f"report every figure drawn, {name}", a["all"], "ms",
                    f"< Plotly page ({b['all']:.0f} ms)", a["all"] < b["all"],
                    f"Plotly page {b['all']:.0f} ms (scrolled to each figure as it drew)"),
            ]  # fmt: skip
        browser.close()
    return rows
