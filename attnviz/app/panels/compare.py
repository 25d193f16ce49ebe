"""The app's Compare tab: the step-through model (A) against another checkpoint (B).

Plain Python, no gradio. A thin view over :func:`attnviz.analysis.compare` on the current
input, both models teacher-forced on A's greedy output (encoder-only: both read the sentence,
A's top fillers scored): the per-head divergence grid of each
kind (with the head of B each head of A is matched to) as clickable HTML (a cell carries
``data-kind``/``data-layer``/``data-head``; a click draws that head), one head of both models
side by side with their difference, and the output tokens coloured by how their probability
changed. Model B comes from the model menu or an upload (the main upload's checks: never
unpickled, a refused upload leaves nothing on disk). User errors (no input, incomparable
checkpoints) come back as a one-line message.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go

from ...analysis import compare as analysis_compare
from ...analysis.compare import Comparison, check_comparable
from ...analysis.masked_lm import scored_positions
from ...checkpoint import Checkpoint
from ...core.errors import AttnvizError, InputError
from ...core.model import KINDS
from ...core.sites import parse_head, parse_head_index, parse_layer
from ...decode.scoring import Scored
from ...render import plots
from ...render.plots import KIND_TITLES
from .. import store
from ..figures import placeholder
from ..kinds import is_decoder_only, is_encoder_only
from ..lru import LRU
from ..state import SessionState, checkpoint_of, layer_count, warning
from ..views import display_token
from ..workers import remote

#: The stamp key of this tab's result (see :func:`attnviz.app.state.panel_stamps`).
PANEL = "compare"
INTRO = (
    "Compare the model above (**A**) with another checkpoint (**B**) on the current input: "
    "both are teacher-forced on A's greedy output (an encoder-only pair: both read the same "
    "sentence, and A's top fillers are scored). Each grid cell is the mean Jensen–Shannon "
    "divergence (bits, 0 = the same attention, 1 = no overlap) of head (layer, head) in A and "
    "the same head in B; **→H2** names the head of B it is matched to (heads of a layer "
    "paired to minimise the total divergence; underlined where it is another head). "
    "**Click a cell** to draw that head as A | B | A − B."
)
_RESULTS = LRU(4)  # (a, version, b, version, text, device) -> (Comparison, Scored a, b)


@dataclass
class CompareView:
    """What the tab shows.

    Attributes:
        grids: one divergence grid per kind the models have, in
            :data:`attnviz.core.model.KINDS` order (a decoder-only model: ``"decoder_self"``
            alone; plotly figures, for saving or a notebook).
        grid_html: the same grids as the page shows them: a button per head that draws it.
        head: A | B | A − B of the chosen head on the current input.
        tokens_html: the target tokens coloured by their probability change (B − A).
        message: markdown (a summary, or the reason nothing is shown).
        comparison: the library's result (None when refused).
    """

    grids: list[go.Figure] = field(default_factory=list)
    grid_html: str = ""
    head: go.Figure | None = None
    tokens_html: str = ""
    message: str = ""
    comparison: Comparison | None = None


#: Why a comparison (or an upload of model B) waits: B is compared on the session's input.
START_FIRST = "type an input and press Step or Run (Read, for a sentence model) first"


def model_choices(state: SessionState) -> list[str]:
    """The model menu's names (the same the page's model picker offers: no other
    session's upload)."""
    return store.menu(state.model or None, owner=state.sid)


def head_menus(state: SessionState, kind: str = "cross") -> tuple[list[str], list[str]]:
    """``(["L0", ...], ["H0", ...])`` for ``kind`` of the loaded model (empty when none)."""
    try:
        ckpt = checkpoint_of(state)
    except AttnvizError:
        return [], []
    layers = [f"L{i}" for i in range(layer_count(ckpt, _kind(kind)))]
    return layers, [f"H{h}" for h in range(ckpt.config.n_heads)]


def model_kinds(state: SessionState) -> list[str]:
    """The attention kinds the loaded model has, in :data:`KINDS` order (a decoder-only
    model: ``["decoder_self"]``; every kind when none loads)."""
    try:
        ckpt = checkpoint_of(state)
    except AttnvizError:
        return list(KINDS)
    return [k for k in KINDS if layer_count(ckpt, k)]


def kind_of(state: SessionState, kind: str) -> str:
    """``kind`` where the loaded model has it, else the first kind it has (a decoder-only
    model's ``"decoder_self"`` for a ``"cross"`` left from an encoder-decoder)."""
    have = model_kinds(state)
    return kind if kind in have or not have else have[0]


