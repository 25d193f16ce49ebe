"""Reports: one self-contained offline HTML page per inspected input.

Sits above :mod:`attnviz.render.plots` and :mod:`attnviz.analysis` and only puts them together;
``attnviz inspect CKPT --text ... --html out.html`` writes the page. The page draws every
heatmap with the app's canvas renderer (``assets/viz.js``, inlined once, as
:func:`attnviz.render.show` does), tables and small bar charts as plain HTML and SVG; nothing is
fetched from a network. The Plotly figures of the same views (``inspect --png``) live in
:mod:`attnviz.render.report_figures`.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..analysis import attribution, masking
from ..analysis.export import SIDES, Inspection, check_unit
from ..analysis.masked_lm import special_token
from ..checkpoint import Checkpoint
from ..core.devices import as_numpy
from ..core.errors import InputError
from ..core.masks import causal_mask
from ..core.model import KINDS
from ..train.snapshots import SNAPSHOTS, Snapshots
from . import plots
from .arrays import b64_f32, mask_bits
from .report_figures import (  # noqa: F401  (re-exported: report.inspection_figures, ...)
    STAT_HEADINGS,
    experiment_figures,
    inspection_figures,
    recorded_mask,
    stats_table,
    to_html,
    write_png,
)
from .show import View, display_token, renderer_js, script_safe

# -- the page: the app's canvas renderer, inlined (no plotly.js) ----------------------------------
_REPORT_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<h1>{title}</h1>
{intro}
{body}
<script type="application/json" id="attnviz-report-data">{data}</script>
<script>{renderer}</script>
<script>(() => {{
  const specs = JSON.parse(document.getElementById("attnviz-report-data").textContent);
  window.AttnViz.drawReport(specs.map((spec) => ({{ el: document.getElementById(spec.id), spec }})));
}})();</script>
</body>
</html>
"""
_REPORT_CSS = """body { font: 14px system-ui, sans-serif; max-width: 1200px; margin: 2em auto;
  padding: 0 1em; color: #1f2937; background: #fff }
h2 { font-size: 1.15em; margin: 1.6em 0 .4em }
.av-fig { margin: .5em 0 1.5em; overflow-x: auto }
.av-fig:empty::before { content: "drawing…"; color: #888 }
.av-head { display: flex; gap: 12px; align-items: center; flex-wrap: wrap; margin: 6px 0 }
.av-export { margin-left: auto; display: flex; gap: 4px }
.av-png, a.av-png { font: 12px sans-serif; padding: 2px 8px; border: 1px solid #d1d5db;
  border-radius: 4px; background: #f9fafb; color: #1f2937; cursor: pointer; text-decoration: none }
.av-row { display: flex; gap: 16px; align-items: flex-start; flex-wrap: wrap }
.av-sub { color: #6b7280; margin: 8px 0 2px } canvas { display: block }
.av-frame { width: 320px }
.av-tip { position: fixed; z-index: 1000; display: none; pointer-events: none;
  background: #111827; color: #f9fafb; padding: 4px 8px; border-radius: 4px; font-size: 12px }
table.av-stats { border-collapse: collapse; font-size: 12px }
.av-stats th, .av-stats td { border: 1px solid #e5e7eb; padding: 3px 6px; text-align: right }
.av-stats th { background: #f3f4f6; text-align: center } .av-stats td.t { text-align: left }
.av-topk { display: grid; grid-template-columns: repeat(auto-fill, minmax(250px, 1fr)); gap: 10px }
.av-card { border: 1px solid #e5e7eb; border-radius: 6px; padding: 6px 8px }
.av-card p { margin: 0 0 4px; font-size: 12px; color: #374151 }
.av-bar { display: grid; grid-template-columns: 6em 1fr 3.5em; gap: 6px; align-items: center;
  font: 12px ui-monospace, monospace }
.av-bar span:first-child { overflow: hidden; text-overflow: ellipsis; white-space: pre }
.av-bar i { display: block; height: 10px; background: #4c78a8; border-radius: 2px }
.av-bar.chosen { font-weight: bold } .av-bar.chosen i { background: #e45756 }
svg.av-svg text { font: 11px sans-serif; fill: #1f2937 } .av-stats td.t { white-space: nowrap }
/* a dark system theme: a dark page; each canvas figure stays a light card, as in notebooks */
@media (prefers-color-scheme: dark) {
  body { background: #111827; color: #e5e7eb } code { color: #e5e7eb }
  .av-fig canvas, svg.av-svg { background: #fff; border-radius: 6px }
  .av-stats th { background: #1f2937 } .av-stats th, .av-stats td { border-color: #374151 }
  .av-card { border-color: #374151 } .av-card p { color: #d1d5db } .av-sub { color: #9ca3af }
  .av-png, a.av-png, select { background: #1f2937; color: #e5e7eb; border-color: #4b5563 }
}
"""


