"""What every attnviz figure shares: colours, the light and dark templates, the input checks
and the heatmap trace and grid-layout builders used by :mod:`attnviz.render.plots` and
:mod:`attnviz.render.plots_analysis` (pure: no gradio, no figures of its own).

Masks are bool, True = blocked: blocked cells are drawn grey with the hover text "masked".
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from torch import Tensor

from ..core.devices import as_numpy
from ..core.errors import InputError

KIND_TITLES = {
    "encoder_self": "Encoder self-attention",
    "decoder_self": "Decoder masked self-attention",
    "cross": "Cross-attention",
}
SCALE = "Viridis"  # a learned zero is dark purple, never the grey of a masked cell
DIVERGING = "RdBu_r"
MASKED = "#c4c4c4"
BAR, HIGHLIGHT = "#4c78a8", "#e45756"
#: One colour per method, the same in every chart.
METHOD_COLOURS = {
    "Integrated Gradients": HIGHLIGHT,
    "gradient × input": "#54a24b",
    "attention": BAR,
}


def _template(background: str, text: str, grid: str) -> go.layout.Template:
    """A small template (the stock ones add ~6 KB and ~6 ms to every figure)."""
    return go.layout.Template(
        layout=dict(
            paper_bgcolor=background,
            plot_bgcolor=background,
            font=dict(family="system-ui, sans-serif", size=12, color=text),
            hovermode="closest",
            hoverlabel=dict(align="left"),
            xaxis=dict(gridcolor=grid, zeroline=False, automargin=True),
            yaxis=dict(gridcolor=grid, zeroline=False, automargin=True),
            margin=dict(t=70, b=50, l=60, r=30),
        )
    )


TEMPLATE = _template("white", "#2a3f5f", "#ebf0f8")
#: The same for a dark page: light text on the page's dark grey, faint grid lines.
DARK_TEMPLATE = _template("#1f2937", "#e5e7eb", "#374151")
Tokens = Sequence[Any] | None  # token strings for an axis; None = positions 0, 1, ...
_GREY = [[0.0, MASKED], [1.0, MASKED]]
_WEIGHT_HOVER = "%{customdata}<br>weight %{z:.4f}<extra></extra>"
CHANGE_HOVER = "%{customdata}<br>change %{z:+.4f}<extra></extra>"
BAR_HOVER = (
    "%{customdata[0]} (id %{customdata[1]}, rank %{customdata[2]})<br>p = %{x:.4f}<extra></extra>"
)
_POSITION_HOVER = "query %{y}, key %{x}<br>weight %{z:.4f}<extra></extra>"
_MASK_HOVER = "%{customdata}<br><b>masked</b> (blocked: weight 0 by construction)<extra></extra>"


# -- input checks ------------------------------------------------------------------------------
def to_array(x: Any, name: str, ndims: tuple[int, ...], dims: str) -> np.ndarray:
    """Tensor or array-like -> float32 numpy, leading size-1 axes dropped down to ``ndims``."""
    try:
        a = as_numpy(x) if isinstance(x, Tensor) else np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise InputError(f"{name} must be numbers {dims}: {e}") from None
    a = a.astype(np.float32, copy=False)
    while a.ndim > max(ndims) and a.shape[0] == 1:
        a = a[0]
    if a.ndim not in ndims or 0 in a.shape:
        raise InputError(f"{name} must be a non-empty array {dims}, got shape {list(a.shape)}")
    return a


def mask_cells(mask: Any, shape: tuple[int, ...], name: str = "mask") -> np.ndarray | None:
    """A bool mask (True = blocked) broadcast to ``shape``; None when nothing is blocked."""
    if mask is None:
        return None
    m = as_numpy(mask) if isinstance(mask, Tensor) else np.asarray(mask)
    if m.dtype != np.bool_:
        raise InputError(f"{name} must be bool (True = blocked), got {m.dtype}")
    while m.ndim > len(shape) and m.shape[0] == 1:
        m = m[0]
    try:
        m = np.broadcast_to(m, shape)
    except ValueError:
        raise InputError(
            f"{name} of shape {list(m.shape)} does not fit weights of shape {list(shape)}"
        ) from None
    return m if m.any() else None


def token_label(token: Any) -> str:
    """A token as plotly text: spaces visible, ``< > &`` escaped (plotly reads HTML tags)."""
    return html.escape(str(token).replace(" ", "␣") or "∅", quote=False)


def axis_labels(tokens: Tokens, n: int, name: str, axis: str) -> list[str]:
    """``n`` display labels; None means positions 0..n-1."""
    if tokens is None:
        return [str(i) for i in range(n)]
    tokens = list(tokens)
    if len(tokens) != n:
        raise InputError(f"{name} has {len(tokens)} tokens but the weights have {n} {axis}")
    return [token_label(t) for t in tokens]


def cell_xy(x_tokens: Tokens, y_tokens: Tokens, tq: int, tk: int) -> tuple[list[str], list[str]]:
    x = axis_labels(x_tokens, tk, "x_tokens", "columns (keys)")
    return x, axis_labels(y_tokens, tq, "y_tokens", "rows (queries)")


def color_max(w: np.ndarray, mask: np.ndarray | None, zmax: float | None = None) -> float:
    """Top of the colour scale: ``zmax``, else the largest unmasked weight (1 if none > 0)."""
    if zmax is not None:
        return float(zmax)
    vals = w if mask is None else w[~mask]
    top = float(np.nanmax(vals)) if vals.size and not np.isnan(vals).all() else 0.0
    return top if top > 0 else 1.0


# -- building blocks ---------------------------------------------------------------------------
def hover_cells(x: list[str], y: list[str]) -> np.ndarray:
    """``[Tq, Tk]`` hover strings naming the query and key tokens and their positions."""
    cols = [f"key {j}: {t}" for j, t in enumerate(x)]
    rows = [f"query {i}: {t}<br>" for i, t in enumerate(y)]
    return np.array([[r + c for c in cols] for r in rows], dtype=object)


def heat_traces(
    w: np.ndarray,
    mask: np.ndarray | None,
    hover: np.ndarray | None,
    *,
    name: str = "weights",
    coloraxis: str | None = None,
    zmax: float = 1.0,
    panel: int = 1,
    hovertemplate: str = _WEIGHT_HOVER,
) -> list[dict[str, Any]]:
    """Weights ``[Tq, Tk]`` (NaN where masked) plus a grey layer of the masked cells.

    ``hover`` None: no per-cell token text (positions only), for compact thumbnails.
    """
    tq, tk = w.shape
    s = "" if panel == 1 else str(panel)
    common = dict(type="heatmap", x=np.arange(tk), y=np.arange(tq))
    if hover is None:
        hovertemplate = _POSITION_HOVER
    else:
        common["customdata"] = hover
    common.update(hoverongaps=False, xaxis=f"x{s}", yaxis=f"y{s}")
    scale: dict[str, Any] = (
        {"coloraxis": coloraxis}
        if coloraxis
        else {"colorscale": SCALE, "zmin": 0.0, "zmax": zmax, "colorbar": {"title": "weight"}}
    )
    z = w if mask is None else np.where(mask, np.nan, w)
    traces = [dict(z=z, name=name, hovertemplate=hovertemplate, **scale, **common)]
    if mask is not None:
        grey = dict(colorscale=_GREY, zmin=0, zmax=1, showscale=False, hoverinfo="skip")
        if hover is not None:
            grey.update(hovertemplate=_MASK_HOVER, hoverinfo=None)
        traces.append(dict(z=np.where(mask, 1.0, np.nan), name="masked", **grey, **common))
    return traces


def token_axis(labels: list[str], reverse: bool = False, **extra: Any) -> dict[str, Any]:
    """Token tick labels at integer positions, so equal tokens keep their own columns."""
    axis = dict(tickmode="array", tickvals=list(range(len(labels))), ticktext=labels)
    axis.update(showgrid=False, autorange="reversed" if reverse else True, **extra)
    return axis


def head_grid(
    rows: int,
    cols: int,
    titles: Sequence[str],
    x_axis: dict[str, Any],
    y_axis: dict[str, Any],
    gaps: tuple[float, float] = (0.02, 0.08),
    match: bool = True,
) -> dict[str, Any]:
    """Layout of a rows x cols grid: panel n (row-major from 1) uses axes ``x{n}``, ``y{n}``.

    With ``match`` every panel zooms with the first and only the outer ones show tick labels.
    """
    w = (1 - gaps[0] * (cols - 1)) / cols
    h = (1 - gaps[1] * (rows - 1)) / rows
    layout: dict[str, Any] = {"annotations": []}
    for r in range(rows):
        for c in range(cols):
            n = r * cols + c + 1
            s = "" if n == 1 else str(n)
            x0, y1 = c * (w + gaps[0]), 1 - r * (h + gaps[1])
            xa = dict(x_axis, domain=[max(x0, 0.0), min(x0 + w, 1.0)], anchor=f"y{s}")
            ya = dict(y_axis, domain=[max(y1 - h, 0.0), min(y1, 1.0)], anchor=f"x{s}")
            if match:
                xa.update(showticklabels=r == rows - 1, matches=None if n == 1 else "x")
                ya.update(showticklabels=c == 0, matches=None if n == 1 else "y")
            layout[f"xaxis{s}"], layout[f"yaxis{s}"] = xa, ya
            layout["annotations"].append(
                dict(text=html.escape(titles[n - 1]), x=x0 + w / 2, y=y1, showarrow=False)
            )
    for a in layout["annotations"]:
        a.update(xref="paper", yref="paper", xanchor="center", yanchor="bottom")
    return layout


def themed(fig: go.Figure, dark: bool) -> go.Figure:
    """``fig`` on the dark template when ``dark`` (titles, ticks and legends stay readable on
    a dark page); the data and its colours are untouched."""
    if dark:
        fig.update_layout(template=DARK_TEMPLATE)
        fig.update_annotations(font_color="#e5e7eb")
    return fig


def new_figure(data: list[dict[str, Any]], **layout: Any) -> go.Figure:
    return go.Figure(data=data, layout=dict(template=TEMPLATE, **layout))


def figure_height(rows: int, tq: int) -> int:
    return int(np.clip(120 + rows * (60 + 16 * tq), 320, 2400))
