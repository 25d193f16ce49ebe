"""Figures of "Why this token" (:mod:`attnviz.analysis.dla`, :mod:`.why`, :mod:`.patching`,
:mod:`.flow`): pure functions of a library result, no gradio.

- :func:`dla_figure`: the parts of a direct attribution as layers x (heads, biases, MLP), above
  a row of what sits outside the layers;
- :func:`grid_figure`: the logit lens at every layer x position;
- :func:`patch_figure`: a patching grid with its axes;
- :func:`flow_figure`: the information-flow route, tokens along x and layers up y (an
  encoder-decoder model: the encoder's source tokens on the left, the decoder's on the right,
  cross-attention edges between them); :func:`edge_figure`: one edge's heads, each head's
  recorded attention map beside its contribution map;
- :func:`cell_attention_figure`: an opened patching cell's attention (the patched run's
  recorded weights beside the unpatched run's).
"""

from __future__ import annotations

import html
from collections.abc import Callable

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.dla import DirectAttribution
from ..analysis.flow import Flow
from ..analysis.patching import Patching
from ..analysis.why import LensGrid
from .plots_core import DIVERGING, SCALE, TEMPLATE, token_axis, token_label

FLOW_COLOURS = {"attention": "#4c78a8", "cross": "#54a24b", "residual": "#9ca3af",
                "mlp": "#f58518"}  # fmt: skip
#: where a flow node sits above its layer's line: after self-attention, cross, the MLP
NODE_RISE = {"x": 0.0, "a": 0.33, "c": 0.6, "m": 0.8}


def quoted(token: str) -> str:
    """A token in a figure's title: “token”, spaces visible, HTML escaped."""
    return f"“{token_label(token)}”"


# -- direct attribution ------------------------------------------------------------------------
def column_of(part) -> str:
    """A part's column in the layers grid: ``"H2"``, ``"X1"`` (cross), ``"attn bias"``,
    ``"mlp"``, ``"attn norm bias"`` (its name without the layer)."""
    return part.name[len(f"L{part.layer}") :].strip()


def dla_cells(res: DirectAttribution) -> tuple[list, np.ndarray, np.ndarray, list[str]]:
    """The parts as drawn: ``(parts outside the layers, z [layers, columns] (NaN where a
    layer has no such part), each cell's part name, column names)``."""
    outside = [p for p in res.parts if p.layer is None]
    inside = [p for p in res.parts if p.layer is not None]
    cols = list(dict.fromkeys(column_of(p) for p in inside))
    n_layers = max((p.layer for p in inside), default=-1) + 1
    z = np.full((n_layers, len(cols)), np.nan)
    names = np.full((n_layers, len(cols)), "", dtype=object)
    for p in inside:
        j = cols.index(column_of(p))
        z[p.layer, j], names[p.layer, j] = p.value, p.name
    return outside, z, names, cols


def dla_figure(res: DirectAttribution) -> go.Figure:
    """The parts of ``res`` as two heatmaps on one diverging scale: a row of the parts outside
    the layers (embeddings, positions, final norm, output bias) above layers x (heads, biases,
    MLP). Every part is one cell (its name in the hover); empty cells are NaN."""
    outside, z, names, cols = dla_cells(res)
    n_layers = z.shape[0]
    values = res.values()
    span = float(np.abs(values).max()) if values.size else 1.0
    span = span or 1.0
    height = int(np.clip(230 + 46 * n_layers, 320, 1200))
    fig = make_subplots(rows=2, cols=1, row_heights=[1, max(n_layers, 1)],
                        vertical_spacing=min(0.08, 60 / height))  # fmt: skip
    common = dict(colorscale=DIVERGING, zmin=-span, zmax=span, zmid=0.0, texttemplate="%{z:.2f}",
                  hovertemplate="%{customdata}: %{z:+.4f}<extra></extra>")  # fmt: skip
    fig.add_trace(go.Heatmap(
        z=[[p.value for p in outside]], x=list(range(len(outside))), y=[0], name="outside",
        customdata=[[p.name for p in outside]], showscale=False, **common,
    ), row=1, col=1)  # fmt: skip
    fig.add_trace(go.Heatmap(
        z=z, x=list(range(len(cols))), y=list(range(n_layers)), name="layers", customdata=names,
        colorbar=dict(title="logit" + (" diff." if res.versus else ""), thickness=14), **common,
    ), row=2, col=1)  # fmt: skip
    what = quoted(res.token) + (f" and not {quoted(res.versus)}" if res.versus else "")
    logit = "logit difference" if res.versus else "logit"
    fig.update_layout(
        template=TEMPLATE,
        title=f"why {what}: {logit} {res.logit:.3f} = sum of the parts {res.total:.3f}",
        height=height,
        margin=dict(l=90, r=30, t=110, b=60),
    )
    fig.update_xaxes(token_axis([html.escape(p.name) for p in outside], side="top"), row=1, col=1)
    fig.update_yaxes(tickmode="array", tickvals=[0], ticktext=["outside"], row=1, col=1)
    fig.update_xaxes(token_axis([html.escape(c) for c in cols], title="head / part"), row=2, col=1)
    fig.update_yaxes(token_axis([f"L{i}" for i in range(n_layers)], reverse=True, title="layer"),
                     row=2, col=1)  # fmt: skip
    return fig


