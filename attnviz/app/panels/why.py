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
- the information-flow graph, its edges and one patching cell opened:
  :mod:`attnviz.app.panels.why_routes`;
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
from ...analysis.patching import WHATS, TooLong
from ...analysis.why import LensGrid, label, lens_grid, n_layers
from ...checkpoint import Checkpoint
from ...core.errors import AttnvizError, InputError
from ...render.plots_why import (
    dla_figure,
    grid_figure,
    patch_figure,
)
from ...render.report_why import why_sections
from .. import store
from ..inputs import refuse
from ..kinds import is_decoder_only, is_encoder_only
from ..speech import samples_of
from ..state import SessionState, checkpoint_of, panel_stamps, warning
from ..views import display_token
from ..workers import remote
from .contrast import alternatives

#: The stamp keys of the tab's panels (see :func:`attnviz.app.state.panel_stamps`), and of
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


def stopped_view(*args, message: str, **kwargs) -> WhyView:
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
        InputError: nothing started, no step taken, an encoder-decoder model whose earlier
            tokens were forced (the library replays the greedy prefix).
    """
    if not state.started:
        raise InputError("type an input and press Step or Run (Read, for a sentence model) first")
    ckpt = checkpoint_of(state)
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
    source = samples_of(state) if ckpt.is_audio else state.text  # a clip: its kept samples
    return Shown(ckpt, source, state.step - 1, token, prefix)


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


def token_md(token: str) -> str:
    return f"“{html.escape(display_token(token))}”"


# -- direct attribution ------------------------------------------------------------------------
@remote(stopped_view)
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
    what = token_md(res.token) + (f" and not {token_md(res.versus)}" if res.versus else "")
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


@remote(stopped_view)
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
        f"Each layer's residual stream at position {res.position} ({token_md(res.tokens[res.position])})"
        f" read through the final norm and the unembedding. The model's choice there is "
        f"{token_md(res.target)}: {when}."
    )
    if s.token is not None and s.token != res.target_id:
        msg += f" (The step shown was forced to {token_md(label(s.ckpt, s.token))}.)"
    return WhyView(msg, rows=lens_rows(res), data=res.to_dict(), result=res)


@remote(stopped_view)
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
@remote(stopped_view)
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
        s, bad, a, b = patch_inputs(state, corrupted, answer, wrong, what)
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
        f"{how} Metric logit({token_md(res.answer)}) − logit({token_md(res.wrong)}): "
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


def patch_inputs(state: SessionState, corrupted, answer, wrong, what: str):
    """The step shown and the patching inputs as the library takes them: ``(shown, corrupted
    ids or text, answer, wrong)``; a decoder-only model's corrupted prompt gets the tokens
    shown before the step, as the clean one has them."""
    s = shown(state)
    refuse(s.ckpt, "patch")  # a speech model: a clip has no corruption to type
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
    attribution of the token produced and the logit lens (computed now), then the lens grid,
    the patching grid and the flow graph where the tab computed them for this same state
    (``kept``: panel key -> ``(stamp, result)`` as the page keeps them). Empty where the tab
    explains nothing (no step taken); an analysis the model refuses is left out."""
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
    grid_ = still("why_lens")  # the lens panel's last result: the whole grid, when it was
    grid_ = grid_ if isinstance(grid_, LensGrid) else None
    return why_sections(dla, lens_, still("why_patch"), still("why_flow"), layers, grid_,
                        lambda i: label(s.ckpt, i))  # fmt: skip
