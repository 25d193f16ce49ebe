"""The app's experiment panels: mask lab, head ablation, attribution, health, playback, export.

Each function takes the :class:`~attnviz.app.session.SessionState` of the step-through view
and returns a :class:`LabView` (figures and a markdown message); every one is a thin layer
over :mod:`attnviz.analysis` / :mod:`attnviz.report`. User errors come back as the message.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go

from .. import analysis, plots
from ..analysis.health import count
from ..checkpoint import Checkpoint
from ..errors import AttnvizError, InputError
from ..plots import KIND_TITLES
from . import figures, store
from .state import (
    SessionState,
    checkpoint_of,
    head_label,
    head_weights,
    layer_index,
)

#: One sentence per mask-lab toggle, for someone learning.
EXPLAIN = {
    "causal": (
        "**Causal mask off:** the causal mask stops each output position from looking at "
        "later positions; without it, when the whole output is fed in at once (as in "
        "training), a position can peek at the very token it is meant to predict."
    ),
    "padding": (
        "**Padding mask off:** sentences in a batch are padded with `<pad>` to one length and "
        "the padding mask keeps real tokens from attending to those pads; without it the "
        "shorter sentence's attention leaks onto meaningless `<pad>` positions."
    ),
    "block": (
        "**Blocked source tokens:** a blocked token is hidden from every attention layer, as if "
        "it were padding, so the model has to produce its output without ever looking at it."
    ),
}
PADDED_ROWS = (
    "Grey rows belong to `<pad>` query positions: their outputs are thrown away, so their "
    "attention means nothing and is not shown."
)


@dataclass
class LabView:
    """What one panel shows: figures (in panel order) and a markdown message."""

    figures: list[go.Figure] = field(default_factory=list)
    message: str = ""
    rows: list[list] = field(default_factory=list)  # table rows, where the panel has a table
    path: str | None = None  # a written file, for the export buttons


RANK_SHOWN = 24  # heads in the ranking chart (the table lists all)


def error_view(exc: Exception, n_figures: int = 1) -> LabView:
    """A panel's answer to a user error: placeholders and the reason as the message."""
    figs = [figures.placeholder("see the message above") for _ in range(n_figures)]
    return LabView(figs, f"⚠ {html.escape(str(exc))}")


def started_checkpoint(state: SessionState) -> Checkpoint:
    """The checkpoint of a state with an input started (else a message to start one)."""
    if not state.started:
        raise InputError("type an input and press Step (or Run) first")
    return checkpoint_of(state)


def parse_sites(sites: Sequence[str]) -> list[tuple[str, int, int]]:
    """``["cross L1 H2", ...]`` -> ``[("cross", 1, 2), ...]``."""
    out = []
    for site in sites or ():
        m = re.fullmatch(r"(\w+) L(\d+) H(\d+)", str(site).strip())
        if not m:
            raise InputError(f"not a head: {site!r}; heads read like 'cross L1 H2'")
        out.append((m[1], int(m[2]), int(m[3])))
    return out


def edited_note(state: SessionState, text: str | None) -> str:
    """A line under the input when it was edited but not run: the panels show another input.

    Returns:
        ``""`` when ``text`` is the input shown (or nothing was started), else the note.
    """
    if not state.started or text is None or text == state.text:
        return ""
    shown = state.text if len(state.text) <= 40 else state.text[:39] + "…"
    return (
        f"✎ The panels still show “{html.escape(shown)}”: press **Step** or **Run** "
        "(or Enter) for the edited input."
    )


