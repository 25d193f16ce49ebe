"""The app's experiment panels: mask lab, head ablation, attribution, health, playback, export.

Each function takes the :class:`~attnviz.app.session.SessionState` of the step-through view
and returns a :class:`LabView` (figures and a markdown message); every one is a thin layer
over :mod:`attnviz.analysis` / :mod:`attnviz.render.report`. User errors come back as the message.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np

from ... import analysis
from ...analysis.stats import changes_nothing
from ...core.errors import AttnvizError, InputError, count
from ...core.sites import parse_head
from ...render import plots
from ...render.plots import KIND_TITLES
from .. import figures, store
from ..kinds import is_decoder_only, is_encoder_only
from ..state import (
    SessionState,
    head_label,
    head_weights,
    layer_index,
    layer_number,
)
from ..workers import remote
from .contrast import ContrastView, alternatives, contrast  # noqa: F401
from .lab_result import LabView, error_view, started_checkpoint, stopped

#: One sentence per mask-lab toggle, for someone learning.
EXPLAIN = {
    "causal": (
        "**Causal mask off:** the causal mask stops each output position from looking at "
        "later positions; without it, when the whole output is fed in at once (as in "
        "training), a position can peek at the very token it is meant to predict."
    ),
    "window": (
        "**Sliding window off:** a local layer lets each position attend only to the last W "
        "tokens (the cells in the window's own colour); switched off, those layers see the "
        "whole prefix as the global layers do. The difference panel shows where the weight "
        "moved, the bars what that does to the next token."
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


RANK_SHOWN = 24  # heads in the ranking chart (the table lists all)


def parse_sites(sites: Sequence[str]) -> list[tuple[str, int, int]]:
    """``["cross L1 H2", ...]`` -> ``[("cross", 1, 2), ...]``."""
    return [parse_head(site) for site in sites or ()]


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
@remote(stopped)
def mask_lab(
    state: SessionState,
    causal_off: bool = False,
    padding_off: bool = False,
    blocked: Sequence[int | str] = (),
    kind: str = "auto",
    layer: int | str | None = None,
    head: str = "mean",
    window_off: Sequence[int | str] = (),
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
        window_off: local layers (``"L3"`` or 3) whose sliding window is switched off.
    Returns:
        Figures: the before/after/difference heatmaps and the next-token distribution
        before vs after at the current step; the message says what changed.
    """
    try:
        ckpt = started_checkpoint(state)
        positions, dropped = current_blocked(state, blocked)
        windows = [layer_number(w) for w in window_off or ()]
        lab = analysis.mask_lab(
            ckpt, state.text, causal_off=causal_off, padding_off=padding_off, block=positions,
            window_off=windows,
        )  # fmt: skip
    except AttnvizError as exc:
        return error_view(exc, 2)
    exp = lab.experiment
    prompt = len(lab.src_pieces[lab.row]) if is_decoder_only(ckpt) else 0
    if prompt:  # one sequence, one kind: the causal self-attention over prompt + reference
        kind = "decoder_self"
    elif kind == "auto":
        kind = ("decoder_self" if causal_off or windows else
                "encoder_self" if padding_off else "cross")  # fmt: skip
    layers = exp.before.trace.layers(kind)
    # a layer chosen for another kind may not exist here: clip rather than refuse
    if layer in (None, "") and windows:  # the first layer whose window went
        layer = windows[0]
    layer = layers[-1] if layer in (None, "") else layer_number(layer)
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
    # the row that predicts the step shown (a decoder-only model's rows begin with its prompt)
    pos = int(np.clip(max(prompt - 1, 0) + max(state.step - 1, 0), 0, tgt_len - 1))
    p0, p1 = exp.before.probs[row, pos], exp.after.probs[row, pos]  # [V] each
    step = pos - max(prompt - 1, 0) + 1  # the decoding step that row predicts
    ids = figures.top_ids(p0, p1, k=8)
    tok = ckpt.tgt_tokenizer
    after = lab.tgt_pieces[row][pos]
    probs = figures.paired_bars(
        {"masks as trained": p0[ids], "after the change": p1[ids]},
        [tok.token(i) for i in ids],
        title=f"next-token distribution at step {step} (after “{html.escape(after)}”, "
        "teacher-forced)",
        horizontal=True,
    )
    message = _mask_message(lab, causal_off, padding_off, positions, pos, step, bool(windows))
    if windows:
        message = EXPLAIN["window"] + "  \n" + message
    if dropped:
        message = (
            f"Blocked tokens of an earlier input ({', '.join(map(str, dropped))}) are not "
            "blocked: choose tokens of this input.  \n" + message
        )
    return LabView([fig, probs], message + ("  \n" + PADDED_ROWS if lab.padded_rows else ""))


def block_labels(state: SessionState) -> list[str]:
    """The current input's source tokens as the mask lab's ``"position: token"`` choices."""
    from ..views import display_token  # views imports nothing of the labs

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


