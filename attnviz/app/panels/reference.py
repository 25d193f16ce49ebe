"""The step view's Reference box: a reference output scored under the model (no gradio).

The reference is teacher-forced (:meth:`attnviz.Checkpoint.score`): each of its tokens gets
the model's probability and rank given the source and the reference before it, shown as a
strip of tokens coloured by probability, with the first position where the model's argmax
leaves the reference marked (where greedy decoding, fed the reference so far, first differs
from it). Its cross-attention is one heatmap at the layer and head the step view shows.
The first position where the reference leaves the output the step view shows (forced tokens
included) is marked too; that mark follows the step view (:func:`attnviz.app.state.follow`).
"""

from __future__ import annotations

import dataclasses
import html

import numpy as np
import plotly.graph_objects as go

from ...checkpoint import Checkpoint
from ...core.errors import AttnvizError, InputError
from ...decode.scoring import Scored
from ...render import plots
from ...train.evaluate import expected_output
from ..inputs import refuse
from ..kinds import is_decoder_only, scored_rows
from ..state import SessionState, checkpoint_of, head_label, head_weights
from ..views import display_token, view_of
from ..workers import remote


@dataclasses.dataclass
class ReferenceView:
    """What the Reference box shows.

    Attributes:
        html: the probability/rank strip (escaped HTML), "" when nothing was scored.
        figure: the reference's cross-attention ``[Tt, Ts]`` as a heatmap, or None.
        message: one line: a summary, or what to fix (starts with "⚠").
        scored: the :class:`~attnviz.decode.scoring.Scored` shown, or None.
        output_divergence: the first position where the reference differs from the output
            the step view shows (:func:`output_divergence`), or None.
    """

    html: str
    figure: go.Figure | None
    message: str
    scored: Scored | None = None
    output_divergence: int | None = None


def output_divergence(ref_ids: list[int], shown: list[int]) -> int | None:
    """The first position where ``ref_ids`` (EOS last) differs from ``shown`` (the output
    the step view shows, BOS excluded), within ``shown``; None when they agree so far."""
    for i, t in enumerate(shown):
        if i >= len(ref_ids) or ref_ids[i] != t:
            return i
    return None


def default_reference(state: SessionState, text: str | None = None) -> str:
    """The output expected for ``text`` (default: the state's input), as the Expected line
    under the step view shows it (:func:`attnviz.train.evaluate.expected_output`: the built-in
    task's true output, or a corpus-trained checkpoint's dev reference), else ""."""
    try:
        ckpt = checkpoint_of(state)
    except AttnvizError:
        return ""
    return expected_output(ckpt, state.text if text is None else text) or ""


def _colour(p: float) -> str:
    """Red (p = 0) through olive to green (p = 1), dark enough for white text (WCAG AA)."""
    return f"hsl({120 * max(0.0, min(1.0, p)):.0f}, 65%, 28%)"


def strip_html(scored: Scored, leaves: int | None = None) -> str:
    """The reference's tokens as chips coloured by probability, rank under each, the first
    divergence outlined (``data-rank``/``data-prob`` on each chip, for tests and tools);
    ``leaves``: the position where the reference leaves the step view's output (``data-leaves``,
    a dashed underline and a ``≠`` after the rank)."""
    chips = []
    for i, (tok, p, r, top) in enumerate(
        zip(scored.tokens, scored.probs, scored.ranks, scored.argmax, strict=True)
    ):
        first = i == scored.first_divergence
        title = f"step {i + 1}: p = {p:.3f}, rank {r}"  # steps count from 1, as in the step view
        if first:
            title += " · first divergence: the model's argmax here is another token"
        if i == leaves:
            title += " · the output shown (Step view) differs here"
        style = (
            f"background:{_colour(p)};color:#fff;padding:2px 6px;border-radius:4px;"
            "display:inline-flex;flex-direction:column;align-items:center;white-space:pre;"
            + ("outline:3px solid #d97706;outline-offset:2px;" if first else "")
            + ("border-bottom:3px dashed #fff;" if i == leaves else "")
        )
        here = ' data-leaves="1"' if i == leaves else ""
        rank = f"#{r}" + (" ≠" if i == leaves else "")
        label = html.escape(display_token(tok))
        chips.append(
            f'<span class="ref-tok{" diverge" if first else ""}" data-prob="{p:.6f}" '
            f'data-rank="{r}" data-argmax="{top}"{here} title="{html.escape(title)}" '
            f'style="{style}">{label}<small style="color:#fff;font-size:.75em">{rank}</small></span>'
        )
    return (
        '<div class="ref-strip" style="display:flex;flex-wrap:wrap;gap:6px;padding:4px 0">'
        + "".join(chips)
        + "</div>"
    )