# -- mask lab -----------------------------------------------------------------------------------
def mask_lab(
    state: SessionState,
    causal_off: bool = False,
    padding_off: bool = False,
    blocked: Sequence[int | str] = (),
    kind: str = "auto",
    layer: int | str | None = None,
    head: str = "mean",
) -> LabView:
    """Weights before / after / difference and the output change when masks change.

    A thin view over :func:`attnviz.analysis.mask_lab` (the input and a companion input of
    another length run as one padded batch, masks as trained vs changed).

    Args:
        causal_off: drop the decoder's causal mask (greedy output recomputed without cache).
        padding_off: drop the padding masks.
        blocked: source positions of the input to block (ints or ``"3: x"`` labels).
        kind: attention kind shown (``"auto"``: the one the change acts on).
        layer, head: which layer (default last) and ``"mean"`` or ``"H<h>"``.
    Returns:
        Figures: the before/after/difference heatmaps and the next-token distribution
        before vs after at the current step; the message says what changed.
    """
    try:
        ckpt = started_checkpoint(state)
        positions, dropped = current_blocked(state, blocked)
        lab = analysis.mask_lab(
            ckpt, state.text, causal_off=causal_off, padding_off=padding_off, block=positions
        )
    except AttnvizError as exc:
        return error_view(exc, 2)
    exp = lab.experiment
    if kind == "auto":
        kind = "decoder_self" if causal_off else "encoder_self" if padding_off else "cross"
    layers = exp.before.trace.layers(kind)
    # a layer chosen for another kind may not exist here: clip rather than refuse
    layer = layers[-1] if layer in (None, "") else int(str(layer).lstrip("L"))
    layer = int(np.clip(layer, 0, layers[-1]))
    keys, queries = lab.labels(kind)
    (w0, m0), (w1, m1) = lab.view("before", kind, layer), lab.view("after", kind, layer)
    shown = lab.texts[lab.row]
    shown = shown if len(shown) <= 48 else shown[:47] + "…"
    title = (  # two short lines: a plotly title does not wrap, and clips at 800 px
        f"{KIND_TITLES[kind]} · layer {layer} · {head_label(head)}<br>"
        f"<sup>input “{html.escape(shown)}”</sup>"
    )
    fig = plots.mask_comparison(
        np.where(m0, 0, head_weights(w0, head)),
        np.where(m1, 0, head_weights(w1, head)),
        keys,
        queries,
        title=title,
        before_mask=m0,
        after_mask=m1,
    )
    row = lab.row
    tgt_len = len(lab.tgt_pieces[row])
    pos = int(np.clip(state.step - 1 if state.step else 0, 0, tgt_len - 1))
    p0, p1 = exp.before.probs[row, pos], exp.after.probs[row, pos]  # [V] each
    ids = figures.top_ids(p0, p1, k=8)
    tok = ckpt.tgt_tokenizer
    after = lab.tgt_pieces[row][pos]
    probs = figures.paired_bars(
        {"masks as trained": p0[ids], "after the change": p1[ids]},
        [tok.token(i) for i in ids],
        title=f"next-token distribution at step {pos + 1} (after “{html.escape(after)}”, "
        "teacher-forced)",
        horizontal=True,
    )
    message = _mask_message(lab, causal_off, padding_off, positions, pos)
    if dropped:
        message = (
            f"Blocked tokens of an earlier input ({', '.join(map(str, dropped))}) are not "
            "blocked: choose tokens of this input.  \n" + message
        )
    return LabView([fig, probs], message + ("  \n" + PADDED_ROWS if lab.padded_rows else ""))


def block_labels(state: SessionState) -> list[str]:
    """The current input's source tokens as the mask lab's ``"position: token"`` choices."""
    from .views import display_token  # views imports nothing of the labs

    return [f"{i}: {display_token(t)}" for i, t in enumerate(state.src_pieces)]


def current_blocked(
    state: SessionState, blocked: Sequence[int | str] | None
) -> tuple[list[int], list[str]]:
    """Source positions to block in the current input, and the choices left from another.

    A ``"3: x"`` label counts only when it names a token of the current input (the page can
    send the ticks of an earlier input with the new one); a bare position is passed on (and
    refused by :func:`attnviz.analysis.mask_lab` when out of range).

    Returns:
        ``(positions, dropped)``: sorted positions, and the choices that were ignored.
    """
    labels = block_labels(state)
    positions, dropped = set(), []
    for b in blocked or ():
        text = str(b).strip()
        try:
            i = int(text.split(":")[0])
        except ValueError:
            raise InputError(f"not a source position: {b!r}") from None
        if ":" not in text or text in labels:
            positions.add(i)
        else:
            dropped.append(text)
    return sorted(positions), dropped


