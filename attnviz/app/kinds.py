"""What the page shows for each kind of model (``ModelConfig.arch``): no gradio, no state.

An encoder-decoder shows all three attention kinds. A decoder-only model continues a prompt:
its prompt and its output are one sequence, so the step view shows one causal
self-attention over prompt + generated tokens, and the places that read an encoder or
cross-attention (the encoder and cross-attention heatmaps, what-if targets, AER, blocking
source tokens) are hidden, each with one sentence saying why (:data:`NOTES`). The labs run
it on its one sequence (decoder self-attention heads only); faithfulness, which needs
cross-attention, refuses it in one sentence (:func:`refuse`). An encoder-only model reads the
sentence once: the labs of :data:`ENCODER_LABS` run on that pass, the others say why not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..analysis.masked_lm import special_token
from ..checkpoint import Checkpoint
from ..core.config import ModelConfig
from ..core.devices import as_numpy
from ..core.errors import InputError
from ..core.record import Trace
from ..decode.scoring import Scored
from ..render.arrays import b64_f32, mask_bits

#: One sentence for each place a decoder-only model hides, by place.
NOTES = {
    "step": (
        "A decoder-only model has no encoder and no cross-attention: its prompt and its "
        "output are one sequence in the self-attention above."
    ),
    "whatif": (
        "What-if redirects a head's cross-attention to one source token; a decoder-only "
        "model has no cross-attention, so there is nothing here to redirect."
    ),
    "align": (
        "Alignment scores cross-attention heads against gold links between source and "
        "output words (AER); a decoder-only model has no cross-attention, its prompt and "
        "output being one sequence, so there is nothing to align."
    ),
    "mask": (
        "A decoder-only model's prompt and output are one sequence, so there are no source "
        "tokens to block: switch the causal mask off to let each position read the token it "
        "should predict."
    ),
}

#: Labs that do not run a decoder-only model: why, in one sentence.
NOT_YET = {
    "faith": (
        "Faithfulness removes source tokens the cross-attention points at; a decoder-only "
        "model has no cross-attention."
    ),
}


#: One sentence for each place an encoder-only model hides or refuses, by place; every other
#: place (a lab) says :data:`ENCODER_NOT_YET`.
ENCODER_NOTES = {
    "step": (
        "An encoder-only model reads the whole sentence at once and generates nothing: above "
        "is its self-attention over the sentence, and the bars are its fillers at each mask "
        "token."
    ),
    "decode": (
        "Step, Back, Reset and beam search do not apply: an encoder-only model reads the whole "
        "sentence at once and generates nothing. Press Read (or Enter) to see its attention "
        "and fillers."
    ),
    "reference": (
        "There is no output to score a reference against: an encoder-only model reads the "
        "whole sentence at once and generates nothing."
    ),
    "whatif": (
        "What-if redirects a head's cross-attention to one source token; an encoder-only "
        "model has no cross-attention (it reads the whole sentence at once and generates "
        "nothing)."
    ),
    "align": (
        "Alignment scores cross-attention heads against gold links between source and output "
        "words; an encoder-only model has no cross-attention and generates nothing to align."
    ),
    "mask": (
        "The mask lab switches a decoder's causal mask off and blocks source tokens; an "
        "encoder-only model has no causal mask and no decoder, and this lab does not run one "
        "yet."
    ),
    "contrast": (
        "“Why this token and not that one” compares two candidates for the next token; an "
        "encoder-only model produces no next token (the attribution above explains the "
        "filler at the first mask)."
    ),
    "faith": (
        "Faithfulness removes source tokens the cross-attention points at; an encoder-only "
        "model has no cross-attention."
    ),
    "beam": (
        "Beam search decodes an output; an encoder-only model reads the whole sentence at "
        "once and generates nothing."
    ),
}
ENCODER_NOT_YET = "Not yet for encoder-only models: this lab runs models that decode."
#: The labs an encoder-only model runs, on its one pass over the sentence (the output read being
#: its top filler at each mask token, or its prediction of each token of a sentence without one).
ENCODER_LABS = ("ablation", "attribution", "health", "export", "compare", "lens")


def is_encoder_only(ckpt: Checkpoint | ModelConfig) -> bool:
    cfg = ckpt if isinstance(ckpt, ModelConfig) else ckpt.config
    return cfg.encoder_only


def is_decoder_only(ckpt: Checkpoint | ModelConfig) -> bool:
    cfg = ckpt if isinstance(ckpt, ModelConfig) else ckpt.config
    return cfg.decoder_only


def layers_text(cfg: ModelConfig) -> str:
    """``"decoder-only, 2 layers"`` / ``"2 encoder + 2 decoder layers"`` / ``"encoder-only, …"``."""
    if cfg.decoder_only:
        return f"decoder-only, {cfg.n_decoder_layers} layers"
    if cfg.encoder_only:
        return f"encoder-only, {cfg.n_encoder_layers} layers"
    return f"{cfg.n_encoder_layers} encoder + {cfg.n_decoder_layers} decoder layers"


def input_label(ckpt: Checkpoint | None) -> str:
    """The input box's label: a decoder-only model continues a prompt, an encoder-only one
    reads a sentence or a pair (with its tokenizer's separator and mask tokens)."""
    if ckpt is not None and is_encoder_only(ckpt):
        sep, mask = (_special(ckpt, w) for w in ("sep", "mask"))
        return f"Sentence (or a pair: first {sep} second; {mask} to fill)"
    return "Prompt" if ckpt is not None and is_decoder_only(ckpt) else "Input"


def _special(ckpt: Checkpoint, which: str) -> str:
    token = special_token(ckpt, which)
    return token[0] if token else f"[{which.upper()}]"


def note(ckpt: Checkpoint | None, place: str) -> str:
    """The sentence shown where ``place`` (a place of :data:`NOTES` or a lab of
    :data:`NOT_YET`; for an encoder-only model, of :data:`ENCODER_NOTES`, a lab of
    :data:`ENCODER_LABS` running and any other place saying :data:`ENCODER_NOT_YET`) is
    hidden for this model, or ``""`` where it is shown."""
    if ckpt is not None and is_encoder_only(ckpt):
        return "" if place in ENCODER_LABS else ENCODER_NOTES.get(place, ENCODER_NOT_YET)
    if ckpt is None or not is_decoder_only(ckpt):
        return ""
    return NOTES.get(place) or NOT_YET.get(place, "")


def refuse(ckpt: Checkpoint, place: str) -> None:
    """Raise :class:`InputError` with the one sentence of a place (a lab, what-if, AER) that
    does not apply to this model; nothing where it applies."""
    why = note(ckpt, place)
    if why:
        raise InputError(why)


def prompt_part(pieces: list[str], encoder: Trace) -> dict[str, Any]:
    """The page payload's prompt of a decoder-only model (with the first Step's rows).

    The stepper runs the prompt but its last token at once (``P' = P - 1`` rows, recorded in
    its encoder trace); the last prompt token is the first one fed. The page labels the
    self-attention ``pre_labels + [bos] + tokens``, ``bos`` being the last prompt piece, and
    its rows are ``prompt_rows`` then one row per step.

    Args:
        pieces: the prompt's display pieces ``[P]``.
        encoder: the stepper's encoder trace (``"decoder_self"`` ``[1, H, P', P']``).
    Returns:
        ``{"pre", "pre_labels", "bos", "prompt_rows"}``; ``prompt_rows``: per layer
        ``{"w", "m"}``, row ``r`` holding its ``r + 1`` keys (as the page's step rows do).
    """
    pre = len(pieces) - 1
    rows = []
    for layer in encoder.layers("decoder_self") if pre else []:
        w = encoder.numpy("decoder_self", layer)[0]  # [H, P', P']
        m = np.broadcast_to(encoder.numpy("decoder_self", layer, "mask")[0, 0], w.shape[1:])
        win = as_numpy(encoder.window("decoder_self", layer)[0, 0])  # [P', P'] a local layer's
        rows.append({
            "w": b64_f32(np.concatenate([w[:, r, : r + 1].ravel() for r in range(pre)])),
            "m": mask_bits(np.concatenate([m[r, : r + 1] for r in range(pre)]),
                           np.concatenate([win[r, : r + 1] for r in range(pre)])),
        })  # fmt: skip
    return {"pre": pre, "pre_labels": pieces[:pre], "bos": pieces[pre], "prompt_rows": rows}


def scored_rows(
    ckpt: Checkpoint, scored: Scored, text: str, n: int, layer: int
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A decoder-only scored pass's rows that predict its first ``n`` tokens.

    Args:
        scored: :meth:`Checkpoint.score` of ``text`` (its ``"decoder_self"`` spans prompt +
            reference; row ``P - 1 + i`` predicts token ``i``).
    Returns:
        ``(weights [H, n, T], mask [n, T], keys [T])``: every key of the sequence, labelled
        by the prompt's pieces and then the reference's tokens.
    """
    prompt = ckpt.encode_source(text).pieces
    w = scored.trace.numpy("decoder_self", layer)[0]  # [H, T, T]
    rows = slice(len(prompt) - 1, len(prompt) - 1 + n)
    m = np.broadcast_to(scored.trace.numpy("decoder_self", layer, "mask")[0, 0], w.shape[1:])
    keys = [*prompt, *scored.tokens][: w.shape[-1]]
    return w[:, rows], m[rows].astype(bool), keys
