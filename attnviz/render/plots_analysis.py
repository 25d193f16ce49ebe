"""Plotly figures of analysis results: attribution against attention, head statistics,
training playback and two-checkpoint comparison (pure functions, arrays in, ``go.Figure`` out).

The colours, templates and input checks come from :mod:`attnviz.render.plots_core`;
:mod:`attnviz.render.plots` re-exports every public name here (``plots.head_stats_figure``).
Shapes use the legend of :mod:`attnviz.render.plots`.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go

from ..core.devices import as_numpy
from ..core.errors import InputError
from ..core.masks import causal_mask
from ..core.model import KINDS
from ..train.induction import best_of
from .plots_core import (
    BAR,
    CHANGE_HOVER,
    DIVERGING,
    HIGHLIGHT,
    METHOD_COLOURS,
    SCALE,
    Tokens,
    axis_labels,
    cell_xy,
    color_max,
    figure_height,
    head_grid,
    heat_traces,
    hover_cells,
    mask_cells,
    new_figure,
    to_array,
    token_axis,
)

if TYPE_CHECKING:
    from ..train.snapshots import Snapshots


# -- attribution -------------------------------------------------------------------------------
def share(a: np.ndarray) -> np.ndarray:
    """Each entry as a signed share of the total magnitude (absolute values sum to 1)."""
    total = float(np.abs(a).sum())
    return a / total if total > 0 else a


def attribution_vs_attention(
    attribution: Any,
    attention: Any,
    tokens: Tokens,
    title: str = "",
    names: tuple[str, str] = ("attribution", "attention"),
) -> go.Figure:
    """Gradient attribution and attention over the same source tokens, as grouped bars.

    Args:
        attribution: ``[Ts]`` attribution per source token (may be signed).
        attention: ``[Ts]`` attention per source token (e.g. a cross-attention row).
        tokens: ``Ts`` source tokens (None for positions).
        names: legend names of the two series.
    Returns:
        Two bar traces, each normalised so its absolute values sum to 1 (signs kept); raw
        values are in the hover; the title gives the Spearman rank correlation of the raw
        values (the agreement :func:`attnviz.analysis.attribute` reports).
    """
    attr = to_array(attribution, "attribution", (1,), "[Ts]")
    att = to_array(attention, "attention", (1,), "[Ts]")
    if attr.shape != att.shape:
        raise InputError(f"attribution {list(attr.shape)} and attention {list(att.shape)} differ")
    labels = axis_labels(tokens, attr.shape[0], "tokens", "positions")
    bars = []
    # a method named like METHOD_COLOURS keeps its colour; attention of any layer is blue
    colours = [METHOD_COLOURS.get(names[0], HIGHLIGHT), BAR]
    for raw, name, colour in zip((attr, att), names, colours, strict=True):
        custom = np.array([[t, f"{r:.4g}"] for t, r in zip(labels, raw, strict=True)], object)
        hover = f"{html.escape(name)}<br>%{{x}}: %{{customdata[0]}}<br>share %{{y:.3f}}"
        bar = dict(type="bar", x=np.arange(len(raw)), y=share(raw), name=name, customdata=custom)
        bar.update(
            marker_color=colour, hovertemplate=hover + "<br>raw %{customdata[1]}<extra></extra>"
        )
        bars.append(bar)
    if np.ptp(attr) > 0 and np.ptp(att) > 0:  # the agreement attnviz.analysis.attribute reports
        ra, rb = (np.argsort(np.argsort(v)).astype(float) for v in (attr, att))
        rho = float(np.corrcoef(ra, rb)[0, 1])
        what = f"Spearman ρ = {rho:.2f}"
        title = f"{title} ({what})" if title else what
    return new_figure(
        bars,
        title=title,
        barmode="group",
        height=360,
        xaxis=token_axis(labels, title="source token"),
        yaxis=dict(title="share of total"),
    )


# -- head statistics ---------------------------------------------------------------------------
def _is_number(v: Any) -> bool:
    return isinstance(v, int | float | np.number) and not isinstance(v, bool)


def _wrap_role(role: str, width: int = 9, lines: int = 2) -> str:
    """A role as a cell label of at most ``lines`` short lines: the words before "head" or
    a parenthesis (``"dead head (uniform, no effect)"`` -> ``"dead"``, ``"uniform/dead head"``
    -> ``"uniform/<br>dead"``), broken after "/" and "-". The whole role is in the hover;
    a label wider than its cell spills over its neighbours."""
    short = role.split("(")[0].strip()
    words = [w for w in short.split() if w != "head"] or short.split()
    parts = " ".join(words).replace("/", "/ ").replace("-", "- ").split()
    out: list[str] = []
    for w in parts:
        if out and len(out[-1]) + 1 + len(w) <= width and not out[-1].endswith(("/", "-")):
            out[-1] += " " + w
        elif out and out[-1].endswith("-") and len(out[-1]) + len(w) <= width:
            out[-1] += w
        else:
            out.append(w)
    if len(out) > lines:
        out = out[: lines - 1] + [out[lines - 1].rstrip("/-") + "…"]
    return "<br>".join(out)


#: Cells per figure row up to which role labels are written in the cells (hover beyond).
ROLE_LABEL_CELLS = 24


def head_stats_figure(rows: Sequence[Mapping[str, Any]], metric: str = "entropy") -> go.Figure:
    """One layer x head heatmap per attention kind, coloured by ``metric``.

    Args:
        rows: one dict per head with ``"kind"``, ``"layer"``, ``"head"``, numeric metrics
            and ``"role"`` (a short description shown in the cell and the hover).
        metric: which numeric key colours the cells (one shared colour scale).
    Returns:
        One panel per kind present (encoder self, decoder self, cross order); cells of heads
        with no row are empty.
    """
    rows = list(rows)
    if not rows:
        raise InputError("no head statistics to plot")
    numeric = [k for k, v in rows[0].items() if _is_number(v) and k not in ("layer", "head")]
    if metric not in numeric:
        raise InputError(f"metric {metric!r} is not in the rows; choose one of {numeric}")
    present = {r["kind"] for r in rows}
    kinds = [k for k in KINDS if k in present] + sorted(present - set(KINDS))
    n_h = max(int(r["head"]) for r in rows) + 1
    n_l = max(int(r["layer"]) for r in rows) + 1
    traces = []
    labelled = n_h * len(kinds) <= ROLE_LABEL_CELLS  # narrower cells: roles in the hover only
    for n, kind in enumerate(kinds, start=1):
        mine = [r for r in rows if r["kind"] == kind]
        layers = max(int(r["layer"]) for r in mine) + 1
        z = np.full((layers, n_h), np.nan)
        role, hover = np.full((2, layers, n_h), "", dtype=object)
        for r in mine:
            i, h, v = int(r["layer"]), int(r["head"]), float(r[metric])
            full = html.escape(str(r.get("role", "")))
            z[i, h], role[i, h] = v, _wrap_role(full)
            hover[i, h] = f"{kind} L{i} H{h}<br>{metric}: {v:.4g}<br>role: {full}"
        s = "" if n == 1 else str(n)
        cells = dict(type="heatmap", z=z, x=np.arange(n_h), y=np.arange(layers), name=kind)
        cells.update(text=role, texttemplate="%{text}" if labelled else "", xgap=2, ygap=2)
        cells.update(textfont=dict(size=10 if n_h * len(kinds) <= 12 else 9))
        cells.update(customdata=hover, hovertemplate="%{customdata}<extra></extra>")
        cells.update(hoverongaps=False, coloraxis="coloraxis", xaxis=f"x{s}", yaxis=f"y{s}")
        traces.append(cells)
    x = token_axis([f"H{h}" for h in range(n_h)])
    y = token_axis([f"L{i}" for i in range(n_l)], reverse=True)
    return new_figure(
        traces,
        title=f"heads by {metric}",
        height=int(np.clip(140 + 70 * n_l, 260, 900)),
        # a normalised metric keeps its 0-1 scale: heads that differ in the fifth digit
        # would otherwise span the whole colour range
        coloraxis=dict(colorscale=SCALE, colorbar=dict(title=metric))
        | (dict(cmin=0.0, cmax=1.0) if metric.startswith("norm_") else {}),
        **head_grid(1, len(kinds), kinds, x, y, gaps=(0.06, 0), match=False),
    )


def head_stats_table(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """All head statistics as a plotly Table: kind, layer, head, role, then every other key."""
    rows = list(rows)
    if not rows:
        raise InputError("no head statistics to show")
    cols = list(dict.fromkeys(["kind", "layer", "head", "role", *(k for r in rows for k in r)]))

    def cell(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float | np.floating) else html.escape(str(v))

    values = [[cell(r.get(c, "")) for r in rows] for c in cols]
    table = dict(
        type="table",
        header=dict(values=[f"<b>{c}</b>" for c in cols], align="left", fill_color="#c8d4e3"),
        cells=dict(values=values, align="left", fill_color="#ebf0f8"),
    )
    return new_figure([table], height=int(np.clip(80 + 26 * len(rows), 200, 900)))


# -- training playback -------------------------------------------------------------------------
_STILL = dict(mode="immediate", frame=dict(duration=0, redraw=True), transition=dict(duration=0))
_PLAY = dict(frame=dict(duration=400, redraw=True), fromcurrent=True)


def player_controls(steps: list[int]) -> dict[str, Any]:
    """Layout of a slider over frames named "0", "1", ... (labelled by step) and play / pause."""
    marks = [
        dict(method="animate", label=str(s), args=[[str(i)], _STILL]) for i, s in enumerate(steps)
    ]
    play = dict(label="▶ play", method="animate", args=[None, _PLAY])
    pause = dict(label="❚❚ pause", method="animate", args=[[None], _STILL])
    # the buttons sit left of the slider on its line, not on top of it; it starts at the first
    at = dict(x=0, y=0, xanchor="left", yanchor="top", pad=dict(t=62, r=10))
    slider = dict(active=0, currentvalue=dict(prefix="step "), pad=dict(t=50), steps=marks)
    slider.update(x=0.2, len=0.8, y=0, yanchor="top")
    return dict(
        sliders=[slider],
        updatemenus=[dict(type="buttons", direction="left", buttons=[play, pause], **at)],
    )


def snapshot_timeline(
    snaps: Snapshots, kind: str, layer: int, head: int | None = None, bos: str = "<bos>"
) -> go.Figure:
    """How attention on the probe input formed over training: one animation frame per snapshot.

    Args:
        snaps: :class:`attnviz.train.snapshots.Snapshots` (``weights[(kind, layer)]`` is a list of
            ``S`` tensors ``[H, Tq, Tk]``).
        kind, layer: which attention.
        head: one head, or None for the mean over heads.
        bos: label of the decoder's first input token (decoder rows are BOS + target).
    Returns:
        ``S`` frames (named "0", "1", ...), a slider over the steps and play / pause buttons;
        each frame's title gives the step, the loss and the probe's greedy output. The causal
        mask of ``"decoder_self"`` is drawn grey (the probe has no padding).
    """
    if (kind, layer) not in snaps.weights or not snaps.steps:
        held = ", ".join(f"{k}/{i}" for k, i in snaps.weights) or "nothing"
        raise InputError(f"the snapshots hold no {kind!r} layer {layer}; they hold {held}")
    stack = np.stack([as_numpy(w) for w in snaps.weights[kind, layer]])  # [S, H, Tq, Tk]
    if head is not None and not 0 <= head < stack.shape[1]:
        raise InputError(f"head must be in 0..{stack.shape[1] - 1}, got {head}")
    z = stack.mean(axis=1) if head is None else stack[:, head]  # [S, Tq, Tk]
    tq, tk = z.shape[1:]
    # decoder rows are BOS + target; a decoder-only probe is one sequence that starts with it
    tgt_in = list(snaps.probe_tgt) if snaps.one_sequence else [bos, *snaps.probe_tgt]
    x = axis_labels(tgt_in if kind == "decoder_self" else snaps.probe_src, tk, "tokens", "keys")
    y = axis_labels(snaps.probe_src if kind == "encoder_self" else tgt_in, tq, "tokens", "queries")
    m = as_numpy(causal_mask(tq, tk)) if kind == "decoder_self" else None
    if m is not None:
        z = np.where(m, np.nan, z)
    which = "mean over heads" if head is None else f"head {head}"

    def title(i: int) -> str:
        out = html.escape(snaps.outputs[i])
        step, loss = snaps.steps[i], snaps.losses[i]
        return f"{kind} layer {layer}, {which} · step {step} · loss {loss:.4f} · output “{out}”"

    top = color_max(z, None)
    fig = new_figure(
        heat_traces(z[0], m, hover_cells(x, y), zmax=top),
        title=title(0),
        height=figure_height(1, tq) + 80,
        xaxis=token_axis(x, title="key"),
        yaxis=token_axis(y, reverse=True, title="query"),
        **player_controls(snaps.steps),
    )
    fig.frames = [
        dict(
            data=[dict(type="heatmap", z=z[i])],
            traces=[0],
            name=str(i),
            layout=dict(title_text=title(i)),
        )
        for i in range(len(snaps.steps))
    ]
    return fig


def induction_curves(
    steps: Sequence[int], scores: Sequence[Mapping[str, Any]], at: int | None = None
) -> go.Figure:
    """Induction heads forming, on one time axis: the loss on each half of repeated random
    tokens (left axis, nats a token) and the best induction and previous-token scores (right
    axis, 0-1) at every training snapshot.

    Args:
        steps: ``S`` training steps; ``scores``: ``S`` dicts with ``induction`` and
            ``prev_token`` ``[L, H]`` tables and ``loss_first`` / ``loss_second``
            (:meth:`attnviz.train.induction.InductionScores.to_dict`).
        at: the snapshot to mark with a vertical line (the one the playback shows).
    Returns:
        Four line traces named ``"loss on the repeat"``, ``"loss on the first run"``,
        ``"induction score"`` (best head of layers 1 and up) and ``"previous-token score"``
        (best head of layer 0).
    """
    if len(steps) != len(scores) or not steps:
        raise InputError("one score set per snapshot step is needed")
    ind, prev = zip(*(best_of(s) for s in scores), strict=True)
    x = list(steps)
    lines = [
        ("loss on the repeat", [s["loss_second"] for s in scores], "y", "#d62728", "solid"),
        ("loss on the first run", [s["loss_first"] for s in scores], "y", "#d62728", "dot"),
        ("induction score", list(ind), "y2", "#1f77b4", "solid"),
        ("previous-token score", list(prev), "y2", "#2ca02c", "solid"),
    ]
    data = [
        dict(type="scatter", mode="lines+markers", name=name, x=x, y=y, yaxis=axis,
             line=dict(color=color, dash=dash), marker=dict(size=4),
             hovertemplate=f"step %{{x}}<br>{name} %{{y:.3f}}<extra></extra>")
        for name, y, axis, color, dash in lines
    ]  # fmt: skip
    shapes = []
    if at is not None and 0 <= at < len(x):
        shapes.append(dict(type="line", x0=x[at], x1=x[at], yref="paper", y0=0, y1=1,
                           line=dict(color="#888888", dash="dash", width=1)))  # fmt: skip
    return new_figure(
        data,
        title="induction heads forming: loss on each half and the best heads' scores",
        height=400,
        xaxis=dict(title="training step"),
        yaxis=dict(title="loss (nats a token)", rangemode="tozero"),
        yaxis2=dict(title="score", overlaying="y", side="right", range=[0, 1.05]),
        legend=dict(orientation="h", y=-0.32),
        shapes=shapes,
    )


# -- two checkpoints -----------------------------------------------------------------------------
def head_divergence(
    divergence: Any, matching: Any = None, title: str = "", zmax: float | None = None
) -> go.Figure:
    """Per-head divergence of two models as a layers x heads grid.

    Args:
        divergence: ``[L, H]`` values (e.g. Jensen–Shannon divergence in bits, in [0, 1]).
        matching: optional ``[L, H]`` ints: the head of the other model matched to each head,
            written in its cell (``"→H2"``).
        title: figure title.
        zmax: top of the colour scale (default: the largest value, or 1 when all are 0).
    Returns:
        One heatmap trace named ``"divergence"`` (row 0 = layer 0 at the top).
    """
    d = to_array(divergence, "divergence", (2,), "[L, H]")
    n_l, n_h = d.shape
    cells = np.array([[f"{v:.3f}" for v in row] for row in d], dtype=object)  # [L, H]
    if matching is not None:
        m = np.asarray(matching)
        if m.shape != d.shape:
            raise InputError(f"matching {list(m.shape)} does not fit divergence {list(d.shape)}")
        cells = np.array(
            [[f"{cells[i, h]}<br>→H{int(m[i, h])}" for h in range(n_h)] for i in range(n_l)],
            dtype=object,
        )
    x = [f"H{h}" for h in range(n_h)]
    y = [f"L{i}" for i in range(n_l)]
    trace = dict(
        type="heatmap", z=d, x=np.arange(n_h), y=np.arange(n_l), name="divergence",
        colorscale=SCALE, zmin=0.0, zmax=color_max(d, None, zmax), text=cells,
        texttemplate="%{text}", customdata=cells, colorbar=dict(title="JSD"),
        hovertemplate="layer %{y}, head %{x}<br>divergence %{z:.4f}<extra></extra>",
    )  # fmt: skip
    return new_figure(
        [trace],
        title=title,
        height=int(np.clip(140 + 60 * n_l, 260, 900)),
        xaxis=token_axis(x, title="head"),
        yaxis=token_axis(y, reverse=True, title="layer"),
    )


def attention_difference(
    a: Any,
    b: Any,
    x_tokens: Tokens,
    y_tokens: Tokens,
    title: str = "",
    mask: Any = None,
    names: tuple[str, str] = ("A", "B"),
) -> go.Figure:
    """One head of two models on the same input: A | B | A − B.

    Args:
        a, b: ``[Tq, Tk]`` weights of the same head position in two models.
        x_tokens, y_tokens: ``Tk`` key and ``Tq`` query tokens (None for positions).
        title: figure title.
        mask: optional bool mask (True = blocked) shared by both, drawn grey in A and B.
        names: panel titles of the two models.
    Returns:
        Three panels: traces named ``names[0]``, ``names[1]`` (shared ``coloraxis``) and
        ``"A - B"`` (``coloraxis2``: diverging, centred on 0, symmetric).
    """
    wa = to_array(a, "a", (2,), "[Tq, Tk]")
    wb = to_array(b, "b", (2,), "[Tq, Tk]")
    if wa.shape != wb.shape:
        raise InputError(f"a {list(wa.shape)} and b {list(wb.shape)} differ in shape")
    m = mask_cells(mask, wa.shape)
    x, y = cell_xy(x_tokens, y_tokens, *wa.shape)
    hover = hover_cells(x, y)
    diff = wa - wb  # [Tq, Tk]
    traces = heat_traces(wa, m, hover, name=names[0], coloraxis="coloraxis")
    traces += heat_traces(wb, m, hover, name=names[1], coloraxis="coloraxis", panel=2)
    change = dict(name="A - B", coloraxis="coloraxis2", hovertemplate=CHANGE_HOVER)
    traces += heat_traces(diff, m, hover, panel=3, **change)
    span = float(np.abs(diff).max()) or 1.0
    bar = dict(thickness=12, len=1)
    titles = (names[0], names[1], f"{names[0]} − {names[1]}")
    return new_figure(
        traces,
        title=title,
        height=figure_height(1, wa.shape[0]),
        coloraxis=dict(
            colorscale=SCALE,
            cmin=0.0,
            cmax=max(color_max(wa, m), color_max(wb, m)),
            colorbar=dict(x=0.65, **bar),
        ),  # fmt: skip
        coloraxis2=dict(colorscale=DIVERGING, cmin=-span, cmax=span, colorbar=dict(**bar)),
        **head_grid(1, 3, titles, token_axis(x), token_axis(y, reverse=True), gaps=(0.1, 0)),
    )