def _mask_message(lab, causal_off, padding_off, positions, pos) -> str:
    exp = lab.experiment
    lines = []
    if causal_off:
        lines.append(EXPLAIN["causal"])
    if padding_off:
        lines.append(EXPLAIN["padding"])
    if positions:
        lines.append(EXPLAIN["block"] + f" Blocked positions: {', '.join(map(str, positions))}.")
    if not lines:
        lines.append("Tick a toggle or choose source tokens to block: nothing is changed yet.")
    for i, t in enumerate(lab.texts):
        b, a = exp.before.outputs[i], exp.after.outputs[i]
        who = "your input" if i == 0 else "the companion input"
        change = "unchanged" if a == b else "**changed**"
        lines.append(
            f"Output for {who} “{html.escape(t)}”: “{html.escape(b)}” → “{html.escape(a)}” "
            f"({change})"
        )
    p0 = exp.before.probs[lab.row, pos]
    p1 = exp.after.probs[lab.row, pos]
    lines.append(
        f"{exp.metric[0].upper()}{exp.metric[1:]}: {exp.before.token_acc:.3f} → "
        f"{exp.after.token_acc:.3f}; largest next-token probability change "
        f"{exp.max_prob_change:.3f} over all steps, {float(np.abs(p1 - p0).max()):.3f} at "
        f"step {pos + 1}. The heatmaps show {'the padded companion' if lab.row else 'your input'}."
    )
    return "  \n".join(lines)


# -- head ablation ------------------------------------------------------------------------------
def shown_output(text: str) -> str:
    """An output in quotes for a message; an empty one says why it is empty (EOS first)."""
    return f"“{html.escape(text)}”" if text else "(empty: EOS first)"


def ablation(state: SessionState, sites: Sequence[str]) -> LabView:
    """Zero the heads ``sites`` (``"cross L1 H2"``, ...) and compare output and probabilities.

    Returns:
        One figure: each baseline output token's probability with and without the heads.
    """
    try:
        ckpt = started_checkpoint(state)
        heads = parse_sites(sites)
        if not heads:
            raise InputError("tick at least one head to switch off")
        res = analysis.ablate(ckpt, state.text, heads)
    except AttnvizError as exc:
        return error_view(exc)
    fig = figures.paired_bars(
        {"all heads on": res.prob_baseline, "ablated": res.prob_ablated},
        res.baseline_tokens,
        title="probability of each baseline output token (teacher-forced)",
    )
    change = "**changed**" if res.changed else "unchanged"
    worst = int(np.argmin(res.prob_change)) if len(res.prob_change) else 0
    msg = (
        f"Switched off {len(heads)} head(s): {', '.join(sites)}.  \n"
        f"Output {shown_output(res.baseline)} → {shown_output(res.ablated)} ({change}); "
        f"largest probability drop {-res.prob_change.min():.3f} at token "
        f"{worst} (“{html.escape(res.baseline_tokens[worst])}”)."
    )
    return LabView([fig], msg)


def rank_heads(state: SessionState, n_inputs: int = 8) -> LabView:
    """Zero each head alone on the input plus a few task examples; largest effect first.

    Returns:
        ``rows``: ``[site, changed outputs, max |Δp|, mean |Δp|]`` per head.
    """
    try:
        ckpt = started_checkpoint(state)
        texts = [state.text, *store.examples_for(ckpt.task, n_inputs - 1)]
        texts = list(dict.fromkeys(texts))
        effects = analysis.head_effects(ckpt, texts)
    except AttnvizError as exc:
        return error_view(exc)
    rows = [
        [e.site, e.changed_outputs, round(e.max_prob_change, 4), round(e.mean_prob_change, 4)]
        for e in effects
    ]
    top = effects[0]
    msg = (
        f"Each head zeroed alone on {count(len(texts), 'input')} (yours first). "
        f"Most important: **{top.site}** (changed {top.changed_outputs} of "
        f"{count(len(texts), 'output')}). The chart shows every head's effect, largest first."
    )
    shown = effects[:RANK_SHOWN]
    fig = figures.paired_bars(  # replaces the last ablation's chart: it explains this ranking
        {
            "max |Δp|": [e.max_prob_change for e in shown],
            "mean |Δp|": [e.mean_prob_change for e in shown],
        },
        [e.site for e in shown],
        title=f"each head zeroed alone on {count(len(texts), 'input')}: "
        "change in the baseline tokens' probabilities"
        + (f" (top {RANK_SHOWN} of {len(effects)})" if len(effects) > RANK_SHOWN else ""),
        value_name="|Δ probability|",
        horizontal=True,
        tokens=False,
    )
    return LabView([fig], msg, rows=rows)