# -- the logit lens ----------------------------------------------------------------------------
def grid_figure(res: LensGrid, name_of: Callable[[int], str]) -> go.Figure:
    """The lens at every layer x position: each cell the probability of that position's next
    token (the last: the token produced), the top token written in it; ``name_of(id)`` is a
    token's text."""
    top = [[token_label(name_of(int(i))) for i in row] for row in res.top_ids.tolist()]
    nxt = [token_label(name_of(i)) for i in res.targets]
    hover = np.array([[f"layer {name}, position {j} → {nxt[j]}: p %{{z:.3f}}; top {top[r][j]}"
                       for j in range(len(res.tokens))] for r, name in enumerate(res.layers)],
                     dtype=object)  # fmt: skip
    trace = go.Heatmap(
        z=res.prob, x=list(range(len(res.tokens))), y=list(range(len(res.layers))),
        text=top, texttemplate="%{text}", colorscale=SCALE, zmin=0, zmax=1, name="lens",
        hovertext=hover, hoverinfo="text", colorbar=dict(title="p(next)", thickness=14),
    )  # fmt: skip
    return go.Figure(
        [trace],
        layout=dict(
            template=TEMPLATE,
            title="logit lens, every layer × position: p(the next token); text: the top token",
            height=int(np.clip(200 + 40 * len(res.layers), 300, 1200)),
            xaxis=token_axis([token_label(t) for t in res.tokens], title="position", tickangle=-45),
            yaxis=token_axis(res.layers, reverse=True, title="stream after layer"),
        ),
    )


# -- patching ----------------------------------------------------------------------------------
def patch_cells(res: Patching) -> tuple[np.ndarray, list[str], list[str]]:
    """The grid as drawn: ``(z [rows, cols], row labels, column labels)``; a
    ``head_positions`` grid ``[M, H, T]`` has a row per module and head."""
    g = res.grid if res.grid is not None else res.approx
    if g.ndim == 3:
        rows = [f"{m} H{h}" for m in res.labels[res.axes[0]] for h in res.labels[res.axes[1]]]
        return g.reshape(-1, g.shape[-1]), rows, list(res.labels[res.axes[2]])
    rows = list(res.labels[res.axes[0]])
    cols = list(res.labels[res.axes[1]])
    if res.axes[1] == "head":
        cols = [f"H{c}" for c in cols]
    if res.axes[0] == "layer":
        rows = [f"L{r}" for r in rows]
    return g, rows, cols


def _axis_text(labels: list[str], axis: str) -> list[str]:
    """Tick labels: tokens with their spaces shown (a position axis), other names escaped."""
    if axis == "position":
        return [token_label(t) for t in labels]
    return [html.escape(t) for t in labels]


