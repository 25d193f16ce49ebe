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
  edges as lines as wide as their importance (an encoder-decoder model: the source's tokens
  on the left, cross-attention edges from them); :func:`open_edge`: one of its attention
  edges opened, the heads carrying it ranked, each with the attention map the run recorded
  beside its contribution map;
- :func:`open_cell`: one cell of a patching grid run again, its next tokens and its attention
  (the patched run's recorded weights at a module and head, beside the unpatched run's);
- :func:`report_results`: what the HTML report adds of this tab for the step shown.

The figures are :mod:`attnviz.render.plots_why`'s. Each view returns a :class:`WhyView` whose
``data`` is the library result's ``to_dict()`` (the JSON download). What the library refuses
(an encoder-only model's attribution, inputs of different lengths) comes back as its one
line.
"""

from __future__ import annotations

import html
import tempfile
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from ... import analysis
from ...analysis.export import dumps
from ...analysis.patched_run import patched_run
from ...analysis.patching import WHATS, TooLong, modules
from ...analysis.why import label, lens_grid, n_layers, prepare
from ...checkpoint import Checkpoint
from ...core.errors import AttnvizError, InputError
from ...render.plots_why import (
    cell_attention_figure,
    dla_figure,
    edge_figure,
    edge_name,
    flow_figure,
    grid_figure,
    patch_figure,
)
from ...render.report_why import why_sections
from .. import store
from ..contrast_lab import alternatives
from ..kinds import is_decoder_only, is_encoder_only
from ..speech import NOT_FOR_AUDIO
from ..stamps import panel_stamps
from ..state import SessionState, checkpoint_of, warning
from ..views import display_token
from ..workers import remote

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
#: the longest a patching grid may take in the app before attribution patching stands in
BUDGET_S = 60.0
NOT_STEPPED = "take at least one Step: this tab explains the token produced at the step shown"
LENS_HEADERS = ["layer", "rank of the token produced (1 = top)", "its probability", "top tokens"]


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
    cells: list[tuple[str, str]] = field(default_factory=list)  # a grid's cells to open
    cell: str | None = None  # the one chosen first


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
    return WhyView(
        msg, grid_figure(res, lambda i: label(s.ckpt, i)), data=res.to_dict(), result=res
    )


# -- patching ----------------------------------------------------------------------------------
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
        s, bad, a, b = _patch_inputs(state, corrupted, answer, wrong, what)
        run = dict(step=s.step, direction=direction, progress=False)
        try:
            res = analysis.patch(s.ckpt, s.text, bad, a, b, what, budget_s=BUDGET_S, **run)
            slow = ""
        except TooLong as exc:  # a first look from one backward pass instead
            res = analysis.patch(s.ckpt, s.text, bad, a, b, what, method="attribution", **run)
            slow = (f"Exact patching would take about {exc.seconds:.0f} s here: this grid is "
                    "**attribution patching** (one backward pass, an estimate). ")  # fmt: skip
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    g = res.grid if res.grid is not None else res.approx
    noising = direction == "noising"  # what matters most: the lowest cell, else the highest
    best = np.unravel_index(int(np.nanargmin(g) if noising else np.nanargmax(g)), g.shape)
    where = html.escape(_cell_name(res, best))
    cells = [(_cell_name(res, i), ",".join(map(str, i))) for i in np.ndindex(*g.shape)
             if np.isfinite(g[i])][:2000]  # fmt: skip
    how = (
        "Noising: the clean input runs, one corrupted activation put in per cell."
        if noising
        else "Denoising: the corrupted input runs, one clean activation put back per cell."
    )
    msg = slow + (
        f"{how} Metric logit({_tok(res.answer)}) − logit({_tok(res.wrong)}): "
        f"clean {res.clean_diff:.3f}, "
        f"corrupted {res.corrupted_diff:.3f}; each cell normalised so 0 is the corrupted run "
        f"and 1 the clean one. {'Most damaging' if noising else 'Largest restored'}: "
        f"**{where}** ({float(g[best]):.3f} of the clean run's difference "
        f"{'left' if noising else 'restored'})."
    )
    first = ",".join(str(int(i)) for i in best)
    return WhyView(msg, patch_figure(res), data=res.to_dict(), result=res, cells=cells, cell=first)


def _cell_name(res, index) -> str:
    """A grid cell as the grid's axes write it: ``decoder_self 0 · H0``, ``L3 · ␣Paris``."""
    short = {"head": "H", "layer": "L"}
    names = [display_token(res.labels[ax][i]) if ax == "position"  # a token: spaces shown
             else short.get(ax, "") + res.labels[ax][i]
             for ax, i in zip(res.axes, index, strict=True)]  # fmt: skip
    return " · ".join(names)


def _patch_inputs(state: SessionState, corrupted, answer, wrong, what: str):
    """The step shown and the patching inputs as the library takes them: ``(shown, corrupted
    ids or text, answer, wrong)``; a decoder-only model's corrupted prompt gets the tokens
    shown before the step, as the clean one has them."""
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
    return s, bad, a, b


CELL_HEADERS = ["next token", "p patched", "p clean", "p corrupted"]


def site_name(value: str) -> str:
    """A head as the menus write it: ``"decoder_self 0 1"`` -> ``decoder_self 0 · H1``."""
    kind, layer, head = value.split()
    return f"{kind} {layer} · H{head}"


def head_sites(ckpt: Checkpoint) -> list[tuple[str, str]]:
    """Every attention head as a menu choice ``(decoder_self 0 · H1, "decoder_self 0 1")``."""
    values = [f"{kind} {layer} {h}" for kind, layer in modules(ckpt)
              for h in range(ckpt.config.n_heads)]  # fmt: skip
    return [(site_name(v), v) for v in values]


def _cell_site(ckpt: Checkpoint, what: str, index: list[int], stack: str) -> str:
    """The head an opened cell shows first: the cell's own (heads, patterns, head
    positions), else head 0 of the patched layer's self-attention (resid)."""
    if what == "resid":
        return f"{'encoder_self' if stack == 'encoder' else 'decoder_self'} {index[0]} 0"
    kind, layer = modules(ckpt)[index[0]]
    return f"{kind} {layer} {index[1]}"


def _axis_tokens(ckpt: Checkpoint, prep, kind: str) -> tuple[list[str], list[str]]:
    """``(keys, queries)`` labelling a ``kind`` attention map of a prepared run."""
    source = ([label(ckpt, i, "encoder") for i in prep.source] if prep.source is not None
              else list(prep.tokens))  # fmt: skip
    if kind == "encoder_self":
        return source, source
    return (source if kind == "cross" else list(prep.tokens)), list(prep.tokens)


def _labels(tokens: list[str], n: int) -> list[str]:
    return tokens if len(tokens) == n else [str(i) for i in range(n)]


@remote(_stopped)
def open_cell(
    state: SessionState,
    corrupted: str | None,
    answer: str | None,
    wrong: str | None,
    what: str,
    direction: str,
    cell: str | None,
    site: str | None = None,
) -> WhyView:
    """One cell of the patching grid run again on its own (:func:`attnviz.analysis.
    patched_run.patched_run`): the patched run's top next tokens beside the clean and
    corrupted runs' probabilities of them, and its attention at ``site`` (``"decoder_self 0
    1"``: module and head; default the cell's own head) as that run recorded it, beside the
    unpatched run's. ``cell``: its indices, ``"0,2"``.

    Returns:
        :class:`WhyView`: ``rows`` the next tokens, ``figure`` the attention, ``cells`` every
        head to show (``cell`` the one shown).
    """
    try:
        if not cell:
            raise InputError("run patching, then choose one of its cells")
        try:
            index = [int(i) for i in str(cell).split(",")]
        except ValueError:
            raise InputError(f"a cell is its indices, as '0,2'; got {str(cell)[:20]!r}") from None
        s, bad, a, b = _patch_inputs(state, corrupted, answer, wrong, what)
        res = patched_run(s.ckpt, s.text, bad, a, b, what, index, step=s.step,
                          direction=direction)  # fmt: skip
        sites = head_sites(s.ckpt)
        prep = prepare(s.ckpt, bad if res.direction == "denoising" else s.text, s.step)
        site = site if site in {v for _, v in sites} else _cell_site(s.ckpt, what, index,
                                                                      prep.stack)  # fmt: skip
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    rows = [[display_token(t), round(p, 4), round(c, 4), round(k, 4)]
            for t, p, c, k in zip(res.top_tokens, res.probs, res.clean_probs,
                                  res.corrupted_probs, strict=True)]  # fmt: skip
    # as the grid's axes write them: L3 · ␣Paris, decoder_self 0 · H0 · ␣is
    prefix = {"resid": ["L", None], "head_positions": ["", "H", None]}.get(what, ["", "H"])
    name = " · ".join(display_token(c) if p is None else p + c
                      for p, c in zip(prefix, res.cell, strict=True))  # fmt: skip
    kind, layer, head = site.split()
    patched = res.trace.numpy(kind, int(layer))[0, int(head)]  # [Tq, Tk], as the run used it
    base = res.base.numpy(kind, int(layer))[0, int(head)]
    keys, queries = _axis_tokens(s.ckpt, prep, kind)
    run = "corrupted" if res.direction == "denoising" else "clean"
    fig = cell_attention_figure(patched, base, _labels(keys, patched.shape[1]),
                                _labels(queries, patched.shape[0]), site_name(site), run)  # fmt: skip
    moved = float(abs(patched - base).max())
    msg = (f"The {res.direction} run with only **{html.escape(name)}** patched:"
           f" its metric {res.metric:.3f} (0 = corrupted, 1 = clean); it predicts "
           f"{_tok(res.top_tokens[0])} ({res.probs[0]:.3f}). Its attention at "
           f"**{html.escape(site_name(site))}**, as that run recorded it, moved by at most "
           f"{moved:.3f} from the {run} run's.")  # fmt: skip
    data = {**res.to_dict(), "attention": {"site": site, "patched": patched.tolist(),
                                           "unpatched": base.tolist()}}  # fmt: skip
    return WhyView(msg, fig, rows=rows, data=data, result=res, cells=sites, cell=site)


# -- information flow --------------------------------------------------------------------------
@remote(_stopped)
def flow_graph(state: SessionState, threshold: float = 0.04) -> WhyView:
    """The information-flow routes to the step shown's prediction at ``threshold``."""
    try:
        s = shown(state)
        res = analysis.flow(s.ckpt, s.text, float(threshold), step=s.step)
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    layers = n_layers(s.ckpt, "encoder" if is_encoder_only(s.ckpt) else "decoder")
    said = ""
    for kind in ("attention", "cross"):
        edges = [res.edges[i] for i in res.route if res.edges[i].kind == kind]
        # what reaches the predicting position from elsewhere says most; else any edge
        far = [e for e in edges if res.nodes[e.target]["position"] == res.position
               and (kind == "cross" or res.nodes[e.source]["position"] != res.position)]  # fmt: skip
        strongest = max(far or edges, key=lambda e: e.weight, default=None)
        if strongest is None:
            continue
        src = res.nodes[strongest.source]["position"]
        heads = ", ".join(f"H{h}" for h, _ in strongest.heads[:2])
        what = "source " if kind == "cross" else ""
        said += (f" The strongest {'cross-' if kind == 'cross' else ''}attention edge reads "
                 f"{what}position {src} ({_tok(res.token_of(strongest.source))}) into "
                 f"{strongest.target} ({strongest.weight:.2f}, carried by "
                 f"{heads or 'no single head'}).")  # fmt: skip
    dead = res.dead_ends()
    if dead:
        said += (f" The route stops at {', '.join(dead[:4])}: no single part of that block is "
                 "close to its output (its sublayer cancels much of the residual), so the "
                 "measure credits none; the direct attribution still splits the logit.")  # fmt: skip
    msg = (
        f"Edges whose importance (the proximity of a part to the block's output, normalised "
        f"per token) is below {float(threshold):g} are dropped; {len(res.route)} of "
        f"{len(res.edges)} remain on the route to the prediction.{said} Click an attention "
        "edge (or choose it below) for the heads that carry it."
    )
    cells, first = edge_choices(res)
    return WhyView(msg, flow_figure(res, layers), data=res.to_dict(), result=res, cells=cells,
                   cell=first)  # fmt: skip


def edge_choices(res) -> tuple[list[tuple[str, str]], str | None]:
    """The route's attention and cross-attention edges as menu choices ``(words, "index")``,
    strongest first, and the one chosen first: the strongest into the predicting position
    from another position (else the strongest)."""
    route = sorted((i for i in res.route if res.edges[i].site is not None),
                   key=lambda i: -res.edges[i].weight)  # fmt: skip
    if not route:
        return [], None

    def far(i: int) -> bool:
        e = res.edges[i]
        into = res.nodes[e.target]
        return (into["position"] == res.position and into["stack"] != "encoder"
                and (e.kind == "cross" or res.nodes[e.source]["position"] != res.position))  # fmt: skip

    first = next((i for i in route if far(i)), route[0])
    return [(edge_name(res, i, plain=True), str(i)) for i in route], str(first)


EDGE_HEADERS = ["rank", "head", "contribution to the edge", "attention at the edge (recorded)"]


def open_edge(state: SessionState, kept: tuple | None, edge: str | int | None,
              top: int = 3) -> WhyView:  # fmt: skip
    """Attention edge ``edge`` (its index) of the graph in ``kept`` (``(stamp, Flow)`` as the
    page keeps it after :func:`flow_graph`): the heads carrying it ranked by contribution,
    and for the ``top`` first each head's attention map, as the run the graph was computed
    on recorded it, beside its contribution map.

    Returns:
        :class:`WhyView`: ``rows`` the ranked heads, ``figure`` the maps; a one-line refusal
        when there is no graph, it was drawn for another state, or the edge is not one.
    """
    try:
        if not kept:
            raise InputError("draw the routes first, then click an attention edge")
        stamp, res = kept
        if stamp != panel_stamps(state)["why_flow"]:
            raise InputError("the graph was drawn for an earlier step or input: draw it again")
        try:
            index = int(str(edge).strip())
        except ValueError:
            raise InputError(
                f"an edge is its number in the graph, got {str(edge)[:20]!r}"
            ) from None
        heads = res.edge_heads(index)
    except AttnvizError as exc:
        return WhyView(message=warning(exc))
    rows = [[n, f"H{h}", round(w, 4), round(a, 4)] for n, (h, w, a) in enumerate(heads, 1)]
    e = res.edges[index]
    shown_ = ", ".join(f"H{h}" for h, _, _ in heads[:top]) or "none"
    name = html.escape(edge_name(res, index, plain=True))
    msg = (f"**{name}**: {len(heads)} heads carry it, ranked by "
           f"their contribution; shown: {shown_}. Left, each head's attention as the run "
           "recorded it; right, its contribution map (its importance through each key into "
           "each query's stream after the block); the edge's cell is outlined.")  # fmt: skip
    m = res.maps[e.site]
    q, k = res.nodes[e.target]["position"], res.nodes[e.source]["position"]
    data = {"edge": index, "site": list(e.site), "query": q, "key": k, "weight": e.weight,
            "heads": [{"head": h, "contribution": w, "attention": a,
                       "attention_map": m.attention[h].tolist(),
                       "contribution_map": m.contribution[h].tolist()}
                      for h, w, a in heads[:top]]}  # fmt: skip
    fig = edge_figure(res, index, top) if heads else None
    return WhyView(msg, fig, rows=rows, data=data, result=res)


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


# -- the HTML report ---------------------------------------------------------------------------
def report_sections(state: SessionState, kept: dict | None = None) -> list:
    """The tab's sections of the Export tab's HTML report, for the step shown: the direct
    attribution of the token produced and the logit lens (computed now), then the patching
    grid and the flow graph where the tab computed them for this same state (``kept``: panel
    key -> ``(stamp, result)`` as the page keeps them). Empty where the tab explains nothing
    (no step taken, a speech model); an analysis the model refuses is left out."""
    try:
        s = shown(state)
    except AttnvizError:
        return []
    now = panel_stamps(state)

    def still(key: str):
        got = (kept or {}).get(key)
        return got[1] if got and got[0] == now[key] else None

    dla = lens_ = None
    with suppress(AttnvizError):  # an encoder-only model: no direct path into its MLM head
        dla = analysis.direct_attribution(s.ckpt, s.text, s.token, None, s.step)
    with suppress(AttnvizError):
        lens_ = analysis.logit_lens(s.ckpt, s.text, s.step)
    layers = n_layers(s.ckpt, "encoder" if is_encoder_only(s.ckpt) else "decoder")
    return why_sections(dla, lens_, still("why_patch"), still("why_flow"), layers)