def _summary(scored: Scored, ckpt: Checkpoint) -> str:
    n, lp = len(scored.ids), scored.logprob
    head = (
        f"{n} tokens (end token included) · log p = {lp:.3f} · mean p = {np.mean(scored.probs):.3f}"
    )
    i = scored.first_divergence
    if i is None:
        return head + " · the model's argmax follows the reference at every step."
    tok = ckpt.tgt_tokenizer
    mine = display_token(tok.token(scored.argmax[i])) if tok is not None else f"#{scored.argmax[i]}"
    return html.escape(
        f"{head} · first divergence at step {i + 1}: the model prefers “{mine}” to the "
        f"reference's “{display_token(scored.tokens[i])}” (p = {scored.probs[i]:.3f}, "
        f"rank {scored.ranks[i]})."
    )


def figure(scored: Scored, state: SessionState, ckpt: Checkpoint) -> go.Figure:
    """The reference's cross-attention at the step view's layer and head (``"all heads"``:
    their mean), rows = the reference's positions (row ``i`` predicts token ``i``); a
    decoder-only model's: its causal self-attention over prompt + reference."""
    if is_decoder_only(ckpt):
        return _self_figure(scored, state, ckpt)
    layer, head = view_of(state, ckpt, "cross")
    head = "mean" if head == "all heads" else head
    w = scored.trace.numpy("cross", layer)[0]  # [H, Tt, Ts]
    mask = scored.trace.numpy("cross", layer, "mask")[0, 0].astype(bool)  # [Tt, Ts]
    z = head_weights(w, head)
    keys = [display_token(p) for p in ckpt.encode_source(state.text).pieces]
    queries = [f"{i}:{display_token(t)}" for i, t in enumerate(scored.tokens)]
    title = f"Reference: cross-attention · layer {layer} · {head_label(head)}"
    fig = plots.heatmap(z, keys, queries, mask=np.broadcast_to(mask, z.shape), title=title)
    i = scored.first_divergence
    if i is not None:  # outline the row of the first divergence
        fig.add_shape(type="rect", x0=-0.5, x1=len(keys) - 0.5, y0=i - 0.5, y1=i + 0.5,
                      line=dict(color=plots.HIGHLIGHT, width=3))  # fmt: skip
    return fig


def _self_figure(scored: Scored, state: SessionState, ckpt: Checkpoint) -> go.Figure:
    layer, head = view_of(state, ckpt, "decoder_self")
    head = "mean" if head == "all heads" else head
    w, mask, keys = scored_rows(ckpt, scored, state.text, len(scored.ids), layer)
    z = head_weights(w, head)  # [Tt, P + Tt - 1]
    queries = [f"{i}:{display_token(t)}" for i, t in enumerate(scored.tokens)]
    title = f"Reference: causal self-attention over prompt + reference · layer {layer} · {head_label(head)}"
    fig = plots.heatmap(z, [display_token(k) for k in keys], queries, mask=mask, title=title)
    i = scored.first_divergence
    if i is not None:  # outline the row of the first divergence
        fig.add_shape(type="rect", x0=-0.5, x1=len(keys) - 0.5, y0=i - 0.5, y1=i + 0.5,
                      line=dict(color=plots.HIGHLIGHT, width=3))  # fmt: skip
    return fig


def _stopped(*args, message: str, **kwargs) -> ReferenceView:
    """The model's worker stopped (:func:`attnviz.app.workers.remote`): its one line."""
    return ReferenceView("", None, message)


@remote(_stopped)
def score(state: SessionState, reference: str) -> ReferenceView:
    """Score ``reference`` against the state's input; a user error is one line, nothing shown.

    Args:
        state: a started state (its input is the source).
        reference: the output to score, as text (the end token is added).
    """
    try:
        if not state.started:
            raise InputError("type an input and press Step or Run first, then score a reference")
        if not (reference or "").strip():
            raise InputError("the reference is empty: type the output you expect")
        ckpt = checkpoint_of(state)
        refuse(ckpt, "reference")  # an encoder-only model has no output to score
        scored = ckpt.score(state.text, reference)
        leaves = output_divergence(scored.ids, state.tokens[: state.step])
        message = _summary(scored, ckpt)
        if leaves is not None:
            message += html.escape(
                f" The output shown (step {state.step}) leaves the reference at step "
                f"{leaves + 1} (dashed, ≠)."
            )
        return ReferenceView(strip_html(scored, leaves), figure(scored, state, ckpt),
                             message, scored, leaves)  # fmt: skip
    except AttnvizError as exc:
        return ReferenceView("", None, "⚠ " + html.escape(str(exc).splitlines()[0]))
