"""The report's "Why this token" sections: the direct attribution, the logit lens and (when
they were computed) the lens at every layer and position, a patching grid and the
information-flow route of one step, as
:func:`attnviz.render.report.page_html` sections (canvas heatmaps, HTML tables, inline SVG),
each with its CSV or JSON download. Pure functions of the library's results.
"""

from __future__ import annotations

import html

import numpy as np

from ..analysis.dla import DirectAttribution
from ..analysis.flow import Flow
from ..analysis.patching import Patching
from ..analysis.why import LensGrid, LogitLens
from .plots_why import FLOW_COLOURS, dla_cells, flow_ticks, node_xy, patch_cells
from .report import csv_link, matrix_panel
from .show import display_token

#: the canvas writes at most 12 characters of a label: shorter names (the full one hovers)
SHORT = {"final norm centering": "norm center", "final norm bias": "norm bias",
         "output bias": "out bias", "attn norm bias": "attn norm b", "cross norm bias":
         "cross norm b", "mlp norm bias": "mlp norm b", "encoder_self": "enc", "decoder_self":
         "dec"}  # fmt: skip


def _q(token: str) -> str:
    return f"“{display_token(token)}”"


def _short(name: str) -> str:
    """A part or module name in at most 12 characters: ``decoder_self 1 H2`` -> ``dec L1 H2``."""
    if name in SHORT:
        return SHORT[name]
    words = name.split()
    if words and words[0] in SHORT and len(words) > 1 and words[1].isdigit():
        name = " ".join([SHORT[words[0]], f"L{words[1]}", *words[2:]])
    return name[:12]


def _labelled(panel: dict, keys: list[str], queries: list[str]) -> dict:
    """``panel`` with names (not tokens) on its axes, as they are."""
    return {**panel, "xl": [_short(k) for k in keys], "yl": [_short(q) for q in queries]}


def attribution_section(res: DirectAttribution) -> tuple[str, dict]:
    """The parts of a direct attribution as two signed heatmaps: what sits outside the layers
    (one row) and layers x (heads, biases, MLP); each cell's part name in its hover."""
    outside, z, names, cols = dla_cells(res)
    missing = np.isnan(z)
    out_names, rows = [p.name for p in outside], [f"L{i}" for i in range(z.shape[0])]
    panels = [
        _labelled(matrix_panel(np.array([[p.value for p in outside]]), out_names, ["outside"],
                               title="outside the layers", signed=True, hover=out_names),
                  out_names, ["outside"]),
        _labelled(matrix_panel(np.nan_to_num(z), cols, rows,
                               mask=missing if missing.any() else None, title="layers × parts",
                               signed=True, hover=[str(n) for n in names.ravel()]), cols, rows),
    ]  # fmt: skip
    what = _q(res.token) + (f" and not {_q(res.versus)}" if res.versus else "")
    logit = "logit difference" if res.versus else "logit"
    heading = (f"Why {what} (position {res.position}): direct attribution, the {logit} "
               f"{res.logit:.4f} = the sum of {len(res.parts)} parts {res.total:.4f}")  # fmt: skip
    return heading, {"type": "heat", "name": "why-attribution", "what": "logit",
                     "title": f"direct attribution of {what}", "panels": panels}  # fmt: skip


def lens_section(res: LogitLens) -> tuple[str, str]:
    """The logit lens at the predicting position as a table (a row per layer: the produced
    token's rank and probability, the top tokens), with its CSV."""
    rows, csv_rows = [], []
    for i, name in enumerate(res.layers):
        top = ", ".join(f"{html.escape(display_token(t))} {p:.3f}"
                        for t, p in zip(res.top_tokens[i], res.top_probs[i], strict=True))  # fmt: skip
        rank, prob = int(res.rank[i]) + 1, float(res.prob[i])
        rows.append(f"<tr><td class=t>{html.escape(name)}</td><td>{rank}</td>"
                    f"<td>{prob:.4f}</td><td class=t>{top}</td></tr>")  # fmt: skip
        csv_rows.append([name, rank, f"{prob:.6g}",
                         " ".join(f"{t}:{p:.4g}" for t, p in zip(res.top_tokens[i],
                                                                   res.top_probs[i], strict=True))])  # fmt: skip
    link = csv_link("logit-lens", ["layer", "rank", "probability", "top tokens"], csv_rows)
    table = ("<table class=\"av-stats av-lens\"><thead><tr><th>layer</th><th>rank of "
             f"{html.escape(_q(res.target))} (1 = top)</th><th>its probability</th>"
             f"<th>top tokens</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")  # fmt: skip
    heading = (f"Logit lens at position {res.position} ({_q(res.tokens[res.position])}): each "
               f"layer's stream through the final norm and the unembedding")  # fmt: skip
    return heading, f'<div class="av-head"><span class="av-export">{link}</span></div>{table}'