# -- attribution --------------------------------------------------------------------------------
def attribution(state: SessionState, layer: int | str = 0, n_steps: int = 32) -> LabView:
    """Integrated Gradients for the newest token beside one layer's cross-attention.

    Returns:
        Two figures: source attribution vs cross-attention (mean of heads) of ``layer``, and
        attribution over the previous target tokens; the message gives the agreement scores.
    """
    try:
        ckpt = started_checkpoint(state)
        if state.step == 0:
            raise InputError("take at least one Step: attribution explains the newest token")
        layer = layer_index(layer or 0, list(range(ckpt.config.n_decoder_layers)))
        a = analysis.attribute(
            ckpt, state.text, state.step - 1, tokens=state.tokens[: state.step], n_steps=n_steps
        )
    except AttnvizError as exc:
        return error_view(exc, 2)
    layer = int(np.clip(layer, 0, max(a.cross)))
    src = plots.attribution_vs_attention(
        a.ig_src,
        a.cross[layer],
        a.src_tokens,
        title=f"step {a.step + 1} “{html.escape(a.token)}”: source tokens",
        names=("Integrated Gradients", f"cross-attention L{layer} (mean of heads)"),
    )
    methods = {"Integrated Gradients": a.ig_tgt, "gradient × input": a.gxi_tgt}
    tgt = figures.paired_bars(  # each method as shares of its own total: scales differ by 1e6
        {name: plots.share(np.asarray(v, float)) for name, v in methods.items()},
        a.tgt_tokens,
        title="attribution to the previous output tokens (decoder input), each method "
        "normalised to its own total",
        value_name="share of the method's total |attribution|",
        colours=[plots.METHOD_COLOURS[name] for name in methods],
    )
    scores = ", ".join(f"`{k}` {v:.2f}" for k, v in a.agreement.items())  # ~ is markdown
    msg = (
        f"Explaining step {a.step + 1}: “{html.escape(a.token)}” (p = {a.prob:.3f}). "
        f"Agreement of attribution with attention as Spearman rank correlation ρ (the "
        f"chart's title gives the same ρ for the layer shown) — {scores}. "
        f"IG convergence delta {a.delta:.2g} (near 0 means the integral converged)."
    )
    return LabView([src, tgt], msg)


# -- why this token and not that one ------------------------------------------------------------
@dataclass
class ContrastView(LabView):
    """The contrastive attribution panel: its figure and message, and what they were drawn from.

    Attributes:
        attribution: the :class:`~attnviz.analysis.attribution.Attribution` with ``versus``.
        versus: the alternative token id explained against.
        next_rows: ``{token id: [Ts] or None}``: the cross-attention row (chosen layer, head
            or mean) of the step after feeding each token (None: decoding ends there).
    """

    attribution: analysis.Attribution | None = None
    versus: int | None = None
    next_rows: dict[int, np.ndarray | None] = field(default_factory=dict)


def _p(p: float) -> str:
    """A probability for a label: 3 decimals, or 2 significant digits below 0.001."""
    return f"{p:.3f}" if p >= 1e-3 or p == 0 else f"{p:.1e}"


def _shown_step(state: SessionState, ckpt: Checkpoint):
    """The :class:`~attnviz.decoding.StepResult` of the step shown (the session's decoder)."""
    from .decoders import DECODERS  # the labs otherwise never touch the session's decoder

    with DECODERS.hold(state, ckpt, state.version) as stepper:
        return stepper.steps[state.step - 1]


def alternatives(state: SessionState, k: int = 10) -> tuple[list[tuple[str, str]], str | None]:
    """The step shown's candidates other than its token, and the default alternative.

    Returns:
        ``([(label, id), ...], default id)``: the ``k`` most likely other tokens (ids as
        strings, the values the page sends) and the default: the model's own argmax when the
        step was forced, else the runner-up. ``([], None)`` before the first Step.
    """
    if not state.started or state.step == 0:
        return [], None
    ckpt = checkpoint_of(state)
    shown = _shown_step(state, ckpt)
    probs = np.asarray(shown.probs, dtype=float)
    order = [int(i) for i in np.argsort(-probs, kind="stable") if int(i) != shown.token]
    tok = ckpt.tgt_tokenizer
    from .views import display_token

    choices = [
        (f"“{display_token(tok.token(i))}” (p = {_p(probs[i])}, id {i})", str(i)) for i in order[:k]
    ]
    return choices, str(order[0]) if order else None


def _next_rows(
    state: SessionState, ckpt: Checkpoint, tokens: Sequence[int], layer: int, head: str
) -> dict[int, np.ndarray | None]:
    """The cross-attention row (``[Ts]``; ``head``: ``"mean"`` or ``"H<h>"``) of the step after
    feeding each of ``tokens`` at the step shown, recorded on a private decoder."""
    from .decoders import new_stepper

    stepper = new_stepper(state, ckpt)
    stepper.sync(state.tokens[: state.step - 1])
    out: dict[int, np.ndarray | None] = {}
    for t in tokens:
        stepper.back(state.step - 1)
        stepper.step(token=t)
        if stepper.done:  # an end token (or the length limit): no step follows
            out[t] = None
            continue
        w = stepper.step().attention["cross", layer].float().cpu().numpy()  # [H, Ts]
        out[t] = np.asarray(head_weights(w, head))
    return out


