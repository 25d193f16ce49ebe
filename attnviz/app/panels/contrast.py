"""The "why this token and not that one" lab: a contrastive attribution of the step shown
against an alternative token, beside the next step's cross-attention after feeding each.

A thin layer over :func:`attnviz.analysis.attribute` (``versus=``) and
:func:`attnviz.render.plots_contrast.contrast_figure`; :mod:`attnviz.app.panels.labs` re-exports
:func:`alternatives`, :func:`contrast` and :class:`ContrastView`.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ... import analysis
from ...checkpoint import Checkpoint
from ...core.errors import AttnvizError, InputError
from ...core.sites import parse_head_index
from ...data.tokenizer import check_token_id
from ..kinds import is_decoder_only
from ..state import SessionState, checkpoint_of, head_label, head_weights, layer_index
from ..workers import remote
from .lab_result import LabView, error_view, started_checkpoint


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
    """The :class:`~attnviz.decode.greedy.StepResult` of the step shown (the session's decoder)."""
    from ..decoders import DECODERS  # the labs otherwise never touch the session's decoder

    with DECODERS.hold(state, ckpt, state.version) as stepper:
        return stepper.steps[state.step - 1]


def _stopped(*args, message: str, **kwargs) -> ContrastView:
    """The model's worker stopped (:func:`attnviz.app.workers.remote`): its one line."""
    return ContrastView(message=message)


def _no_alternatives(*args, message: str, **kwargs) -> tuple[list, None]:
    return [], None


@remote(_no_alternatives)
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
    from ..views import display_token

    choices = [
        (f"“{display_token(tok.token(i))}” (p = {_p(probs[i])}, id {i})", str(i)) for i in order[:k]
    ]
    return choices, str(order[0]) if order else None


def _next_rows(
    state: SessionState, ckpt: Checkpoint, tokens: Sequence[int], layer: int, head: str
) -> dict[int, np.ndarray | None]:
    """The cross-attention row (``[Ts]``; ``head``: ``"mean"`` or ``"H<h>"``) of the step after
    feeding each of ``tokens`` at the step shown, recorded on a private decoder."""
    from ..decoders import new_stepper

    stepper = new_stepper(state, ckpt)
    stepper.sync(state.tokens[: state.step - 1])
    out: dict[int, np.ndarray | None] = {}
    for t in tokens:
        stepper.back(state.step - 1)
        stepper.step(token=t)
        if stepper.done:  # an end token (or the length limit): no step follows
            out[t] = None
            continue
        att = stepper.step().attention
        if ("cross", layer) in att:
            w = att["cross", layer].float().cpu().numpy()  # [H, Ts]
        else:  # a decoder-only model: its self-attention on the prompt's pieces
            n = len(state.src_pieces)
            w = att["decoder_self", layer].float().cpu().numpy()[:, :n]  # [H, P]
        out[t] = np.asarray(head_weights(w, head))
    return out


@remote(_stopped)
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
        ckpt = started_checkpoint(state, "contrast")  # a decoding step's two choices
        if state.step == 0:
            raise InputError("take at least one Step: this explains the token of the step shown")
        chosen = state.tokens[state.step - 1]
        vocab = ckpt.config.tgt_vocab_size
        if versus in (None, "", "auto"):
            versus = alternatives(state)[1]
        alt = check_token_id(str(versus), vocab)
        if alt == chosen:
            raise InputError(
                f"token {alt} is the one chosen at step {state.step}: pick another candidate"
            )
        layer_i = layer_index(layer, list(range(ckpt.config.n_decoder_layers)))
        if str(head) != "mean" and not parse_head_index(head) < ckpt.config.n_heads:
            raise InputError(f"head must be in H0..H{ckpt.config.n_heads - 1}, got {head}")
        a = analysis.attribute(
            ckpt, state.text, state.step - 1, tokens=state.tokens[: state.step],
            n_steps=n_steps, versus=alt,
        )  # fmt: skip
        rows = _next_rows(state, ckpt, [chosen, alt], layer_i, str(head))
    except AttnvizError as exc:
        view = error_view(exc)
        return ContrastView(view.figures, view.message)
    from ...render.plots_contrast import contrast_figure
    from ..views import display_token

    names = (display_token(a.token), display_token(a.versus or ""))
    after = f"step {state.step + 1}, layer {layer_i}, {head_label(head)}"
    fig = contrast_figure(
        a.ig_src,
        {f"next step after “{names[0]}”": rows[chosen], f"next step after “{names[1]}”": rows[alt]},
        [display_token(t) for t in a.src_tokens],
        title=f"step {state.step}: why “{html.escape(names[0])}” and not “{html.escape(names[1])}”",
        names=names,
    )
    one = is_decoder_only(ckpt)
    if one:  # one sequence: the source is the prompt, the attention its self-attention on it
        fig.update_layout(xaxis2_title_text="prompt token")
    ended = [n for n, t in zip(names, (chosen, alt), strict=True) if rows[t] is None]
    msg = (
        f"**Why “{html.escape(names[0])}” (p = {_p(a.prob)}) and not “{html.escape(names[1])}” "
        f"(p = {_p(a.versus_prob)}) at step {state.step}.** Top: Integrated Gradients of "
        f"log p(“{html.escape(names[0])}”) − log p(“{html.escape(names[1])}”) = {a.contrast:.3f} "
        f"over the {'prompt' if one else 'source'} tokens (blue: evidence for "
        f"“{html.escape(names[0])}”, orange and hatched: for “{html.escape(names[1])}”; "
        f"convergence delta {a.delta:.2g}). Bottom: the "
        f"{'self-attention on the prompt' if one else 'cross-attention row'} of the **next** "
        f"step ({after}) after feeding "
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