def grid_sections(res: LensGrid, label) -> list[tuple[str, dict | str]]:
    """The logit lens at every layer x position as two heatmaps: the top token's probability
    and the probability of each position's next token (``label(id)``: a token id's text);
    every cell's top token and next token in its hover, and all of them in a CSV (the
    heatmaps' own CSV holds their numbers)."""
    n_layers, t = res.top_probs.shape
    tops = [[label(int(i)) for i in row] for row in res.top_ids.tolist()]
    nexts = [label(int(i)) for i in res.targets]
    hover = [f"layer {res.layers[r]} · {display_token(res.tokens[c])}: top "
             f"{display_token(tops[r][c])} {res.top_probs[r, c]:.3f}, next "
             f"{display_token(nexts[c])} {res.prob[r, c]:.3f} (rank {int(res.rank[r, c]) + 1})"
             for r in range(n_layers) for c in range(t)]  # fmt: skip
    rows = [f"L{x}" if x.isdigit() else x for x in res.layers]
    panels = [matrix_panel(res.top_probs, res.tokens, rows, title="top token's probability",
                           hover=hover),
              matrix_panel(res.prob, res.tokens, rows, title="next token's probability",
                           hover=hover)]  # fmt: skip
    csv_rows = [[res.layers[r], c, res.tokens[c], tops[r][c], f"{res.top_probs[r, c]:.6g}",
                 nexts[c], f"{res.prob[r, c]:.6g}", int(res.rank[r, c]) + 1]
                for r in range(n_layers) for c in range(t)]  # fmt: skip
    link = csv_link("logit-lens-grid", ["layer", "position", "token", "top token",
                                        "top probability", "next token", "next probability",
                                        "next rank"], csv_rows)  # fmt: skip
    heading = (
        f"Logit lens at every layer and position ({t} positions, {n_layers} streams): "
        "what each layer's stream would predict there"
    )
    heat = {"type": "heat", "name": "why-lens-grid", "what": "probability",
            "title": "logit lens: layers × positions", "panels": panels}  # fmt: skip
    note = (
        f'<div class="av-head"><span class="av-export">{link}</span></div><p>Each cell\'s '
        "top token, its probability, and the next token's probability and rank.</p>"
    )
    return [(heading, heat), ("Logit lens at every layer and position: the tokens", note)]


def patching_section(res: Patching) -> tuple[str, dict]:
    """A patching grid as a signed heatmap (0 = the corrupted run, 1 = the clean one)."""
    z, rows, cols = patch_cells(res)
    missing = ~np.isfinite(z)
    panel = matrix_panel(np.nan_to_num(z), cols, rows, signed=True,
                         mask=missing if missing.any() else None,
                         title=f"patching {res.what} ({res.direction})",
                         hover=[f"{r} · {c}" for r in rows for c in cols])  # fmt: skip
    if res.axes[-1] != "position":  # heads along x: names, not tokens
        panel = _labelled(panel, cols, rows)
    else:
        panel["yl"] = [_short(r) for r in rows]
    est = "" if res.grid is not None else " (attribution patching: an estimate)"
    heading = (f"Activation patching of {res.what}, {res.direction}{est}: logit("
               f"{_q(res.answer)}) − logit({_q(res.wrong)}), 0 = corrupted "
               f"{res.corrupted_diff:.3f}, 1 = clean {res.clean_diff:.3f}")  # fmt: skip
    return heading, {"type": "heat", "name": f"why-patching-{res.what}", "what": "restored",
                     "title": heading, "panels": [panel]}  # fmt: skip


