"""Plotly figures of why two sentences are similar (:func:`attnviz.analysis.similarity`):
the token-pair contributions as a diverging heatmap centred on zero, and per-token values of
both sentences (shares of the cosine, Integrated Gradients) as signed bars.

Pure functions, arrays in, ``go.Figure`` out; no gradio. Colours and templates come from
:mod:`attnviz.render.plots_core`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError
from .plots_core import DIVERGING, Tokens, cell_xy, new_figure, token_axis

PAIR_HOVER = "A %{customdata}<br>contribution %{z:+.4f}<extra></extra>"
BAR_VALUE_HOVER = "%{customdata}<br>%{y:+.4f}<extra></extra>"
#: bar colours: the two sides of :data:`DIVERGING` (``RdBu_r``: red adds, blue takes away)
ADDS, TAKES = "#d6604d", "#4393c3"


def pair_heatmap(
    pairs: Any,
    a_tokens: Tokens,
    b_tokens: Tokens,
    title: str = "",
    names: tuple[str, str] = ("A", "B"),
) -> go.Figure:
    """Token-pair contributions ``[Ta, Tb]`` (rows: the first text's tokens, top to bottom;
    columns: the second's) on a diverging scale with zero in the middle, symmetric.

    Args:
        pairs: ``[Ta, Tb]`` contributions (they sum to the cosine).
        a_tokens, b_tokens: ``Ta`` row and ``Tb`` column tokens (None for positions).
        title: figure title; names: what the two axes are called.
    Returns:
        One heatmap trace named ``"pairs"`` holding ``pairs`` exactly (as float64).
    """
    # float64 kept exact (the shared to_array gives float32 for display)
    z = pairs.detach().cpu().double().numpy() if hasattr(pairs, "detach") else pairs
    z = np.asarray(z, dtype=np.float64)
    if z.ndim != 2:
        raise InputError(f"pairs must be [Ta, Tb], got shape {list(z.shape)}")
    x, y = cell_xy(b_tokens, a_tokens, *z.shape)
    hover = np.array(
        [[f"{i}: {ty} ↔ {names[1]} {j}: {tx}" for j, tx in enumerate(x)] for i, ty in enumerate(y)],
        dtype=object,
    )  # [Ta, Tb]
    span = float(np.abs(z).max()) if z.size else 0.0
    span = span or 1.0
    trace = dict(
        type="heatmap", z=z, x=np.arange(z.shape[1]), y=np.arange(z.shape[0]), name="pairs",
        customdata=hover, hovertemplate=PAIR_HOVER.replace("A ", f"{names[0]} ", 1),
        colorscale=DIVERGING, zmin=-span, zmax=span, zmid=0.0,
        colorbar=dict(title="share of<br>the cosine", thickness=14),
    )  # fmt: skip
    cell = int(np.clip(560 / max(z.shape[0], 1), 14, 40))
    return new_figure(
        [trace],
        title=title,
        height=int(np.clip(170 + cell * z.shape[0], 320, 1400)),
        xaxis=token_axis(x, title=f"{names[1]} tokens", tickangle=-45),
        yaxis=token_axis(y, reverse=True, title=f"{names[0]} tokens"),
    )


def token_bars(
    values: Sequence[Any],
    tokens: Sequence[Tokens],
    titles: Sequence[str],
    title: str = "",
    value_name: str = "value",
) -> go.Figure:
    """Signed per-token values of one or more texts, one panel each side by side (positive
    bars red, negative blue, as in :func:`pair_heatmap`; equal tokens keep their own bars).

    Args:
        values: one ``[T_k]`` array per text; tokens: their ``T_k`` tokens (None: positions).
        titles: a title per panel; title: the figure's; value_name: the y axis.
    Returns:
        One bar trace per panel, named by ``titles``, holding ``values`` (float64).
    """
    if not (len(values) == len(tokens) == len(titles)) or not values:
        raise InputError("token_bars needs as many values, tokens and titles, at least one")
    n = len(values)
    gap = 0.08
    width = (1 - gap * (n - 1)) / n
    traces, layout = [], {}
    for k, (v, toks, name) in enumerate(zip(values, tokens, titles, strict=True)):
        y = np.asarray(v.detach().cpu().double() if hasattr(v, "detach") else v, np.float64)
        if y.ndim != 1:
            raise InputError(f"{name}: values must be one number per token, got {list(y.shape)}")
        labels, _ = cell_xy(toks, None, 1, len(y))
        s = "" if k == 0 else str(k + 1)
        traces.append(dict(
            type="bar", x=np.arange(len(y)), y=y, name=name, xaxis=f"x{s}", yaxis=f"y{s}",
            marker=dict(color=[ADDS if t >= 0 else TAKES for t in y]),
            customdata=labels, hovertemplate=BAR_VALUE_HOVER, showlegend=False,
        ))  # fmt: skip
        x0 = k * (width + gap)
        layout[f"xaxis{s}"] = token_axis(labels, domain=[x0, min(x0 + width, 1.0)],
                                         anchor=f"y{s}", tickangle=-45)  # fmt: skip
        layout[f"yaxis{s}"] = dict(anchor=f"x{s}", zeroline=True, title=value_name if k == 0
                                   else None)  # fmt: skip
    layout["annotations"] = [
        dict(text=name, x=k * (width + gap) + width / 2, y=1.0, xref="paper", yref="paper",
             showarrow=False, xanchor="center", yanchor="bottom")
        for k, name in enumerate(titles)
    ]  # fmt: skip
    return new_figure(traces, title=title, height=340, bargap=0.25, **layout)