def patch_figure(res: Patching) -> go.Figure:
    """The patching grid with its axes, on a diverging scale centred on 0 (the corrupted
    run) and reaching at least 1 (the clean run)."""
    z, rows, cols = patch_cells(res)
    span = max(1.0, float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else 1.0)
    small = z.size <= 400
    trace = go.Heatmap(
        z=z, x=list(range(len(cols))), y=list(range(len(rows))), colorscale=DIVERGING,
        zmin=-span, zmax=span, zmid=0.0, name="patching", texttemplate="%{z:.2f}" if small else None,
        hovertemplate="%{y} · %{x}: %{z:.3f}<extra></extra>",
        colorbar=dict(title="restored<br>(0..1)", thickness=14),
    )  # fmt: skip
    x_name = res.axes[-1]
    y_name = " / ".join(res.axes[:-1])
    return go.Figure(
        [trace],
        layout=dict(
            template=TEMPLATE,
            title=(f"patching {res.what} ({res.direction}): logit({token_label(res.answer)}) − "
                   f"logit({token_label(res.wrong)}), 0 = corrupted "
                   f"{res.corrupted_diff:.2f}, 1 = clean {res.clean_diff:.2f}"),
            height=int(np.clip(200 + 34 * len(rows), 300, 1400)),
            xaxis=token_axis(_axis_text(cols, x_name), title=x_name, tickangle=-45),
            yaxis=token_axis(_axis_text(rows, y_name), reverse=True, title=y_name),
        ),
    )  # fmt: skip


# -- information flow --------------------------------------------------------------------------
#: The width, in token steps, a long source is drawn in: a speech encoder's 1500 frames are
#: squeezed to it, so the decoder's few tokens keep their room beside them.
SOURCE_WIDTH = 60


def _source_scale(res: Flow) -> float:
    n = len(res.source_tokens or ())
    return min(1.0, SOURCE_WIDTH / n) if n else 1.0


def node_xy(name: str, res: Flow) -> tuple[float, float]:
    """Where a flow node is drawn: x its position (an encoder-decoder model's decoder positions
    after the source's and a gap; a source of more than :data:`SOURCE_WIDTH` positions
    squeezed to that width); y its layer, plus :data:`NODE_RISE` for the stream after a
    layer's self-attention (``a``), cross-attention (``c``) and its MLP (``m``)."""
    info = res.nodes[name]
    letter = name.lstrip("e")[0]
    x = float(info["position"])
    if res.source_tokens is not None:
        k = _source_scale(res)
        x = x * k if info["stack"] == "encoder" else x + len(res.source_tokens) * k + 1
    return x, info["layer"] + NODE_RISE[letter]


def flow_ticks(res: Flow) -> tuple[list[float], list[str]]:
    """Position ticks where :func:`node_xy` draws them: the source's tokens (a squeezed
    source every n-th one, so that its labels stay readable), then the decoder's (or the
    one stack's)."""
    toks = [token_label(t) for t in res.tokens]
    if res.source_tokens is None:
        return [float(i) for i in range(len(toks))], toks
    src = [token_label(t) for t in res.source_tokens]
    k = _source_scale(res)
    shown = range(0, len(src), max(1, round(1 / k)))
    off = len(src) * k + 1
    return [i * k for i in shown] + [off + i for i in range(len(toks))], [
        src[i] for i in shown
    ] + toks