def flow_section(res: Flow, n_layers: int) -> tuple[str, str]:
    """The route of an information-flow graph as inline SVG (tokens along x, layers up y,
    each edge as wide as its importance, its heads in its tooltip), with its edges as CSV."""
    step, rise, left, top, bottom = 44, 110, 80, 20, 90
    xs, ticks = flow_ticks(res)  # where node_xy draws the positions (a long source squeezed)
    w, h = int(left + step * (max(xs) + 1) + 20), top + rise * n_layers + bottom

    def xy(node: str) -> tuple[float, float]:
        x, y = node_xy(node, res)
        return left + step * x + step / 2, top + rise * (n_layers - y)

    parts = []
    for i in range(n_layers + 1):
        y = top + rise * (n_layers - i)
        parts.append(f'<line x1="{left}" x2="{w - 10}" y1="{y}" y2="{y}" stroke="#e5e7eb"/>'
                     f'<text x="4" y="{y + 4}">{"embeddings" if i == 0 else f"after L{i - 1}"}'
                     "</text>")  # fmt: skip
    rows = []
    for i in res.route:
        e = res.edges[i]
        (x0, y0), (x1, y1) = xy(e.source), xy(e.target)
        heads = ", ".join(f"H{hd} {wt:.2f}" for hd, wt in e.heads[:4])
        tip = (f"{e.source} ({display_token(res.token_of(e.source))}) → {e.target}: {e.kind} "
               f"{e.weight:.3f}" + (f"; heads {heads}" if heads else ""))  # fmt: skip
        parts.append(f'<line x1="{x0:.1f}" y1="{y0:.1f}" x2="{x1:.1f}" y2="{y1:.1f}" '
                     f'stroke="{FLOW_COLOURS.get(e.kind, "#888")}" stroke-width="'
                     f'{0.8 + 9 * e.weight:.1f}" stroke-linecap="round"><title>'
                     f"{html.escape(tip)}</title></line>")  # fmt: skip
        rows.append([e.source, e.target, e.kind, f"{e.weight:.6g}",
                     " ".join(f"H{hd}:{wt:.4g}" for hd, wt in e.heads)])  # fmt: skip
    for j, t in zip(xs, ticks, strict=True):
        x, y = left + step * j + step / 2, top + rise * n_layers + 12
        parts.append(f'<text x="{x:.0f}" y="{y}" transform="rotate(50 {x:.0f} {y})">'
                     f"{html.escape(display_token(t)[:10])}</text>")  # fmt: skip
    for k, (kind, colour) in enumerate(FLOW_COLOURS.items()):
        parts.append(f'<rect x="{left + 90 * k}" y="{h - 14}" width="10" height="10" '
                     f'fill="{colour}"/><text x="{left + 90 * k + 14}" y="{h - 5}">{kind}</text>')  # fmt: skip
    svg = (f'<svg class="av-svg av-flow" role="img" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}">{"".join(parts)}</svg>')  # fmt: skip
    link = csv_link("information-flow", ["source", "target", "kind", "weight", "heads"], rows)
    heading = (f"Information flow to position {res.position} ({_q(res.tokens[res.position])}), "
               f"threshold {res.threshold:g}: {len(res.route)} edges on the route")  # fmt: skip
    return heading, f'<div class="av-head"><span class="av-export">{link}</span></div>{svg}'


def why_sections(
    attribution: DirectAttribution | None = None,
    lens: LogitLens | None = None,
    patching: Patching | None = None,
    flow: Flow | None = None,
    n_layers: int = 0,
    grid: LensGrid | None = None,
    label=str,
) -> list:
    """The Why this token sections of one step, each result that is given (``n_layers``:
    the layers of the stack that predicts, for the flow graph's rows; ``label(id)``: a token
    id's text, for the lens grid's top tokens)."""
    out: list = []
    if attribution is not None:
        out.append(attribution_section(attribution))
    if lens is not None:
        out.append(lens_section(lens))
    if grid is not None:
        out += grid_sections(grid, label)
    if patching is not None:
        out.append(patching_section(patching))
    if flow is not None:
        out.append(flow_section(flow, n_layers))
    return out
