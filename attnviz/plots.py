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

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import plotly.graph_objects as go
from torch import Tensor

from .devices import as_numpy
from .errors import InputError
from .masks import causal_mask
from .model import KINDS

if TYPE_CHECKING:
    from .snapshots import Snapshots

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
#: A small template: the stock ones add ~6 KB and ~6 ms to every figure.
TEMPLATE = go.layout.Template(
    layout=dict(
        paper_bgcolor="white",
        plot_bgcolor="white",
        font=dict(family="system-ui, sans-serif", size=12, color="#2a3f5f"),
        hovermode="closest",
        hoverlabel=dict(align="left"),
        xaxis=dict(gridcolor="#ebf0f8", zeroline=False, automargin=True),
        yaxis=dict(gridcolor="#ebf0f8", zeroline=False, automargin=True),
        margin=dict(t=70, b=50, l=60, r=30),
    )
)
#: The same for a dark page: light text on the page's dark grey, faint grid lines.
DARK_TEMPLATE = go.layout.Template(
    layout=dict(
        paper_bgcolor="#1f2937",
        plot_bgcolor="#1f2937",
        font=dict(family="system-ui, sans-serif", size=12, color="#e5e7eb"),
        hovermode="closest",
        hoverlabel=dict(align="left"),
        xaxis=dict(gridcolor="#374151", zeroline=False, automargin=True),
        yaxis=dict(gridcolor="#374151", zeroline=False, automargin=True),
        margin=dict(t=70, b=50, l=60, r=30),
    )
)
Tokens = Sequence[Any] | None  # token strings for an axis; None = positions 0, 1, ...
_GREY = [[0.0, MASKED], [1.0, MASKED]]
_WEIGHT_HOVER = "%{customdata}<br>weight %{z:.4f}<extra></extra>"
_CHANGE_HOVER = "%{customdata}<br>change %{z:+.4f}<extra></extra>"
_BAR_HOVER = (
    "%{customdata[0]} (id %{customdata[1]}, rank %{customdata[2]})<br>p = %{x:.4f}<extra></extra>"
)
_POSITION_HOVER = "query %{y}, key %{x}<br>weight %{z:.4f}<extra></extra>"
_MASK_HOVER = "%{customdata}<br><b>masked</b> (blocked: weight 0 by construction)<extra></extra>"


# -- input checks ------------------------------------------------------------------------------
def _array(x: Any, name: str, ndims: tuple[int, ...], dims: str) -> np.ndarray:
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


def _mask(mask: Any, shape: tuple[int, ...], name: str = "mask") -> np.ndarray | None:
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


def _labels(tokens: Tokens, n: int, name: str, axis: str) -> list[str]:
    """``n`` display labels; None means positions 0..n-1."""
    if tokens is None:
        return [str(i) for i in range(n)]
    tokens = list(tokens)
    if len(tokens) != n:
        raise InputError(f"{name} has {len(tokens)} tokens but the weights have {n} {axis}")
    return [token_label(t) for t in tokens]


def _xy(x_tokens: Tokens, y_tokens: Tokens, tq: int, tk: int) -> tuple[list[str], list[str]]:
    x = _labels(x_tokens, tk, "x_tokens", "columns (keys)")
    return x, _labels(y_tokens, tq, "y_tokens", "rows (queries)")


def _zmax(w: np.ndarray, mask: np.ndarray | None, zmax: float | None = None) -> float:
    """Top of the colour scale: ``zmax``, else the largest unmasked weight (1 if none > 0)."""
    if zmax is not None:
        return float(zmax)
    vals = w if mask is None else w[~mask]
    top = float(np.nanmax(vals)) if vals.size and not np.isnan(vals).all() else 0.0
    return top if top > 0 else 1.0


# -- building blocks ---------------------------------------------------------------------------
def _hover_cells(x: list[str], y: list[str]) -> np.ndarray:
    """``[Tq, Tk]`` hover strings naming the query and key tokens and their positions."""
    cols = [f"key {j}: {t}" for j, t in enumerate(x)]
    rows = [f"query {i}: {t}<br>" for i, t in enumerate(y)]
    return np.array([[r + c for c in cols] for r in rows], dtype=object)