def contrast(
    state: SessionState,
    versus: int | str | None = None,
    layer: int | str | None = None,
    head: str = "mean",
    n_steps: int = 32,
) -> ContrastView:
    """Why the step shown chose its token and not ``versus``: Integrated Gradients of
    ``log p(chosen) - log p(versus)`` over the source (:func:`attnviz.analysis.attribute`
    with ``versus=``), beside the cross-attention row of the next step after feeding each.

    Args:
        versus: the alternative token id (None/``""``/``"auto"``: see :func:`alternatives`).
        layer: decoder layer of the attention rows (``"L1"``/1; default last).
        head: ``"mean"`` or ``"H<h>"``.
    Returns:
        One figure (attribution above, the two attention rows below) and its caption.
    """
    try:
        ckpt = started_checkpoint(state)
        if state.step == 0:
            raise InputError("take at least one Step: this explains the token of the step shown")
        chosen = state.tokens[state.step - 1]
        vocab = ckpt.config.tgt_vocab_size
        if versus in (None, "", "auto"):
            versus = alternatives(state)[1]
        try:
            alt = int(str(versus).strip())
        except ValueError:
            raise InputError(f"not a token id: {versus!r}; ids are 0..{vocab - 1}") from None
        if not 0 <= alt < vocab:
            raise InputError(f"token {alt} is outside the vocabulary 0..{vocab - 1}")
        if alt == chosen:
            raise InputError(
                f"token {alt} is the one chosen at step {state.step}: pick another candidate"
            )
        layer_i = layer_index(layer, list(range(ckpt.config.n_decoder_layers)))
        if str(head) != "mean" and not re.fullmatch(r"H\d+", str(head)):
            raise InputError(f"not a head: {head!r}; heads read like 'H2' (or 'mean')")
        if str(head) != "mean" and not int(str(head)[1:]) < ckpt.config.n_heads:
            raise InputError(f"head must be in H0..H{ckpt.config.n_heads - 1}, got {head}")
        a = analysis.attribute(
            ckpt, state.text, state.step - 1, tokens=state.tokens[: state.step],
            n_steps=n_steps, versus=alt,
        )  # fmt: skip
        rows = _next_rows(state, ckpt, [chosen, alt], layer_i, str(head))
    except AttnvizError as exc:
        view = error_view(exc)
        return ContrastView(view.figures, view.message)
    from ..plots_contrast import contrast_figure
    from .views import display_token

    names = (display_token(a.token), display_token(a.versus or ""))
    after = f"step {state.step + 1}, layer {layer_i}, {head_label(head)}"
    fig = contrast_figure(
        a.ig_src,
        {f"next step after “{names[0]}”": rows[chosen], f"next step after “{names[1]}”": rows[alt]},
        [display_token(t) for t in a.src_tokens],
        title=f"step {state.step}: why “{html.escape(names[0])}” and not “{html.escape(names[1])}”",
        names=names,
    )
    ended = [n for n, t in zip(names, (chosen, alt), strict=True) if rows[t] is None]
    msg = (
        f"**Why “{html.escape(names[0])}” (p = {_p(a.prob)}) and not “{html.escape(names[1])}” "
        f"(p = {_p(a.versus_prob)}) at step {state.step}.** Top: Integrated Gradients of "
        f"log p(“{html.escape(names[0])}”) − log p(“{html.escape(names[1])}”) = {a.contrast:.3f} "
        f"over the source tokens (blue: evidence for “{html.escape(names[0])}”, orange and "
        f"hatched: for “{html.escape(names[1])}”; convergence delta {a.delta:.2g}). Bottom: the "
        f"cross-attention row of the **next** step ({after}) after feeding "
        f"“{html.escape(names[0])}” vs after feeding “{html.escape(names[1])}”: where each "
        "choice sends the attention."
    )
    if ended:
        msg += (
            " No next step after "
            + " or ".join(f"“{html.escape(n)}”" for n in ended)
            + (" (decoding ends there).")
        )
    return ContrastView([fig], msg, attribution=a, versus=alt, next_rows=rows)