def _mask_message(
    lab, causal_off, padding_off, positions, pos, step: int, windows: bool = False
) -> str:
    """The mask lab's message; ``windows``: a layer's sliding window was switched off (said
    by the caller), so something was changed."""
    exp = lab.experiment
    lines = []
    if causal_off:
        lines.append(EXPLAIN["causal"])
    if padding_off:
        lines.append(EXPLAIN["padding"])
    if positions:
        lines.append(EXPLAIN["block"] + f" Blocked positions: {', '.join(map(str, positions))}.")
    if not lines and not windows:  # a decoder-only model has no source tokens to block
        one_stack = not any(k == "cross" for k, _ in exp.before.trace.keys())
        how = ("Tick the causal or the padding toggle" if one_stack
               else "Tick a toggle or choose source tokens to block")  # fmt: skip
        lines.append(f"{how}: nothing is changed yet.")
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
        f"step {step}. The heatmaps show {'the padded companion' if lab.row else 'your input'}."
    )
    return "  \n".join(lines)


# -- head ablation ------------------------------------------------------------------------------
def shown_output(text: str) -> str:
    """An output in quotes for a message; an empty one says why it is empty (EOS first)."""
    return f"“{html.escape(text)}”" if text else "(empty: EOS first)"


@remote(stopped)
def ablation(state: SessionState, sites: Sequence[str]) -> LabView:
    """Zero the heads ``sites`` (``"cross L1 H2"``, ...) and compare output and probabilities.

    Returns:
        One figure: each baseline output token's probability with and without the heads.
    """
    try:
        ckpt = started_checkpoint(state, "ablation")
        heads = parse_sites(sites)
        if not heads:
            raise InputError("tick at least one head to switch off")
        res = analysis.ablate(ckpt, state.text, heads)
    except AttnvizError as exc:
        return error_view(exc)
    read = bool(res.positions)  # an encoder-only model's one pass: tokens at positions
    fig = figures.paired_bars(
        {"all heads on": res.prob_baseline, "ablated": res.prob_ablated},
        [f"{p}:{t}" for p, t in zip(res.positions, res.baseline_tokens, strict=True)]
        if read
        else res.baseline_tokens,
        title=READ_TITLE if read else "probability of each baseline output token (teacher-forced)",
    )
    change = "**changed**" if res.changed else "unchanged"
    worst = int(np.argmin(res.prob_change)) if len(res.prob_change) else 0
    where = f"position {res.positions[worst]}" if read else f"step {worst + 1}"
    msg = (
        f"Switched off {len(heads)} head(s): {', '.join(sites)}.  \n"
        f"{_read_what(res.positions, state) if read else 'Output'} "
        f"{shown_output(res.baseline)} → {shown_output(res.ablated)} ({change}); "
        f"largest probability drop {-res.prob_change.min():.3f} at {where} "
        f"(“{html.escape(res.baseline_tokens[worst])}”)."
    )
    return LabView([fig], msg)


def _read_what(positions: list[int], state: SessionState) -> str:
    """What an encoder-only ablation compares: the fillers at the masks, or (a sentence
    without a mask token, every position read) the model's reading of each token."""
    return "Top filler per mask" if len(positions) < len(state.src_ids) else "Each token as read"


def signif(x: float, digits: int = 4) -> float:
    """``x`` to ``digits`` significant digits: a table cell that keeps the size the chart
    beside it draws (rounding to decimals showed 0 for the 1e-5 effects of a random model)."""
    return float(f"{x:.{digits}g}")


#: The ablation chart's title for an encoder-only model (one pass, no output decoded).
READ_TITLE = "probability of the top filler at each mask (no mask: of each token), one pass"


