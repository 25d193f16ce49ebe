"""The few figures only the app needs (placeholders, paired bars); the rest is ``attnviz.render.plots``.

Pure functions, arrays in, ``go.Figure`` out, in the style of :mod:`attnviz.render.plots` (no gradio).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from ..core.sites import head_name
from ..render import plots

COLOURS = (plots.BAR, plots.HIGHLIGHT, "#54a24b", "#b279a2")


def placeholder(message: str, height: int = 260) -> go.Figure:
    """An empty figure that says why it is empty (e.g. "press Step")."""
    return go.Figure(
        layout=dict(
            template=plots.TEMPLATE,
            height=height,
            xaxis=dict(visible=False),
            yaxis=dict(visible=False),
            annotations=[
                dict(
                    text=html.escape(message),
                    showarrow=False,
                    xref="paper",
                    yref="paper",
                    x=0.5,
                    y=0.5,
                    font=dict(size=14, color="#6b7280"),
                )
            ],
        )
    )


def paired_bars(
    series: Mapping[str, Sequence[float] | np.ndarray],
    labels: Sequence[str],
    title: str = "",
    value_name: str = "probability",
    horizontal: bool = False,
    colours: Sequence[str] | None = None,
    tokens: bool = True,
) -> go.Figure:
    """Several named series over the same labels as grouped bars.

    Args:
        series: ``{name: [N] values}``, every series the same length.
        labels: ``N`` category labels (tokens).
        value_name: axis title and hover name of the values.
        horizontal: bars left to right, first label at the top.
        colours: one per series (default: blue, red, green, purple).
        tokens: the labels are tokens (spaces shown as ␣); False for names such as heads.
    Returns:
        One bar trace per series, named after it.
    """
    labels = [plots.token_label(t) if tokens else str(t) for t in labels]
    pos = np.arange(len(labels))
    bars = []
    for (name, values), colour in zip(series.items(), colours or COLOURS, strict=False):
        v = np.asarray(values, dtype=np.float32)
        hover = f"{html.escape(name)}<br>%{{customdata}}: %{{{'x' if horizontal else 'y'}:.4f}}"
        bar = dict(type="bar", name=name, marker_color=colour, customdata=labels)
        bar.update(hovertemplate=hover + "<extra></extra>")
        bar.update(dict(x=v, y=pos, orientation="h") if horizontal else dict(x=pos, y=v))
        bars.append(bar)
    cat = plots.token_axis(labels, reverse=horizontal)
    val = dict(title=value_name, showgrid=True)
    return go.Figure(
        data=bars,
        layout=dict(
            template=plots.TEMPLATE,
            title=title,
            barmode="group",
            height=int(np.clip(120 + (34 if horizontal else 0) * len(labels), 300, 900)),
            xaxis=val if horizontal else cat,
            yaxis=cat if horizontal else val,
            legend=dict(orientation="h", y=1.02, yanchor="bottom", x=1, xanchor="right"),
        ),
    )


def top_ids(*dists: np.ndarray, k: int = 8) -> list[int]:
    """Ids of the ``k`` most likely tokens of the first distribution, plus the argmax of the others."""
    ids = [int(i) for i in np.argsort(-dists[0], kind="stable")[:k]]
    for d in dists[1:]:
        best = int(np.argmax(d))
        if best not in ids:
            ids.append(best)
    return ids


def mark_row(fig: go.Figure, row: int, n_cols: int) -> go.Figure:
    """Outline query row ``row`` of a single-panel heatmap (the row the last step added)."""
    fig.add_shape(
        type="rect",
        x0=-0.5,
        x1=n_cols - 0.5,
        y0=row - 0.5,
        y1=row + 0.5,
        line=dict(color=plots.HIGHLIGHT, width=2),
    )
    return fig


# -- the Alignment tab ------------------------------------------------------------------------------
#: Faithfulness methods in the order and colours of every chart.
FAITH_COLOURS = {
    "weights": plots.BAR,
    "norms": "#54a24b",
    "rollout": "#b279a2",
    "ig": plots.HIGHLIGHT,
    "random": "#9ca3af",
}
FAITH_NAMES = {
    "weights": "attention weights",
    "norms": "norms ‖αf(x)‖",
    "rollout": "rollout",
    "ig": "Integrated Gradients",
    "random": "random ranking",
}


def aer_grid(
    aer: np.ndarray, layer_aer: np.ndarray, mean_aer: float, best: tuple[tuple[int, int], float]
) -> go.Figure:
    """Per-head AER ``[L, H]`` as an annotated heatmap (lower is better; best head outlined)."""
    aer = np.asarray(aer, dtype=np.float64)
    n_layers, n_heads = aer.shape
    x = [f"H{h}" for h in range(n_heads)]
    y = [f"L{i} (mean {layer_aer[i]:.2f})" for i in range(n_layers)]
    text = [[f"{v:.3f}" for v in row] for row in aer]
    (bl, bh), value = best
    fig = go.Figure(
        data=[
            dict(
                type="heatmap",
                z=aer,
                x=x,
                y=y,
                zmin=0,
                zmax=1,
                colorscale="RdYlGn_r",
                text=text,
                texttemplate="%{text}",
                hovertemplate="cross %{y} %{x}<br>AER %{z:.3f}<extra></extra>",
                colorbar=dict(title="AER"),
            )
        ],
        layout=dict(
            template=plots.TEMPLATE,
            title=f"AER per cross-attention head (all heads {mean_aer:.3f}; best L{bl} H{bh} "
            f"{value:.3f})",
            height=int(np.clip(160 + 60 * n_layers, 260, 700)),
            xaxis=dict(title="head"),
            yaxis=dict(title="layer", autorange="reversed"),
        ),
    )
    fig.add_shape(
        type="rect", x0=bh - 0.5, x1=bh + 0.5, y0=bl - 0.5, y1=bl + 0.5,
        line=dict(color="#111827", width=3),
    )  # fmt: skip
    return fig


def alignment_overlay(cur, lens: str, setting: str) -> go.Figure:
    """One head's word-level cross-attention of the current input with predicted links
    (white circles) and gold links (red crosses). ``cur``: :class:`attnviz.app.panels.alignment.Current`."""
    fig = plots.heatmap(
        cur.matrix,
        cur.src_words,
        cur.tgt_words,
        title=f"{head_name('cross', cur.layer, cur.head)} · lens {lens} · {setting} setting<br>"
        "<sup>○ predicted link (argmax) · ✕ gold link</sup>",
    )

    def links(pairs, name: str, marker: dict) -> go.Scatter:
        pairs = sorted(pairs)
        return go.Scatter(
            x=[i for i, _ in pairs],
            y=[j for _, j in pairs],
            customdata=[f"{cur.tgt_words[j]} → {cur.src_words[i]}" for i, j in pairs],
            mode="markers",
            name=name,
            marker=marker,
            hovertemplate=f"{name}: %{{customdata}}<extra></extra>",
        )

    fig.add_trace(links(cur.predicted, "predicted", dict(symbol="circle-open", size=16,
                                                           color="white", line=dict(width=3))))  # fmt: skip
    if cur.gold is not None:
        ns, nt = len(cur.src_words), len(cur.tgt_words)
        gold = [g for g in cur.gold.possible if g[0] < ns and g[1] < nt]
        fig.add_trace(links(gold, "gold", dict(symbol="x-thin-open", size=11,
                                               color=plots.HIGHLIGHT, line=dict(width=3))))  # fmt: skip
    return fig.update_layout(showlegend=False)  # the subtitle names the two markers


def faithfulness_curves(
    comprehensiveness: Mapping[str, np.ndarray], sufficiency: Mapping[str, np.ndarray]
) -> go.Figure:
    """Comprehensiveness and sufficiency over k = 1..K, one line per method, side by side."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("comprehensiveness (higher: more faithful)",
                                        "sufficiency (lower: more faithful)"),
    )  # fmt: skip
    for col, curves in ((1, comprehensiveness), (2, sufficiency)):
        for method, values in curves.items():
            v = np.asarray(values, dtype=np.float64)
            fig.add_trace(
                go.Scatter(
                    x=np.arange(1, len(v) + 1),
                    y=v,
                    mode="lines+markers",
                    name=FAITH_NAMES.get(method, method),
                    legendgroup=method,
                    showlegend=col == 1,
                    line=dict(
                        color=FAITH_COLOURS.get(method),
                        dash="dot" if method == "random" else "solid",
                    ),
                    hovertemplate=f"{FAITH_NAMES.get(method, method)}<br>k %{{x}}: "
                    "Δp %{y:+.4f}<extra></extra>",
                ),
                row=1,
                col=col,
            )
        fig.update_xaxes(title_text="k (top source tokens)", dtick=1, row=1, col=col)
    fig.update_yaxes(title_text="drop in p(chosen token)", row=1, col=1)
    fig.update_layout(
        template=plots.TEMPLATE,
        height=420,
        title="faithfulness at this step",
        legend=dict(orientation="h", y=-0.25, yanchor="top", x=0, xanchor="left"),
    )
    return fig
