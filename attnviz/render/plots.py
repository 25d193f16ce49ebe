"""Plotly figures of recorded attention: pure functions, arrays in, ``go.Figure`` out.

Shapes use the project legend ``B, H, Tq, Tk, Ts, Tt, V`` plus ``L`` (layers) and ``S``
(snapshots). Weights may be torch tensors or numpy arrays; tensors become float32 numpy
arrays through :func:`attnviz.to_numpy`, the one place that happens. Masks are bool,
True = blocked: blocked cells are drawn grey with the hover text "masked", apart from
learned zeros, which take the bottom colour of the scale. Query rows run top to bottom.

Layouts are built as plain dicts and validated once (``make_subplots`` and repeated
``update_*`` calls cost several times more). No gradio here: the app and a Python user call
the same functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ..core.errors import InputError

# the analysis figures and the shared parts live in their own modules; every public name of
# both is re-exported here, so ``plots.<name>`` is the one place to find a figure
from .plots_analysis import (  # noqa: F401
    ROLE_LABEL_CELLS,
    attention_difference,
    attribution_vs_attention,
    head_divergence,
    head_stats_figure,
    head_stats_table,
    induction_curves,
    player_controls,
    share,
    snapshot_timeline,
)
from .plots_core import (  # noqa: F401
    BAR,
    BAR_HOVER,
    CHANGE_HOVER,
    DARK_TEMPLATE,
    DIVERGING,
    HIGHLIGHT,
    KIND_TITLES,
    MASKED,
    METHOD_COLOURS,
    SCALE,
    TEMPLATE,
    Tokens,
    cell_xy,
    color_max,
    figure_height,
    head_grid,
    heat_traces,
    hover_cells,
    mask_cells,
    new_figure,
    themed,
    to_array,
    token_axis,
    token_label,
)


# -- attention matrices ------------------------------------------------------------------------
def heatmap(
    weights: Any,
    x_tokens: Tokens,
    y_tokens: Tokens,
    mask: Any = None,
    title: str = "",
    zmax: float | None = None,
) -> go.Figure:
    """One attention matrix as a heatmap.

    Args:
        weights: ``[Tq, Tk]`` post-softmax weights (leading size-1 axes are dropped, so
            ``trace.weights(kind, layer)[:, h]`` of a batch of one works).
        x_tokens: ``Tk`` key tokens (columns); None for positions.
        y_tokens: ``Tq`` query tokens (rows, first at the top); None for positions.
        mask: bool broadcastable to ``[Tq, Tk]``, True = blocked (e.g. ``trace.mask(...)``).
        title: figure title.
        zmax: top of the colour scale (default: the largest unmasked weight, or 1).
    Returns:
        A figure whose trace 0 holds the weights (NaN at masked cells) and, when anything is
        masked, trace 1 (named ``"masked"``) the grey masked cells.
    """
    w = to_array(weights, "weights", (2,), "[Tq, Tk]")
    m = mask_cells(mask, w.shape)
    x, y = cell_xy(x_tokens, y_tokens, *w.shape)
    return new_figure(
        heat_traces(w, m, hover_cells(x, y), zmax=color_max(w, m, zmax)),
        title=title,
        height=figure_height(1, w.shape[0]),
        xaxis=token_axis(x, title="key"),
        yaxis=token_axis(y, reverse=True, title="query"),
    )


def heads_grid(
    weights: Any,
    x_tokens: Tokens,
    y_tokens: Tokens,
    mask: Any = None,
    titles: Sequence[str] | None = None,
    zmax: float | None = None,
    token_hover: bool = True,
) -> go.Figure:
    """Every head of one layer (one row) or of every layer (layers x heads) on one colour scale.

    Args:
        weights: ``[H, Tq, Tk]`` or ``[L, H, Tq, Tk]``.
        x_tokens, y_tokens: ``Tk`` key and ``Tq`` query tokens (None for positions).
        mask: bool broadcastable to the weights, True = blocked (``[B=1, 1, Tq, Tk]`` works).
        titles: one per panel, row-major (default ``"H0"``, ``"H1"``, ... or ``"L0 H1"``, ...).
        zmax: top of the shared colour scale (default: the largest unmasked weight, or 1).
        token_hover: hover names the query and key tokens; False shows positions only and
            leaves the per-cell text out (a many-panel overview is then several times smaller).
    Returns:
        ``H`` or ``L * H`` panels whose weight traces share ``coloraxis``; panels zoom together.
    """
    w = to_array(weights, "weights", (3, 4), "[H, Tq, Tk] or [L, H, Tq, Tk]")
    one_layer = w.ndim == 3
    w = w[None] if one_layer else w  # [L, H, Tq, Tk]
    n_l, n_h, tq, tk = w.shape
    m = mask_cells(mask, w.shape)
    if titles is None:
        titles = [f"H{h}" if one_layer else f"L{i} H{h}" for i in range(n_l) for h in range(n_h)]
    if len(titles) != n_l * n_h:
        raise InputError(f"titles has {len(titles)} entries for {n_l * n_h} panels")
    x, y = cell_xy(x_tokens, y_tokens, tq, tk)
    hover = hover_cells(x, y) if token_hover else None
    traces = []
    for n, (i, h) in enumerate(np.ndindex(n_l, n_h), start=1):
        mh = None if m is None or not m[i, h].any() else m[i, h]
        traces += heat_traces(
            w[i, h], mh, hover, name=titles[n - 1], coloraxis="coloraxis", panel=n
        )
    gaps = (0.02, min(0.08, 0.3 / n_l))
    return new_figure(
        traces,
        height=figure_height(n_l, tq),
        coloraxis=dict(
            colorscale=SCALE, cmin=0.0, cmax=color_max(w, m, zmax), colorbar=dict(title="weight")
        ),
        **head_grid(n_l, n_h, titles, token_axis(x), token_axis(y, reverse=True), gaps),
    )


def mask_comparison(
    before: Any,
    after: Any,
    x_tokens: Tokens,
    y_tokens: Tokens,
    title: str = "",
    before_mask: Any = None,
    after_mask: Any = None,
) -> go.Figure:
    """Attention before and after an edit (e.g. a mask switched off) and their difference.

    Args:
        before, after: ``[Tq, Tk]`` weights.
        x_tokens, y_tokens: ``Tk`` key and ``Tq`` query tokens (None for positions).
        title: figure title.
        before_mask, after_mask: optional bool masks (True = blocked) drawn grey.
    Returns:
        Three panels: traces named ``"before"``, ``"after"`` (shared ``coloraxis``) and
        ``"after - before"`` (``coloraxis2``, diverging, symmetric about 0).
    """
    b = to_array(before, "before", (2,), "[Tq, Tk]")
    a = to_array(after, "after", (2,), "[Tq, Tk]")
    if a.shape != b.shape:
        raise InputError(f"before {list(b.shape)} and after {list(a.shape)} differ in shape")
    mb, ma = (
        mask_cells(before_mask, b.shape, "before_mask"),
        mask_cells(after_mask, a.shape, "after_mask"),
    )
    x, y = cell_xy(x_tokens, y_tokens, *b.shape)
    hover = hover_cells(x, y)
    diff = a - b  # [Tq, Tk]
    traces = heat_traces(b, mb, hover, name="before", coloraxis="coloraxis")
    traces += heat_traces(a, ma, hover, name="after", coloraxis="coloraxis", panel=2)
    change = dict(name="after - before", coloraxis="coloraxis2", hovertemplate=CHANGE_HOVER)
    traces += heat_traces(diff, None, hover, panel=3, **change)
    span = float(np.abs(diff).max()) or 1.0
    top = max(color_max(b, mb), color_max(a, ma))
    bar = dict(thickness=12, len=1)
    titles = ("before", "after", "after − before")
    return new_figure(
        traces,
        title=title,
        height=figure_height(1, b.shape[0]),
        coloraxis=dict(colorscale=SCALE, cmin=0.0, cmax=top, colorbar=dict(x=0.65, **bar)),
        coloraxis2=dict(colorscale=DIVERGING, cmin=-span, cmax=span, colorbar=dict(**bar)),
        **head_grid(1, 3, titles, token_axis(x), token_axis(y, reverse=True), gaps=(0.1, 0)),
    )


# -- decoding and attribution ------------------------------------------------------------------
def topk_bar(
    probs: Any, tokens: Sequence[Any], k: int = 10, chosen: int | None = None, title: str = ""
) -> go.Figure:
    """The ``k`` most likely next tokens as horizontal bars, most likely at the top.

    Args:
        probs: ``[V]`` next-token distribution.
        tokens: ``V`` token strings (index = id).
        k: how many bars.
        chosen: id of the token taken; its bar is highlighted, and added at the bottom (with
            its rank in the hover) when it is not in the top ``k``.
    Returns:
        A figure with one bar trace; ``customdata`` rows are ``(token, id, rank)``.
    """
    p = to_array(probs, "probs", (1,), "[V]")
    v = p.shape[0]
    if len(tokens) != v:
        raise InputError(f"tokens has {len(tokens)} entries but probs has {v}")
    if k < 1:
        raise InputError(f"k must be at least 1, got {k}")
    ids = [int(i) for i in np.argsort(-p, kind="stable")[: min(k, v)]]
    if chosen is not None:
        if not 0 <= chosen < v:
            raise InputError(f"chosen id {chosen} is outside the vocabulary 0..{v - 1}")
        if chosen not in ids:
            ids.append(int(chosen))
    labels = [token_label(tokens[i]) for i in ids]
    ranks = [int((p > p[i]).sum()) + 1 for i in ids]
    bar = dict(type="bar", x=p[ids], y=np.arange(len(ids)), orientation="h", cliponaxis=False)
    bar.update(text=[f"{p[i]:.3f}" for i in ids], textposition="outside", hovertemplate=BAR_HOVER)
    bar.update(customdata=np.array(list(zip(labels, ids, ranks, strict=True)), dtype=object))
    bar.update(marker_color=[HIGHLIGHT if i == chosen else BAR for i in ids])
    ticks = [f"<b>{t}</b>" if i == chosen else t for t, i in zip(labels, ids, strict=True)]
    return new_figure(
        [bar],
        title=title or f"top {min(k, v)} next tokens",
        height=int(np.clip(100 + 26 * len(ids), 240, 900)),
        xaxis=dict(title="probability", range=[0, 1.1], showgrid=True),
        yaxis=token_axis(ticks, reverse=True),
    )


# -- config ------------------------------------------------------------------------------------
def figure_config() -> dict[str, Any]:
    """The plotly config every attnviz figure uses: no logo or cloud link, PNG download kept."""
    return {
        "displaylogo": False,
        "showLink": False,
        "responsive": True,
        "toImageButtonOptions": {"format": "png", "filename": "attnviz", "scale": 2},
    }