def flow_figure(res: Flow, n_layers: int) -> go.Figure:
    """The route of ``res``: tokens along x, layers up y, each edge a line as wide as its
    importance (self-attention blue, cross-attention green, residual grey, MLP orange); hover
    a midpoint for the edge and its heads."""
    traces: list[go.Scatter] = []
    buckets: dict[tuple[str, int], tuple[list, list]] = {}
    mids: dict[str, tuple[list, list, list]] = {}
    for i in res.route:
        e = res.edges[i]
        (x0, y0), (x1, y1) = node_xy(e.source, res), node_xy(e.target, res)
        xs, ys = buckets.setdefault((e.kind, int(round(e.weight * 10))), ([], []))
        xs += [x0, x1, None]
        ys += [y0, y1, None]
        heads = ", ".join(f"H{h} {w:.2f}" for h, w in e.heads[:4])
        m = mids.setdefault(e.kind, ([], [], [], []))
        m[0].append((x0 + x1) / 2)
        m[1].append((y0 + y1) / 2)
        m[3].append(i)  # the edge's index: a click on it opens its heads
        m[2].append(f"{e.source} ({token_label(res.token_of(e.source))}) → {e.target}: "
                    f"{e.kind} {e.weight:.3f}" + (f"<br>heads {heads}" if heads else ""))  # fmt: skip
    shown_kinds = set()
    for (kind, w10), (xs, ys) in sorted(buckets.items()):
        traces.append(go.Scatter(
            x=xs, y=ys, mode="lines", name=kind, legendgroup=kind,
            showlegend=kind not in shown_kinds, hoverinfo="skip",
            line=dict(color=FLOW_COLOURS.get(kind, "#888"), width=0.8 + 0.9 * w10),
        ))  # fmt: skip
        shown_kinds.add(kind)
    for kind, (xs, ys, text, index) in mids.items():
        click = kind in ("attention", "cross")  # an attention edge opens its heads
        traces.append(go.Scatter(
            x=xs, y=ys, mode="markers", marker=dict(size=12 if click else 6, opacity=0.01,
                                                    color=FLOW_COLOURS.get(kind, "#888")),
            hovertext=[t + ("<br>click: its heads" if click else "") for t in text],
            hoverinfo="text", showlegend=False, name=f"{kind} edges", customdata=index,
        ))  # fmt: skip
    top = f"x{n_layers}_{res.position}"
    ends = (n for i in res.route for n in (res.edges[i].source, res.edges[i].target))
    used = [n for n in dict.fromkeys([*ends, top]) if n in res.nodes]
    pts = [node_xy(n, res) for n in used]
    traces.append(go.Scatter(
        x=[p[0] for p in pts], y=[p[1] for p in pts], mode="markers", name="nodes",
        marker=dict(size=[14 if n == top else 6 for n in used], color="#6b7280",
                    symbol=["star" if n == top else "circle" for n in used]),
        hovertext=used, hoverinfo="text", showlegend=False,
    ))  # fmt: skip
    ticks = [0.0] + [v for i in range(n_layers) for v in (i + 0.33, i + 1.0)]
    texts = ["embeddings"] + [t for i in range(n_layers) for t in (f"L{i} attn", f"after L{i}")]
    xvals, xtext = flow_ticks(res)
    where = f"({token_label(res.tokens[res.position])})"
    return go.Figure(
        traces,
        layout=dict(
            template=TEMPLATE,
            title=(f"information flow to position {res.position} {where}, threshold "
                   f"{res.threshold:g}: {len(res.route)} edges on the route"),
            height=int(np.clip(220 + 110 * n_layers, 320, 1400)),
            xaxis=dict(tickmode="array", tickvals=xvals, ticktext=xtext, title="position",
                       tickangle=-45, zeroline=False, showgrid=False,
                       range=[-0.5, max(xvals) + 0.5]),  # every token, not the route's
            yaxis=dict(tickmode="array", tickvals=ticks, ticktext=texts, zeroline=False,
                       range=[-0.3, n_layers + 0.3]),
            legend=dict(orientation="h", x=1, xanchor="right", y=1.0, yanchor="bottom"),
            hovermode="closest",
        ),
    )  # fmt: skip


def edge_name(res: Flow, index: int, plain: bool = False) -> str:
    """An edge in words: ``decoder_self 0: position 0 “a” → position 1 “b” (0.60)``; HTML
    escaped for a figure, ``plain`` text for a menu or markdown (escaped there)."""
    e = res.edges[index]
    src, dst = res.nodes[e.source], res.nodes[e.target]
    where = f"{e.site[0]} {e.site[1]}: " if e.site else ""
    from_ = "source " if e.kind == "cross" else ""
    name = (f"{where}{from_}position {src['position']} {quoted(res.token_of(e.source))} → "
            f"position {dst['position']} {quoted(res.token_of(e.target))} ({e.weight:.2f})")  # fmt: skip
    return html.unescape(name) if plain else name


