"""The "why this token and not that one" figure: a contrastive attribution over the source
beside the attention rows that follow each of the two tokens (pure: arrays -> plotly figure).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError
from .plots import BAR, HIGHLIGHT, TEMPLATE, token_axis, token_label

#: Evidence for the chosen token / for the alternative (blue and orange: told apart without
#: red-green vision; the alternative's bars are also hatched, and the sign is in the hover
#: and the bar's side of zero).
FOR_CHOSEN, FOR_ALT = "#2563eb", "#ea580c"


def contrast_figure(
    attribution: Any,
    rows: dict[str, Any | None],
    tokens: Sequence[Any],
    title: str = "",
    names: tuple[str, str] = ("chosen", "alternative"),
) -> go.Figure:
    """Contrastive attribution over the source tokens, and two attention rows below it.

    Args:
        attribution: ``[Ts]`` scores for ``log p(chosen) - log p(alternative)`` (signed:
            positive is evidence for the chosen token).
        rows: ``{legend name: [Ts] attention row or None}`` (None: no such row, e.g. after
            an end token); the first is drawn in the chosen token's colour.
        tokens: ``Ts`` source tokens.
        names: the two tokens, for the hover.
    Returns:
        Two stacked panels sharing the token axis: the attribution (bars coloured and
        hatched by sign) and the attention rows (grouped bars, raw weights; the second
        hatched).
    """
    ig = np.asarray(attribution, dtype=float)
    if ig.ndim != 1:
        raise InputError(f"attribution must be [Ts], got shape {list(ig.shape)}")
    labels = [token_label(t) for t in tokens]
    if len(labels) != len(ig):
        raise InputError(f"{len(labels)} tokens but {len(ig)} attribution scores")
    x = np.arange(len(ig))
    side = np.where(ig >= 0, f"for “{names[0]}”", f"for “{names[1]}”")
    data: list[dict[str, Any]] = [
        dict(
            type="bar", x=x, y=ig, name="Integrated Gradients (contrast)",
            marker_color=np.where(ig >= 0, FOR_CHOSEN, FOR_ALT).tolist(), showlegend=False,
            marker_pattern_shape=np.where(ig >= 0, "", "/").tolist(),
            customdata=np.stack([labels, side], 1),
            hovertemplate="%{customdata[0]}: %{y:.4g}<br>evidence %{customdata[1]}<extra></extra>",
            xaxis="x", yaxis="y",
        )
    ]  # fmt: skip
    colours = (FOR_CHOSEN, FOR_ALT, BAR, HIGHLIGHT)
    for i, (name, row) in enumerate(rows.items()):
        colour = colours[i % len(colours)]
        if row is None:
            continue
        r = np.asarray(row, dtype=float)
        if r.shape != ig.shape:
            raise InputError(
                f"attention row {name!r} has shape {list(r.shape)}, expected [{len(ig)}]"
            )
        data.append(
            dict(
                type="bar", x=x, y=r, name=name, marker_color=colour, customdata=labels,
                marker_pattern_shape="/" if i % 2 else "",
                hovertemplate=f"{name}<br>%{{customdata}}: weight %{{y:.4f}}<extra></extra>",
                xaxis="x2", yaxis="y2",
            )
        )  # fmt: skip
    axis = token_axis(labels)
    layout = dict(
        template=TEMPLATE,
        title=title,
        barmode="group",
        height=560,
        legend=dict(orientation="h", y=-0.18),
        xaxis=dict(axis, domain=[0, 1], anchor="y", matches="x2", showticklabels=False),
        yaxis=dict(domain=[0.56, 1], anchor="x", zeroline=True,
                   title=f"IG (+ for “{token_label(names[0])}”)"),
        xaxis2=dict(axis, domain=[0, 1], anchor="y2", title="source token"),
        yaxis2=dict(domain=[0, 0.44], anchor="x2", title="attention weight", rangemode="tozero"),
    )  # fmt: skip
    return go.Figure(data=data, layout=layout)
