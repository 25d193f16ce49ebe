"""The app's "Why this token" tab: why the model produced the token at the step shown.

Plain Python, no gradio. Thin views over the library's residual-stream analyses, each on the
prediction of the step the step view shows (the prompt or source plus the tokens shown before
it, forced ones included for a decoder-only model):

- :func:`attribution`: :func:`attnviz.analysis.direct_attribution` as a heatmap of
  layers x (heads, attention bias, MLP) above a row of what sits outside the layers
  (embeddings, positions, the final norm's bias, the output bias); "why A and not B" given a
  second token;
- :func:`lens` and :func:`grid`: :func:`attnviz.analysis.logit_lens` at the predicting
  position as a table, :func:`attnviz.analysis.why.lens_grid` as a layers x positions heatmap;
- :func:`patching`: :func:`attnviz.analysis.patch` between the input and a corrupted one, the
  grid as a heatmap with its axes;
- :func:`flow_graph`: :func:`attnviz.analysis.flow` drawn with tokens along x, layers up y,
  edges as lines as wide as their importance.

Each returns a :class:`WhyView` whose ``data`` is the library result's ``to_dict()`` (the JSON
download). What the library refuses (a post-norm model's attribution, an encoder-decoder
model's flow, an encoder-only model's attribution) comes back as its one line.
"""

from __future__ import annotations

import html
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .. import analysis
from ..analysis.dla import DirectAttribution
from ..analysis.export import dumps
from ..analysis.flow import Flow
from ..analysis.patching import WHATS, Patching
from ..analysis.why import LensGrid, label, lens_grid
from ..checkpoint import Checkpoint
from ..core.errors import AttnvizError, InputError
from ..render.plots_core import DIVERGING, SCALE, TEMPLATE, token_axis, token_label
from . import store
from .contrast_lab import alternatives
from .kinds import is_decoder_only, is_encoder_only
from .speech import NOT_FOR_AUDIO
from .state import SessionState, checkpoint_of, warning
from .views import display_token
from .workers import remote

#: The stamp keys of the tab's panels (see :func:`attnviz.app.stamps.panel_stamps`), and of
#: its menu of the step's other candidates.
PANELS = ("why_dla", "why_lens", "why_patch", "why_flow")
ALT = "why_alt"
INTRO = (
    "Why the model produced the token at the **step shown** (Step a few times first): "
    "**direct attribution** splits its logit into what each head, MLP and the embeddings "
    "wrote into the residual stream; the **logit lens** reads each layer's stream through "
    "the model's own output head; **patching** runs a corrupted input and puts one clean "
    "activation back at a time; **information flow** draws the routes that carry the "
    "prediction. Tokens are typed as text, or `#17` for the id 17."
)
NOT_STEPPED = "take at least one Step: this tab explains the token produced at the step shown"
LENS_HEADERS = ["layer", "rank of the token produced (1 = top)", "its probability", "top tokens"]
FLOW_COLOURS = {"attention": "#4c78a8", "residual": "#9ca3af", "mlp": "#f58518"}


@dataclass
class WhyView:
    """What one panel of the tab shows.

    Attributes:
        message: markdown (the one line of a refusal, or what the result says).
        figure: the panel's figure, or None.
        rows: table rows (the logit lens), or empty.
        data: the library result's ``to_dict()`` for the JSON download (None when refused).
        result: the library's result itself (None when refused; not sent to the page).
    """

    message: str = ""
    figure: go.Figure | None = None
    rows: list[list] = field(default_factory=list)
    data: dict[str, Any] | None = None
    result: Any = field(default=None, repr=False)


def _stopped(*args, message: str, **kwargs) -> WhyView:
    """The model's worker stopped (:func:`attnviz.app.workers.remote`): its one line."""
    return WhyView(message=message)


# -- what the analyses run on ------------------------------------------------------------------
@dataclass
class Shown:
    """The prediction of the step shown, as the library takes it.

    Attributes:
        text: the input (token ids for a decoder-only model: prompt + tokens before the step).
        step: the library's ``step`` (None for a decoder-only model: its ids end there).
        token: the id produced at the step shown (None: an encoder-only model's top filler).
        prefix: the tokens shown before the step (appended to a decoder-only corrupted input).
    """

    ckpt: Checkpoint
    text: Any
    step: int | None
    token: int | None
    prefix: list[int]