def matrix_panel(
    z: np.ndarray,
    keys: Sequence[str],
    queries: Sequence[str],
    *,
    mask: np.ndarray | None = None,
    title: str = "",
    signed: bool = False,
    hover: Sequence[str] | None = None,
) -> dict:
    """One panel of a ``"heat"`` figure: ``z`` ``[Tq, Tk]`` as base64 float32, the recorded
    ``mask`` (True = blocked) as ``"0"/"1"`` per cell, axis labels and optional per-cell hover
    notes (row-major)."""
    z = np.asarray(z, dtype=np.float32)
    tq, tk = z.shape
    panel = {"title": title, "tq": int(tq), "tk": int(tk), "z": b64_f32(np.nan_to_num(z)),
             "m": "" if mask is None else mask_bits(np.broadcast_to(mask, z.shape)),
             "xl": [display_token(t) for t in keys], "yl": [display_token(t) for t in queries],
             "signed": signed}  # fmt: skip
    if hover is not None:
        panel["hover"] = list(hover)
    return panel


def attention_spec(ins: Inspection, kind: str, unit: str = "pieces") -> dict:
    """The ``"attention"`` figure of one kind: every layer and head as recorded in ``ins.trace``
    (the data of :class:`attnviz.render.show.View`, drawn by the same ``AV.drawStatic``).

    Args:
        unit: ``"words"``: every matrix pooled into words (:meth:`Inspection.arrays`), the
            axes labelled with words and the title saying so.
    Returns:
        :attr:`attnviz.render.show.View.data` (per layer ``w``: base64 float32 ``[H, Tq, Tk]``, ``m``:
        the recorded mask ``[Tq, Tk]``) with ``type`` ``"attention"``.
    """
    view = View.from_trace(ins.trace, ins.src_tokens, ins.tgt_tokens, kind=kind,
                           out_tokens=ins.out_tokens, title=plots.KIND_TITLES[kind])  # fmt: skip
    data = {**view.data, "type": "attention", "lines": False}
    if check_unit(unit) == "words":
        index, words = ins.word_index(), ins.words()
        pooled = [ins.word_attention(kind, i, index) for i in ins.trace.layers(kind)]
        data["layers"] = [{"w": b64_f32(w), "m": mask_bits(m)} for w, m in pooled]
        q, k = SIDES[kind]
        data["queries"] = [display_token(t) for t in words[q]]
        data["keys"] = [display_token(t) for t in words[k]]
        data["title"] = f"{data['title']} · words"
        data["name"] = f"{kind}-words"  # the figure's downloads say words too
    return data


def _stats_spec(rows: Sequence[Mapping], metric: str = "norm_entropy") -> dict:
    """Layers x heads per kind, coloured by ``metric``; the role of each head in the hover."""
    panels = []
    for kind in KINDS:
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            continue
        n_l = max(int(r["layer"]) for r in mine) + 1
        n_h = max(int(r["head"]) for r in rows) + 1
        z = np.zeros((n_l, n_h), np.float32)
        missing = np.ones((n_l, n_h), bool)
        roles = [[""] * n_h for _ in range(n_l)]
        for r in mine:
            i, h = int(r["layer"]), int(r["head"])
            v = float(r[metric])
            z[i, h], missing[i, h] = (v, False) if np.isfinite(v) else (0.0, True)
            roles[i][h] = f"role: {r.get('role', '')}"
        panels.append(matrix_panel(z, [f"H{h}" for h in range(n_h)], [f"L{i}" for i in range(n_l)],
                                    mask=missing if missing.any() else None, title=kind,
                                    hover=[x for row in roles for x in row]))  # fmt: skip
    return {"type": "heat", "name": f"heads-{metric}", "what": STAT_HEADINGS.get(metric, metric)
            .replace("<br>", " "), "title": f"heads by {metric.replace('_', ' ')}",
            "panels": panels, "maxCell": 40}  # fmt: skip


