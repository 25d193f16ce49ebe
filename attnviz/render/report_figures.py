"""The report's views as Plotly figures: what ``attnviz inspect --png`` writes (server-side,
through kaleido) and what the offline page drew before it used the app's canvas renderer
(:func:`to_html` still makes a self-contained page of any Plotly figures).
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from ..analysis import attribution, masking
from ..analysis.export import Inspection
from ..checkpoint import Checkpoint
from ..core.devices import as_numpy
from ..core.errors import InputError
from ..core.record import Trace
from ..train.snapshots import SNAPSHOTS, Snapshots
from . import plots

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>body {{ font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto;
padding: 0 1em; color: #222 }} .attnviz-figure {{ margin: 1.5em 0; overflow-x: auto }}
.attnviz-figure .plotly-graph-div:empty::before {{ content: "drawing…"; color: #888 }}</style>
</head>
<body>
<h1>{title}</h1>
{intro}
{body}
<script type="application/octet-stream" id="attnviz-plotlyjs">{bundle}</script>
<script>{loader}</script>
</body>
</html>
"""
#: Unpacks the gzipped plotly.js bundle, then draws each figure when it nears the viewport:
#: a page of a dozen figures opens in the time of the first two.
_LOADER = """(async () => {
  const b64 = document.getElementById("attnviz-plotlyjs").textContent.trim();
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const gunzip = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  const js = document.createElement("script");
  js.textContent = await new Response(gunzip).text();
  document.head.appendChild(js);
  const config = CONFIG;
  const draw = (div) => {
    const fig = JSON.parse(document.getElementById(div.id + "-json").textContent);
    Plotly.newPlot(div, fig.data, fig.layout, config).then(
      () => fig.frames && Plotly.addFrames(div, fig.frames));
  };
  const seen = new IntersectionObserver((entries) => {
    for (const e of entries) if (e.isIntersecting) { seen.unobserve(e.target); draw(e.target); }
  }, { rootMargin: "600px 0px" });
  document.querySelectorAll(".attnviz-figure .plotly-graph-div").forEach((d) => seen.observe(d));
})();"""


@functools.cache
def _bundle() -> str:
    """plotly.js, gzipped and base64-encoded (~40 % of its 4.6 MB; the page unpacks it)."""
    from plotly.offline import get_plotlyjs

    return base64.b64encode(gzip.compress(get_plotlyjs().encode(), 9, mtime=0)).decode()


def to_html(
    figures: Sequence[go.Figure] | Mapping[str, go.Figure], title: str, intro_html: str = ""
) -> str:
    """One self-contained offline HTML page holding every figure.

    plotly.js is embedded once, gzipped (the page unpacks it with the browser's
    ``DecompressionStream``); each figure is JSON drawn when it nears the viewport; MathJax
    and every CDN or cloud link are left out, so the page opens without a network.

    Args:
        figures: figures in page order, or ``{heading: figure}`` to give each a heading.
        title: page title (escaped).
        intro_html: trusted HTML placed under the title.
    Returns:
        The page as a string.
    """
    items = list(figures.items()) if isinstance(figures, Mapping) else [(None, f) for f in figures]
    if not items:
        raise InputError("to_html needs at least one figure")
    parts = []
    for i, (heading, fig) in enumerate(items):
        if heading:
            parts.append(f"<h2>{html.escape(heading)}</h2>")
        spec = pio.to_json(fig, validate=False).replace("</", "<\\/")  # no "</script>" inside
        height = fig.layout.height or 520
        parts.append(
            f'<div class="attnviz-figure"><div id="attnviz-figure-{i}" class="plotly-graph-div" '
            f'style="height:{int(height)}px; width:100%"></div>'
            f'<script type="application/json" id="attnviz-figure-{i}-json">{spec}</script></div>'
        )
    loader = _LOADER.replace("CONFIG", json.dumps(plots.figure_config()))
    return _PAGE.format(
        title=html.escape(title), intro=intro_html, body="\n".join(parts), bundle=_bundle(),
        loader=loader,
    )  # fmt: skip


def _sides(ins: Inspection) -> dict[str, tuple[list[str], list[str]]]:
    """(key tokens, query tokens) of each kind."""
    return {
        "encoder_self": (ins.src_tokens, ins.src_tokens),
        "decoder_self": (ins.tgt_tokens, ins.tgt_tokens),
        "cross": (ins.src_tokens, ins.tgt_tokens),
    }


def recorded_mask(trace: Trace, kind: str, layer: int) -> np.ndarray:
    """The mask the model applied in one attention module, batch item 0.

    Returns:
        ``[Tq, Tk]`` bool, True = blocked (the same for every head).
    """
    return as_numpy(trace.mask(kind, layer))[0, 0]


#: Readable column headings of the head-statistics table (the rows keep their JSON keys).
STAT_HEADINGS = {
    "kind": "attention",
    "layer": "layer",
    "head": "head",
    "role": "role",
    "entropy": "entropy<br>(nats)",
    "norm_entropy": "normalised<br>entropy",
    "max_weight": "largest<br>weight",
    "diagonal": "on<br>diagonal",
    "anti_diagonal": "on anti-<br>diagonal",
    "previous": "on previous<br>token",
    "first": "on first<br>token",
    "last": "on last<br>token",
    "eos": "on EOS",
    "bos": "on start<br>token",
    "punct": "on punct-<br>uation",
    "sink": "on sinks",
    "distance": "mean<br>distance",
}
_WIDTHS = {"kind": 100, "layer": 48, "head": 45, "role": 165}