def _ticks(labels: list[str], most: int = 60) -> dict:
    """Token ticks, every n-th one past ``most`` (a speech encoder's 1500 frames)."""
    every = max(1, -(-len(labels) // most))
    return dict(tickmode="array", tickvals=list(range(0, len(labels), every)),
                ticktext=[token_label(t) for t in labels[::every]], showgrid=False)  # fmt: skip


def pair_figure(
    rows: list[tuple[str, np.ndarray, str, np.ndarray]],
    keys: list[str],
    queries: list[str],
    title: str,
    mark: tuple[int, int] | None = None,
    names: tuple[str, str] = ("attention", "contribution"),
) -> go.Figure:
    """Rows of two heatmaps side by side (``(left title, [Tq, Tk], right title, [Tq, Tk])``),
    keys along x and queries down y; ``mark``: the cell ``(query, key)`` outlined in each.
    The left maps share a 0..1 scale; the right ones share 0..their largest value."""
    n = len(rows)
    fig = make_subplots(rows=n, cols=2, subplot_titles=[t for r in rows for t in (r[0], r[2])],
                        horizontal_spacing=0.2, vertical_spacing=min(0.15, 0.6 / max(n, 1)))  # fmt: skip
    hi = max((float(np.nanmax(r[3])) for r in rows if np.size(r[3])), default=1.0) or 1.0
    hover = "query %{y} “%{customdata[0]}” → key %{x} “%{customdata[1]}”: %{z:.3f}<extra></extra>"
    cd = np.array([[[token_label(q), token_label(k)] for k in keys] for q in queries], dtype=object)
    for r, (_, left, _, right) in enumerate(rows, start=1):
        for c, (z, scale, top, name) in enumerate(
            ((left, SCALE, 1.0, names[0]), (right, "Magma", hi, names[1])), start=1
        ):
            fig.add_trace(go.Heatmap(
                z=z, colorscale=scale, zmin=0, zmax=top, customdata=cd, hovertemplate=hover,
                name=name, showscale=r == 1,
                colorbar=dict(title=name, thickness=12, len=min(1.0, 1.2 / n), y=1,
                              yanchor="top", x=0.41 if c == 1 else 1.01),
            ), row=r, col=c)  # fmt: skip
            if mark is not None:
                q, k = mark
                axis = 2 * (r - 1) + c
                ref = "" if axis == 1 else str(axis)
                fig.add_shape(type="rect", x0=k - 0.5, x1=k + 0.5, y0=q - 0.5, y1=q + 0.5,
                              xref=f"x{ref}", yref=f"y{ref}",
                              line=dict(color="#22d3ee", width=2.5))  # fmt: skip
    fig.update_xaxes(**_ticks(keys), tickangle=-45)
    fig.update_yaxes(**_ticks(queries), autorange="reversed")
    fig.update_layout(template=TEMPLATE, title=title, margin=dict(l=70, r=40, t=110, b=70),
                      height=int(np.clip(140 + n * (130 + 22 * min(len(queries), 24)), 340, 2000)))  # fmt: skip
    return fig


def edge_figure(res: Flow, index: int, top: int = 3) -> go.Figure:
    """Attention edge ``index`` of ``res``: its ``top`` heads (ranked by contribution), each
    one's attention map as the run recorded it beside its contribution map (its importance
    through each key into each query's stream), the edge's cell outlined."""
    e = res.edges[index]
    m = res.maps[e.site]
    heads = res.edge_heads(index)[:top]
    keys = res.source_tokens if e.kind == "cross" and res.source_tokens else res.tokens
    q, k = res.nodes[e.target]["position"], res.nodes[e.source]["position"]
    rows = [(f"H{h} attention (recorded): {a:.3f} at the edge", m.attention[h],
             f"H{h} contribution: {w:.3f} of the edge", m.contribution[h])
            for h, w, a in heads]  # fmt: skip
    return pair_figure(rows, list(keys), list(res.tokens), f"heads carrying {edge_name(res, index)}",
                       (q, k))  # fmt: skip


def cell_attention_figure(
    patched: np.ndarray,
    base: np.ndarray,
    keys: list[str],
    queries: list[str],
    site: str,
    run: str,
) -> go.Figure:
    """An opened patching cell's attention at ``site`` (``"decoder_self 0 · H1"``): the patched
    run's recorded weights ``[Tq, Tk]`` beside those of the ``run`` it patched, unpatched."""
    rows = [(f"{site}: patched run (recorded)", patched,
             f"{site}: the {run} run, unpatched", base)]  # fmt: skip
    fig = pair_figure(rows, keys, queries, f"attention of the patched run, {site}",
                      names=("patched", "unpatched"))  # fmt: skip
    fig.update_traces(zmax=1.0, colorscale=SCALE)  # one scale: one colour bar
    fig.update_traces(showscale=False, selector=dict(name="patched"))
    fig.update_traces(colorbar_title="weight", selector=dict(name="unpatched"))
    return fig