def csv_link(name: str, header: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A download link holding a CSV file as a ``data:`` URI (nothing is fetched)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    b64 = base64.b64encode(buf.getvalue().encode()).decode("ascii")
    return (f'<a class="av-png" download="attnviz-{name}.csv" '
            f'href="data:text/csv;base64,{b64}">CSV</a>')  # fmt: skip


def _num(v) -> str:
    if isinstance(v, float):
        return "n/a" if not np.isfinite(v) else f"{v:.3f}"
    return html.escape(str(v))


def _stats_table_html(rows: Sequence[Mapping]) -> str:
    """Every head's statistics as a plain HTML table (headings from :data:`STAT_HEADINGS`)."""
    cols = list(dict.fromkeys(["kind", "layer", "head", "role", *(k for r in rows for k in r)]))
    head = "".join(f"<th>{STAT_HEADINGS.get(c, html.escape(c))}</th>" for c in cols)
    body = "".join(
        "<tr>" + "".join(
            f'<td{" class=t" if c in ("kind", "role") else ""}>{_num(r.get(c, ""))}</td>'
            for c in cols) + "</tr>"
        for r in rows
    )  # fmt: skip
    link = csv_link("head-statistics", cols, [[r.get(c, "") for c in cols] for r in rows])
    return (f'<div class="av-head"><span class="av-export">{link}</span></div>'
            f'<table class="av-stats"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')  # fmt: skip


def _topk_html(ins: Inspection, k: int) -> str:
    """Every step's ``k`` most likely next tokens as bars (the chosen one in red)."""
    cards, rows = [], []
    for step, probs in enumerate(ins.probs, start=1):
        chosen = ins.out_ids[step - 1]
        ids = [int(i) for i in np.argsort(-probs, kind="stable")[:k]]
        if chosen not in ids:
            ids.append(int(chosen))
        if ins.positions is not None:  # an encoder-only read: the token at a position
            pos = ins.positions[step - 1]
            where = (
                f"Position {pos}: token at <b>{html.escape(display_token(ins.src_tokens[pos]))}</b>"
            )
        else:
            after = " ".join(display_token(t) for t in ins.tgt_tokens[:step])
            where = f"Step {step}: next token after <b>{html.escape(after)}</b>"
        bars = "".join(
            f'<div class="av-bar{" chosen" if i == chosen else ""}">'
            f"<span>{html.escape(display_token(ins.vocab[i]))}</span>"
            f'<span><i style="width:{100 * float(probs[i]):.1f}%"></i></span>'
            f"<span>{float(probs[i]):.3f}</span></div>"
            for i in ids
        )
        cards.append(f'<div class="av-card"><p>{where}</p>{bars}</div>')
        rows += [[step, ins.vocab[i], i, f"{float(probs[i]):.6g}", int(i == chosen)] for i in ids]
    link = csv_link("next-tokens", ["step", "token", "id", "probability", "chosen"], rows)
    return (f'<div class="av-head"><span class="av-export">{link}</span></div>'
            f'<div class="av-topk">{"".join(cards)}</div>')  # fmt: skip


def _bars_svg(
    series: Mapping[str, np.ndarray], labels: Sequence[str], colours: Sequence[str]
) -> str:
    """Grouped signed bars (each series as shares of its total magnitude) as inline SVG; the
    raw share is in each bar's tooltip."""
    n, m = len(labels), len(series)
    slot, bar, left, top, plot_h = 14 * m + 12, 12, 60, 36, 220
    w = max(left + n * slot + 10, 150 + 190 * m)
    shares = {name: plots.share(np.asarray(v, float)) for name, v in series.items()}
    hi = max((float(s.max()) for s in shares.values()), default=0.0)
    lo = min((float(s.min()) for s in shares.values()), default=0.0)
    hi, lo = max(hi, 0.0), min(lo, 0.0)
    span = (hi - lo) or 1.0
    zero = top + plot_h * hi / span  # y of share 0
    y_of = lambda v: top + plot_h * (hi - v) / span  # noqa: E731
    h = int(top + plot_h + 90)
    parts = [f'<line x1="{left - 4}" x2="{w - 10}" y1="{zero:.1f}" y2="{zero:.1f}" stroke="#9ca3af"/>',
             f'<line x1="{left - 4}" x2="{left - 4}" y1="{top}" y2="{top + plot_h}" stroke="#9ca3af"/>',
             '<text x="4" y="14">share of total</text>']  # fmt: skip
    for v in sorted({hi, 0.0, lo}):
        parts.append(f'<text x="4" y="{y_of(v) + 4:.1f}">{v:+.2f}</text>')
    for j, (name, s) in enumerate(shares.items()):
        parts.append(f'<rect x="{150 + j * 190}" y="5" width="10" height="10" fill="{colours[j]}"/>'
                     f'<text x="{164 + j * 190}" y="14">{html.escape(name)}</text>')  # fmt: skip
        for i, v in enumerate(s):
            x, y0, y1 = left + i * slot + 6 + j * 14, y_of(max(v, 0.0)), y_of(min(v, 0.0))
            parts.append(f'<rect x="{x}" y="{y0:.1f}" width="{bar}" height="{y1 - y0:.1f}" '
                         f'fill="{colours[j]}"><title>{html.escape(name)} · '
                         f"{html.escape(labels[i])}: share {v:+.3f}</title></rect>")  # fmt: skip
    for i, t in enumerate(labels):
        x, y = left + i * slot + slot / 2, top + plot_h + 10
        parts.append(f'<text x="{x:.0f}" y="{y}" transform="rotate(60 {x:.0f} {y})">'
                     f"{html.escape(t[:12])}</text>")  # fmt: skip
    return (f'<svg class="av-svg" role="img" width="{w}" height="{h}" '
            f'viewBox="0 0 {w} {h}">{"".join(parts)}</svg>')  # fmt: skip


def report_sections(
    ins: Inspection, ckpt: Checkpoint | None = None, top_k: int = 10, unit: str = "pieces"
) -> list:
    """The page's sections in order: ``(heading, spec)`` where ``spec`` is a figure the page
    draws on canvas (a dict with ``"type"``: ``"attention"``, ``"heat"`` or ``"playback"``) or
    trusted HTML (tables, bars, SVG) written as it is.

    Every attention weight is batch item 0 of ``ins.trace``, as recorded; with ``ckpt``, the
    experiments that run the model again (causal mask off, attribution, training playback).
    ``unit="words"``: the attention figures pooled into words (the experiments stay pieces).
    """
    out: list = []
    words = " (words)" if check_unit(unit) == "words" else ""
    for kind in ins.trace.kinds():
        title = plots.KIND_TITLES[kind]
        out.append((f"{title}: every layer and head{words}", attention_spec(ins, kind, unit)))
    rows = [s.to_dict() for s in ins.stats]
    if rows:
        out.append(("Head statistics: normalised entropy", _stats_spec(rows)))
        out.append(("Head statistics: every head", _stats_table_html(rows)))
    heading = ("Next-token probabilities at every step" if ins.positions is None
               else "Fillers at every mask token (without one: each token predicted)")  # fmt: skip
    out.append((heading, _topk_html(ins, top_k)))
    if ckpt is not None:
        out += experiment_sections(ckpt, ins)
    return out


def experiment_sections(ckpt: Checkpoint, ins: Inspection) -> list:
    """Views that run the model again, as :func:`report_sections` sections: the causal mask
    switched off, attribution of the newest token, and training playback (with snapshots)."""
    if ins.positions is not None:  # an encoder-only read: no decoder, nothing decoded
        return _read_sections(ckpt, ins)
    out: list = []
    exp = masking.causal_experiment(ckpt, [ins.text])
    last = ckpt.config.n_decoder_layers - 1
    before = exp.before.trace.numpy("decoder_self", last)[0].mean(0)  # [Tt, Tt], head mean
    after = exp.after.trace.numpy("decoder_self", last)[0].mean(0)
    tok = ckpt.tgt_tokenizer
    reference = exp.target_ids[0]  # the ids teacher-forced (no decode -> encode round trip)
    if ckpt.config.decoder_only:  # one sequence: the prompt, then the reference
        head = list(ckpt.encode_source(ins.text).pieces)
        tokens = [*head, *(tok.token(i) for i in reference)][: before.shape[0]]
    else:
        tokens = [tok.token(i) for i in (ckpt.config.bos_id, *reference)][: before.shape[0]]
    mb = recorded_mask(exp.before.trace, "decoder_self", last)
    ma = recorded_mask(exp.after.trace, "decoder_self", last)
    out.append((
        f"Causal mask off (decoder self-attention L{last}, mean of heads): {exp.summary()}",
        {"type": "heat", "name": "causal-mask-off", "title": f"decoder self-attention L{last}",
         "panels": [matrix_panel(before, tokens, tokens, mask=mb, title="before"),
                    matrix_panel(after, tokens, tokens, mask=ma, title="after"),
                    matrix_panel(after - before, tokens, tokens, title="after − before",
                                  signed=True)]},
    ))  # fmt: skip
    a = attribution.attribute(ckpt, ins.text, len(ins.out_ids) - 1, tokens=ins.out_ids)
    out.append(_attribution_section(a, f"Step {a.step + 1}"))
    if (ckpt.path / SNAPSHOTS).is_file():
        snaps = Snapshots.load(ckpt.path)
        kind = snaps.shown_kind
        what = "cross-attention" if kind == "cross" else "self-attention"
        out.append((f"Training playback: {what} L{last} on the probe input",
                    playback_spec(snaps, kind, last)))  # fmt: skip
    return out


def _read_sections(ckpt: Checkpoint, ins: Inspection) -> list:
    """An encoder-only read's experiment: attribution of the filler at its first mask token
    (nothing where the sentence has none: no filler to explain)."""
    mask = special_token(ckpt, "mask")
    if mask is None or ins.src_tokens[ins.positions[0]] != mask[0]:
        return []
    a = attribution.attribute(ckpt, ins.text, 0, tokens=ins.out_ids)
    return [_attribution_section(a, f"Mask at position {ins.positions[0]}")]


def _attribution_section(a, where: str) -> tuple[str, str]:
    """Integrated Gradients, gradient x input and rollout over the source tokens as bars."""
    series = {"Integrated Gradients": a.ig_src, "gradient × input": a.gxi_src,
              "attention rollout": a.rollout}  # fmt: skip
    labels = [display_token(t) for t in a.src_tokens]
    link = csv_link("attribution", ["position", "token", *series],
                     [[i, t, *(f"{float(v[i]):.6g}" for v in series.values())]
                      for i, t in enumerate(a.src_tokens)])  # fmt: skip
    svg = _bars_svg(series, labels, [plots.METHOD_COLOURS["Integrated Gradients"],
                                     plots.METHOD_COLOURS["gradient × input"], plots.BAR])  # fmt: skip
    return (
        f"{where} ({a.token}): Integrated Gradients vs attention rollout "
        f"(convergence delta {a.delta:.3g}, Spearman {a.agreement['ig~rollout']:.2f})",
        f'<div class="av-head"><span class="av-export">{link}</span></div>{svg}',
    )  # fmt: skip


def playback_spec(snaps: Snapshots, kind: str, layer: int, bos: str = "<bos>") -> dict:
    """The ``"playback"`` figure: one frame per training snapshot ``[S, H, Tq, Tk]``, the
    slider starting at the first; the causal mask of ``"decoder_self"`` greyed."""
    if (kind, layer) not in snaps.weights or not snaps.steps:
        held = ", ".join(f"{k}/{i}" for k, i in snaps.weights) or "nothing"
        raise InputError(f"the snapshots hold no {kind!r} layer {layer}; they hold {held}")
    w = np.stack([as_numpy(x) for x in snaps.weights[kind, layer]]).astype(np.float32)
    _, n_heads, tq, tk = w.shape  # [S, H, Tq, Tk]
    tgt_in = list(snaps.probe_tgt) if snaps.one_sequence else [bos, *snaps.probe_tgt]
    keys = tgt_in if kind == "decoder_self" else snaps.probe_src
    queries = snaps.probe_src if kind == "encoder_self" else tgt_in
    m = as_numpy(causal_mask(tq, tk)) if kind == "decoder_self" else None
    frames = [{"step": int(s), "title": f"{kind} layer {layer} · step {s} · loss {loss:.4f} · "
               f"output “{out}”"}
              for s, loss, out in zip(snaps.steps, snaps.losses, snaps.outputs, strict=True)]  # fmt: skip
    return {"type": "playback", "name": f"playback-{kind}-L{layer}", "title": f"{kind} layer {layer}",
            "frames": frames, "heads": int(n_heads), "tq": int(tq), "tk": int(tk), "w": b64_f32(w),
            "m": "" if m is None else mask_bits(m),
            "xl": [display_token(t) for t in keys[:tk]], "yl": [display_token(t) for t in queries[:tq]]}  # fmt: skip


def page_html(sections: Sequence, title: str, intro_html: str = "") -> str:
    """One self-contained offline page: the app's canvas renderer inlined once, each canvas
    figure's numbers in one JSON block, HTML sections as they are; nothing fetched.

    Args:
        sections: ``(heading, spec)`` pairs as :func:`report_sections` returns them.
        title: page title (escaped); ``intro_html``: trusted HTML under the title.
    """
    if not sections:
        raise InputError("a report needs at least one section")
    body, specs = [], []
    for i, (heading, spec) in enumerate(sections):
        body.append(f"<h2>{html.escape(heading)}</h2>")
        if isinstance(spec, str):
            body.append(f'<div class="av-fig av-html" data-drawn="1">{spec}</div>')
        else:
            fid = f"attnviz-fig-{i}"
            specs.append({**spec, "id": fid})
            body.append(f'<div class="av-fig" id="{fid}" data-kind="{spec["type"]}"></div>')
    data = script_safe(json.dumps(specs, separators=(",", ":"), ensure_ascii=False))
    return _REPORT_PAGE.format(title=html.escape(title), css=_REPORT_CSS, intro=intro_html,
                               body="\n".join(body), data=data,
                               renderer=script_safe(renderer_js()))  # fmt: skip


def report_data(page: str) -> list[dict]:
    """The canvas figures' specs embedded in a page :func:`page_html` wrote (for checks)."""
    found = re.search(r'<script type="application/json" id="attnviz-report-data">(.*?)</script>',
                      page, re.S)  # fmt: skip
    if not found:
        raise InputError("this page holds no attnviz report data")
    return json.loads(found[1])  # "<\/" (script-safe) is a JSON escape of "</"


def _intro(ins: Inspection, unit: str = "pieces") -> str:
    intro = (
        f"<p>Checkpoint <code>{html.escape(ins.checkpoint)}</code></p>"
        f"<p>Input: <b>{html.escape(ins.text)}</b><br>"
        f"{'Output (greedy)' if ins.positions is None else 'Read once; top filler per mask (or token)'}: "
        f"<b>{html.escape(ins.output)}</b></p>"
    )
    if ins.unknown:
        intro += f"<p>Read as &lt;unk&gt;: {html.escape(' '.join(ins.unknown))}</p>"
    return (
        intro
        + (
            "<p>Every weight below was recorded inside the forward passes that produced this "
            "output. Grey cells are masked (blocked), not learned zeros. Each figure downloads as "
            "PNG, CSV (what it shows) or JSON (every number in it).</p>"
        )
        + (
            "<p>Attention is shown over <b>words</b>: each word's attention summed over its key "
            "pieces and averaged over its query pieces; a word cell is masked only where all its "
            "pieces are.</p>"
            if unit == "words"
            else ""
        )
    )


def inspection_page(
    ins: Inspection, ckpt: Checkpoint | None = None, unit: str = "pieces", extra: Sequence = ()
) -> str:
    """The whole HTML page for one inspected input (with ``ckpt``, experiment views too),
    drawn by the app's canvas renderer; ``unit="words"``: attention pooled into words;
    ``extra``: more ``(heading, spec)`` sections after them (the app's Why this token
    results, :mod:`attnviz.render.report_why`)."""
    title = f"attnviz: {ins.text}" + (" · words" if check_unit(unit) == "words" else "")
    sections = [*report_sections(ins, ckpt, unit=unit), *extra]
    return page_html(sections, title, _intro(ins, unit))


def plotly_page(ins: Inspection, ckpt: Checkpoint | None = None) -> str:
    """The same report with Plotly figures (the page before the canvas renderer; ~2 MB of
    gzipped plotly.js): kept for ``attnviz bench``'s before/after row."""
    figs = inspection_figures(ins)
    if ckpt is not None:
        figs.update(experiment_figures(ckpt, ins))
    return to_html(figs, f"attnviz: {ins.text}", _intro(ins))


def write_html(
    ins: Inspection,
    path: str | Path,
    ckpt: Checkpoint | None = None,
    unit: str = "pieces",
    extra: Sequence = (),
) -> Path:
    """Write :func:`inspection_page` (pieces or words, ``extra`` sections after) to ``path``."""
    path = Path(path)
    path.write_text(inspection_page(ins, ckpt, unit, extra), encoding="utf-8")
    return path