def stats_table(rows: Sequence[Mapping]) -> go.Figure:
    """:func:`attnviz.render.plots.head_stats_table` with whole headings and room for each column.

    Undefined statistics (NaN, e.g. weight on EOS when the keys hold no EOS) show as "n/a".
    """
    shown = [
        {k: "n/a" if isinstance(v, float) and not np.isfinite(v) else v for k, v in r.items()}
        for r in rows
    ]
    fig = plots.head_stats_table(shown)
    cols = list(dict.fromkeys(["kind", "layer", "head", "role", *(k for r in rows for k in r)]))
    fig.update_traces(
        header=dict(
            values=[f"<b>{STAT_HEADINGS.get(c, html.escape(c))}</b>" for c in cols],
            font=dict(size=11),
        ),
        columnwidth=[_WIDTHS.get(c, 85) for c in cols],
    )
    fig.update_layout(  # as wide as its columns (the page scrolls sideways rather than clip)
        width=sum(_WIDTHS.get(c, 85) for c in cols) + 10,
        height=int(np.clip(60 + 22 * len(rows), 200, 1400)),
        margin=dict(t=10, b=10, l=5, r=5),
    )
    return fig


def inspection_figures(ins: Inspection, top_k: int = 10) -> dict[str, go.Figure]:
    """Every view of one inspected input, by heading, in page order.

    Decoding steps are numbered from 1, as the app numbers them: step 1 chooses the first
    output token.
    """
    titles = plots.KIND_TITLES
    figs: dict[str, go.Figure] = {}
    for kind, (keys, queries) in _sides(ins).items():
        layers = ins.trace.layers(kind)
        weights = np.stack([ins.trace.numpy(kind, layer)[0] for layer in layers])  # [L, H, Tq, Tk]
        mask = np.stack([recorded_mask(ins.trace, kind, layer) for layer in layers])  # [L, Tq, Tk]
        mask = np.broadcast_to(mask[:, None], weights.shape)  # [L, H, Tq, Tk]
        figs[f"{titles[kind]}: layers x heads"] = plots.heads_grid(
            weights, keys, queries, mask=mask
        )
    rows = [s.to_dict() for s in ins.stats]
    figs["Head statistics: normalised entropy"] = plots.head_stats_figure(rows, "norm_entropy")
    figs["Head statistics: every head"] = stats_table(rows)
    for step, probs in enumerate(ins.probs, start=1):
        figs[f"Step {step}: next token after {' '.join(ins.tgt_tokens[:step])}"] = plots.topk_bar(
            probs, ins.vocab, k=top_k, chosen=ins.out_ids[step - 1]
        )
    return figs


def experiment_figures(ckpt: Checkpoint, ins: Inspection) -> dict[str, go.Figure]:
    """Views that run the model again: causal mask off, attribution, training playback."""
    figs: dict[str, go.Figure] = {}
    # teacher-forced on the task's correct output where there is one (else the model's own,
    # and the summary then says "agreement with the model's own output", not accuracy)
    exp = masking.causal_experiment(ckpt, [ins.text])
    last = ckpt.config.n_decoder_layers - 1
    before = exp.before.trace.numpy("decoder_self", last)[0].mean(0)  # [Tt, Tt], head mean
    after = exp.after.trace.numpy("decoder_self", last)[0].mean(0)
    tok = ckpt.tgt_tokenizer
    reference = exp.target_ids[0]  # the ids teacher-forced (no decode -> encode round trip)
    tokens = [tok.token(i) for i in (ckpt.config.bos_id, *reference)][: before.shape[0]]
    figs[f"Causal mask off (decoder self-attention L{last}, mean of heads): {exp.summary()}"] = (
        plots.mask_comparison(
            before,
            after,
            tokens,
            tokens,
            before_mask=recorded_mask(exp.before.trace, "decoder_self", last),
            after_mask=recorded_mask(exp.after.trace, "decoder_self", last),
        )
    )
    # the newest token of the export, as the app's Attribution tab explains it
    a = attribution.attribute(ckpt, ins.text, len(ins.out_ids) - 1, tokens=ins.out_ids)
    figs[
        f"Step {a.step + 1} ({a.token}): Integrated Gradients vs attention rollout "
        f"(convergence delta {a.delta:.3g}, Spearman {a.agreement['ig~rollout']:.2f})"
    ] = plots.attribution_vs_attention(
        a.ig_src, a.rollout, a.src_tokens, names=("Integrated Gradients", "attention rollout")
    )
    if (ckpt.path / SNAPSHOTS).is_file():
        snaps = Snapshots.load(ckpt.path)
        figs[f"Training playback: cross-attention L{last} on the probe input"] = (
            plots.snapshot_timeline(snaps, "cross", last)
        )
    return figs


def write_png(fig: go.Figure, path: str | Path) -> Path:
    """Server-side PNG of one figure; needs kaleido and a Chromium it can find.

    Raises:
        InputError: kaleido or its browser is missing (the page's camera button still works).
    """
    try:
        import kaleido  # noqa: F401
    except ImportError:
        raise InputError(
            "server-side PNG needs the kaleido package and a Chromium; without them use the "
            "camera button in each figure's toolbar (HTML page or app)"
        ) from None
    path = Path(path)
    try:
        fig.write_image(str(path), format="png")
    except Exception as exc:  # kaleido reports a missing browser in several ways
        raise InputError(
            f"server-side PNG failed ({exc}); use the toolbar's camera button"
        ) from None
    return path