def shown_kinds(result: Comparison) -> list[str]:
    """The kinds compared: those with heads (a decoder-only pair: ``"decoder_self"``)."""
    return [k for k in KINDS if result.divergence[k].size]


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise InputError(f"unknown attention kind {kind!r}; one of {', '.join(KINDS)}")
    return kind


def _index(value, prefix: str, n: int, what: str) -> int:
    i = (parse_layer if prefix == "L" else parse_head_index)(0 if value in (None, "") else value)
    if not 0 <= i < n:
        raise InputError(f"{what} {i} does not exist (0 to {n - 1})")
    return i


def _checkpoints(state: SessionState, model_b: str) -> tuple[Checkpoint, Checkpoint, str]:
    if not state.started:
        raise InputError(START_FIRST)
    if not model_b:
        raise InputError("pick model B to compare with")
    path_b = store.resolve_model(model_b, owner=state.sid)
    if not store.visible(path_b, state.sid):
        raise InputError("model B is not in this session's menu")
    a, b = checkpoint_of(state), store.get_checkpoint(path_b, state.device)
    check_comparable(a, b)  # one line: another kind, other heads or other tokenizers
    return a, b, path_b


def comparison_of(state: SessionState, model_b: str) -> tuple[Comparison, Scored, Scored]:
    """The comparison of the state's model with ``model_b`` (a menu name or folder) on the
    state's input, and both teacher-forced passes (kept for drawing heads); cached."""
    a, b, path_b = _checkpoints(state, model_b)
    key = (state.model, store.version_of(state.model), path_b, store.version_of(path_b),
           state.text, state.device)  # fmt: skip
    hit = _RESULTS.get(key)
    if hit is None:
        result = analysis_compare(a, b, [state.text], keep_scores=True)
        hit = (result, *result.scored[0])
        _RESULTS.put(key, hit)
    return hit


def head_figure(
    state: SessionState, scored_a: Scored, scored_b: Scored, kind: str, layer, head, b_name: str
) -> go.Figure:
    """A | B | A − B of one head for the current input (teacher-forced rows)."""
    ckpt = checkpoint_of(state)
    kind = _kind(kind)
    li = _index(layer, "L", layer_count(ckpt, kind), "layer")
    hi = _index(head, "H", ckpt.config.n_heads, "head")
    wa = scored_a.trace.numpy(kind, li)[0, hi]  # [Tq, Tk]
    wb = scored_b.trace.numpy(kind, li)[0, hi]
    mask = scored_a.trace.numpy(kind, li, "mask")[0, 0]  # [Tq, Tk]
    src = [display_token(t) for t in state.src_pieces]
    tok = ckpt.tgt_tokenizer
    bos = tok.token(ckpt.config.bos_id) if tok is not None else "<s>"
    tgt_in = [display_token(bos), *(display_token(t) for t in scored_a.tokens[:-1])]  # [Tt]
    if is_decoder_only(ckpt):  # one sequence: the prompt, then the output it reads
        tgt_in = [*src, *(display_token(t) for t in scored_a.tokens)][: wa.shape[-1]]
    keys, queries = {"encoder_self": (src, src), "decoder_self": (tgt_in, tgt_in),
                     "cross": (src, tgt_in)}[kind]  # fmt: skip
    title = (
        f"{KIND_TITLES[kind]} · layer {li} · head {hi}<br>"
        f"<sup>A = {html.escape(store.model_name(state.model))}, "
        f"B = {html.escape(b_name)}</sup>"
    )
    return plots.attention_difference(wa, wb, keys, queries, title=title, mask=mask)


def tokens_html(result: Comparison, at: Sequence[int] | None = None) -> str:
    """The target tokens as a strip: green where B gives them more probability, red where less;
    hovering a token shows both probabilities and ranks. ``at``: the tokens are an
    encoder-only A's top filler at each of these positions, not its greedy output (fillers
    of positions apart are parted by “…”, as the summary writes them)."""
    spans = []
    for k, t in enumerate(result.tokens[0]):
        c = float(np.clip(t.change, -1, 1))
        colour = _chip_colour(c)
        tip = (f"A: p={t.prob_a:.4f}, rank {t.rank_a} · B: p={t.prob_b:.4f}, rank {t.rank_b} "
               f"· change {t.change:+.4f}")  # fmt: skip
        if at is not None:
            tip = f"position {at[k]} · {tip}"
            if k and at[k] != at[k - 1] + 1:
                spans.append('<span class="av-cmp-gap"> … </span>')
        spans.append(
            f'<span class="av-cmp-tok" title="{html.escape(tip)}" style="background:{colour};'
            f'color:#111827;padding:2px 4px;margin:2px;border:1px solid #9ca3af;border-radius:3px;display:inline-block">'
            f"{html.escape(display_token(t.token))}</span>"
        )
    what = "A's top filler at each mask token" if at is not None else "A's greedy output"
    legend = (
        f"<small>Output tokens ({what}): green = B more likely, red = B less likely; "
        "hover a token for both probabilities and ranks.</small>"
    )
    return f'<div id="compare-token-strip">{"".join(spans)}</div>{legend}'