@remote(stopped)
def rank_heads(state: SessionState, n_inputs: int = 8) -> LabView:
    """Zero each head alone on the input plus a few task examples; largest effect first.

    Returns:
        ``rows``: ``[site, changed outputs, max |Δp|, mean |Δp|]`` per head.
    """
    try:
        ckpt = started_checkpoint(state, "ablation")
        texts = [state.text, *store.examples_of(ckpt, n_inputs - 1)]
        texts = list(dict.fromkeys(texts))
        effects = analysis.head_effects(ckpt, texts)
    except AttnvizError as exc:
        return error_view(exc)
    rows = [
        [e.site, e.changed_outputs, signif(e.max_prob_change), signif(e.mean_prob_change)]
        for e in effects
    ]
    top = effects[0]
    said = (f"changed {top.changed_outputs} of {count(len(texts), 'output')}, "
            f"largest probability change {top.max_prob_change:.2g}")  # fmt: skip
    verdict = (
        f"Largest effect: **{top.site}** ({said})"
        if not changes_nothing(top)
        else f"No head matters much: the largest effect, **{top.site}**, {said}"
    )
    msg = (
        f"Each head zeroed alone on {count(len(texts), 'input')} (yours first). {verdict}. "
        "The chart shows every head's effect, largest first."
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
@remote(stopped)
def attribution(state: SessionState, layer: int | str = 0, n_steps: int = 32) -> LabView:
    """Integrated Gradients for the newest token beside one layer's cross-attention (a
    decoder-only model: the newest position's self-attention on its prompt).

    Returns:
        Two figures: source (prompt) attribution vs the attention (mean of heads) of
        ``layer``, and attribution over the previous target tokens; the message gives the
        agreement scores (``ig~cross L1``, or ``ig~self L1`` for a decoder-only model).
    """
    try:
        ckpt = started_checkpoint(state, "attribution")
        if is_encoder_only(ckpt):  # the read pass: the filler at the first mask token
            layer = layer_index(layer or 0, list(range(ckpt.config.n_encoder_layers)))
            return mask_attribution(analysis.attribute(ckpt, state.text, 0, n_steps=n_steps),
                                    layer)  # fmt: skip
        if state.step == 0:
            raise InputError("take at least one Step: attribution explains the newest token")
        layer = layer_index(layer or 0, list(range(ckpt.config.n_decoder_layers)))
        a = analysis.attribute(
            ckpt, state.text, state.step - 1, tokens=state.tokens[: state.step], n_steps=n_steps
        )
    except AttnvizError as exc:
        return error_view(exc, 2)
    layer = int(np.clip(layer, 0, max(a.cross)))
    one = is_decoder_only(ckpt)  # one sequence: the attention row is self-attention on the prompt
    attended = "self-attention on the prompt" if one else "cross-attention"
    src = plots.attribution_vs_attention(
        a.ig_src,
        a.cross[layer],
        a.src_tokens,
        title=f"step {a.step + 1} “{html.escape(a.token)}”: {'prompt' if one else 'source'} tokens",
        names=("Integrated Gradients", f"{attended} L{layer} (mean of heads)"),
    )
    methods = {"Integrated Gradients": a.ig_tgt, "gradient × input": a.gxi_tgt}
    tgt = figures.paired_bars(  # each method as shares of its own total: scales differ by 1e6
        {name: plots.share(np.asarray(v, float)) for name, v in methods.items()},
        a.tgt_tokens,
        title=f"attribution to the previous output tokens ({'after the prompt' if one else 'decoder input'}), "
        "each method normalised to its own total",
        value_name="share of total",  # the title says of what; a longer one is cut off
        colours=[plots.METHOD_COLOURS[name] for name in methods],
    )
    scores = ", ".join(f"`{k}` {v:.2f}" for k, v in a.agreement.items())  # ~ is markdown
    msg = (
        f"Explaining step {a.step + 1}: “{html.escape(a.token)}” (p = {a.prob:.3f}). "
        + (
            "Integrated Gradients over the prompt and the output so far; the attention "
            "compared is the newest position's self-attention on the prompt (`~self`). "
            if one
            else ""
        )
        + f"Agreement of attribution with attention as Spearman rank correlation ρ (the "
        f"chart's title gives the same ρ for the layer shown) — {scores}. "
        f"IG convergence delta {a.delta:.2g} (near 0 means the integral converged)."
    )
    return LabView([src, tgt], msg)


def mask_attribution(a, layer: int) -> LabView:
    """:func:`attribution` of an encoder-only model: the filler at its first mask token,
    Integrated Gradients over the sentence beside that mask's self-attention row of ``layer``,
    and both methods over the sentence (as shares of their own totals)."""
    src = plots.attribution_vs_attention(
        a.ig_src, a.cross[layer], a.src_tokens,
        title=f"filler “{html.escape(a.token)}” at the first mask token: the sentence's tokens",
        names=("Integrated Gradients", f"self-attention of the mask L{layer} (mean of heads)"),
    )  # fmt: skip
    methods = {"Integrated Gradients": a.ig_src, "gradient × input": a.gxi_src}
    both = figures.paired_bars(
        {name: plots.share(np.asarray(v, float)) for name, v in methods.items()},
        a.src_tokens,
        title="attribution to the sentence's tokens, each method normalised to its own total",
        value_name="share of total",
        colours=[plots.METHOD_COLOURS[name] for name in methods],
    )
    scores = ", ".join(f"`{k}` {v:.2f}" for k, v in a.agreement.items())
    msg = (
        f"Explaining the top filler at the first mask token: “{html.escape(a.token)}” "
        f"(p = {a.prob:.3f}). Integrated Gradients over the sentence's token embeddings; the "
        "attention compared is the mask position's self-attention row (`~self`). Agreement "
        f"as Spearman rank correlation ρ — {scores}. IG convergence delta {a.delta:.2g} (near "
        "0 means the integral converged)."
    )
    return LabView([src, both], msg)
