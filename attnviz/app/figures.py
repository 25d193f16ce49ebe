"""The few figures only the app needs (placeholders, paired bars); the rest is ``attnviz.plots``.

Pure functions, arrays in, ``go.Figure`` out, in the style of :mod:`attnviz.plots` (no gradio).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from .. import plots

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
) -> go.Figure:
    """Several named series over the same labels as grouped bars.

    Args:
        series: ``{name: [N] values}``, every series the same length.
        labels: ``N`` category labels (tokens).
        value_name: axis title and hover name of the values.
        horizontal: bars left to right, first label at the top.
        colours: one per series (default: blue, red, green, purple).
    Returns:
        One bar trace per series, named after it.
    """
    labels = [plots.token_label(t) for t in labels]  # the one token-label rule
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