def _read_at(state: SessionState) -> list[int] | None:
    """Where an encoder-only A's output is read in the state's sentence (None otherwise)."""
    ckpt = checkpoint_of(state)
    return scored_positions(ckpt, state.src_ids) if is_encoder_only(ckpt) else None


def _chip_colour(change: float) -> str:
    """An opaque chip colour: white (no change) to green (B more likely) or red (B less
    likely), mixed over white so dark text reads on it in either page theme."""
    rgb = (84, 162, 75) if change >= 0 else (228, 87, 86)
    a = min(abs(change), 1.0) * 0.75  # at most 3/4 of the hue: dark text stays >= 4.5:1
    r, g, b = (round(255 + (x - 255) * a) for x in rgb)
    return f"rgb({r},{g},{b})"


#: Divergences at or below this (bits) read as "no change" (float noise of the same model).
SAME = 1e-6


def _summary(result: Comparison, a_name: str, b_name: str) -> str:
    out_a, out_b, same = result.outputs[0]
    agree = "the same output" if same else "**different outputs**"
    top = []
    for kind in shown_kinds(result):
        (layer, head, d), *_ = result.most_changed(kind, 1)
        if d > SAME:
            top.append(f"{KIND_TITLES[kind].lower()}: L{layer} H{head} ({d:.3f})")
    heads = (
        "Most changed head per kind — " + "; ".join(top) + "."
        if top
        else "No head differs: every head attends the same in A and B (divergence 0)."
    )
    return (
        f"A = **{html.escape(a_name)}** → “{html.escape(out_a)}”, B = **{html.escape(b_name)}** "
        f"→ “{html.escape(out_b)}”: {agree}.  \n{heads}"
    )


def _stopped(*args, message: str, **kwargs) -> CompareView:
    """The model's worker stopped (:func:`attnviz.app.workers.remote`): its one line."""
    return CompareView(message=message)


@remote(_stopped)
def compare(
    state: SessionState, model_b: str, kind: str = "cross", layer="L0", head="H0"
) -> CompareView:
    """Everything the Compare tab shows for the state's model vs ``model_b`` on its input.

    Args:
        state: the step-through state (its model is A, its input the one compared).
        model_b: a menu name (or folder) of the checkpoint to compare with.
        kind, layer, head: the head drawn as A | B | A − B (``"L1"``, ``"H2"``).
    Returns:
        :class:`CompareView`; a user error (no input, incomparable checkpoints, a head that
        does not exist) is its one-line message with placeholder figures.
    """
    try:
        result, sa, sb = comparison_of(state, model_b)
        b_name = store.model_name(store.resolve_model(model_b, owner=state.sid))
        grids = []
        kind = kind if kind in shown_kinds(result) else shown_kinds(result)[0]
        for k in shown_kinds(result):
            fig = plots.head_divergence(
                result.divergence[k], result.matching[k], title=f"{KIND_TITLES[k]}: A vs B",
                zmax=1.0,
            )  # fmt: skip
            grids.append(fig)
        fig = head_figure(state, sa, sb, kind, layer, head, b_name)
        pick = (kind, _index(layer, "L", 10**9, "layer"), _index(head, "H", 10**9, "head"))
    except AttnvizError as exc:
        return error_view(exc)
    a_name = store.model_name(state.model)
    summary = _summary(result, a_name, b_name)
    return CompareView(
        grids=grids, grid_html=grid_html(result, pick, (a_name, b_name)), head=fig,
        tokens_html=tokens_html(result, _read_at(state)),
        message=summary, comparison=result,
    )  # fmt: skip


def _cell_colour(d: float) -> str:
    """White (JS 0) to red (JS 1), square-root scaled so small changes show; light enough for
    dark text in either page theme."""
    light = 96 - 34 * float(np.clip(d, 0, 1)) ** 0.5
    return f"hsl(0, 75%, {light:.0f}%)"