def _heat_traces(
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


def _grid(
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


def _figure(data: list[dict[str, Any]], **layout: Any) -> go.Figure:
    return go.Figure(data=data, layout=dict(template=TEMPLATE, **layout))


def _height(rows: int, tq: int) -> int:
    return int(np.clip(120 + rows * (60 + 16 * tq), 320, 2400))


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
    w = _array(weights, "weights", (2,), "[Tq, Tk]")
    m = _mask(mask, w.shape)
    x, y = _xy(x_tokens, y_tokens, *w.shape)
    return _figure(
        _heat_traces(w, m, _hover_cells(x, y), zmax=_zmax(w, m, zmax)),
        title=title,
        height=_height(1, w.shape[0]),
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
    w = _array(weights, "weights", (3, 4), "[H, Tq, Tk] or [L, H, Tq, Tk]")
    one_layer = w.ndim == 3
    w = w[None] if one_layer else w  # [L, H, Tq, Tk]
    n_l, n_h, tq, tk = w.shape
    m = _mask(mask, w.shape)
    if titles is None:
        titles = [f"H{h}" if one_layer else f"L{i} H{h}" for i in range(n_l) for h in range(n_h)]
    if len(titles) != n_l * n_h:
        raise InputError(f"titles has {len(titles)} entries for {n_l * n_h} panels")
    x, y = _xy(x_tokens, y_tokens, tq, tk)
    hover = _hover_cells(x, y) if token_hover else None
    traces = []
    for n, (i, h) in enumerate(np.ndindex(n_l, n_h), start=1):
        mh = None if m is None or not m[i, h].any() else m[i, h]
        traces += _heat_traces(
            w[i, h], mh, hover, name=titles[n - 1], coloraxis="coloraxis", panel=n
        )
    gaps = (0.02, min(0.08, 0.3 / n_l))
    return _figure(
        traces,
        height=_height(n_l, tq),
        coloraxis=dict(
            colorscale=SCALE, cmin=0.0, cmax=_zmax(w, m, zmax), colorbar=dict(title="weight")
        ),
        **_grid(n_l, n_h, titles, token_axis(x), token_axis(y, reverse=True), gaps),
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
    b = _array(before, "before", (2,), "[Tq, Tk]")
    a = _array(after, "after", (2,), "[Tq, Tk]")
    if a.shape != b.shape:
        raise InputError(f"before {list(b.shape)} and after {list(a.shape)} differ in shape")
    mb, ma = _mask(before_mask, b.shape, "before_mask"), _mask(after_mask, a.shape, "after_mask")
    x, y = _xy(x_tokens, y_tokens, *b.shape)
    hover = _hover_cells(x, y)
    diff = a - b  # [Tq, Tk]
    traces = _heat_traces(b, mb, hover, name="before", coloraxis="coloraxis")
    traces += _heat_traces(a, ma, hover, name="after", coloraxis="coloraxis", panel=2)
    change = dict(name="after - before", coloraxis="coloraxis2", hovertemplate=_CHANGE_HOVER)
    traces += _heat_traces(diff, None, hover, panel=3, **change)
    span = float(np.abs(diff).max()) or 1.0
    top = max(_zmax(b, mb), _zmax(a, ma))
    bar = dict(thickness=12, len=1)
    titles = ("before", "after", "after − before")
    return _figure(
        traces,
        title=title,
        height=_height(1, b.shape[0]),
        coloraxis=dict(colorscale=SCALE, cmin=0.0, cmax=top, colorbar=dict(x=0.65, **bar)),
        coloraxis2=dict(colorscale=DIVERGING, cmin=-span, cmax=span, colorbar=dict(**bar)),
        **_grid(1, 3, titles, token_axis(x), token_axis(y, reverse=True), gaps=(0.1, 0)),
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
    p = _array(probs, "probs", (1,), "[V]")
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
    bar.update(text=[f"{p[i]:.3f}" for i in ids], textposition="outside", hovertemplate=_BAR_HOVER)
    bar.update(customdata=np.array(list(zip(labels, ids, ranks, strict=True)), dtype=object))
    bar.update(marker_color=[HIGHLIGHT if i == chosen else BAR for i in ids])
    ticks = [f"<b>{t}</b>" if i == chosen else t for t, i in zip(labels, ids, strict=True)]
    return _figure(
        [bar],
        title=title or f"top {min(k, v)} next tokens",
        height=int(np.clip(100 + 26 * len(ids), 240, 900)),
        xaxis=dict(title="probability", range=[0, 1.1], showgrid=True),
        yaxis=token_axis(ticks, reverse=True),
    )


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
    attr = _array(attribution, "attribution", (1,), "[Ts]")
    att = _array(attention, "attention", (1,), "[Ts]")
    if attr.shape != att.shape:
        raise InputError(f"attribution {list(attr.shape)} and attention {list(att.shape)} differ")
    labels = _labels(tokens, attr.shape[0], "tokens", "positions")
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
    return _figure(
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
    return _figure(
        traces,
        title=f"heads by {metric}",
        height=int(np.clip(140 + 70 * n_l, 260, 900)),
        coloraxis=dict(colorscale=SCALE, colorbar=dict(title=metric)),
        **_grid(1, len(kinds), kinds, x, y, gaps=(0.06, 0), match=False),
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
    return _figure([table], height=int(np.clip(80 + 26 * len(rows), 200, 900)))


# -- training playback -------------------------------------------------------------------------
_STILL = dict(mode="immediate", frame=dict(duration=0, redraw=True), transition=dict(duration=0))
_PLAY = dict(frame=dict(duration=400, redraw=True), fromcurrent=True)


def _player(steps: list[int]) -> dict[str, Any]:
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
        snaps: :class:`attnviz.snapshots.Snapshots` (``weights[(kind, layer)]`` is a list of
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
    tgt_in = [bos, *snaps.probe_tgt]
    x = _labels(tgt_in if kind == "decoder_self" else snaps.probe_src, tk, "tokens", "keys")
    y = _labels(snaps.probe_src if kind == "encoder_self" else tgt_in, tq, "tokens", "queries")
    m = as_numpy(causal_mask(tq, tk)) if kind == "decoder_self" else None
    if m is not None:
        z = np.where(m, np.nan, z)
    which = "mean over heads" if head is None else f"head {head}"

    def title(i: int) -> str:
        out = html.escape(snaps.outputs[i])
        step, loss = snaps.steps[i], snaps.losses[i]
        return f"{kind} layer {layer}, {which} · step {step} · loss {loss:.4f} · output “{out}”"

    top = _zmax(z, None)
    fig = _figure(
        _heat_traces(z[0], m, _hover_cells(x, y), zmax=top),
        title=title(0),
        height=_height(1, tq) + 80,
        xaxis=token_axis(x, title="key"),
        yaxis=token_axis(y, reverse=True, title="query"),
        **_player(snaps.steps),
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
    d = _array(divergence, "divergence", (2,), "[L, H]")
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
        colorscale=SCALE, zmin=0.0, zmax=_zmax(d, None, zmax), text=cells,
        texttemplate="%{text}", customdata=cells, colorbar=dict(title="JSD"),
        hovertemplate="layer %{y}, head %{x}<br>divergence %{z:.4f}<extra></extra>",
    )  # fmt: skip
    return _figure(
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
    wa = _array(a, "a", (2,), "[Tq, Tk]")
    wb = _array(b, "b", (2,), "[Tq, Tk]")
    if wa.shape != wb.shape:
        raise InputError(f"a {list(wa.shape)} and b {list(wb.shape)} differ in shape")
    m = _mask(mask, wa.shape)
    x, y = _xy(x_tokens, y_tokens, *wa.shape)
    hover = _hover_cells(x, y)
    diff = wa - wb  # [Tq, Tk]
    traces = _heat_traces(wa, m, hover, name=names[0], coloraxis="coloraxis")
    traces += _heat_traces(wb, m, hover, name=names[1], coloraxis="coloraxis", panel=2)
    change = dict(name="A - B", coloraxis="coloraxis2", hovertemplate=_CHANGE_HOVER)
    traces += _heat_traces(diff, m, hover, panel=3, **change)
    span = float(np.abs(diff).max()) or 1.0
    bar = dict(thickness=12, len=1)
    titles = (names[0], names[1], f"{names[0]} − {names[1]}")
    return _figure(
        traces,
        title=title,
        height=_height(1, wa.shape[0]),
        coloraxis=dict(
            colorscale=SCALE,
            cmin=0.0,
            cmax=max(_zmax(wa, m), _zmax(wb, m)),
            colorbar=dict(x=0.65, **bar),
        ),  # fmt: skip
        coloraxis2=dict(colorscale=DIVERGING, cmin=-span, cmax=span, colorbar=dict(**bar)),
        **_grid(1, 3, titles, token_axis(x), token_axis(y, reverse=True), gaps=(0.1, 0)),
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