def shown(state: SessionState) -> Shown:
    """What the analyses explain for ``state``: the step shown's prediction.

    Raises:
        InputError: nothing started, no step taken, a speech model, an encoder-decoder model
            whose earlier tokens were forced (the library replays the greedy prefix).
    """
    if not state.started:
        raise InputError("type an input and press Step or Run (Read, for a sentence model) first")
    ckpt = checkpoint_of(state)
    if ckpt.is_audio:
        raise InputError(NOT_FOR_AUDIO)
    if is_encoder_only(ckpt):  # one pass: the filler at the first mask token
        return Shown(ckpt, state.text, None, None, [])
    if state.step < 1:
        raise InputError(NOT_STEPPED)
    prefix = list(state.tokens[: state.step - 1])
    token = int(state.tokens[state.step - 1])
    if is_decoder_only(ckpt):
        return Shown(ckpt, list(state.src_ids) + prefix, None, token, prefix)
    if any(f < state.step - 1 for f in state.forced):
        raise InputError(
            "a token before the step shown was forced: this tab explains an encoder-decoder "
            "model's greedy output only (step back to the forced token, or Reset)"
        )
    return Shown(ckpt, state.text, state.step - 1, token, prefix)


def token_arg(value: str | int | None) -> int | str | None:
    """A token as the page gives it: ``"#17"`` is the id 17, other text the token itself,
    empty nothing (the CLI's convention)."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    value = str(value).strip()
    if not value:
        return None
    if value.startswith("#") and value[1:].isdigit():
        return int(value[1:])
    return value


def candidates(state: SessionState) -> tuple[list[tuple[str, str]], str | None]:
    """The step shown's other candidates as ``(label, "#id")`` choices, and the default
    (the runner-up; for a forced token, the model's own choice). Empty before a Step."""
    try:
        choices, default = alternatives(state)
    except AttnvizError:
        return [], None
    return [(text, f"#{i}") for text, i in choices], (f"#{default}" if default else None)


def _tok(token: str) -> str:
    return f"“{html.escape(display_token(token))}”"


# -- direct attribution ------------------------------------------------------------------------
def column_of(part) -> str:
    """A part's column in the layers grid: ``"H2"``, ``"X1"`` (cross), ``"attn bias"``,
    ``"mlp"``, ``"mlp bias"`` (its name without the layer)."""
    return part.name[len(f"L{part.layer}") :].strip()


def dla_figure(res: DirectAttribution) -> go.Figure:
    """The parts of ``res`` as two heatmaps on one diverging scale: a row of the parts outside
    the layers (embeddings, positions, final norm, output bias) above layers x (heads, biases,
    MLP). Every part is one cell (its name in the hover); empty cells are NaN."""
    outside = [p for p in res.parts if p.layer is None]
    inside = [p for p in res.parts if p.layer is not None]
    cols = list(dict.fromkeys(column_of(p) for p in inside))
    n_layers = max((p.layer for p in inside), default=-1) + 1
    z = np.full((n_layers, len(cols)), np.nan)
    names = np.full((n_layers, len(cols)), "", dtype=object)
    for p in inside:
        j = cols.index(column_of(p))
        z[p.layer, j], names[p.layer, j] = p.value, p.name
    values = res.values()
    span = float(np.abs(values).max()) if values.size else 1.0
    span = span or 1.0
    fig = make_subplots(rows=2, cols=1, row_heights=[1, max(n_layers, 1)], vertical_spacing=0.12)
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
    what = _tok(res.token) + (f" and not {_tok(res.versus)}" if res.versus else "")
    logit = "logit difference" if res.versus else "logit"
    fig.update_layout(
        template=TEMPLATE,
        title=f"why {what}: {logit} {res.logit:.3f} = sum of the parts {res.total:.3f}",
        height=int(np.clip(230 + 46 * n_layers, 320, 1200)),
        margin=dict(l=90, r=30, t=70, b=60),
    )
    fig.update_xaxes(token_axis([html.escape(p.name) for p in outside]), row=1, col=1)
    fig.update_yaxes(tickmode="array", tickvals=[0], ticktext=["outside"], row=1, col=1)
    fig.update_xaxes(token_axis([html.escape(c) for c in cols], title="head / part"), row=2, col=1)
    fig.update_yaxes(token_axis([f"L{i}" for i in range(n_layers)], reverse=True, title="layer"),
                     row=2, col=1)  # fmt: skip
    return fig


@remote(_stopped)
def attribution(state: SessionState, versus: str | None = None) -> WhyView:
    """Direct logit attribution of the token at the step shown (``versus``: explain it and not
    that token; ``"#17"`` an id, else the token's text).

    Returns:
        :class:`WhyView`: the parts' heatmap and the largest parts in words.
    """
    try:
        s = shown(state)
        res = analysis.direct_attribution(s.ckpt, s.text, s.token, token_arg(versus), s.step)
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    top = ", ".join(f"`{p.name}` {p.value:+.3f}" for p in res.top(5))
    what = _tok(res.token) + (f" and not {_tok(res.versus)}" if res.versus else "")
    msg = (
        f"Why {what} at position {res.position}: the {'logit difference' if res.versus else 'logit'}"
        f" {res.logit:.4f} is the sum of {len(res.parts)} parts ({res.total:.4f}), each read "
        f"through the final norm frozen at its scale in this run. Largest: {top}."
    )
    return WhyView(msg, dla_figure(res), data=res.to_dict(), result=res)


# -- the logit lens ----------------------------------------------------------------------------
def lens_rows(lens) -> list[list]:
    """One table row per layer: its name, the produced token's rank (1 = top) and probability,
    and the top tokens with their probabilities."""
    rows = []
    for i, name in enumerate(lens.layers):
        top = ", ".join(
            f"“{display_token(t)}” {p:.3f}"  # a table cell: plain text, not escaped
            for t, p in zip(lens.top_tokens[i], lens.top_probs[i], strict=True)
        )
        rows.append([name, int(lens.rank[i]) + 1, round(float(lens.prob[i]), 4), top])
    return rows


@remote(_stopped)
def lens(state: SessionState, k: int = 5) -> WhyView:
    """The logit lens at the predicting position of the step shown: a row per layer."""
    try:
        s = shown(state)
        res = analysis.logit_lens(s.ckpt, s.text, s.step, k=k)
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    first = next((res.layers[i] for i in range(len(res.layers)) if res.rank[i] == 0), None)
    when = (f"it is the top token from layer **{first}** on" if first is not None
            else "no layer's stream has it on top")  # fmt: skip
    msg = (
        f"Each layer's residual stream at position {res.position} ({_tok(res.tokens[res.position])})"
        f" read through the final norm and the unembedding. The model's choice there is "
        f"{_tok(res.target)}: {when}."
    )
    if s.token is not None and s.token != res.target_id:
        msg += f" (The step shown was forced to {_tok(label(s.ckpt, s.token))}.)"
    return WhyView(msg, rows=lens_rows(res), data=res.to_dict(), result=res)


def grid_figure(res: LensGrid, ckpt: Checkpoint) -> go.Figure:
    """The lens at every layer x position: each cell the probability of that position's next
    token (the last: the token produced), the top token written in it."""
    top = [[token_label(label(ckpt, int(i))) for i in row] for row in res.top_ids.tolist()]
    nxt = [token_label(label(ckpt, i)) for i in res.targets]
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


@remote(_stopped)
def grid(state: SessionState) -> WhyView:
    """The whole logit-lens grid (every layer x position) of the step shown's input."""
    try:
        s = shown(state)
        res = lens_grid(s.ckpt, s.text, s.step, progress=False)
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    msg = (
        f"The lens at every layer and position ({len(res.layers)} × {len(res.tokens)}): each "
        "cell is the probability the stream gives the position's next token."
    )
    return WhyView(msg, grid_figure(res, s.ckpt), data=res.to_dict(), result=res)


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


@remote(_stopped)
def patching(
    state: SessionState,
    corrupted: str | None,
    answer: str | None = None,
    wrong: str | None = None,
    what: str = "resid",
    direction: str = "denoising",
) -> WhyView:
    """Activation patching between the input (clean) and ``corrupted`` at the step shown.

    Args:
        corrupted: an input of as many tokens (a decoder-only model: the tokens shown before
            the step are appended to it, as to the clean prompt).
        answer, wrong: the tokens whose logit difference is the metric (``"#17"`` an id);
            default the token produced and the runner-up.
        what: ``"resid"``, ``"heads"``, ``"head_positions"`` or ``"patterns"``.
        direction: ``"denoising"`` (the corrupted run, one clean activation put back) or
            ``"noising"`` (the clean run, one corrupted activation put in).
    """
    try:
        s = shown(state)
        if what not in WHATS:
            raise InputError(f"what must be one of {', '.join(WHATS)}, got {what!r}")
        text = (corrupted or "").strip()
        if not text:
            raise InputError("type a corrupted input of as many tokens as the input")
        one = is_decoder_only(s.ckpt)  # the tokens shown before the step follow the prompt
        bad = list(s.ckpt.encode_source(text).ids) + s.prefix if one else text
        a = token_arg(answer)
        a = s.token if a is None else a
        b = token_arg(wrong)
        if b is None:
            _, default = candidates(state)
            b = token_arg(default)
        if a is None or b is None:
            raise InputError("give the answer and the wrong token (text, or #id)")
        res = analysis.patch(
            s.ckpt, s.text, bad, a, b, what, step=s.step, direction=direction, progress=False
        )
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    g = res.grid
    noising = direction == "noising"  # what matters most: the lowest cell, else the highest
    best = np.unravel_index(int(np.nanargmin(g) if noising else np.nanargmax(g)), g.shape)
    names = [res.labels[ax][i] for ax, i in zip(res.axes, best, strict=True)]
    where = " / ".join(f"{ax} {html.escape(n)}" for ax, n in zip(res.axes, names, strict=True))
    how = (
        "Noising: the clean input runs, one corrupted activation put in per cell."
        if noising
        else "Denoising: the corrupted input runs, one clean activation put back per cell."
    )
    msg = (
        f"{how} Metric logit({_tok(res.answer)}) − logit({_tok(res.wrong)}): "
        f"clean {res.clean_diff:.3f}, "
        f"corrupted {res.corrupted_diff:.3f}; each cell normalised so 0 is the corrupted run "
        f"and 1 the clean one. {'Most damaging' if noising else 'Largest restored'}: "
        f"**{where}** ({float(g[best]):.3f})."
    )
    return WhyView(msg, patch_figure(res), data=res.to_dict(), result=res)


# -- information flow --------------------------------------------------------------------------
def node_xy(name: str, nodes: dict) -> tuple[int, float]:
    """Where a flow node is drawn: its position along x; up y the stream entering layer l at
    ``l`` (``x{l}``), after layer l's attention at ``l + 0.5`` (``a{l}``), its MLP at
    ``l + 0.75`` (``m{l}``)."""
    kind, rest = name[0], name[1:]
    layer = int(rest.split("_")[0])
    return int(nodes[name]["position"]), layer + {"x": 0.0, "a": 0.5, "m": 0.75}[kind]


def flow_figure(res: Flow, n_layers: int) -> go.Figure:
    """The route of ``res``: tokens along x, layers up y, each edge a line as wide as its
    importance (attention blue, residual grey, MLP orange); hover a midpoint for the heads."""
    traces: list[go.Scatter] = []
    buckets: dict[tuple[str, int], tuple[list, list]] = {}
    mids: dict[str, tuple[list, list, list]] = {}
    for i in res.route:
        e = res.edges[i]
        (x0, y0), (x1, y1) = node_xy(e.source, res.nodes), node_xy(e.target, res.nodes)
        xs, ys = buckets.setdefault((e.kind, int(round(e.weight * 10))), ([], []))
        xs += [x0, x1, None]
        ys += [y0, y1, None]
        heads = ", ".join(f"H{h} {w:.2f}" for h, w in e.heads[:4])
        m = mids.setdefault(e.kind, ([], [], []))
        m[0].append((x0 + x1) / 2)
        m[1].append((y0 + y1) / 2)
        m[2].append(f"{e.source} → {e.target}: {e.kind} {e.weight:.3f}"
                    + (f"<br>heads {heads}" if heads else ""))  # fmt: skip
    shown_kinds = set()
    for (kind, w10), (xs, ys) in sorted(buckets.items()):
        traces.append(go.Scatter(
            x=xs, y=ys, mode="lines", name=kind, legendgroup=kind,
            showlegend=kind not in shown_kinds, hoverinfo="skip",
            line=dict(color=FLOW_COLOURS.get(kind, "#888"), width=0.8 + 0.9 * w10),
        ))  # fmt: skip
        shown_kinds.add(kind)
    for kind, (xs, ys, text) in mids.items():
        traces.append(go.Scatter(
            x=xs, y=ys, mode="markers", marker=dict(size=6, opacity=0.01,
                                                    color=FLOW_COLOURS.get(kind, "#888")),
            hovertext=text, hoverinfo="text", showlegend=False, name=f"{kind} edges",
        ))  # fmt: skip
    top = f"x{n_layers}_{res.position}"
    ends = (n for i in res.route for n in (res.edges[i].source, res.edges[i].target))
    used = list(dict.fromkeys([*ends, top]))
    pts = [node_xy(n, res.nodes) if n in res.nodes else (res.position, n_layers) for n in used]
    traces.append(go.Scatter(
        x=[p[0] for p in pts], y=[p[1] for p in pts], mode="markers", name="nodes",
        marker=dict(size=[14 if n == top else 6 for n in used], color="#374151",
                    symbol=["star" if n == top else "circle" for n in used]),
        hovertext=used, hoverinfo="text", showlegend=False,
    ))  # fmt: skip
    ticks = [0.0] + [v for i in range(n_layers) for v in (i + 0.5, i + 1.0)]
    texts = ["embeddings"] + [t for i in range(n_layers) for t in (f"L{i} attn", f"after L{i}")]
    return go.Figure(
        traces,
        layout=dict(
            template=TEMPLATE,
            title=(
                f"information flow to position {res.position} "
                f"({token_label(res.tokens[res.position])}), threshold {res.threshold:g}: "
                f"{len(res.route)} edges on the route"
            ),  # fmt: skip
            height=int(np.clip(220 + 110 * n_layers, 320, 1400)),
            xaxis=token_axis(
                [token_label(t) for t in res.tokens],
                title="position",
                tickangle=-45,
                zeroline=False,
            ),  # fmt: skip
            yaxis=dict(
                tickmode="array",
                tickvals=ticks,
                ticktext=texts,
                zeroline=False,
                range=[-0.3, n_layers + 0.3],
            ),  # fmt: skip
            legend=dict(orientation="h", y=-0.25),
        ),
    )


@remote(_stopped)
def flow_graph(state: SessionState, threshold: float = 0.04) -> WhyView:
    """The information-flow routes to the step shown's prediction at ``threshold``."""
    try:
        s = shown(state)
        res = analysis.flow(s.ckpt, s.text, float(threshold), step=s.step)
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    from ..analysis.why import n_layers, prepare

    layers = n_layers(s.ckpt, prepare(s.ckpt, s.text, s.step).stack)
    attn = [res.edges[i] for i in res.route if res.edges[i].kind == "attention"]
    strongest = max(attn, key=lambda e: e.weight, default=None)
    said = ""
    if strongest is not None:
        src = res.nodes[strongest.source]["position"]
        heads = ", ".join(f"H{h}" for h, _ in strongest.heads[:2])
        said = (f" The strongest attention edge reads position {src} "
                f"({_tok(res.tokens[src])}) into {strongest.target} ({strongest.weight:.2f}, "
                f"carried by {heads or 'no single head'}).")  # fmt: skip
    msg = (
        f"Edges whose importance (the proximity of a part to the block's output, normalised "
        f"per token) is below {float(threshold):g} are dropped; {len(res.route)} of "
        f"{len(res.edges)} remain on the route to the prediction.{said}"
    )
    return WhyView(msg, flow_figure(res, layers), data=res.to_dict(), result=res)


# -- export --------------------------------------------------------------------------------------
def write_json(data: dict[str, Any] | None, name: str) -> str | None:
    """``data`` written as ``<name>.json`` in this process's exports folder for a download
    button; its path (None when there is nothing to write)."""
    if not data:
        return None
    folder = Path(tempfile.mkdtemp(prefix="why-", dir=store.private_dir("exports")))
    path = folder / f"{name}.json"
    path.write_text(dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
    return str(path)