def grid_html(
    result: Comparison,
    pick: tuple[str, int, int] | None = None,
    names: tuple[str, str] | None = None,
) -> str:
    """The divergence grids, one table per kind, as buttons: a cell shows the divergence of
    head (layer, head) of A and B and the head of B it is matched to; clicking it draws that
    head (``data-kind``, ``data-layer``, ``data-head``; ``pick`` is marked as drawn).
    ``names`` (A's, B's) label the grids, so they say what they compare whatever the message
    above them says later (a refused upload's warning)."""
    caption = ""
    if names:
        a, b = (html.escape(n) for n in names)
        caption = f'<p class="av-cmp-names">A = <b>{a}</b> vs B = <b>{b}</b></p>'
    tables = []
    for kind in shown_kinds(result):
        d, m, md = result.divergence[kind], result.matching[kind], result.matched_divergence[kind]
        head_cols = "".join(f"<th>H{h}</th>" for h in range(d.shape[1]))
        rows = []
        for ly in range(d.shape[0]):
            cells = []
            for h in range(d.shape[1]):
                j = int(m[ly, h])
                picked = " best" if pick == (kind, ly, h) else ""
                moved = " av-cmp-moved" if j != h else ""
                tip = (f"{KIND_TITLES[kind]} L{ly} H{h}: JS divergence A vs B {d[ly, h]:.3f} "
                       f"bits; matched to B's H{j} ({md[ly, h]:.3f}). Click to draw A | B | A − B")  # fmt: skip
                cells.append(
                    f'<td><button type="button" class="av-aer av-cmp-cell{picked}" '
                    f'data-kind="{kind}" data-layer="{ly}" data-head="{h}" '
                    f'aria-pressed="{str(bool(picked)).lower()}" '
                    f'style="background:{_cell_colour(d[ly, h])}" title="{html.escape(tip)}">'
                    f'<span>{d[ly, h]:.3f}</span><span class="av-cmp-match{moved}">→H{j}</span>'
                    "</button></td>"
                )
            rows.append(f"<tr><th>L{ly}</th>{''.join(cells)}</tr>")
        tables.append(
            f'<div class="av-cmp-kind" id="compare-grid-{kind}"><b>{KIND_TITLES[kind]}</b>'
            f"<table><thead><tr><th></th>{head_cols}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>"
        )
    style = (
        "<style>#compare-grid .av-cmp-grids{display:flex;flex-wrap:wrap;gap:18px}"
        "#compare-grid .av-cmp-cell{min-width:4.5rem}"
        # light cells in either theme: dark text on them, whatever the page's text colour
        "#compare-grid .av-cmp-cell,#compare-grid .av-cmp-cell span{color:#111827 !important}"
        "#compare-grid .av-cmp-match{font-size:.8rem}"
        "#compare-grid .av-cmp-moved{text-decoration:underline;font-weight:700}</style>"
    )
    return (
        f'{style}<div class="av-aergrid">{caption}<div class="av-cmp-grids">{"".join(tables)}</div>'
        '<p class="explain">JS divergence in bits (0 = the same attention); →H names the head '
        "of B each head of A is matched to. Click a head to draw it as A | B | A − B.</p></div>"
    )


def parse_pick(value: str) -> tuple[str, str, str]:
    """A clicked cell's ``"kind layer head"`` (as the page sends it) -> ``(kind, "L1", "H2")``."""
    kind, layer, head = parse_head(value or "")
    return kind, f"L{layer}", f"H{head}"


def upload_b(
    paths: list[str], device: str = "cpu", owner: str | None = None
) -> tuple[str | None, str]:
    """An uploaded checkpoint as model B: ``(its menu name, "")``, or ``(None, why not)``.

    The main upload's checks (:func:`attnviz.app.store.import_upload`): no pickle is read, and
    a refused upload leaves nothing on disk.

    Args:
        owner: the session's id: the upload is that session's own (other sessions' menus do
            not list it; deleted with the session); ``""``: a session that has not started
            (refused: B is compared on its input); None: shared (a library call).
    """
    if owner == "":
        return None, warning(InputError(START_FIRST))
    try:
        folder, _ = store.import_upload([p for p in paths or [] if p], device, owner=owner or "")
    except AttnvizError as exc:
        return None, warning(exc)
    return store.model_name(folder), ""


def error_view(exc: Exception) -> CompareView:
    """The tab's answer to a user error: the reason in one line, placeholders for figures."""
    figs = [placeholder("see the message above") for _ in KINDS]
    return CompareView(grids=figs, head=placeholder("see the message above"), message=warning(exc))
